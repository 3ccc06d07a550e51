//! The default demo's figures are worth showing at a budget a privacy
//! review can sign (ε = 2 per device per day): with a fixed fleet seed and
//! release key, 40 s of `fleetdp demo` (in-process Kafka, its default
//! 100,000 devices, simulated hours of 3 s)
//! release figures of which at least 95% are useful — within their stream's
//! `target_error`, or else the bound `fleetdp plan` warns at (5% of the
//! stream's range; a histogram bin: the readings it expects) — per
//! partition and fleet-wide (which it leads with); every statistic's
//! observed coverage is printed. At `--tight`'s budget the same bar is
//! missed, so the judgement can fail.

use fleetdp::demo::{run, DemoOptions};
use fleetdp::dp::rng::ReleaseKey;
use std::time::Duration;

fn demo(tight: bool) -> fleetdp::demo::DemoOutcome {
    run(DemoOptions {
        duration: Duration::from_secs(40),
        devices: fleetdp::demo::DEMO_DEVICES,
        round_seconds: 3.0,
        listen: None,
        seed: 1,
        tight,
        key: Some(ReleaseKey::from_bytes([7; 32])),
        partitions: false,
        documents: false,
    })
    .expect("the demo runs")
}

#[test]
fn the_default_demo_releases_figures_a_newcomer_can_trust() {
    let out = demo(false);
    eprintln!("{}", out.summary);
    let (useful, all) = out.useful;
    assert!(
        out.windows_released >= 30,
        "{} windows",
        out.windows_released
    );
    assert!(all >= 100, "{all} figures");
    assert!(
        useful as f64 >= 0.95 * all as f64,
        "{useful} of {all} figures within their target or the plan's bound"
    );
    // The fleet view it leads with: one record per seq the partitions
    // share, as useful as the partitions' figures.
    let (useful, all) = out.fleet_useful;
    assert!(
        out.fleet_releases >= 10,
        "{} fleet releases",
        out.fleet_releases
    );
    assert!(all >= 40, "{all} fleet-wide figures");
    assert!(
        useful as f64 >= 0.95 * all as f64,
        "{useful} of {all} fleet-wide figures within their target or the plan's bound"
    );
    assert!(out.summary.starts_with("Fleet-wide"), "{}", out.summary);
    // The question the registry answers: battery_v per firmware, with the
    // simulated 4.2 draining 0.3 V (rolled out halfway).
    let mean = |fw: &str| out.group_means[&("battery_v".to_string(), format!("firmware={fw}"))];
    assert!(
        mean("4.1") - mean("4.2") > 0.1,
        "4.1 {} V, 4.2 {} V",
        mean("4.1"),
        mean("4.2")
    );
    assert!(
        out.summary.contains("By group, battery_v mean"),
        "{}",
        out.summary
    );
    // Every simulated device has a registry row with a declared firmware:
    // none may land in `other` (rows lost by the mock cluster did).
    assert!(
        !out.group_means.keys().any(|(_, g)| g == "firmware=other"),
        "devices without their registry row: {:?}",
        out.group_means
    );
}

/// The control: the same fleet at `--tight`'s ε = 0.2 per device per day
/// misses the bar, so the judgement above can fail.
#[test]
fn the_tight_demo_misses_the_bar() {
    let out = demo(true);
    eprintln!("{}", out.summary);
    let (useful, all) = out.useful;
    assert!(all >= 100, "{all} figures");
    assert!(
        (useful as f64) < 0.95 * all as f64,
        "{useful} of {all} figures useful at the tight budget"
    );
}
