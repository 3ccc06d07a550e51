//! Coverage of the quantiles' rank interval (`dp/src/release/rank.rs`):
//! over windows of spread, tied and skewed data, one and three levels,
//! both relations and both measures, every released level lies between the
//! true quantiles at ranks `q·n ± r` in at least 95% of windows (all levels
//! at once; the interval is conservative), and near its worst case (every
//! other candidate just beyond it) still at least 95%. The control is the
//! same interval without its union over candidates (`2Δu·ln 20/ε`, one
//! candidate's tail): on that worst case it covers far less than 95%.
//! Under the adaptive prior (a lane's later windows, a band far from the
//! data) the wider interval the plan states holds the same way, on every
//! shape and on its worst case (the covering candidate penalised, the
//! favoured ones just beyond it), where the interval without the prior's
//! term misses in most windows.

mod common;

use common::{privacy, stream_spec};
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, Mechanism, QuantileTrack, StatKind, StreamPlan};
use fleetdp_dp::rng::ReleaseKey;
use fleetdp_dp::stats::QuantileLevel;

const TRIALS: u64 = 2000;

fn stream(measure: Measure, relation: Relation, budget: f64, levels: &[f64], n: u64) -> StreamPlan {
    stream_with(measure, relation, budget, levels, n, false)
}

fn stream_with(
    measure: Measure,
    relation: Relation,
    budget: f64,
    levels: &[f64],
    n: u64,
    adaptive: bool,
) -> StreamPlan {
    let window = if relation == Relation::AddRemove {
        0
    } else {
        n
    };
    let mut spec = stream_spec((0.0, 100.0, 1.0), window, vec![StatKind::Quantiles]);
    spec.quantiles = levels.to_vec();
    spec.adaptive_quantiles = adaptive;
    plan(&privacy(relation, measure, budget), &[spec])
        .unwrap()
        .streams
        .remove(0)
}

fn data(kind: &str, n: i64) -> Vec<i64> {
    (0..n)
        .map(|i| match kind {
            "spread" => (i * 37) % 101,
            "ties" => 20 + 10 * (i % 5),
            _ => ((i * i) % 97) / 4,
        })
        .collect()
}

/// Whether `c` lies between the true quantiles at ranks `q·n ± tau`.
fn within(sorted: &[i64], c: i64, q: f64, tau: f64) -> bool {
    let target = q * sorted.len() as f64;
    let below = sorted.partition_point(|&x| x < c) as f64;
    let at_most = sorted.partition_point(|&x| x <= c) as f64;
    below <= target + tau + 1e-9 && at_most >= target - tau - 1e-9
}

/// Share of windows whose every level lies within `tau` ranks (`None`:
/// the released interval), and the released `tau`.
fn coverage(s: &StreamPlan, values: &[i64], seed: u8, tau: Option<f64>) -> (f64, f64) {
    coverage_after(s, values, seed, tau, &QuantileTrack::default())
}

/// [`coverage`] of windows released after `track`.
fn coverage_after(
    s: &StreamPlan,
    values: &[i64],
    seed: u8,
    tau: Option<f64>,
    track: &QuantileTrack,
) -> (f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let key = ReleaseKey::from_bytes([seed; 32]);
    let (mut covered, mut released) = (0u64, 0.0);
    for seq in 0..TRIALS {
        let r = s.release_after(&key, 0, seq, values, track);
        released = r[0].rank_half_width.expect("a rank interval");
        let tau = tau.unwrap_or(released);
        covered += u64::from(r.iter().all(|q| {
            let c = q.values[0].round() as i64;
            within(&sorted, c, q.level.unwrap(), tau)
        }));
    }
    (covered as f64 / TRIALS as f64, released)
}

#[test]
fn rank_intervals_cover_at_least_95_percent() {
    let mut seed = 0;
    for relation in [Relation::ChangeOne, Relation::AddRemove] {
        for (measure, budget) in [(Measure::Pure, 1.0), (Measure::Zcdp, 0.05)] {
            for levels in [&[0.5][..], &[0.1, 0.5, 0.9]] {
                for n in [40, 1000] {
                    let s = stream(measure, relation, budget, levels, n);
                    for kind in ["spread", "ties", "skewed"] {
                        seed += 1;
                        let (rate, tau) = coverage(&s, &data(kind, n as i64), seed, None);
                        println!("{relation:?} {measure:?} {levels:?} n {n} {kind}: ±{tau:.1} ranks covers {rate:.4}");
                        assert!(
                            rate >= 0.95,
                            "{relation:?} {measure:?} {levels:?} n={n} {kind}: {rate}"
                        );
                    }
                }
            }
        }
    }
}

/// The rank half-width is the formula of `rank.rs` from the plan's own
/// selection: `2·Δu·ln(L·m/0.05)/ε` (readings), Δu = 1 per reading under
/// change-one and `max(q, 1 − q)` under add-remove.
#[test]
fn the_rank_half_width_is_the_union_bound() {
    for (relation, du) in [(Relation::ChangeOne, 1.0), (Relation::AddRemove, 0.9)] {
        let s = stream(Measure::Pure, relation, 1.0, &[0.1, 0.5, 0.9], 100);
        let eps = match &s.measurements[0].mechanism {
            Mechanism::Select(sel) => sel.epsilon_f64(),
            Mechanism::Additive(_) => unreachable!("a selection"),
        };
        let want = 2.0 * du * (3.0 * 101.0 / 0.05f64).ln() / eps;
        let got = s.rank_half_width.unwrap();
        assert!((got - want).abs() < 1e-9, "{relation:?}: {got} vs {want}");
        assert_eq!(QuantileLevel::DEN, 1_000_000);
    }
}

/// Two clusters that put every candidate but one just beyond `d` ranks
/// from the median: `n/2 − d` readings at the bottom, the rest at the top,
/// so only the top candidate covers rank `n/2` — the selections' worst case.
fn clusters(n: i64, d: i64) -> Vec<i64> {
    (0..n)
        .map(|i| if i < n / 2 - d { 0 } else { 100 })
        .collect()
}

/// The control can fail: one candidate's tail (`2Δu·ln 20/ε`) ignores the
/// other candidates; where all 100 of them sit just beyond it (clusters)
/// it misses in most windows. The released interval still covers at least
/// 95% on the same shape pushed just beyond it, under both selections
/// (close to its worst case: it is not loose there).
#[test]
fn one_candidates_tail_under_covers() {
    for (measure, budget) in [(Measure::Pure, 1.0), (Measure::Zcdp, 0.125)] {
        let s = stream(measure, Relation::ChangeOne, budget, &[0.5], 400);
        let eps = match &s.measurements[0].mechanism {
            Mechanism::Select(sel) => sel.epsilon_f64(),
            Mechanism::Additive(_) => unreachable!("a selection"),
        };
        let naive = 2.0 * 20f64.ln() / eps;
        let tau = s.rank_half_width.unwrap();
        let values = clusters(400, naive.floor() as i64 + 1);
        let (rate, _) = coverage(&s, &values, 77, Some(naive));
        let (held, _) = coverage(&s, &clusters(400, tau.floor() as i64 + 1), 78, None);
        let se = (0.95f64 * 0.05 / TRIALS as f64).sqrt();
        println!("{measure:?}: ±{naive:.1} ranks covers {rate:.4}; ±{tau:.1} covers {held:.4} at its edge");
        assert!(
            held >= 0.95,
            "{measure:?}: the released interval covers {held}"
        );
        assert!(
            held < 0.995,
            "{measure:?}: the worst case is not near ({held})"
        );
        assert!(
            rate < 0.95 - 4.0 * se,
            "{measure:?}: one candidate's tail covers {rate}"
        );
    }
}

/// A lane whose last 8 windows released `at` for every level: its bands sit
/// there, far from where the data put the quantiles.
fn stale_track(at: i64, levels: usize) -> QuantileTrack {
    QuantileTrack {
        recent: vec![vec![at; levels]; 8],
    }
}

#[test]
fn rank_intervals_hold_under_the_adaptive_prior() {
    let mut seed = 100;
    for relation in [Relation::ChangeOne, Relation::AddRemove] {
        for (measure, budget) in [(Measure::Pure, 1.0), (Measure::Zcdp, 0.05)] {
            for levels in [&[0.5][..], &[0.1, 0.5, 0.9]] {
                let s = stream_with(measure, relation, budget, levels, 1000, true);
                let plain = stream(measure, relation, budget, levels, 1000);
                assert!(s.rank_half_width.unwrap() > plain.rank_half_width.unwrap());
                for kind in ["spread", "ties", "skewed"] {
                    seed += 1;
                    let track = stale_track(97, levels.len());
                    let values = data(kind, 1000);
                    let (rate, tau) = coverage_after(&s, &values, seed, None, &track);
                    println!("adaptive {relation:?} {measure:?} {levels:?} {kind}: ±{tau:.1} ranks covers {rate:.4}");
                    assert!(
                        rate >= 0.95,
                        "{relation:?} {measure:?} {levels:?} {kind}: {rate}"
                    );
                }
            }
        }
    }
}

/// The prior's worst case: the readings split between 0 and 99, so only
/// candidate 99 (outside the band at 50 and off the escape grid, so
/// penalised) covers rank n/2 and every favoured candidate sits `d` ranks
/// away. With `d` just beyond the adaptive plan's interval it still covers
/// at least 95%; with `d` just beyond the interval without the prior's term
/// (the same stream not adapting), that interval misses in most windows.
#[test]
fn the_prior_needs_its_wider_interval() {
    let split = |n: i64, d: i64| -> Vec<i64> {
        (0..n).map(|i| if i < n / 2 - d { 0 } else { 99 }).collect()
    };
    for (measure, budget) in [(Measure::Pure, 1.0), (Measure::Zcdp, 0.125)] {
        let s = stream_with(measure, Relation::ChangeOne, budget, &[0.5], 1000, true);
        let plain = stream(measure, Relation::ChangeOne, budget, &[0.5], 1000)
            .rank_half_width
            .unwrap();
        let track = stale_track(50, 1);
        let tau = s.rank_half_width.unwrap();
        let (held, _) = coverage_after(&s, &split(1000, tau.floor() as i64 + 1), 91, None, &track);
        let (rate, _) = coverage_after(
            &s,
            &split(1000, plain.floor() as i64 + 1),
            92,
            Some(plain),
            &track,
        );
        let se = (0.95f64 * 0.05 / TRIALS as f64).sqrt();
        println!("{measure:?}: ±{tau:.1} ranks covers {held:.4} at its edge; ±{plain:.1} covers {rate:.4}");
        assert!(
            held >= 0.95,
            "{measure:?}: the prior's interval covers {held}"
        );
        assert!(
            rate < 0.95 - 4.0 * se,
            "{measure:?}: the interval without the prior covers {rate}"
        );
    }
}
