//! Build facts for `fleetdp --version`, the startup log and
//! `fleetdp_build_info`: the git commit (or "unknown" outside a checkout)
//! and the build time (UTC).

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let built = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    println!("cargo:rustc-env=FLEETDP_COMMIT={commit}");
    println!("cargo:rustc-env=FLEETDP_BUILT={built}");
    // Again when the checked-out commit changes, not on every build.
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    println!("cargo:rerun-if-changed=build.rs");
}
