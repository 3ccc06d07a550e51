//! Fleet-wide combination: over many seeded trials of `m` partitions'
//! keyed releases, the combined sum, mean, count and histogram bins match
//! their stated noise variance (within 5%) and their 95% intervals cover the
//! fleet's truth in 95–96% of trials (within four standard errors); the
//! normal approximation the intervals replace is shown to under-cover
//! (the control).

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{
    plan, FleetCache, PartRelease, PrivacySpec, QuantileTrack, StatKind, StreamSpec,
};
use fleetdp_dp::rng::ReleaseKey;
use rand::{Rng, SeedableRng};

const TRIALS: usize = 100_000;

fn spec(relation: Relation, statistics: Vec<StatKind>) -> StreamSpec {
    StreamSpec {
        name: "fleet".into(),
        lower: 0.0,
        upper: 100.0,
        resolution: 0.5,
        window_size: if relation == Relation::ChangeOne {
            40
        } else {
            0
        },
        max_readings_per_device: 1,
        max_windows_per_device: 1,
        budget_share: 1.0,
        statistics: statistics.clone(),
        histogram_edges: if statistics.contains(&StatKind::Histogram) {
            vec![0.0, 25.0, 50.0, 75.0, 100.0]
        } else {
            vec![]
        },
        quantiles: vec![],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        window_ms: (relation == Relation::AddRemove).then_some(60_000),
        running_share: 0.0,
        running_lifetime: 1 << 24,
        device_alarm_share: 0.0,
        groups: None,
    }
}

struct Tally {
    name: &'static str,
    /// Histogram bins are projected onto the window size by each
    /// partition, which only shrinks their error: their stated interval
    /// (the raw measurement's) is checked to cover at least 95%.
    conservative: bool,
    bin: usize,
    covered: usize,
    normal_covered: usize,
    sq_err: f64,
    stated_var: f64,
}

/// `m` partitions, each releasing a window of its own values per trial;
/// every tallied statistic's combined value against the fleet's truth.
fn run(
    measure: Measure,
    relation: Relation,
    eps: f64,
    m: usize,
    stats: Vec<StatKind>,
    names: &[(&'static str, usize)],
) {
    let privacy = PrivacySpec {
        relation,
        budget: Budget {
            measure,
            per_horizon: eps,
            delta: 1e-6,
        },
    };
    let s = plan(&privacy, &[spec(relation, stats)])
        .unwrap()
        .streams
        .remove(0);
    let key = ReleaseKey::from_bytes([3; 32]);
    let track = QuantileTrack::default();
    let mut data = rand_chacha::ChaCha8Rng::seed_from_u64(m as u64 * 7 + eps as u64);
    let mut cache = FleetCache::default();
    let mut tallies: Vec<Tally> = names
        .iter()
        .map(|&(name, bin)| Tally {
            name,
            conservative: name == "histogram",
            bin,
            covered: 0,
            normal_covered: 0,
            sq_err: 0.0,
            stated_var: 0.0,
        })
        .collect();
    for trial in 0..TRIALS {
        let n = if relation == Relation::ChangeOne {
            40
        } else {
            300
        };
        let windows: Vec<Vec<i64>> = (0..m)
            .map(|_| (0..n).map(|_| data.gen_range(40..160)).collect())
            .collect();
        let releases: Vec<_> = windows
            .iter()
            .enumerate()
            .map(|(p, w)| s.release_with_moments(&key, p as i32, trial as u64, w, &track, None))
            .collect();
        // With their raw moments, as the service publishes them: the
        // add-remove count and sum are combined from the raw draws.
        let parts: Vec<PartRelease> = releases
            .iter()
            .map(|(r, moments)| PartRelease {
                n: if relation == Relation::ChangeOne {
                    40
                } else {
                    0
                },
                statistics: r,
                moments: *moments,
            })
            .collect();
        let fleet = s.combine(&parts, &mut cache).unwrap();
        let all: Vec<i64> = windows.concat();
        let truth = s.truth(&all);
        for t in &mut tallies {
            let f = fleet.iter().find(|f| f.name == t.name).unwrap();
            let want = truth.iter().find(|f| f.name == t.name).unwrap().values[t.bin];
            let err = f.values[t.bin] - want;
            let (hw, sd) = (f.half_width.unwrap(), f.std.unwrap());
            t.covered += (err.abs() <= hw + 1e-9) as usize;
            t.normal_covered += (err.abs() <= 1.959964 * sd) as usize;
            t.sq_err += err * err;
            t.stated_var = sd * sd;
        }
    }
    for t in &tallies {
        let cov = t.covered as f64 / TRIALS as f64;
        let var = t.sq_err / TRIALS as f64;
        let what = format!("{measure:?} {relation:?} m={m} {}[{}]", t.name, t.bin);
        println!(
            "{what}: coverage {cov:.4} (normal {:.4}), variance {var:.4} vs {:.4}",
            t.normal_covered as f64 / TRIALS as f64,
            t.stated_var
        );
        // 95–96% within four standard errors of the empirical rate.
        let tol = 4.0 * (0.95f64 * 0.05 / TRIALS as f64).sqrt();
        let upper = if t.conservative { 1.0 } else { 0.96 + tol };
        assert!(
            (0.95 - tol..=upper).contains(&cov),
            "{what}: coverage {cov}"
        );
        let ratio = var / t.stated_var;
        let low = if t.conservative { 0.0 } else { 0.95 };
        assert!(
            (low..1.05).contains(&ratio),
            "{what}: variance {var} vs {}",
            t.stated_var
        );
    }
}

#[test]
fn laplace_sums_means_and_bins_change_one() {
    let stats = || vec![StatKind::Sum, StatKind::Mean, StatKind::Histogram];
    let names = [("sum", 0), ("mean", 0), ("histogram", 1)];
    run(Measure::Pure, Relation::ChangeOne, 2.0, 2, stats(), &names);
    run(Measure::Pure, Relation::ChangeOne, 2.0, 4, stats(), &names);
}

#[test]
fn gaussian_sums_change_one() {
    let stats = vec![StatKind::Sum, StatKind::Mean];
    run(
        Measure::Zcdp,
        Relation::ChangeOne,
        0.5,
        3,
        stats,
        &[("sum", 0), ("mean", 0)],
    );
}

/// Add-remove: noisy counts with bins, and the direct sum (no count).
#[test]
fn add_remove_counts_sums_and_bins() {
    let stats = vec![StatKind::Count, StatKind::Histogram];
    let names = [("count", 0), ("histogram", 2)];
    run(Measure::Pure, Relation::AddRemove, 0.2, 4, stats, &names);
    run(
        Measure::Pure,
        Relation::AddRemove,
        0.05,
        3,
        vec![StatKind::Sum],
        &[("sum", 0)],
    );
}

/// The control: on two Laplace draws, a normal interval with the exact
/// variance covers less than 95% (so the convolution above is needed).
#[test]
fn the_normal_approximation_under_covers_laplace_sums() {
    use fleetdp_dp::mechanism::Noise;
    use fleetdp_dp::rational::exact;
    use fleetdp_dp::sampler::DiscreteLaplace;
    use fleetdp_dp::sums::sum_half_width;
    let noise = Noise::Laplace(DiscreteLaplace::new(&exact(50.0)));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let normal = 1.959964 * (2.0 * noise.variance()).sqrt();
    let exact_w = sum_half_width(&noise, 2);
    let (mut n_cov, mut e_cov) = (0, 0);
    let trials = 200_000;
    for _ in 0..trials {
        let s = (noise.sample(&mut rng) + noise.sample(&mut rng)) as f64;
        n_cov += (s.abs() <= normal) as usize;
        e_cov += (s.abs() <= exact_w) as usize;
    }
    let (n_cov, e_cov) = (n_cov as f64 / trials as f64, e_cov as f64 / trials as f64);
    assert!(n_cov < 0.945, "normal {n_cov}");
    assert!((0.9485..=0.955).contains(&e_cov), "exact {e_cov}");
}
