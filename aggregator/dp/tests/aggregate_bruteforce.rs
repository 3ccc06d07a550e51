//! Sample-and-aggregate's sensitivity by brute force, and its release
//! audited: on every input of up to three devices with up to two readings
//! each on a 4-value universe, blocks by device (`m` ∈ {1, 2, 3}), trims 0
//! and ¼, changing, adding or removing one device moves the aggregate by at
//! most `(hi − lo)/m` (and the rounded one by at most that plus 1), and the
//! bound is reached.

mod common;

use common::{cp_lower, cp_upper};
use fleetdp_dp::aggregate::{aggregate, estimates, release};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::collections::HashMap;

const LO: i64 = 0;
const HI: i64 = 3;

/// Every device's possible readings: up to two values on [LO, HI].
fn readings() -> Vec<Vec<i64>> {
    let mut out = vec![vec![]];
    for a in LO..=HI {
        out.push(vec![a]);
        for b in a..=HI {
            out.push(vec![a, b]);
        }
    }
    out
}

/// The aggregate of devices' readings, device `d` in block `d % m`.
fn agg(devices: &[Vec<i64>], m: usize, trim: f64) -> f64 {
    let mut blocks = vec![Vec::new(); m];
    for (d, r) in devices.iter().enumerate() {
        blocks[d % m].extend(r);
    }
    aggregate(&estimates(&mut blocks, trim, LO, HI))
}

#[test]
fn one_device_moves_the_aggregate_by_at_most_the_range_over_m() {
    let options = readings();
    for m in 1..=3usize {
        for trim in [0.0, 0.25] {
            let bound = (HI - LO) as f64 / m as f64;
            let mut reached = 0.0f64;
            for a in &options {
                for b in &options {
                    for c in &options {
                        let x = vec![a.clone(), b.clone(), c.clone()];
                        let base = agg(&x, m, trim);
                        // Change one device.
                        for d in 0..3 {
                            for o in &options {
                                let mut y = x.clone();
                                y[d] = o.clone();
                                let diff = (agg(&y, m, trim) - base).abs();
                                assert!(
                                    diff <= bound + 1e-9,
                                    "m={m} trim={trim} {x:?} → {y:?}: {diff}"
                                );
                                reached = reached.max(diff);
                            }
                        }
                        // Remove the last device (adding is the reverse).
                        let diff = (agg(&x[..2], m, trim) - base).abs();
                        assert!(
                            diff <= bound + 1e-9,
                            "m={m} trim={trim} {x:?} without the last: {diff}"
                        );
                    }
                }
            }
            assert!(
                (reached - bound).abs() < 1e-9,
                "m={m} trim={trim}: bound {bound} not reached ({reached})"
            );
        }
    }
}

/// Neighbours at the bound: the released values' distributions stay within
/// e^ε of each other per outcome.
#[test]
fn the_release_is_epsilon_dp_empirically() {
    const TRIALS: u64 = 40_000;
    let eps = 1.0;
    // Two blocks; one device moves its block's estimate from LO to HI.
    let (x, y) = (vec![LO as f64, 2.0], vec![HI as f64, 2.0]);
    let outcomes = |e: &[f64], seed: u64| -> HashMap<i64, u64> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut h = HashMap::new();
        for _ in 0..TRIALS {
            *h.entry(release(&mut rng, e, LO, HI, eps)).or_insert(0) += 1;
        }
        h
    };
    let (a, b) = (outcomes(&x, 1), outcomes(&y, 2));
    let keys: Vec<i64> = a.keys().chain(b.keys()).copied().collect();
    let tests = 2.0 * keys.len() as f64;
    let mut best = 0.0f64;
    for k in keys {
        let (p, q) = (
            a.get(&k).copied().unwrap_or(0),
            b.get(&k).copied().unwrap_or(0),
        );
        for (p, q) in [(p, q), (q, p)] {
            if p == 0 {
                continue;
            }
            let lower =
                (cp_lower(p, TRIALS, 0.05 / tests) / cp_upper(q, TRIALS, 0.05 / tests)).ln();
            assert!(lower <= eps, "outcome {k}: ε lower bound {lower}");
            if q > 0 {
                best = best.max((p as f64 / q as f64).ln());
            }
        }
    }
    assert!(best > 0.3, "the shift is not visible: ε̂ = {best}");
}
