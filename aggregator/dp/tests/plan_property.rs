//! Every declaration is either planned or refused with a field-named error,
//! quickly, and never crashes: 10⁴ seeded random configurations drawn from
//! each field's edge values (zero, negative, NaN, ±∞, just past each
//! documented bound, the type's extremes) and ordinary ones. Found by hand
//! before: `window_size = 2⁴⁰` and a huge `k` aborted with multi-GB
//! allocations, ε = 10⁻¹⁵ made the plan take 23 s, tiny horizons panicked.
//! Accepted plans must also release a window, and step their running
//! totals, without panicking (`running_share = 1e-35` passed the plan and
//! panicked at the first release).

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PlanError, PrivacySpec, QuantileTrack, StatKind, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

/// The statistics a random stream draws from (`clamped` is drawn apart).
const STATS: [StatKind; 7] = [
    StatKind::Count,
    StatKind::Sum,
    StatKind::Mean,
    StatKind::Variance,
    StatKind::Std,
    StatKind::Histogram,
    StatKind::Quantiles,
];

const CONFIGS: u64 = 10_000;
/// A plan (or a refusal) and one release take at most this long.
const BOUND: Duration = Duration::from_secs(1);

fn pick<T: Clone>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())].clone()
}

const F: &[f64] = &[
    0.0,
    -1.0,
    1e-300,
    1e-15,
    1e-6,
    0.1,
    0.5,
    1.0,
    2.0,
    85.0,
    1e6,
    1e15,
    1e300,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
];

/// A valid stream for `relation`, with each field replaced by one of its
/// edge values with probability `p`.
fn stream(rng: &mut ChaCha8Rng, i: usize, relation: Relation, p: f64) -> StreamSpec {
    let timed = relation == Relation::AddRemove;
    let mut s = StreamSpec {
        name: format!("stream.{i}-ok_"),
        lower: -40.0,
        upper: 85.0,
        resolution: pick(rng, &[0.1, 0.5, 1.0]),
        window_size: if timed { 0 } else { pick(rng, &[1, 10, 1000]) },
        window_ms: timed.then_some(300_000),
        max_readings_per_device: 1,
        max_windows_per_device: pick(rng, &[1, 24]),
        budget_share: pick(rng, &[1.0, 0.5]),
        statistics: STATS.into_iter().filter(|_| rng.gen_bool(0.5)).collect(),
        histogram_edges: vec![-40.0, 0.0, 20.0, 85.0],
        quantiles: vec![0.5, 0.9],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        running_share: pick(rng, &[0.0, 0.0, 0.2]),
        running_lifetime: 1 << 16,
        device_alarm_share: 0.0,
        groups: None,
    };
    if s.statistics.is_empty() {
        s.statistics.push(StatKind::Mean);
    }
    // `clamped` in half the streams, drawn from the stream's own generator
    // so the other fields' draws stay as they were.
    let mut side =
        ChaCha8Rng::seed_from_u64(s.resolution.to_bits() ^ i as u64 ^ rng.clone().gen::<u64>());
    if side.gen_bool(0.5) {
        s.statistics.push(StatKind::Clamped);
    }
    // Adaptive quantile candidates in half the quantile streams.
    s.adaptive_quantiles = s.statistics.contains(&StatKind::Quantiles) && side.gen_bool(0.5);
    // Joint quantiles in a fifth of them (refused where they do not apply).
    s.joint_quantiles = s.statistics.contains(&StatKind::Quantiles) && side.gen_bool(0.2);
    // Accuracy targets on a fifth of the streams, any statistic (declared or
    // not), edge values included.
    if side.gen_bool(0.2) {
        let targets = [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e-300,
            1e-6,
            0.5,
            20.0,
            1e300,
        ];
        for _ in 0..side.gen_range(1..=3) {
            let stat = match side.gen_range(0..=STATS.len()) {
                i if i < STATS.len() => STATS[i],
                _ => StatKind::Clamped,
            };
            s.target_error
                .push((stat, targets[side.gen_range(0..targets.len())]));
        }
    }
    if !s.statistics.contains(&StatKind::Histogram) {
        s.histogram_edges.clear();
    }
    if !s.statistics.contains(&StatKind::Quantiles) {
        s.quantiles.clear();
    }
    if rng.gen_bool(p) {
        s.name = pick(
            rng,
            &[String::new(), "a/0".into(), "x".repeat(129), "ünï".into()],
        );
    }
    if rng.gen_bool(p) {
        s.lower = pick(rng, F);
    }
    if rng.gen_bool(p) {
        s.upper = pick(rng, F);
    }
    if rng.gen_bool(p) {
        s.resolution = pick(rng, &[1e-9, 1e-300, 0.0, -0.1, f64::NAN, 1e300, 0.3]);
    }
    if rng.gen_bool(p) {
        s.window_size = pick(rng, &[0, 1, 2, 10_000_000, 10_000_001, 1 << 40, u64::MAX]);
    }
    if rng.gen_bool(p) {
        s.window_ms = pick(rng, &[None, Some(0), Some(1), Some(u64::MAX)]);
    }
    if rng.gen_bool(p) {
        s.max_readings_per_device = pick(rng, &[0, 2, 10_000, 10_001, u32::MAX]);
    }
    if rng.gen_bool(p) {
        s.max_windows_per_device = pick(rng, &[0, 1_000_000, 1_000_001, u32::MAX]);
    }
    if rng.gen_bool(p) {
        s.budget_share = pick(rng, &[0.0, -1.0, 1.5, 1e-300, f64::NAN, f64::INFINITY]);
    }
    if rng.gen_bool(p) {
        s.statistics = vec![];
    }
    if rng.gen_bool(p) {
        s.histogram_edges = match rng.gen_range(0..4) {
            0 => vec![],
            1 => vec![85.0, 0.0, -40.0],
            2 => (0..=1000).map(|i| -40.0 + 0.125 * i as f64).collect(),
            _ => vec![f64::NAN, 1.0],
        };
    }
    if rng.gen_bool(p) {
        s.quantiles = match rng.gen_range(0..4) {
            0 => vec![],
            1 => vec![-0.1, 1.1],
            2 => vec![f64::NAN],
            _ => (0..150).map(|i| i as f64 / 150.0).collect(),
        };
    }
    if rng.gen_bool(p) {
        s.quantile_candidates = match rng.gen_range(0..3) {
            0 => Some(vec![]),
            1 => Some(vec![0.0, 10.0, 20.0]),
            _ => Some((0..200_000).map(|i| i as f64 * 0.1).collect()),
        };
    }
    if rng.gen_bool(p) {
        s.window_timeout_ms = pick(rng, &[Some(0), Some(1), Some(60_000), Some(u64::MAX)]);
    }
    if rng.gen_bool(p) {
        // Just under 1, out of range, and so small that a running total's
        // noise outgrows the sampler's integers (1e-35 crash-looped the
        // service).
        s.running_share = pick(
            rng,
            &[
                0.99,
                1.0,
                -0.1,
                f64::NAN,
                1e-12,
                1e-20,
                1e-35,
                1e-300,
                5e-324,
            ],
        );
    }
    if rng.gen_bool(p) {
        s.running_lifetime = pick(rng, &[0, 1, 3, 1 << 24, 1 << 40, u64::MAX]);
    }
    // The device-limit alarm on a tenth of the streams, drawn from the
    // side generator (the other fields' draws stay as they were), edge
    // values with probability `p`.
    if side.gen_bool(0.1) {
        s.device_alarm_share = 0.01;
    }
    if side.gen_bool(p) {
        s.device_alarm_share =
            [0.99, 1.0, -0.1, f64::NAN, 1e-12, 1e-35, 5e-324][side.gen_range(0..7)];
    }
    s
}

/// A short description of a configuration (the full one can be megabytes).
fn describe(c: u64, privacy: &PrivacySpec, specs: &[StreamSpec]) -> String {
    let mut d = format!("config {c}: {privacy:?}");
    for s in specs {
        d += &format!(
            " [{:?} {}..{} by {} n={} window_ms={:?} k={} W={} share={} stats={:?} edges={} quantiles={} candidates={:?} timeout={:?} running={} lifetime={} alarm={}]",
            s.name.chars().take(20).collect::<String>(),
            s.lower,
            s.upper,
            s.resolution,
            s.window_size,
            s.window_ms,
            s.max_readings_per_device,
            s.max_windows_per_device,
            s.budget_share,
            s.statistics,
            s.histogram_edges.len(),
            s.quantiles.len(),
            s.quantile_candidates.as_ref().map(Vec::len),
            s.window_timeout_ms,
            s.running_share,
            s.running_lifetime,
            s.device_alarm_share
        );
    }
    d
}

#[test]
fn every_declaration_is_planned_or_refused_quickly() {
    let mut rng = ChaCha8Rng::seed_from_u64(20261124);
    let key = ReleaseKey::from_bytes(*b"plan-property-test-key-0123456.!");
    let (mut planned, mut refused) = (0u64, 0u64);
    let mut slowest = (Duration::ZERO, String::new());
    for c in 0..CONFIGS {
        // Mostly valid configurations with a few edge values each, some
        // with many.
        let p = pick(&mut rng, &[0.02, 0.08, 0.3]);
        let relation = pick(&mut rng, &[Relation::ChangeOne, Relation::AddRemove]);
        let measure = pick(&mut rng, &[Measure::Pure, Measure::Zcdp]);
        let mut budget = Budget {
            measure,
            per_horizon: pick(&mut rng, &[0.1, 1.0, 6.0]),
            delta: if measure == Measure::Zcdp { 1e-6 } else { 0.0 },
        };
        if rng.gen_bool(p) {
            budget.per_horizon = pick(&mut rng, F);
        }
        if rng.gen_bool(p) {
            budget.delta = pick(&mut rng, &[0.0, 1e-300, 1e-12, 0.1, 1.0, 2.0, f64::NAN]);
        }
        let privacy = PrivacySpec { relation, budget };
        let n = rng.gen_range(1..=3);
        let specs: Vec<StreamSpec> = (0..n).map(|i| stream(&mut rng, i, relation, p)).collect();
        if std::env::var_os("PLAN_PROPERTY_VERBOSE").is_some() {
            eprintln!("start {}", describe(c, &privacy, &specs));
        }
        let started = Instant::now();
        let result = std::panic::catch_unwind(|| plan(&privacy, &specs));
        let took = started.elapsed();
        let what = || describe(c, &privacy, &specs);
        let p = match result {
            Err(_) => panic!("plan panicked on {}", what()),
            Ok(Err(e)) => {
                // Refusals name a stream field or the privacy budget.
                match &e {
                    PlanError::Field { field, .. } => assert!(!field.is_empty(), "{}", what()),
                    PlanError::Budget(_) => {}
                }
                refused += 1;
                if std::env::var_os("PLAN_PROPERTY_VERBOSE").is_some() {
                    eprintln!("refused: {e}");
                }
                None
            }
            Ok(Ok(p)) => {
                planned += 1;
                Some(p)
            }
        };
        let mut total = took;
        if let Some(p) = p {
            // One small window through every accepted stream.
            let started = Instant::now();
            for s in &p.streams {
                // Count windows hold exactly n values; time windows any number.
                let n = match s.spec.window_ms {
                    Some(_) => 50,
                    None if s.spec.window_size <= 10_000 => s.spec.window_size as i64,
                    None => continue,
                };
                let (lower, upper) = (s.universe.lower(), s.universe.upper());
                let values: Vec<i64> = (0..n).map(|i| (lower + i).min(upper)).collect();
                let r = std::panic::catch_unwind(|| s.release(&key, 0, c, &values));
                assert!(r.is_ok(), "release panicked on {}", what());
                // A second window after the first one's quantiles; each
                // release taking its step's selections is the release that
                // selects again, bit for bit.
                let r = std::panic::catch_unwind(|| {
                    let mut track = QuantileTrack::default();
                    for seq in [c, c + 1] {
                        let before = track.clone();
                        let chosen = s.track_step(&key, 0, seq, &values, &mut track);
                        assert_eq!(chosen.is_some(), s.spec.adaptive_quantiles);
                        let taken =
                            s.release_with_moments(&key, 0, seq, &values, &before, chosen.as_ref());
                        let again = s.release_with_moments(&key, 0, seq, &values, &before, None);
                        assert_eq!(format!("{taken:?}"), format!("{again:?}"));
                    }
                });
                assert!(r.is_ok(), "release after a track panicked on {}", what());
                // Running totals over a few windows: every draw of an
                // accepted plan fits the exact sampler.
                let r = std::panic::catch_unwind(|| {
                    let mut state = Default::default();
                    for seq in 0..2 {
                        let stepped = s.running_step(&key, 0, seq, &values, &mut state);
                        assert_eq!(stepped.is_some(), s.running.is_some());
                    }
                });
                assert!(r.is_ok(), "running totals panicked on {}", what());
                // The device-limit alarm at counts from none to past any limit.
                let r = std::panic::catch_unwind(|| {
                    for (seq, count) in [0, 1, 1 << 20, u64::MAX >> 2].into_iter().enumerate() {
                        if let Some(a) = &s.alarm {
                            a.fires(&key, ("s", 0), 3, seq as u64, count, 1 << 20);
                        }
                    }
                });
                assert!(r.is_ok(), "the device alarm panicked on {}", what());
            }
            total += started.elapsed();
        }
        if total > slowest.0 {
            slowest = (total, what());
        }
        assert!(
            total <= BOUND,
            "{total:?} (plan {took:?}; over {BOUND:?}) for {}",
            what()
        );
    }
    eprintln!(
        "{planned} planned, {refused} refused; slowest {:?}: {}",
        slowest.0, slowest.1
    );
    assert!(
        planned >= 1000,
        "the generator reaches accepted plans too ({planned})"
    );
    assert!(refused >= 2000, "and refusals ({refused})");
}
