//! Release keys that cannot be weak, through the `fleetdp` binary: `keygen`
//! creates a 0600 file atomically and never overwrites or follows a link;
//! `run` refuses a key file others can read, an all-zero key and a key
//! with a `+` sign, each with an error naming the cause, before it connects
//! anywhere.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn fleetdp(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fleetdp"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn config(dir: &Path, key_line: &str) -> String {
    let path = dir.join("fleetdp.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[kafka]
brokers = "127.0.0.1:1"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[http]
listen = ""
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
{key_line}
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 10
statistics = ["mean"]
"#
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn keygen_creates_owner_only_files_and_never_overwrites_or_follows_links() {
    let dir = tempdir("keygen");
    let key = dir.join("release.key");
    let (ok, out) = fleetdp(&["keygen", "--out", key.to_str().unwrap()], &[]);
    assert!(ok, "{out}");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&key).unwrap();
    assert_eq!(text.trim().len(), 64);
    // Not again over it.
    let (ok, out) = fleetdp(&["keygen", "--out", key.to_str().unwrap()], &[]);
    assert!(!ok && out.contains("refusing to overwrite"), "{out}");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), text);
    // A link placed where the key goes is not followed.
    let target = dir.join("elsewhere");
    let link = dir.join("linked.key");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (ok, out) = fleetdp(&["keygen", "--out", link.to_str().unwrap()], &[]);
    assert!(!ok, "{out}");
    assert!(!target.exists(), "keygen followed the link");
}

#[test]
fn run_refuses_readable_key_files_and_degenerate_keys() {
    let dir = tempdir("keys");
    let key = dir.join("release.key");
    let (ok, out) = fleetdp(&["keygen", "--out", key.to_str().unwrap()], &[]);
    assert!(ok, "{out}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = config(&dir, &format!("key_file = {:?}", key.to_str().unwrap()));
    let (ok, out) = fleetdp(&["run", "--config", &cfg], &[]);
    assert!(
        !ok && out.contains("mode 0644") && out.contains("release.key"),
        "{out}"
    );

    let cfg = config(&dir, "key_env = \"FLEETDP_TEST_WEAK_KEY\"");
    for (key, why) in [
        ("0".repeat(64), "degenerate"),
        ("+f".repeat(32), "not hexadecimal"),
        ("deadbeef".repeat(8), "degenerate"),
    ] {
        let (ok, out) = fleetdp(
            &["run", "--config", &cfg],
            &[("FLEETDP_TEST_WEAK_KEY", &key)],
        );
        assert!(!ok && out.contains(why), "{key}: {out}");
    }
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fleetdp-{name}-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `--version` names the commit and the build time.
#[test]
fn version_names_the_commit_and_build_time() {
    let (ok, out) = fleetdp(&["--version"], &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("(commit ") && out.contains(", built 20"),
        "{out}"
    );
    assert!(fleetdp::VERSION.starts_with(env!("CARGO_PKG_VERSION")));
}
