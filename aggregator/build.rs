//! Build facts for `fleetdp --version`, the startup log and
//! `fleetdp_build_info`: the git commit (`FLEETDP_COMMIT` when the builder
//! gives it, as the image build does; else the checkout's; else "unknown"),
//! the build time (UTC), and whether the linked librdkafka has libcurl
//! (OAUTHBEARER's OIDC flow): a build without it says so now, as a cargo
//! warning, not only when the setting is used.

fn main() {
    // An image build has no .git (the build context leaves it out): the
    // builder passes the commit in (deploy/Dockerfile's FLEETDP_COMMIT).
    let given = std::env::var("FLEETDP_COMMIT")
        .ok()
        .map(|c| c.trim().to_string());
    let given = given.filter(|c| c.len() >= 7 && c.bytes().all(|b| b.is_ascii_hexdigit()));
    let commit = given
        .map(|c| c.chars().take(12).collect())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".into());
    let built = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    println!("cargo:rustc-env=FLEETDP_COMMIT={commit}");
    println!("cargo:rustc-env=FLEETDP_BUILT={built}");
    // Again when the checked-out commit changes, not on every build.
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FLEETDP_COMMIT");
    oidc();
}

/// The checked-out commit, if this is a git checkout.
fn git_commit() -> Option<String> {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
}

/// librdkafka's configure turns OIDC off quietly when libcurl's headers
/// are missing; its config.h says what it found.
fn oidc() {
    let Ok(root) = std::env::var("DEP_RDKAFKA_ROOT") else {
        return;
    };
    let header = std::path::Path::new(&root).join("config.h");
    let found = std::fs::read_to_string(&header).unwrap_or_default();
    let oidc = found.lines().any(|l| l.trim() == "#define WITH_CURL 1");
    if !oidc {
        println!(
            "cargo:warning=librdkafka was built without libcurl: this FleetDP cannot use \
             [kafka.security.oauthbearer] (OIDC). Install Debian's libcurl4-openssl-dev, then \
             `cargo clean -p rdkafka-sys` and build again (tests/run.sh does this itself)."
        );
    }
    println!("cargo:rerun-if-changed={}", header.display());
}
