//! Benchmarks of the privacy core: exact sampler throughput and the time to
//! release one window (n = 10,000; mean, std, 10-bin histogram, 4 quantiles).
//!
//! Run: `cargo bench -p fleetdp-dp --bench core`. Targets (one core): ≥ 5 M
//! discrete Laplace samples/s at scale 100; window release ≤ 2 ms.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::rational::exact;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PrivacySpec, StatKind, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;
use fleetdp_dp::sampler::{DiscreteGaussian, DiscreteLaplace};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

const BATCH: u64 = 10_000;

fn samplers(c: &mut Criterion) {
    let mut g = c.benchmark_group("discrete_laplace");
    g.throughput(Throughput::Elements(BATCH));
    for scale in [1.0, 100.0, 1e4] {
        let d = DiscreteLaplace::new(&exact(scale));
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        g.bench_with_input(BenchmarkId::from_parameter(scale), &d, |b, d| {
            b.iter(|| {
                (0..BATCH)
                    .map(|_| d.sample(&mut rng))
                    .fold(0i128, |a, x| a ^ x)
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("discrete_gaussian");
    g.throughput(Throughput::Elements(BATCH));
    for sigma in [1.0f64, 100.0, 1e4] {
        let d = DiscreteGaussian::new(&exact(sigma * sigma));
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        g.bench_with_input(BenchmarkId::from_parameter(sigma), &d, |b, d| {
            b.iter(|| {
                (0..BATCH)
                    .map(|_| d.sample(&mut rng))
                    .fold(0i128, |a, x| a ^ x)
            })
        });
    }
    g.finish();
}

fn window_release(c: &mut Criterion) {
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
    let mut g = c.benchmark_group("window_release_n10000");
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
        g.bench_function(format!("{measure:?}"), |b| {
            b.iter(|| {
                seq += 1;
                black_box(s.release(&key, 0, seq, black_box(&values)))
            })
        });
        g.bench_function(format!("{measure:?}_exact_baseline"), |b| {
            b.iter(|| black_box(s.truth(black_box(&values))))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3)).warm_up_time(std::time::Duration::from_secs(1));
    targets = samplers, window_release
}
criterion_main!(benches);
