//! The README's two commands in either order: on a
//! fresh machine `cargo run --release -p fleetdp -- demo` builds librdkafka
//! before `tests/run.sh` installs libcurl's headers; librdkafka's configure
//! then turns OIDC off quietly and cargo never rebuilds it. tests/run.sh
//! now cleans such a build after its installs (tests/stale_librdkafka.sh);
//! these tests run that script against a made-up target directory, with a
//! `pkg-config` that says whether libcurl is there and a `cargo` that
//! records what it is asked, and check that run.sh calls it after the
//! install and before its first cargo command.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A scratch directory with `bin/pkg-config` (exit `libcurl`), `bin/cargo`
/// (appends its arguments to `cargo.log`) and a target directory holding
/// one librdkafka build per `(profile dir, with curl)`.
fn scratch(name: &str, libcurl: bool, builds: &[(&str, bool)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("fleetdp-build-deps-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("bin")).unwrap();
    let shim = |file: &str, body: &str| {
        let p = d.join("bin").join(file);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    shim("pkg-config", if libcurl { "exit 0" } else { "exit 1" });
    shim(
        "cargo",
        &format!("echo \"$@\" >> {}", d.join("cargo.log").display()),
    );
    for (i, (profile, curl)) in builds.iter().enumerate() {
        let out = d
            .join("target")
            .join(profile)
            .join("build")
            .join(format!("rdkafka-sys-{i:016x}"))
            .join("out");
        std::fs::create_dir_all(&out).unwrap();
        let header = if *curl {
            "#define ENABLE_CURL \"try\"\n#define WITH_CURL 1\n"
        } else {
            "#define ENABLE_CURL \"try\"\n"
        };
        std::fs::write(out.join("config.h"), header).unwrap();
    }
    d
}

/// Run the script in `d`; the cargo commands it ran.
fn run(d: &Path) -> Vec<String> {
    let path = format!(
        "{}:{}",
        d.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    crate::harness::stdout_of(
        Command::new("bash")
            .arg(root().join("tests/stale_librdkafka.sh"))
            .env("PATH", path)
            .env("CARGO_TARGET_DIR", d.join("target")),
    );
    std::fs::read_to_string(d.join("cargo.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Demo first, libcurl installed after: the build without it is cleaned,
/// in each profile that has one; a build with it is left alone.
#[test]
fn a_librdkafka_built_before_libcurl_is_rebuilt() {
    let d = scratch(
        "stale",
        true,
        &[("release", false), ("debug", false), ("bench", true)],
    );
    let mut ran = run(&d);
    ran.sort();
    assert_eq!(
        ran,
        [
            "clean --quiet -p rdkafka-sys --profile dev",
            "clean --quiet -p rdkafka-sys --profile release",
        ]
    );
}

/// Tests first (libcurl there before the first build), or no libcurl at
/// all: nothing is cleaned.
#[test]
fn a_build_with_libcurl_or_a_machine_without_it_is_left_alone() {
    assert!(run(&scratch("fresh", true, &[("release", true)])).is_empty());
    assert!(run(&scratch("none", false, &[("release", false)])).is_empty());
    assert!(run(&scratch("empty", true, &[])).is_empty());
}

/// run.sh installs libcurl, then runs the script, before any cargo
/// command of its own (else a stale build would already be linked).
#[test]
fn run_sh_checks_after_installing_and_before_building() {
    let text = std::fs::read_to_string(root().join("tests/run.sh")).unwrap();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("tests/run.sh has no {needle:?}"))
    };
    let install = at("apt_install libcurl4-openssl-dev");
    let check = at("tests/stale_librdkafka.sh\"");
    let first_cargo = text
        .lines()
        .scan(0, |pos, l| {
            let start = *pos;
            *pos += l.len() + 1;
            Some((start, l.trim_start()))
        })
        .find(|(_, l)| l.starts_with("cargo "))
        .map(|(p, _)| p)
        .expect("run.sh runs cargo");
    assert!(
        install < check && check < first_cargo,
        "{install} {check} {first_cargo}"
    );
}
