//! Benchmarks of the privacy core: exact sampler throughput and the time to
//! release one window (n = 10,000; mean, std, 10-bin histogram, 4 quantiles)
//! beside the exact aggregation of the same window, measured in the same
//! run. Each figure is the best of several timed passes (the VM is shared).
//!
//! Run: `cargo bench -p fleetdp-dp --bench core`. Targets (one core), each
//! printed as a `TARGET` line with this run's verdict: ≥ 5 M discrete
//! Laplace samples/s at scale 100; window release ≤ 2 ms.

// The service benches' `TARGET` line, shared.
#[path = "../../benches/pipeline/target.rs"]
mod target;

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::rational::exact;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PrivacySpec, StatKind, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;
use fleetdp_dp::sampler::{DiscreteGaussian, DiscreteLaplace};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::hint::black_box;
use std::time::Instant;

/// Timed passes per figure; the best is reported.
const PASSES: usize = 7;

/// The shortest of [`PASSES`] timings of `f`, in seconds, after one
/// untimed pass.
fn best_of(mut f: impl FnMut()) -> f64 {
    f();
    (0..PASSES)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    samplers();
    window_release();
}

/// Samples per timed pass.
const SAMPLES: u64 = 200_000;

fn samplers() {
    let mut at_100 = 0.0;
    for scale in [1.0, 100.0, 1e4] {
        let d = DiscreteLaplace::new(&exact(scale));
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let secs = best_of(|| {
            black_box(
                (0..SAMPLES)
                    .map(|_| d.sample(&mut rng))
                    .fold(0i128, |a, x| a ^ x),
            );
        });
        let rate = SAMPLES as f64 / secs;
        println!(
            "discrete Laplace, scale {scale}: {:.2} M samples/s",
            rate / 1e6
        );
        if scale == 100.0 {
            at_100 = rate;
        }
    }
    for sigma in [1.0f64, 100.0, 1e4] {
        let d = DiscreteGaussian::new(&exact(sigma * sigma));
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let secs = best_of(|| {
            black_box(
                (0..SAMPLES)
                    .map(|_| d.sample(&mut rng))
                    .fold(0i128, |a, x| a ^ x),
            );
        });
        let rate = SAMPLES as f64 / secs;
        println!(
            "discrete Gaussian, sigma {sigma}: {:.2} M samples/s",
            rate / 1e6
        );
    }
    target::line(
        "discrete Laplace at scale 100",
        &format!("{:.2} M samples/s", at_100 / 1e6),
        "≥ 5 M samples/s",
        at_100 >= 5e6,
    );
}

fn window_release() {
    let spec = StreamSpec {
        name: "cabin_temp_c".into(),
        lower: -40.0,
        upper: 85.0,
        resolution: 0.1,
        window_size: 10_000,
        max_readings_per_device: 1,
        max_windows_per_device: 24,
        budget_share: 1.0,
        statistics: vec![
            StatKind::Mean,
            StatKind::Std,
            StatKind::Histogram,
            StatKind::Quantiles,
        ],
        histogram_edges: vec![
            -40.0, -20.0, -10.0, 0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 85.0,
        ],
        quantiles: vec![0.1, 0.5, 0.9, 0.99],
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
    let mut worst: f64 = 0.0;
    for measure in [Measure::Pure, Measure::Zcdp] {
        let privacy = PrivacySpec {
            relation: Relation::ChangeOne,
            budget: Budget {
                measure,
                per_horizon: 1.0,
                delta: 1e-6,
            },
        };
        let p = plan(&privacy, std::slice::from_ref(&spec)).unwrap();
        let s = &p.streams[0];
        let values: Vec<i64> = (0..10_000).map(|i| 150 + (i * 7919 % 400) - 200).collect();
        let key = ReleaseKey::from_bytes([1; 32]);
        let mut seq = 0u64;
        // Each pass releases 20 windows (new seqs: new noise).
        let release = best_of(|| {
            for _ in 0..20 {
                seq += 1;
                black_box(s.release(&key, 0, seq, black_box(&values)));
            }
        }) / 20.0;
        let exact = best_of(|| {
            for _ in 0..20 {
                black_box(s.truth(black_box(&values)));
            }
        }) / 20.0;
        println!(
            "release one window, n = 10,000, {measure:?}: {:.2} ms (exact baseline {:.2} ms, ratio {:.2})",
            release * 1e3,
            exact * 1e3,
            release / exact
        );
        worst = worst.max(release);
    }
    target::line(
        "window release, n = 10,000, slower measure",
        &format!("{:.2} ms", worst * 1e3),
        "≤ 2 ms",
        worst <= 2e-3,
    );
}
