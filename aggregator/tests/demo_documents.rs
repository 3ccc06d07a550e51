//! `fleetdp demo --documents`: the simulated fleet sends its own
//! multi-metric JSON documents (vin, RFC 3339 ts, nested metrics) and the
//! demo reads them through an `[input]` mapping; every stream is released,
//! fleet-wide and per partition, with figures as useful as the native
//! demo's.

use fleetdp::demo::{run, DemoOptions};
use fleetdp::dp::rng::ReleaseKey;
use std::time::Duration;

#[test]
fn the_demo_reads_a_multi_metric_document_fleet() {
    let out = run(DemoOptions {
        duration: Duration::from_secs(25),
        devices: fleetdp::demo::DEMO_DEVICES,
        round_seconds: 2.5,
        listen: None,
        seed: 3,
        tight: false,
        key: Some(ReleaseKey::from_bytes([8; 32])),
        partitions: false,
        documents: true,
    })
    .expect("the demo runs");
    eprintln!("{}", out.summary);
    // Three streams × two partitions, about a window per simulated hour
    // (2.5 s).
    assert!(
        out.windows_released >= 18,
        "{} windows",
        out.windows_released
    );
    assert!(
        out.fleet_releases >= 9,
        "{} fleet releases",
        out.fleet_releases
    );
    for stream in ["cabin_temp_c", "battery_v", "speed_kmh"] {
        assert!(out.summary.contains(stream), "{stream} never released");
    }
    for (useful, all) in [out.useful, out.fleet_useful] {
        assert!(
            useful as f64 >= 0.95 * all as f64,
            "{useful} of {all} figures within their target or the plan's bound"
        );
    }
}
