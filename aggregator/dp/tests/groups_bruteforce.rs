//! Brute-force sensitivity of group-by (docs/DESIGN.md §4): for every small
//! stream of readings (device, group, value) in arrival order — devices
//! that stay in one group and devices that move group mid-stream — and every
//! neighbour of one device (its values changed; or all its readings
//! removed), bounded by [`bound_contributions`] with `G` ∈ {1, 2} and
//! `k` ∈ {1, 2}, the vector of every group's count, sum, centred sum and
//! histogram moves by at most [`grouped`]'s L1 and L2 bounds, and the bound
//! is reached. A bounding that let a device into a third group, or counted
//! `k + 1` of its readings, fails it (the controls).

use fleetdp_dp::groups::{bound_contributions, grouped, GroupedReading};
use fleetdp_dp::relation::{Neighbouring, Relation};
use fleetdp_dp::stats::{self, Sensitivity, Statistic};
use fleetdp_dp::universe::Universe;
use num_rational::BigRational;
use num_traits::ToPrimitive;
use std::collections::BTreeMap;

const GROUPS: u32 = 3;
const VALUES: [i64; 2] = [0, 2];

fn universe() -> Universe {
    Universe::new(0.0, 2.0, 1.0).unwrap()
}

/// Every sequence of `len` readings of the target device 0 and one other
/// device 1, each reading a (device, group, value), in arrival order; the
/// window is the same for all (one window slot).
fn streams(len: usize) -> Vec<Vec<GroupedReading>> {
    let mut out = vec![vec![]];
    for _ in 0..len {
        let mut next = Vec::new();
        for s in &out {
            for device in 0..2u64 {
                for group in 0..GROUPS {
                    for &value in &VALUES {
                        let mut t = s.clone();
                        t.push(GroupedReading {
                            device,
                            group,
                            window: 0,
                            value,
                        });
                        next.push(t);
                    }
                }
            }
        }
        out = next;
    }
    out
}

/// Neighbours for device 0: every other assignment of values to its
/// readings (change-one), or its readings removed (add-remove).
fn neighbours(s: &[GroupedReading], relation: Relation) -> Vec<Vec<GroupedReading>> {
    let mine: Vec<usize> = (0..s.len()).filter(|&i| s[i].device == 0).collect();
    match relation {
        Relation::AddRemove => vec![s.iter().filter(|r| r.device != 0).copied().collect()],
        Relation::ChangeOne => {
            let mut out = Vec::new();
            for mask in 0..VALUES.len().pow(mine.len() as u32) {
                let mut t = s.to_vec();
                let mut m = mask;
                for &i in &mine {
                    t[i].value = VALUES[m % VALUES.len()];
                    m /= VALUES.len();
                }
                out.push(t);
            }
            out
        }
    }
}

/// Every group's measurements of the window, as one vector per statistic.
fn measure(kept: &BTreeMap<(u32, u64), Vec<i64>>, u: &Universe) -> Vec<Vec<i128>> {
    let edges = [0i64, 1, 3];
    let of = |g: u32| kept.get(&(g, 0)).cloned().unwrap_or_default();
    let mut count = vec![];
    let mut sum = vec![];
    let mut centred = vec![];
    let mut hist = vec![];
    for g in 0..GROUPS {
        let v = of(g);
        count.push(v.len() as i128);
        sum.push(stats::sum(&v));
        centred.push(stats::centred_sum(&v, u));
        hist.extend(stats::histogram(&v, &edges).into_iter().map(i128::from));
    }
    vec![count, sum, centred, hist]
}

fn distance(a: &[i128], b: &[i128]) -> (i128, i128) {
    a.iter().zip(b).fold((0, 0), |(l1, l2), (x, y)| {
        let d = (x - y).abs();
        (l1 + d, l2 + d * d)
    })
}

fn f(r: &BigRational) -> f64 {
    r.to_f64().unwrap()
}

/// The largest L1 and squared-L2 moves over all streams of `len` readings,
/// per statistic, with a bounding of `g` groups and `k` readings.
fn worst(relation: Relation, g: u32, k: u32, len: usize) -> Vec<(i128, i128)> {
    let u = universe();
    let mut worst = vec![(0, 0); 4];
    for s in streams(len) {
        let a = measure(&bound_contributions(&s, g, k).kept, &u);
        for n in neighbours(&s, relation) {
            let b = measure(&bound_contributions(&n, g, k).kept, &u);
            for (w, (x, y)) in worst.iter_mut().zip(a.iter().zip(&b)) {
                let (l1, l2) = distance(x, y);
                w.0 = w.0.max(l1);
                w.1 = w.1.max(l2);
            }
        }
    }
    worst
}

fn bounds(relation: Relation, g: u32, k: u32) -> Vec<Sensitivity> {
    let u = universe();
    let nb = Neighbouring::new(relation, k);
    [
        Statistic::Count,
        Statistic::Sum,
        Statistic::CentredSum,
        Statistic::Histogram,
    ]
    .iter()
    .map(|s| grouped(&s.sensitivity(nb, &u, 1), g))
    .collect()
}

#[test]
fn grouped_sensitivities_hold_and_are_reached() {
    for relation in [Relation::ChangeOne, Relation::AddRemove] {
        for g in [1, 2] {
            for k in [1, 2] {
                // Enough readings of device 0 to fill G groups with k each
                // and try one more group.
                let len = (g * k + 1).min(5) as usize;
                let got = worst(relation, g, k, len);
                let want = bounds(relation, g, k);
                let names = ["count", "sum", "centred_sum", "histogram"];
                for ((name, (l1, l2)), b) in names.iter().zip(&got).zip(&want) {
                    let what = format!("{relation:?} G={g} k={k} {name}");
                    assert!(*l1 as f64 <= f(&b.l1), "{what}: L1 {l1} > {}", f(&b.l1));
                    assert!(
                        *l2 as f64 <= f(&b.l2_sq),
                        "{what}: L2² {l2} > {}",
                        f(&b.l2_sq)
                    );
                    // Tight: reached by some stream (counts under change-one
                    // never move).
                    if f(&b.l1) > 0.0 {
                        assert_eq!(*l1 as f64, f(&b.l1), "{what}: L1 bound not reached");
                    }
                }
            }
        }
    }
}

/// The controls: a bounding one group or one reading too generous breaks
/// the bound (so the search above can fail).
#[test]
fn a_looser_bounding_breaks_the_bound() {
    for relation in [Relation::ChangeOne, Relation::AddRemove] {
        let want = bounds(relation, 1, 1);
        let more_groups = worst(relation, 2, 1, 3);
        assert!(
            more_groups[1].0 as f64 > f(&want[1].l1),
            "{relation:?}: G + 1"
        );
        let more_readings = worst(relation, 1, 2, 3);
        assert!(
            more_readings[1].0 as f64 > f(&want[1].l1),
            "{relation:?}: k + 1"
        );
    }
}
