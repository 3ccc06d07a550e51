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
    // OTLP's metrics messages, as FleetDP writes them: prost's own types,
    // without serde (their JSON is OTLP/JSON, written by hand).
    println!("cargo:rerun-if-changed=proto/otlp_metrics.proto");
    let otlp = protox::compile(["proto/otlp_metrics.proto"], ["proto"]).expect("valid .proto");
    prost_build::Config::new()
        .compile_fds(otlp)
        .expect("generate Rust from the OTLP .proto");
}
