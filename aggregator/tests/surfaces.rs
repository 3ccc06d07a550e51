//! The production surfaces, tried through the release binary the
//! way a careless or hostile operator meets them: a security property
//! under librdkafka's other spelling beside `[kafka.security]` (the
//! password went out in clear), a running share that crash-looped the
//! service, `${…}` values printed in the `starting` line, `${…}` refused
//! for named choices, and the exit codes orchestrators act on.
//!
//! No broker is needed: every case is decided at start (the cluster named
//! is 127.0.0.1:1, where nothing listens).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CONFIG_ERROR: i32 = 78;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("fleetdp-surfaces-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(name: &str, text: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A release key for `run` (mode 0600).
fn key() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir().join("release.key");
    if !p.exists() {
        let hex: String = (0..32u8)
            .map(|i| format!("{:02x}", i.wrapping_mul(37) ^ 0x5a))
            .collect();
        std::fs::write(&p, hex).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    p
}

/// A configuration with `kafka` extra lines, `extra` tables after the
/// privacy table, and one stream with `stream` extra lines.
fn config(kafka: &str, privacy: &str, stream: &str, extra: &str) -> String {
    format!(
        "[kafka]\nbrokers = \"127.0.0.1:1\"\ninput_topic = \"in\"\noutput_topic = \"out\"\ndead_letter_topic = \"dlq\"\n{kafka}\n\
         [privacy]\nepsilon_per_device = 1.0\nhorizon = \"24h\"\nkey_file = \"{}\"\n{privacy}\n\
         [http]\nlisten = \"127.0.0.1:0\"\n{extra}\n\
         [[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 10\nstatistics = [\"mean\"]\n{stream}\n",
        key().display()
    )
}

/// `fleetdp <args> --config <file>` with `env`, stopped after `limit`.
fn fleetdp(args: &[&str], file: &Path, env: &[(&str, &str)], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(args)
        .arg("--config")
        .arg(file)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Item 1: `sasl.mechanism` (librdkafka's alias of `sasl.mechanisms`)
/// beside `[kafka.security]` passed `plan` and `run`, and some clients
/// then sent the password in clear with PLAIN. Now both refuse it at
/// start, naming the property, with the configuration error's code.
#[test]
fn a_security_alias_beside_the_security_table_is_refused() {
    let security = "[kafka.properties]\n\"sasl.mechanism\" = \"PLAIN\"\n[kafka.security]\nprotocol = \"sasl_plaintext\"\nsasl_mechanism = \"SCRAM-SHA-256\"\nusername = \"fleetdp\"\npassword = \"${FLEETDP_SURFACES_PASSWORD}\"";
    let file = write("alias.toml", &config(security, "", "", ""));
    let env = [("FLEETDP_SURFACES_PASSWORD", "in-clear-is-bad")];
    for cmd in [&["plan"][..], &["run"][..]] {
        let o = fleetdp(cmd, &file, &env, Duration::from_secs(30));
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(CONFIG_ERROR), "{cmd:?}: {e}");
        assert!(
            e.contains("kafka.properties.\"sasl.mechanism\"") && e.contains("sasl.mechanisms"),
            "{cmd:?}: {e}"
        );
        assert!(!e.contains("in-clear-is-bad"), "{e}");
    }
}

/// Item 2: `running_share = 1e-35` passed `plan`, and the first release
/// panicked (exit 101) after every restart. Now the plan refuses it,
/// naming the field and the floor, and `run` exits with the
/// configuration error's code (a restart cannot help).
#[test]
fn a_running_share_below_the_floor_is_refused_not_crash_looped() {
    for (measure, budget) in [
        ("pure", ""),
        ("zcdp", "rho_per_device = 1.0\ndelta = 1e-6\n"),
    ] {
        let privacy = format!("measure = \"{measure}\"\n{budget}");
        let text = config("", &privacy, "running_share = 1e-35", "");
        let text = if measure == "zcdp" {
            text.replace("epsilon_per_device = 1.0\n", "")
        } else {
            text
        };
        let file = write(&format!("running-{measure}.toml"), &text);
        for cmd in [&["plan"][..], &["run"][..]] {
            let o = fleetdp(cmd, &file, &[], Duration::from_secs(30));
            let e = stderr(&o);
            assert_eq!(
                o.status.code(),
                Some(CONFIG_ERROR),
                "{measure} {cmd:?}: {e}"
            );
            assert!(
                e.contains("running_share") && e.contains("below the floor"),
                "{measure} {cmd:?}: {e}"
            );
        }
    }
}

/// Item 4: values written as `${ENV}` for `brokers`, `input_topic` and
/// `group_id` appeared verbatim in the `starting` line. Every line the
/// process writes blanks them now, text or JSON, the fatal line included.
#[test]
fn expanded_values_never_reach_the_log() {
    let kafka = "group_id = \"${FLEETDP_SURFACES_GROUP}\"";
    let text = config(kafka, "", "", "")
        .replace("\"127.0.0.1:1\"", "\"${FLEETDP_SURFACES_BROKERS}\"")
        .replace(
            "input_topic = \"in\"",
            "input_topic = \"${FLEETDP_SURFACES_TOPIC}\"",
        );
    let file = write("expanded.toml", &text);
    let env = [
        ("FLEETDP_SURFACES_BROKERS", "127.0.0.1:1"),
        ("FLEETDP_SURFACES_TOPIC", "topic-secret-7f3a"),
        ("FLEETDP_SURFACES_GROUP", "group-secret-9c1e"),
    ];
    for json in [false, true] {
        let args: &[&str] = if json {
            &["--log-json", "run"]
        } else {
            &["run"]
        };
        let o = fleetdp(args, &file, &env, Duration::from_secs(90));
        let e = stderr(&o);
        assert!(e.contains("starting"), "json={json}: {e}");
        assert!(e.contains("<secret>"), "json={json}: {e}");
        for (_, value) in env {
            assert!(!e.contains(value), "json={json}: {value} shown in {e}");
        }
    }
}

/// Item 5: `${…}` in a named choice (`protocol`, `relation`, `measure`,
/// `input_format`, `output_format`) was refused as "unknown variant",
/// since the TOML was parsed into types before expanding.
#[test]
fn every_named_choice_may_be_an_expanded_value() {
    let kafka = "input_format = \"${FLEETDP_SURFACES_FORMAT}\"\noutput_format = \"${FLEETDP_SURFACES_OUT}\"\n[kafka.security]\nprotocol = \"${FLEETDP_SURFACES_PROTOCOL}\"";
    let privacy =
        "relation = \"${FLEETDP_SURFACES_RELATION}\"\nmeasure = \"${FLEETDP_SURFACES_MEASURE}\"";
    let file = write("choices.toml", &config(kafka, privacy, "", ""));
    let env = [
        ("FLEETDP_SURFACES_FORMAT", "json"),
        ("FLEETDP_SURFACES_OUT", "json"),
        ("FLEETDP_SURFACES_PROTOCOL", "plaintext"),
        ("FLEETDP_SURFACES_RELATION", "change-one"),
        ("FLEETDP_SURFACES_MEASURE", "pure"),
    ];
    let o = fleetdp(&["plan"], &file, &env, Duration::from_secs(30));
    assert!(o.status.success(), "{}", stderr(&o));
    // A wrong choice is still refused, after expansion, naming the value.
    let o = fleetdp(
        &["plan"],
        &file,
        &[
            ("FLEETDP_SURFACES_FORMAT", "json"),
            ("FLEETDP_SURFACES_OUT", "json"),
            ("FLEETDP_SURFACES_PROTOCOL", "tls"),
            ("FLEETDP_SURFACES_RELATION", "change-one"),
            ("FLEETDP_SURFACES_MEASURE", "pure"),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(o.status.code(), Some(CONFIG_ERROR), "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown variant"), "{}", stderr(&o));
}

/// Item 8: `plan --help` said `--strict` exits 1; it exits 78, the
/// configuration error's code, and the help now says so.
#[test]
fn plan_strict_exits_as_its_help_says() {
    let help = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["plan", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("exit 78"), "{help}");
    // A mean of ±… on 10 readings at ε = 1: mostly noise.
    let file = write("strict.toml", &config("", "", "", ""));
    let o = fleetdp(&["plan", "--strict"], &file, &[], Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(CONFIG_ERROR), "{}", stderr(&o));
    assert!(stderr(&o).contains("--strict"), "{}", stderr(&o));
}
