//! The privacy core stays free of I/O (docs/DESIGN.md §2): none of Kafka,
//! an async runtime, HTTP or duration parsing among its normal (transitive)
//! dependencies, as `cargo tree` resolves them.

use std::process::Command;

#[test]
fn the_core_links_no_io_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "fleetdp-dp",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(
        crates.contains(&"fleetdp-dp") && crates.contains(&"rand_chacha"),
        "{tree}"
    );
    for banned in [
        "rdkafka",
        "rdkafka-sys",
        "tokio",
        "hyper",
        "humantime",
        "metrics",
    ] {
        assert!(
            !crates.contains(&banned),
            "the core depends on {banned}:\n{tree}"
        );
    }
}
