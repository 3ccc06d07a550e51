//! Coverage of the fleet-wide intervals add-remove derives with the noisy
//! count (sum, mean, clamped share, variance, std; `dp/src/release/fleet.rs`
//! with the box of `derived.rs` around the partitions' summed raw moments):
//! three partitions with unlike data (spread, edge-heavy, flat), small and
//! large windows, pure DP and zCDP; each figure covers the fleet's truth
//! (the pooled windows') in at least 95% of seqs. Before, these figures
//! carried no interval at all.

mod common;

use common::add_remove_figures as stream;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::release::{FleetCache, PartRelease, QuantileTrack, StreamPlan};
use fleetdp_dp::rng::ReleaseKey;

const TRIALS: u64 = 2000;
const NAMES: [&str; 5] = ["sum", "mean", "variance", "std", "clamped"];

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

/// Coverage of each of [`NAMES`] over `TRIALS` seqs of `m` partitions.
fn coverage(s: &StreamPlan, n: i64, m: usize, seed: u8) -> [f64; 5] {
    let windows: Vec<Vec<i64>> = (0..m).map(|p| window(p, n)).collect();
    let pooled: Vec<i64> = windows.concat();
    let truth = s.truth(&pooled);
    let want = |name: &str| truth.iter().find(|t| t.name == name).unwrap().values[0];
    let key = ReleaseKey::from_bytes([seed; 32]);
    let track = QuantileTrack::default();
    let mut cache = FleetCache::default();
    let mut covered = [0u64; 5];
    for seq in 0..TRIALS {
        let releases: Vec<_> = windows
            .iter()
            .enumerate()
            .map(|(p, w)| {
                let r = s.release(&key, p as i32, seq, w);
                let moments = s.raw_moments(&key, p as i32, seq, w, &track);
                // The raw count is the released one before its clamp at 0.
                let count = r.iter().find(|x| x.name == "count").unwrap().values[0];
                assert_eq!(moments.unwrap().count.unwrap().max(0.0), count);
                (r, moments)
            })
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
        for (i, name) in NAMES.iter().enumerate() {
            let f = fleet.iter().find(|f| f.name == *name).unwrap();
            let h = f
                .half_width
                .unwrap_or_else(|| panic!("fleet {name} has an interval"));
            covered[i] += u64::from((f.values[0] - want(name)).abs() <= h + 1e-9);
        }
    }
    covered.map(|c| c as f64 / TRIALS as f64)
}

#[test]
fn fleet_add_remove_derived_intervals_cover_at_least_95_percent() {
    let mut seed = 0u8;
    for (measure, budget) in [(Measure::Pure, 1.0), (Measure::Zcdp, 0.1)] {
        let s = stream(measure, budget);
        for n in [1, 4, 30, 400] {
            seed += 1;
            let rates = coverage(&s, n, 3, seed);
            println!("{measure:?} ε/ρ {budget} n {n} per partition, 3 partitions: {rates:?}");
            for (name, rate) in NAMES.iter().zip(rates) {
                assert!(
                    rate >= 0.95,
                    "{measure:?} {budget} n={n}: fleet {name} covers {rate}"
                );
            }
        }
    }
}

/// Without the moments (a record from before they were carried, or change-
/// one's other path) the figures state no interval rather than a guess.
#[test]
fn without_moments_there_is_no_interval() {
    let s = stream(Measure::Pure, 1.0);
    let key = ReleaseKey::from_bytes([9; 32]);
    let r = s.release(&key, 0, 0, &window(0, 30));
    let parts = [PartRelease {
        n: 0,
        statistics: &r,
        moments: None,
    }];
    let fleet = s.combine(&parts, &mut FleetCache::default()).unwrap();
    for name in NAMES {
        let f = fleet.iter().find(|f| f.name == name).unwrap();
        assert_eq!(f.half_width, None, "{name}");
    }
}
