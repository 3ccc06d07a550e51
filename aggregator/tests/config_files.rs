//! `fleetdp plan` on the files a configuration names and on the budget
//! splits people write, through the release binary:
//! - a FIFO, `/dev/zero` or a directory as `input.avro_schema`,
//!   `input.protobuf_descriptor_set`, `privacy.key_file` or the
//!   configuration itself is refused within a second, naming the field (a
//!   FIFO used to hang `plan` and `run`; `/dev/zero` was read until memory
//!   ran out);
//! - 5 × 0.2, 10 × 0.1 and 20 × 0.05 budget shares are accepted (they were
//!   refused as "add up to 1 > 1", a floating-point sum), and a split just
//!   over 1 is still refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("fleetdp-config-files-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `fleetdp plan --config <path>`: (exit success, stderr), killed after 5 s.
fn plan(config: &Path) -> (bool, String, Duration) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["plan", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.success(), err, start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(5) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!(
                "fleetdp plan --config {} still running after 5 s",
                config.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stream(name: &str, share: f64) -> String {
    format!(
        "[[stream]]\nname = \"{name}\"\nlower = 0.0\nupper = 100.0\nresolution = 1.0\nwindow_size = 1000\n\
         max_windows_per_device = 24\nstatistics = [\"mean\"]\nbudget_share = {share}\n"
    )
}

fn config(extra: &str, streams: &str) -> String {
    format!(
        "[kafka]\nbrokers = \"127.0.0.1:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\n\
         dead_letter_topic = \"dlq\"\n[privacy]\nepsilon_per_device = 1.0\nhorizon = \"24h\"\n{extra}\n{streams}"
    )
}

fn write(name: &str, text: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn fifo(name: &str) -> PathBuf {
    let p = dir().join(name);
    let _ = std::fs::remove_file(&p);
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(2) reads a valid NUL-terminated path and nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    p
}

#[test]
fn fifos_devices_and_directories_are_refused_at_once() {
    let f = fifo("schema.fifo");
    let targets = [
        (f.clone(), "FIFO"),
        (PathBuf::from("/dev/zero"), "character device"),
        (dir(), "directory"),
    ];
    for (path, what) in &targets {
        let p = path.display();
        for (field, extra) in [
            (
                "input.avro_schema",
                format!("[input]\navro_schema = \"{p}\"\nstreams = {{ temp = \"/v\" }}\nevent_time = \"/t\"\ndevice_id = \"/d\""),
            ),
            (
                "input.protobuf_descriptor_set",
                format!("[input]\nprotobuf_descriptor_set = \"{p}\"\nprotobuf_message = \"x.Y\"\nstreams = {{ temp = \"v\" }}\nevent_time = \"t\"\ndevice_id = \"d\""),
            ),
        ] {
            let c = write("c.toml", &config(&extra, &stream("temp", 1.0)));
            let (ok, err, took) = plan(&c);
            assert!(!ok, "{field} = {p}: accepted");
            assert!(err.contains(field) && err.contains(what), "{field} = {p}: {err}");
            assert!(took < Duration::from_secs(1), "{field} = {p}: took {took:?}");
        }
        // The configuration itself.
        let (ok, err, took) = plan(path);
        assert!(!ok && err.contains(what), "--config {p}: {err}");
        assert!(took < Duration::from_secs(1), "--config {p}: took {took:?}");
    }
}

#[test]
fn even_budget_splits_are_accepted() {
    for n in [5, 10, 20] {
        let share = 1.0 / n as f64;
        let share: f64 = format!("{share}").parse().unwrap();
        let streams: String = (0..n).map(|i| stream(&format!("s{i}"), share)).collect();
        let c = write("split.toml", &config("", &streams));
        let (ok, err, _) = plan(&c);
        assert!(ok, "{n} × {share}: {err}");
    }
    let streams: String = (0..5)
        .map(|i| stream(&format!("s{i}"), 0.2000001))
        .collect();
    let c = write("over.toml", &config("", &streams));
    let (ok, err, _) = plan(&c);
    assert!(!ok && err.contains("add up to"), "{err}");
}

/// Every configuration the repository ships releases useful figures:
/// `fleetdp plan --strict` passes on each (it fails when a figure would be
/// mostly noise). Issue: the shipped `deploy/fleetdp.toml` planned a mean
/// of ±44.9 °C for cabin temperatures, and nothing said so.
/// Every configuration the repository ships: `deploy/*.toml` and the
/// Kubernetes ConfigMap's, as a file.
fn shipped_configurations() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut configs: Vec<PathBuf> = ["fleetdp.toml", "fleetdp.compose.toml", "demo.toml"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    let k8s = std::fs::read_to_string(root.join("k8s/fleetdp.yaml")).unwrap();
    let map = serde_yaml::Deserializer::from_str(&k8s)
        .map(|d| <serde_yaml::Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let path = dir().join("k8s-configmap.toml");
    std::fs::write(&path, map["data"]["fleetdp.toml"].as_str().unwrap()).unwrap();
    configs.push(path);
    configs
}

/// Every shipped configuration spends a budget a privacy review can sign:
/// at most moderate protection, ε ≤ 4 per device per day (under zCDP its ε
/// at the declared δ), a horizon shorter than a day counted once per
/// horizon the day spans. Issue: the compose stack's configuration spent
/// ε = 18 per device per hour.
#[test]
fn every_shipped_configuration_spends_at_most_a_moderate_budget_a_day() {
    for config in shipped_configurations() {
        let out = crate::harness::stdout_of(
            Command::new(env!("CARGO_BIN_EXE_fleetdp"))
                .args(["plan", "--format", "json", "--config"])
                .arg(&config),
        );
        let r: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let per_horizon = r["epsilon_at_delta"]
            .as_f64()
            .unwrap_or_else(|| r["budget_per_horizon"].as_f64().unwrap());
        let horizons_a_day = 86_400f64 / r["horizon_seconds"].as_f64().unwrap();
        let per_day = per_horizon * horizons_a_day.ceil().max(1.0);
        assert!(
            per_day <= 4.0,
            "{}: ε ≈ {per_day:.2} per device per day (horizon {}): more than a review signs",
            config.display(),
            r["horizon"]
        );
    }
}

/// Every configuration the repository ships releases useful figures:
/// `fleetdp plan --strict` passes on each (it fails when a figure would be
/// mostly noise). Issue: the shipped `deploy/fleetdp.toml` planned a mean
/// of ±44.9 °C for cabin temperatures, and nothing said so.
#[test]
fn every_shipped_configuration_passes_plan_strict() {
    let configs = shipped_configurations();
    for config in &configs {
        let out = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["plan", "--strict", "--config"])
            .arg(config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}{}",
            config.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The file-mode rule for secrets in volumes FleetDP does not own: a
/// Kubernetes Secret volume with `fsGroup` hands the pod root-owned files
/// readable by its group (`0440`), which FleetDP refused as group-readable
/// — and without `fsGroup` a non-root pod cannot read them at all, so
/// `key_file` had no working path in Kubernetes. Such a file is accepted;
/// one others can read, one of another group, a group-writable one, or a
/// group-readable one when FleetDP runs as root are still refused. Runs
/// `plan` as user and group 65534 (nobody), so it needs root.
#[test]
fn a_root_owned_secret_readable_by_the_process_group_is_accepted() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot hand files to another user; skipped");
        return;
    }
    let d = dir().join("handed");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = d.join("password");
    let config = d.join("fleetdp.toml");
    let text = format!(
        "[kafka]\nbrokers = \"b:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\ndead_letter_topic = \"dlq\"\n\
         [kafka.security]\nprotocol = \"sasl_plaintext\"\nsasl_mechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"${{file:{}}}\"\n\
         [privacy]\nepsilon_per_device = 1.0\nhorizon = \"24h\"\n\
         [[stream]]\nname = \"t\"\nlower = 0.0\nupper = 1.0\nresolution = 0.1\nwindow_size = 10\nstatistics = [\"count\"]\n",
        secret.display()
    );
    std::fs::write(&config, text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let plan_as = |uid: u32, gid: u32, mode: u32, group: u32| {
        std::fs::write(&secret, "s3cret\n").unwrap();
        std::os::unix::fs::chown(&secret, Some(0), Some(group)).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["plan", "--config"])
            .arg(&config)
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, err) = plan_as(65534, 65534, 0o440, 65534);
    assert!(ok, "a Secret-volume file was refused: {err}");
    for (what, uid, mode, group) in [
        ("readable by others", 65534, 0o444, 65534),
        ("of another group", 65534, 0o440, 0),
        ("group-writable", 65534, 0o460, 65534),
        ("group-readable, FleetDP as root", 0, 0o440, 65534),
    ] {
        let (ok, err) = plan_as(uid, uid, mode, group);
        assert!(!ok, "a secret file {what} was accepted");
        assert!(
            err.contains("kafka.security.password") && err.contains("mode"),
            "{what}: {err}"
        );
    }
}
