//! The command's log and exit codes as an operator's tooling sees them:
//! no colour escapes when stderr is a file, every line JSON
//! under `--log-json` (the fatal one too), the effective configuration as
//! fields rather than a Rust `Debug` struct, and exit codes that tell a
//! refused configuration (78) from a runtime failure (1) and a bad command
//! line (2).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("fleetdp-logs-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A configuration whose broker nobody listens on (the service starts,
/// logs its configuration and keeps trying to connect).
fn config(name: &str, horizon: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(
        &p,
        format!(
            "[kafka]\nbrokers = \"127.0.0.1:9\"\ninput_topic = \"in\"\noutput_topic = \"out\"\n\
             dead_letter_topic = \"dlq\"\n[privacy]\nepsilon_per_device = 1.0\nhorizon = \"{horizon}\"\n\
             key_env = \"FLEETDP_LOGS_KEY\"\n[http]\nlisten = \"\"\n\
             [[stream]]\nname = \"cabin_temp_c\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\n\
             window_size = 1000\nmax_windows_per_device = 24\nstatistics = [\"mean\"]\n"
        ),
    )
    .unwrap();
    p
}

fn fleetdp(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fleetdp"));
    c.args(args).env(
        "FLEETDP_LOGS_KEY",
        fleetdp::dp::rng::ReleaseKey::ephemeral().to_hex(),
    );
    // What a terminal-less service manager passes: colour is not forced off.
    c.env_remove("NO_COLOR");
    c
}

/// `fleetdp run` with stderr to a file until its stream line is logged.
fn run_log(json: bool) -> String {
    let cfg = config(if json { "json.toml" } else { "text.toml" }, "24h");
    let log = dir().join(if json { "json.log" } else { "text.log" });
    let mut args = vec!["run", "--config", cfg.to_str().unwrap()];
    if json {
        args.insert(0, "--log-json");
    }
    let mut child = fleetdp(&args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("stream planned") || start.elapsed() > Duration::from_secs(30) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(text.contains("stream planned"), "{text}");
    text
}

#[test]
fn a_log_written_to_a_file_has_no_colour_escapes() {
    let text = run_log(false);
    assert!(!text.contains('\u{1b}'), "ANSI escapes in a file: {text:?}");
    assert!(text.contains("starting"), "{text}");
}

#[test]
fn the_effective_configuration_is_logged_as_fields() {
    let text = run_log(true);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let start = lines
        .iter()
        .find(|l| l["fields"]["message"] == "starting")
        .expect("a starting line");
    let f = &start["fields"];
    assert_eq!(f["brokers"], "127.0.0.1:9", "{f}");
    assert_eq!(f["input_topic"], "in");
    assert_eq!(f["relation"], "change-one", "{f}");
    assert_eq!(f["budget_per_horizon"], 1.0);
    assert_eq!(f["horizon"], "24h", "{f}");
    let stream = lines
        .iter()
        .find(|l| l["fields"]["message"] == "stream planned")
        .expect("a stream line");
    assert_eq!(stream["fields"]["stream"], "cabin_temp_c");
    assert_eq!(stream["fields"]["window_size"], 1000);
    assert_eq!(stream["fields"]["max_windows_per_device"], 24);
    assert!(!text.contains("KafkaConfig {"), "a Debug struct: {text}");
}

#[test]
fn exit_codes_tell_configuration_runtime_and_usage_apart() {
    // A refused configuration: 78, and under --log-json its reason is the
    // last line, as JSON.
    let bad = config("bad.toml", "forever");
    let out = fleetdp(&["--log-json", "run", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    for line in err.lines() {
        let doc: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(doc["level"].is_string(), "{line}");
    }
    let last: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert_eq!(last["fields"]["exit_code"], 78);
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("privacy.horizon"),
        "{last}"
    );
    // The same as text.
    let out = fleetdp(&["plan", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.starts_with("fleetdp: "), "{err}");
    // A runtime failure: 1.
    let out = fleetdp(&["keygen", "--out", "/nonexistent-dir/release.key"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A bad command line: 2.
    let out = fleetdp(&["run", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
