//! Brute-force sensitivity (the method of "Global sensitivity from scratch", docs/DESIGN.md §10, exhaustively): for small
//! universes, every dataset and every neighbour within distance k, in both
//! relations, the analytic sensitivity of every statistic is at least the
//! empirical maximum, and equal to it where the bound is claimed tight.

use fleetdp_dp::relation::{Neighbouring, Relation};
use fleetdp_dp::stats::{self, QuantileLevel, Statistic};
use fleetdp_dp::universe::Universe;
use num_bigint::BigInt;
use num_rational::BigRational;

/// All multisets (sorted) of size `m` over `values`.
fn multisets(values: &[i64], m: usize) -> Vec<Vec<i64>> {
    fn go(values: &[i64], m: usize, start: usize, cur: &mut Vec<i64>, out: &mut Vec<Vec<i64>>) {
        if cur.len() == m {
            out.push(cur.clone());
            return;
        }
        for i in start..values.len() {
            cur.push(values[i]);
            go(values, m, i, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    go(values, m, 0, &mut Vec::new(), &mut out);
    out
}

/// All sub-multisets of `d` of size `r` (as index sets, duplicates allowed).
fn index_subsets(len: usize, r: usize) -> Vec<Vec<usize>> {
    fn go(len: usize, r: usize, start: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == r {
            out.push(cur.clone());
            return;
        }
        for i in start..len {
            cur.push(i);
            go(len, r, i + 1, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    go(len, r, 0, &mut Vec::new(), &mut out);
    out
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

/// Neighbours of `d` within distance `k`.
fn neighbours(d: &[i64], values: &[i64], nb: Neighbouring) -> Vec<Vec<i64>> {
    let k = nb.k as usize;
    let mut out = Vec::new();
    match nb.relation {
        Relation::ChangeOne => {
            for j in 1..=k.min(d.len()) {
                for idx in index_subsets(d.len(), j) {
                    for repl in multisets(values, j) {
                        let mut e = d.to_vec();
                        for (&i, &v) in idx.iter().zip(&repl) {
                            e[i] = v;
                        }
                        out.push(sorted(e));
                    }
                }
            }
        }
        Relation::AddRemove => {
            // Symmetric distance ≤ k: remove r records and add a, r + a ≤ k.
            for r in 0..=k.min(d.len()) {
                for a in 0..=(k - r) {
                    if r + a == 0 {
                        continue;
                    }
                    for idx in index_subsets(d.len(), r) {
                        let kept: Vec<i64> = (0..d.len())
                            .filter(|i| !idx.contains(i))
                            .map(|i| d[i])
                            .collect();
                        for add in multisets(values, a) {
                            let mut e = kept.clone();
                            e.extend(add);
                            out.push(sorted(e));
                        }
                    }
                }
            }
        }
    }
    out
}

fn rat(v: i128) -> BigRational {
    BigRational::from_integer(BigInt::from(v))
}

/// Empirical maximum (L1, L2²) of a vector-valued statistic over all pairs.
struct Max {
    l1: BigRational,
    l2_sq: BigRational,
}

impl Max {
    fn new() -> Self {
        Self {
            l1: rat(0),
            l2_sq: rat(0),
        }
    }
    fn update(&mut self, a: &[BigRational], b: &[BigRational]) {
        assert_eq!(a.len(), b.len());
        let mut l1 = rat(0);
        let mut l2 = rat(0);
        for (x, y) in a.iter().zip(b) {
            let d = if x > y { x - y } else { y - x };
            l2 += &d * &d;
            l1 += d;
        }
        if l1 > self.l1 {
            self.l1 = l1;
        }
        if l2 > self.l2_sq {
            self.l2_sq = l2;
        }
    }
}

struct Case {
    universe: Universe,
    edges: Vec<i64>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            universe: Universe::from_units(0, 5, 1.0),
            edges: vec![0, 2, 4, 5],
        },
        Case {
            universe: Universe::from_units(-2, 3, 0.5),
            edges: vec![-2, 0, 3],
        },
        Case {
            universe: Universe::from_units(-5, 0, 0.1),
            edges: vec![-5, -1, 0],
        },
        Case {
            universe: Universe::from_units(-1, 1, 1.0),
            edges: vec![-1, 0, 1],
        },
        Case {
            universe: Universe::from_units(7, 9, 1.0),
            edges: vec![7, 8, 9],
        },
        Case {
            universe: Universe::from_units(0, 1, 1.0),
            edges: vec![0, 1],
        },
    ]
}

const LEVELS: [f64; 5] = [0.0, 0.25, 0.5, 0.9, 1.0];

/// Statistic values as exact rationals (vectors for histogram/utilities).
fn evaluate(stat: Statistic, d: &[i64], c: &Case, level: QuantileLevel) -> Vec<BigRational> {
    let u = &c.universe;
    match stat {
        Statistic::Count => vec![rat(d.len() as i128)],
        Statistic::Sum => vec![rat(stats::sum(d))],
        Statistic::Mean => vec![BigRational::new(
            BigInt::from(stats::sum(d)),
            BigInt::from(d.len()),
        )],
        Statistic::CentredSum => vec![rat(stats::centred_sum(d, u))],
        Statistic::CentredSumSq => vec![rat(stats::centred_sum_sq(d, u))],
        Statistic::BoundaryCount => vec![rat(stats::boundary_count(d, u))],
        Statistic::Histogram => stats::histogram(d, &c.edges)
            .into_iter()
            .map(|x| rat(x as i128))
            .collect(),
        Statistic::QuantileUtility => {
            let cands: Vec<i64> = (u.lower()..=u.upper()).collect();
            // Utilities are in units of 1/den: back to rank units.
            stats::quantile_utilities(d, &cands, level)
                .into_iter()
                .map(|x| BigRational::new(BigInt::from(x), BigInt::from(level.den)))
                .collect()
        }
    }
}

fn check(stat: Statistic, relation: Relation, tight_when: impl Fn(&Case, usize, u32) -> bool) {
    let mut checked = 0usize;
    // Quantile utilities: per (k, level) the largest change seen and the bound.
    let mut quantile_reached = std::collections::BTreeMap::new();
    let mut quantile_bound = std::collections::BTreeMap::new();
    for c in cases() {
        let values: Vec<i64> = (c.universe.lower()..=c.universe.upper()).collect();
        assert!(values.len() <= 6);
        for k in [1u32, 2] {
            let nb = Neighbouring::new(relation, k);
            let sizes: Vec<usize> = match relation {
                Relation::ChangeOne => (1..=5).collect(),
                Relation::AddRemove => (0..=5).collect(),
            };
            for n in sizes {
                let levels: Vec<QuantileLevel> = if stat == Statistic::QuantileUtility {
                    LEVELS
                        .iter()
                        .map(|&q| QuantileLevel::new(q).unwrap())
                        .collect()
                } else {
                    vec![QuantileLevel::new(0.5).unwrap()]
                };
                for level in levels {
                    let mut max = Max::new();
                    let mut linf = rat(0);
                    for d in multisets(&values, n) {
                        let a = evaluate(stat, &d, &c, level);
                        for e in neighbours(&d, &values, nb) {
                            if stat == Statistic::Mean && e.is_empty() {
                                continue;
                            }
                            let b = evaluate(stat, &e, &c, level);
                            if stat == Statistic::QuantileUtility {
                                for (x, y) in a.iter().zip(&b) {
                                    let dlt = if x > y { x - y } else { y - x };
                                    if dlt > linf {
                                        linf = dlt;
                                    }
                                }
                            } else {
                                max.update(&a, &b);
                            }
                            checked += 1;
                        }
                    }
                    let analytic = stat.sensitivity(nb, &c.universe, n as u64);
                    let ctx = format!(
                        "{stat:?} {relation:?} k={k} n={n} U={:?} q={}",
                        c.universe,
                        level.as_f64()
                    );
                    if stat == Statistic::QuantileUtility {
                        // The level's own bound (rank units), which the plan uses.
                        let per_level = BigRational::new(
                            BigInt::from(level.utility_sensitivity(nb)),
                            BigInt::from(level.den),
                        );
                        assert!(analytic.l1 >= per_level, "{ctx}: level bound above k");
                        assert!(
                            per_level >= linf,
                            "{ctx}: analytic {per_level} < empirical {linf}"
                        );
                        // Tight: some neighbours of some window reach it.
                        let best = quantile_reached
                            .entry((k, level.num))
                            .or_insert_with(|| rat(0));
                        if linf > *best {
                            *best = linf.clone();
                        }
                        quantile_bound.insert((k, level.num), per_level);
                        continue;
                    }
                    assert!(
                        analytic.l1 >= max.l1,
                        "{ctx}: L1 analytic {} < empirical {}",
                        analytic.l1,
                        max.l1
                    );
                    assert!(
                        analytic.l2_sq >= max.l2_sq,
                        "{ctx}: L2² analytic {} < empirical {}",
                        analytic.l2_sq,
                        max.l2_sq
                    );
                    if tight_when(&c, n, k) {
                        assert_eq!(analytic.l1, max.l1, "{ctx}: L1 claimed tight");
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} pairs checked");
    for (key, bound) in &quantile_bound {
        assert_eq!(
            &quantile_reached[key], bound,
            "{relation:?} (k, level·10⁶) = {key:?}: the bound is never reached"
        );
    }
}

#[test]
fn count() {
    check(Statistic::Count, Relation::ChangeOne, |_, _, _| true);
    check(Statistic::Count, Relation::AddRemove, |_, _, _| true);
}

#[test]
fn sum() {
    check(Statistic::Sum, Relation::ChangeOne, |_, n, k| {
        n >= k as usize
    });
    check(Statistic::Sum, Relation::AddRemove, |_, _, _| true);
}

#[test]
fn mean() {
    check(Statistic::Mean, Relation::ChangeOne, |_, n, k| {
        n >= k as usize
    });
}

#[test]
fn centred_moments() {
    check(Statistic::CentredSum, Relation::ChangeOne, |_, n, k| {
        n >= k as usize
    });
    check(Statistic::CentredSum, Relation::AddRemove, |_, _, _| true);
    check(Statistic::CentredSumSq, Relation::ChangeOne, |_, _, _| {
        false
    });
    check(Statistic::CentredSumSq, Relation::AddRemove, |_, _, _| {
        false
    });
}

#[test]
fn histogram_l1_and_l2() {
    check(Statistic::Histogram, Relation::ChangeOne, |c, n, k| {
        n >= k as usize && c.edges.len() > 2
    });
    check(Statistic::Histogram, Relation::AddRemove, |_, _, _| true);
}

#[test]
fn boundary_count() {
    // Reached whenever a window holds k readings that can move onto or
    // off a bound: a universe with interior values.
    check(Statistic::BoundaryCount, Relation::ChangeOne, |c, n, k| {
        n >= k as usize && c.universe.width() >= 2
    });
    check(Statistic::BoundaryCount, Relation::AddRemove, |_, _, _| {
        true
    });
}

#[test]
fn quantile_utility() {
    check(
        Statistic::QuantileUtility,
        Relation::ChangeOne,
        |_, _, _| false,
    );
    check(
        Statistic::QuantileUtility,
        Relation::AddRemove,
        |_, _, _| false,
    );
}

/// The check itself must be able to fail: an understated bound is caught.
#[test]
fn an_understated_bound_is_caught() {
    let c = &cases()[0];
    let values: Vec<i64> = (0..=5).collect();
    let nb = Neighbouring::new(Relation::ChangeOne, 2);
    let mut max = Max::new();
    for d in multisets(&values, 3) {
        let a = evaluate(Statistic::Sum, &d, c, QuantileLevel::new(0.5).unwrap());
        for e in neighbours(&d, &values, nb) {
            max.update(
                &a,
                &evaluate(Statistic::Sum, &e, c, QuantileLevel::new(0.5).unwrap()),
            );
        }
    }
    // kΔ = 10; a claim of (k−1)Δ = 5 would be refuted.
    assert_eq!(max.l1, rat(10));
    assert!(rat(5) < max.l1);
}

/// Joint quantiles (`fleetdp_dp::joint`): under change-one every tuple's
/// utility moves by at most `2·k·den` between neighbouring windows (two gap
/// counts per changed reading), for 2 and 3 levels, every window of up to 4
/// readings on 5 grid values, `k ∈ {1, 2}`; the bound is reached (tight),
/// and `k·den` (one gap per reading) would be exceeded.
#[test]
fn joint_quantile_utility() {
    use fleetdp_dp::joint;
    use fleetdp_dp::release::joint_utility_sensitivity;
    let values: Vec<i64> = (0..5).collect();
    let den = QuantileLevel::DEN;
    for levels in [vec![0.5, 0.9], vec![0.1, 0.5, 0.9], vec![0.25, 0.75]] {
        let nums: Vec<i64> = levels
            .iter()
            .map(|&q| QuantileLevel::new(q).unwrap().num)
            .collect();
        for k in [1u32, 2] {
            let nb = Neighbouring::new(Relation::ChangeOne, k);
            let bound = joint_utility_sensitivity(nb) as i128;
            let mut worst = 0i128;
            for n in 1..=4 {
                for d in multisets(&values, n) {
                    let ud = joint::utilities(&d, &values, &nums, den);
                    for e in neighbours(&d, &values, nb) {
                        let ue = joint::utilities(&e, &values, &nums, den);
                        let moved = ud
                            .iter()
                            .zip(&ue)
                            .map(|(a, b)| (a - b).abs())
                            .max()
                            .unwrap();
                        assert!(
                            moved <= bound,
                            "{levels:?} k={k}: {d:?} → {e:?} moves {moved} > {bound}"
                        );
                        worst = worst.max(moved);
                    }
                }
            }
            assert_eq!(worst, bound, "{levels:?} k={k}: the bound is reached");
            assert!(
                worst > i128::from(k) * i128::from(den),
                "one gap per reading would be understated"
            );
        }
    }
}
