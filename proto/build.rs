//! Compiles the .proto files with protox (pure Rust): no system protoc.
fn main() {
    println!("cargo:rerun-if-changed=proto/fleetdp.proto");
    let fds = protox::compile(["proto/fleetdp.proto"], ["proto"]).expect("valid .proto");
    prost_build::Config::new()
        // Releases can also be emitted as JSON for human consumers.
        .type_attribute(
            ".",
            "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default)]",
        )
        // A reading's few labels: a BTreeMap decodes them without a
        // HashMap's per-map random state and SipHash (and in name order).
        // A plan's settings: in name order, so the encoding is canonical.
        .btree_map([
            ".fleetdp.v1.DeviceReading.labels",
            ".fleetdp.v1.PlanFingerprint.settings",
        ])
        .compile_fds(fds)
        .expect("generate Rust from the .proto");
}
