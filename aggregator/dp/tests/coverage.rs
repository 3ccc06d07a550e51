//! Coverage of the reported 95% intervals: over ≥ 10⁵ windows the interval
//! covers the true sum and mean in at least 95% of trials, and in at most 96%
//! where the noise scale is ≥ 10 units. The empirical rate is compared with a
//! 4-standard-error tolerance, and the exact coverage of the discrete
//! interval is checked to lie in the band itself.

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::accuracy::{coverage, LEVEL};
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, Mechanism, PrivacySpec, StatKind, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;

const TRIALS: u64 = 100_000;

fn run(measure: Measure, budget: f64, expect_upper_band: bool) {
    let spec = StreamSpec {
        name: "coverage".into(),
        lower: 0.0,
        upper: 100.0,
        resolution: 0.5,
        window_size: 50,
        max_readings_per_device: 2,
        max_windows_per_device: 1,
        budget_share: 1.0,
        statistics: vec![StatKind::Sum, StatKind::Mean],
        histogram_edges: vec![],
        quantiles: vec![],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        window_ms: None,
        running_share: 0.0,
        running_lifetime: 1 << 24,
        device_alarm_share: 0.0,
        groups: None,
    };
    let privacy = PrivacySpec {
        relation: Relation::ChangeOne,
        budget: Budget {
            measure,
            per_horizon: budget,
            delta: 1e-6,
        },
    };
    let s = plan(&privacy, &[spec]).unwrap().streams.remove(0);
    let m = &s.measurements[0];
    let Mechanism::Additive(noise) = &m.mechanism else {
        panic!()
    };
    // Scale in metric units (noise is on the centred sum, in half grid units).
    let scale_units = noise.scale_f64() / 2.0;
    let exact_cov = coverage(noise, m.half_width);
    assert!(exact_cov >= LEVEL, "exact coverage {exact_cov}");
    if expect_upper_band {
        assert!(scale_units >= 10.0, "scale {scale_units}");
        assert!(exact_cov <= 0.96, "exact coverage {exact_cov}");
    }
    let key = ReleaseKey::from_bytes([9; 32]);
    let values: Vec<i64> = (0..50).map(|i| 40 + (i * 7) % 120).collect();
    let truth = s.truth(&values);
    let (true_sum, true_mean) = (truth[0].values[0], truth[1].values[0]);
    let (mut cover_sum, mut cover_mean) = (0u64, 0u64);
    for seq in 0..TRIALS {
        let r = s.release(&key, 0, seq, &values);
        let (sum, mean) = (&r[0], &r[1]);
        cover_sum += ((sum.values[0] - true_sum).abs() <= sum.half_width.unwrap() + 1e-9) as u64;
        cover_mean +=
            ((mean.values[0] - true_mean).abs() <= mean.half_width.unwrap() + 1e-9) as u64;
    }
    let se = (LEVEL * (1.0 - LEVEL) / TRIALS as f64).sqrt();
    for (name, c) in [("sum", cover_sum), ("mean", cover_mean)] {
        let rate = c as f64 / TRIALS as f64;
        println!(
            "{measure:?} scale {scale_units:.2}: {name} coverage {rate:.4} (exact {exact_cov:.4})"
        );
        assert!(
            rate >= LEVEL - 4.0 * se,
            "{name}: coverage {rate} below 95%"
        );
        assert!(
            (rate - exact_cov).abs() < 4.0 * se,
            "{name}: {rate} vs exact {exact_cov}"
        );
        if expect_upper_band {
            assert!(rate <= 0.96 + 4.0 * se, "{name}: coverage {rate} above 96%");
        }
    }
}

#[test]
fn laplace_intervals_cover() {
    // L1 = 2kΔ = 800 half units, ε = 2 → scale 400 half units = 200 units.
    run(Measure::Pure, 2.0, true);
}

#[test]
fn gaussian_intervals_cover() {
    run(Measure::Zcdp, 0.5, true);
}

#[test]
fn small_scale_intervals_cover_at_least_95() {
    // Scale well below 10 units: discreteness may push coverage above 96%.
    run(Measure::Pure, 500.0, false);
}
