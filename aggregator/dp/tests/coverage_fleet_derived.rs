//! Coverage of the fleet-wide intervals built from the partitions' summed
//! raw moments (`dp/src/release/fleet.rs` with the box of `derived.rs`):
//! three partitions with unlike data (spread, edge-heavy, flat), small and
//! large windows, pure DP and zCDP. Under add-remove every figure derived
//! with the noisy count (sum, mean, clamped share, variance, std); under
//! change-one, where `n` is public, the pooled variance and std (the sum,
//! mean and share there have the summed noise's exact interval). Each
//! figure covers the fleet's truth (the pooled windows') in at least 95% of
//! seqs. Before, these figures carried no interval at all.

mod common;

use common::{derived_figures, privacy, stream_spec};
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{
    plan, FleetCache, PartRelease, QuantileTrack, RawMoments, ReleasedStatistic, StatKind,
    StreamPlan,
};
use fleetdp_dp::rng::ReleaseKey;

const TRIALS: u64 = 2000;
/// Figures with a box interval under add-remove.
const ADD_REMOVE: &[&str] = &["sum", "mean", "variance", "std", "clamped"];
/// Figures with a box interval under change-one.
const CHANGE_ONE: &[&str] = &["variance", "std"];

/// Partition `p`'s window of `n` readings (grid units of 0.5 over
/// [-40, 120]): spread, edge-heavy (mostly at the top, some clamped at the
/// bottom) or flat.
fn window(p: usize, n: i64) -> Vec<i64> {
    (0..n)
        .map(|i| match p % 3 {
            0 => -40 + (i * 37) % 161,
            1 if i % 10 == 3 => -40,
            1 => 110 + i % 11,
            _ => 50,
        })
        .collect()
}

/// Coverage of each of `names` over `TRIALS` seqs of `m` partitions.
fn coverage(s: &StreamPlan, names: &[&str], n: i64, m: usize, seed: u8) -> Vec<f64> {
    let change_one = s.neighbouring.relation == Relation::ChangeOne;
    let windows: Vec<Vec<i64>> = (0..m).map(|p| window(p, n)).collect();
    let pooled: Vec<i64> = windows.concat();
    let truth = s.truth(&pooled);
    let want = |name: &str| truth.iter().find(|t| t.name == name).unwrap().values[0];
    let key = ReleaseKey::from_bytes([seed; 32]);
    let track = QuantileTrack::default();
    let mut cache = FleetCache::default();
    let mut covered = vec![0u64; names.len()];
    for seq in 0..TRIALS {
        let releases: Vec<_> = windows
            .iter()
            .enumerate()
            .map(|(p, w)| {
                let (r, moments) = s.release_with_moments(&key, p as i32, seq, w, &track, None);
                let moments = moments.unwrap();
                // The same release as without the moments.
                assert_eq!(r, s.release(&key, p as i32, seq, w));
                // The raw count is the released one before its clamp at 0;
                // change-one's is public and not among them.
                let count = r.iter().find(|x| x.name == "count").unwrap().values[0];
                match change_one {
                    true => assert_eq!((moments.count, count), (None, w.len() as f64)),
                    false => assert_eq!(moments.count.unwrap().max(0.0), count),
                }
                // The centred sum is the released sum's own draw (no
                // further measurement, so no further spend): Σx = (c +
                // n(L + U))/2 clamped to [nL, nU] (grid units -40..120).
                if change_one {
                    let n = w.len() as f64;
                    let c = moments.centred_sum.unwrap();
                    let sum = ((c + n * 80.0) / 2.0).clamp(-40.0 * n, 120.0 * n) * 0.5;
                    let released = r.iter().find(|x| x.name == "sum").unwrap().values[0];
                    assert!((sum - released).abs() < 1e-6, "{sum} vs {released}");
                }
                (r, moments, w.len() as u64)
            })
            .collect();
        let parts: Vec<PartRelease> = releases
            .iter()
            .map(|(r, moments, len)| PartRelease {
                n: if change_one { *len } else { 0 },
                statistics: r,
                moments: Some(*moments),
            })
            .collect();
        let fleet = s.combine(&parts, &mut cache).unwrap();
        for (i, name) in names.iter().enumerate() {
            let f = fleet.iter().find(|f| f.name == *name).unwrap();
            let h = f
                .half_width
                .unwrap_or_else(|| panic!("fleet {name} has an interval"));
            assert_eq!(f.std, None, "{name}: a box interval states no std");
            covered[i] += u64::from((f.values[0] - want(name)).abs() <= h + 1e-9);
        }
    }
    covered
        .into_iter()
        .map(|c| c as f64 / TRIALS as f64)
        .collect()
}

/// The stream: change-one's count windows hold `n` readings (public).
fn stream(relation: Relation, measure: Measure, budget: f64, n: i64) -> StreamPlan {
    let size = if relation == Relation::ChangeOne {
        n
    } else {
        0
    };
    derived_figures(relation, measure, budget, size as u64)
}

fn check(relation: Relation, names: &[&str]) {
    let mut seed = 0u8;
    for (measure, budget) in [(Measure::Pure, 1.0), (Measure::Zcdp, 0.1)] {
        for n in [1, 4, 30, 400] {
            let s = stream(relation, measure, budget, n);
            seed += 1;
            let rates = coverage(&s, names, n, 3, seed);
            println!("{relation:?} {measure:?} ε/ρ {budget} n {n} per partition, 3 partitions: {rates:?}");
            for (name, rate) in names.iter().zip(rates) {
                assert!(
                    rate >= 0.95,
                    "{relation:?} {measure:?} {budget} n={n}: fleet {name} covers {rate}"
                );
            }
        }
    }
}

#[test]
fn fleet_add_remove_derived_intervals_cover_at_least_95_percent() {
    check(Relation::AddRemove, ADD_REMOVE);
}

#[test]
fn fleet_change_one_variance_and_std_intervals_cover_at_least_95_percent() {
    check(Relation::ChangeOne, CHANGE_ONE);
}

/// Seqs for the exact intervals below: enough that 93.5% coverage (what an
/// independent check measured for the fleet count) cannot pass.
const EXACT_TRIALS: u64 = 20_000;

/// Issue: under add-remove each partition releases its noisy count
/// (and a directly measured sum over a universe ≥ 0) clamped at 0, and the
/// fleet's was the sum of those clamped values with the summed noise's
/// interval: it held in 93–94% of windows, 77–84% where counts are small.
/// Combined from the partitions' raw draws, then clamped, it holds: four
/// partitions, mostly empty ones (0, 0, 1, 2 readings; the fleet's window
/// is not empty) and unlike ones (1 to 30), pure DP and zCDP.
#[test]
fn the_fleet_count_and_sum_cover_their_truth_under_add_remove() {
    let m = 4;
    for (measure, budget) in [(Measure::Pure, 0.5), (Measure::Zcdp, 0.05)] {
        for ((stats, lower), sizes) in [
            (vec![StatKind::Count, StatKind::Mean], -20.0),
            (vec![StatKind::Sum], 0.0),
        ]
        .into_iter()
        .flat_map(|s| {
            [
                (s.clone(), [0, 0, 0, 0]),
                (s.clone(), [0, 0, 1, 2]),
                (s, [1, 2, 5, 30]),
            ]
        }) {
            let spec = stream_spec((lower, 60.0, 0.5), 0, stats.clone());
            let s = plan(&privacy(Relation::AddRemove, measure, budget), &[spec])
                .unwrap()
                .streams
                .remove(0);
            let name = if stats.contains(&StatKind::Count) {
                "count"
            } else {
                "sum"
            };
            let windows: Vec<Vec<i64>> = (0..m)
                .map(|p| (0..sizes[p]).map(|i| 1 + (i * 7) % 120).collect())
                .collect();
            let truth = match name {
                "count" => windows.iter().map(Vec::len).sum::<usize>() as f64,
                _ => windows.iter().flatten().sum::<i64>() as f64 * 0.5,
            };
            let key = ReleaseKey::from_bytes([41; 32]);
            let track = QuantileTrack::default();
            let mut cache = FleetCache::default();
            let mut covered = 0u64;
            for seq in 0..EXACT_TRIALS {
                let releases: Vec<_> = windows
                    .iter()
                    .enumerate()
                    .map(|(p, w)| s.release_with_moments(&key, p as i32, seq, w, &track, None))
                    .collect();
                let parts: Vec<PartRelease> = releases
                    .iter()
                    .map(|(r, moments)| PartRelease {
                        n: 0,
                        statistics: r,
                        moments: *moments,
                    })
                    .collect();
                let fleet = s.combine(&parts, &mut cache).unwrap();
                let f = fleet.iter().find(|f| f.name == name).unwrap();
                let h = f.half_width.expect("an interval");
                assert!(f.values[0] >= 0.0, "{name} {}", f.values[0]);
                covered += u64::from((f.values[0] - truth).abs() <= h + 1e-9);
            }
            let rate = covered as f64 / EXACT_TRIALS as f64;
            // 3.3 standard errors under 95%: a 95% interval fails this one
            // run in 2,000.
            let floor = 0.95 - 3.3 * (0.95 * 0.05 / EXACT_TRIALS as f64).sqrt();
            println!("{measure:?} fleet {name}, partitions of {sizes:?}: {rate}");
            assert!(
                rate >= floor,
                "{measure:?} fleet {name}, partitions of {sizes:?}: covers {rate} < {floor}"
            );
        }
    }
}

/// Without the moments (a record from before they were carried) the
/// figures state no interval rather than a guess, under either relation.
#[test]
fn without_moments_there_is_no_interval() {
    for (relation, names, n) in [
        (Relation::AddRemove, ADD_REMOVE, 0),
        (Relation::ChangeOne, CHANGE_ONE, 30),
    ] {
        let s = stream(relation, Measure::Pure, 1.0, 30);
        let key = ReleaseKey::from_bytes([9; 32]);
        let r = s.release(&key, 0, 0, &window(0, 30));
        let parts = [PartRelease {
            n,
            statistics: &r,
            moments: None,
        }];
        let fleet = s.combine(&parts, &mut FleetCache::default()).unwrap();
        for name in names {
            let f = fleet.iter().find(|f| f.name == *name).unwrap();
            assert_eq!(f.half_width, None, "{relation:?} {name}");
        }
    }
}

/// A partition release read from the output topic may come from another
/// writer: a statistic with too few or too many values is refused with an
/// error naming it (before, an empty one panicked the combination), and a
/// moment that is not finite leaves the figures without an interval instead
/// of a NaN one.
fn part(statistics: &[ReleasedStatistic], moments: Option<RawMoments>) -> PartRelease<'_> {
    PartRelease {
        n: 0,
        statistics,
        moments,
    }
}

#[test]
fn a_malformed_partition_release_is_refused_and_bad_moments_give_no_interval() {
    let s = stream(Relation::AddRemove, Measure::Pure, 1.0, 0);
    let key = ReleaseKey::from_bytes([7; 32]);
    let track = QuantileTrack::default();
    let (a, b) = (window(0, 30), window(1, 30));
    let (ra, ma) = s.release_with_moments(&key, 0, 0, &a, &track, None);
    let (_, mb) = s.release_with_moments(&key, 1, 0, &b, &track, None);
    for values in [vec![], vec![1.0, 2.0]] {
        let mut rb = s.release(&key, 1, 0, &b);
        rb.iter_mut().find(|x| x.name == "mean").unwrap().values = values.clone();
        let parts = [part(&ra, ma), part(&rb, mb)];
        let err = s.combine(&parts, &mut FleetCache::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("a partition's mean has {} values, the plan 1", values.len())
        );
    }
    let rb = s.release(&key, 1, 0, &b);
    for bad in [f64::NAN, f64::INFINITY] {
        let mut mb = mb.unwrap();
        mb.centred_sum = Some(bad);
        let parts = [part(&ra, ma), part(&rb, Some(mb))];
        let fleet = s.combine(&parts, &mut FleetCache::default()).unwrap();
        for name in ["sum", "mean", "variance", "std"] {
            let f = fleet.iter().find(|f| f.name == name).unwrap();
            assert_eq!(f.half_width, None, "{bad} {name}");
        }
        // The share does not read the centred sum: its interval stays.
        let share = fleet.iter().find(|f| f.name == "clamped").unwrap();
        assert!(share.half_width.is_some_and(f64::is_finite));
    }
}
