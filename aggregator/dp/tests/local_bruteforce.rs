//! The median's local sensitivity at distance `k`, checked against its
//! definition on every window of small universes (change-one: neighbours
//! differ in one reading), the smooth sensitivity's two properties (an
//! upper bound on the local sensitivity; within `e^β` between neighbours),
//! the distance PTR tests, an empirical audit of PTR's release, and the same
//! for the smooth-sensitivity release (its ladder bound, exact sampler and
//! audit).

mod common;

use common::{chi_square_p, cp_lower, cp_upper};
use fleetdp_dp::local::{
    distance_to_unstable, local_sensitivity, ls_at_distance, median_index, ptr_median,
    smooth_sensitivity,
};
use fleetdp_dp::smooth::{rounded_laplace, smooth_exponent, smooth_median, Ladder};
use num_rational::BigRational;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::collections::HashMap;

const LO: i64 = 0;
const HI: i64 = 4;

/// Every sorted window of `n` readings on [LO, HI].
fn windows(n: usize) -> Vec<Vec<i64>> {
    fn rec(n: usize, from: i64, cur: &mut Vec<i64>, out: &mut Vec<Vec<i64>>) {
        if cur.len() == n {
            out.push(cur.clone());
            return;
        }
        for v in from..=HI {
            cur.push(v);
            rec(n, v, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    rec(n, LO, &mut Vec::new(), &mut out);
    out
}

fn median(x: &[i64]) -> i64 {
    x[median_index(x.len())]
}

/// Changed readings between two sorted windows of one size.
fn distance(x: &[i64], y: &[i64]) -> usize {
    let (mut i, mut j, mut common) = (0, 0, 0);
    while i < x.len() && j < y.len() {
        match x[i].cmp(&y[j]) {
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
    }
    x.len() - common
}

/// The local sensitivity by definition: the largest median change of one
/// substituted reading.
fn ls_by_definition(x: &[i64]) -> i64 {
    let m = median(x);
    let mut best = 0;
    for i in 0..x.len() {
        for v in LO..=HI {
            let mut z = x.to_vec();
            z[i] = v;
            z.sort_unstable();
            best = best.max((median(&z) - m).abs());
        }
    }
    best
}

#[test]
fn local_sensitivity_at_distance_matches_its_definition() {
    for n in 1..=5 {
        let all = windows(n);
        let ls: Vec<i64> = all.iter().map(|y| ls_by_definition(y)).collect();
        for x in &all {
            assert_eq!(local_sensitivity(x, LO, HI), ls_by_definition(x), "{x:?}");
            for k in 0..=n + 1 {
                let by_definition = all
                    .iter()
                    .zip(&ls)
                    .filter(|(y, _)| distance(x, y) <= k)
                    .map(|(_, &l)| l)
                    .max()
                    .unwrap();
                assert_eq!(
                    ls_at_distance(x, LO, HI, k),
                    by_definition,
                    "x = {x:?}, k = {k}"
                );
            }
            for b in 0..=HI {
                let by_definition = all
                    .iter()
                    .zip(&ls)
                    .filter(|(_, &l)| l > b)
                    .map(|(y, _)| distance(x, y))
                    .min()
                    .unwrap_or(n + 2);
                assert_eq!(
                    distance_to_unstable(x, LO, HI, b),
                    by_definition,
                    "x = {x:?}, b = {b}"
                );
            }
        }
    }
}

#[test]
fn smooth_sensitivity_bounds_the_local_one_and_is_smooth() {
    for beta in [0.1, 0.5, 1.0] {
        for n in 1..=5 {
            let all = windows(n);
            let s: Vec<f64> = all
                .iter()
                .map(|x| smooth_sensitivity(x, LO, HI, beta))
                .collect();
            for (i, x) in all.iter().enumerate() {
                assert!(s[i] >= ls_by_definition(x) as f64, "{x:?}");
                for (j, y) in all.iter().enumerate() {
                    if distance(x, y) == 1 {
                        assert!(
                            s[i] <= beta.exp() * s[j] + 1e-12,
                            "β = {beta}: S({x:?}) = {} > e^β S({y:?}) = {}",
                            s[i],
                            s[j]
                        );
                    }
                }
            }
        }
    }
}

/// Every outcome's probability under one neighbour stays within `e^eps`
/// of the other's plus `delta`, both ways (Clopper–Pearson bounds, 5%
/// family-wise over the outcomes seen).
fn assert_within<K: std::hash::Hash + Eq + Copy + std::fmt::Debug>(
    a: &HashMap<K, u64>,
    c: &HashMap<K, u64>,
    trials: u64,
    eps: f64,
    delta: f64,
) {
    let keys: Vec<K> = a.keys().chain(c.keys()).copied().collect();
    let tests = 2.0 * keys.len() as f64;
    for k in keys {
        let (p, q) = (
            a.get(&k).copied().unwrap_or(0),
            c.get(&k).copied().unwrap_or(0),
        );
        for (p, q) in [(p, q), (q, p)] {
            let lo = cp_lower(p, trials, 0.05 / tests) - delta;
            let hi = cp_upper(q, trials, 0.05 / tests);
            assert!(
                lo <= eps.exp() * hi,
                "outcome {k:?}: {p} vs {q} of {trials}"
            );
        }
    }
}

/// PTR on neighbours, where the changed reading moves the median: every
/// outcome's probability stays within `e^{2ε}` of the other's plus δ.
#[test]
fn ptr_is_two_epsilon_delta_dp_empirically() {
    const TRIALS: u64 = 40_000;
    let (eps, delta, b) = (0.5, 1e-3, 2);
    // 101 readings, each value ten times, on [0, 100]: stable for b = 2
    // (γ ≈ 20, so PTR releases); the median (45) sits on a value boundary,
    // so moving one reading from the top to the bottom moves it (to 44).
    let x: Vec<i64> = (0..101).map(|i| 40 + i / 10).collect();
    let mut y = x.clone();
    y[100] = 0;
    y.sort_unstable();
    assert_ne!(median(&x), median(&y));
    let outcomes = |w: &[i64], seed: u64| -> HashMap<Option<i64>, u64> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut h = HashMap::new();
        for _ in 0..TRIALS {
            *h.entry(ptr_median(&mut rng, w, 0, 100, b, eps, delta))
                .or_insert(0) += 1;
        }
        h
    };
    let (a, c) = (outcomes(&x, 1), outcomes(&y, 2));
    assert!(
        a.get(&None).copied().unwrap_or(0) < TRIALS / 2,
        "PTR refused too often"
    );
    assert_within(&a, &c, TRIALS, 2.0 * eps, delta);
    // The noise is there: the released value varies.
    assert!(a.len() > 5);
}

/// The ladder bound `S = q^j` used by the smooth release: an upper bound on
/// the local sensitivity by definition, within `q = e^β` between every pair
/// of neighbours, and the float smooth sensitivity rounded up by at most `q`.
#[test]
fn the_ladder_bound_is_smooth_and_bounds_the_local_sensitivity() {
    // m = 2, 3 and 30: β ≈ 0.41, 0.29 and 0.033.
    for (eps, delta) in [(10.0, 0.5), (4.0, 0.1), (1.0, 1e-6)] {
        let ladder = Ladder::for_privacy(eps, delta);
        let q = (ladder.m() + 1) as f64 / ladder.m() as f64;
        for n in 1..=5 {
            let all = windows(n);
            let j: Vec<i64> = all
                .iter()
                .map(|x| smooth_exponent(x, LO, HI, &ladder))
                .collect();
            for (i, x) in all.iter().enumerate() {
                let s = q.powi(j[i] as i32);
                assert!(s >= ls_by_definition(x) as f64, "{x:?}: {s}");
                let float = smooth_sensitivity(x, LO, HI, ladder.beta());
                assert!(
                    float <= s * (1.0 + 1e-12) && s <= q * float * (1.0 + 1e-12),
                    "{x:?}: ladder {s}, smooth {float}"
                );
                for (k, y) in all.iter().enumerate() {
                    if distance(x, y) == 1 {
                        assert!(
                            j[i] <= j[k] + 1,
                            "j({x:?}) = {} vs j({y:?}) = {}",
                            j[i],
                            j[k]
                        );
                    }
                }
            }
        }
    }
}

/// `round(b·Z)` against its exact pmf, for a scale above and below one.
#[test]
fn rounded_laplace_has_its_distribution() {
    for (num, den) in [(3i64, 2i64), (1, 3), (40, 7)] {
        let b = BigRational::new(num.into(), den.into());
        let bf = num as f64 / den as f64;
        let mut rng = ChaCha20Rng::seed_from_u64(num as u64 * 31 + den as u64);
        let samples: Vec<i128> = (0..60_000).map(|_| rounded_laplace(&mut rng, &b)).collect();
        let pmf = |k: i128| -> f64 {
            if k == 0 {
                1.0 - (-0.5 / bf).exp()
            } else {
                let k = k.unsigned_abs() as f64;
                0.5 * ((-(k - 0.5) / bf).exp() - (-(k + 0.5) / bf).exp())
            }
        };
        let p = chi_square_p(&samples, pmf, (-60, 60), 5.0);
        assert!(p > 1e-4, "b = {num}/{den}: p = {p}");
    }
}

/// The smooth release on neighbours where the changed reading moves the
/// median: every outcome's probability stays within `e^ε` of the other's
/// plus δ. With a tenth of the noise it fails.
#[test]
fn smooth_median_is_epsilon_delta_dp_empirically() {
    const TRIALS: u64 = 40_000;
    let (eps, delta) = (1.0, 1e-3);
    let x: Vec<i64> = (0..101).map(|i| 40 + i / 10).collect();
    let mut y = x.clone();
    y[100] = 0;
    y.sort_unstable();
    assert_ne!(median(&x), median(&y));
    let outcomes = |w: &[i64], seed: u64| -> HashMap<i64, u64> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut h = HashMap::new();
        for _ in 0..TRIALS {
            *h.entry(smooth_median(&mut rng, w, 0, 100, eps, delta))
                .or_insert(0) += 1;
        }
        h
    };
    let (a, c) = (outcomes(&x, 5), outcomes(&y, 6));
    assert_within(&a, &c, TRIALS, eps, delta);
    assert!(a.len() > 5, "the noise is there");
}
