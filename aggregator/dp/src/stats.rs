//! Exact statistics of a window (integer arithmetic on grid units) and their
//! stability maps: the L1 and L2 sensitivity of each for a relation and `k`.
//!
//! Privacy argument: values lie in `[L, U]`, `Δ = U − L`. Changing one record
//! moves `x` by ≤ Δ, `c = 2x − L − U` by ≤ 2Δ, `c²` by ≤ Δ², one histogram
//! bin down and one up, and every rank by ≤ 1; adding or removing one record
//! moves the count by 1, `x` by ≤ max(|L|,|U|), `c` by ≤ Δ, `c²` by ≤ Δ², one
//! bin by 1 and every rank and `q·n` by ≤ 1. With `k` records each bound
//! scales by `k` (L2 of a histogram: `√2·k` resp. `k`, all `k` moves in the
//! same pair of bins being the worst case). The brute-force tests check every
//! bound against all neighbours of small universes.

use super::relation::{Neighbouring, Relation};
use super::universe::Universe;
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::ToPrimitive;

/// What a statistic's value changes by between neighbours: L1 and squared L2
/// norms, in the statistic's own units (exact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sensitivity {
    pub l1: BigRational,
    pub l2_sq: BigRational,
}

impl Sensitivity {
    /// A scalar statistic: L1 = L2.
    pub fn scalar(v: BigRational) -> Self {
        Self {
            l2_sq: &v * &v,
            l1: v,
        }
    }
    /// L2 as a float (reporting only).
    pub fn l2_f64(&self) -> f64 {
        self.l2_sq.to_f64().unwrap_or(f64::NAN).sqrt()
    }
    pub fn l1_f64(&self) -> f64 {
        self.l1.to_f64().unwrap_or(f64::NAN)
    }
}

/// Statistics whose stability maps the core knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    /// Number of records.
    Count,
    /// `Σ x`.
    Sum,
    /// `Σ x / n` (n public).
    Mean,
    /// `Σ (2x − L − U)`: the sum centred on the midpoint, in half units.
    CentredSum,
    /// `Σ (2x − L − U)²`: second moment about the midpoint, in quarter units².
    CentredSumSq,
    /// Counts over declared bins, as a vector.
    Histogram,
    /// Readings at the universe's bounds (`x = L` or `x = U` after
    /// top-coding): changing, adding or removing one reading moves it by at
    /// most 1, so `k` for `k` readings under both relations.
    BoundaryCount,
    /// Quantile utility (distance of `q·n` to the ranks of `c`, negated) for
    /// every candidate `c`; its level-free bound `k` (the tight one per
    /// level: [`QuantileLevel::utility_sensitivity`]).
    QuantileUtility,
}

fn int(v: i128) -> BigRational {
    BigRational::from_integer(BigInt::from(v))
}

impl Statistic {
    /// The L1/L2 sensitivity for `n` records (n matters only for the mean).
    pub fn sensitivity(&self, nb: Neighbouring, u: &Universe, n: u64) -> Sensitivity {
        let k = nb.k as i128;
        let delta = u.width() as i128;
        let change = nb.relation == Relation::ChangeOne;
        match self {
            Statistic::Count => Sensitivity::scalar(int(if change { 0 } else { k })),
            Statistic::Sum => Sensitivity::scalar(int(if change {
                k * delta
            } else {
                k * u.max_abs() as i128
            })),
            Statistic::Mean => {
                assert!(change, "the mean needs a public window size");
                Sensitivity::scalar(BigRational::new(
                    BigInt::from(k * delta),
                    BigInt::from(n.max(1)),
                ))
            }
            Statistic::CentredSum => {
                Sensitivity::scalar(int(if change { 2 * k * delta } else { k * delta }))
            }
            Statistic::CentredSumSq => Sensitivity::scalar(int(k * delta * delta)),
            Statistic::Histogram => {
                if change {
                    Sensitivity {
                        l1: int(2 * k),
                        l2_sq: int(2 * k * k),
                    }
                } else {
                    Sensitivity {
                        l1: int(k),
                        l2_sq: int(k * k),
                    }
                }
            }
            Statistic::QuantileUtility | Statistic::BoundaryCount => Sensitivity::scalar(int(k)),
        }
    }
}

/// Readings at the universe's bounds (units), exact.
pub fn boundary_count(values: &[i64], u: &Universe) -> i128 {
    values
        .iter()
        .filter(|&&x| x == u.lower() || x == u.upper())
        .count() as i128
}

/// `Σ x`, exact.
pub fn sum(values: &[i64]) -> i128 {
    values.iter().map(|&x| x as i128).sum()
}

/// `Σ (2x − L − U)`, exact (half units).
pub fn centred_sum(values: &[i64], u: &Universe) -> i128 {
    let mid2 = (u.lower() + u.upper()) as i128;
    values.iter().map(|&x| 2 * x as i128 - mid2).sum()
}

/// `Σ (2x − L − U)²`, exact (quarter units²). Config validation proves
/// `n·Δ²` fits; the sum is still checked.
pub fn centred_sum_sq(values: &[i64], u: &Universe) -> i128 {
    let mid2 = (u.lower() + u.upper()) as i128;
    values
        .iter()
        .map(|&x| {
            let c = 2 * x as i128 - mid2;
            c * c
        })
        .try_fold(0i128, |acc, t| acc.checked_add(t))
        .expect("validated: n·Δ² fits in i128")
}

/// Bin index of `x` for increasing edges `e0 < e1 < … < eB` (units): bin `i`
/// holds `[e_i, e_{i+1})`, the last bin also holds `e_B`. Values outside
/// the edges go to the nearest end bin (cannot happen when the edges cover
/// the universe, which config validation requires).
pub fn bin_of(x: i64, edges: &[i64]) -> usize {
    let bins = edges.len() - 1;
    edges[1..bins].partition_point(|&e| e <= x)
}

/// Counts per bin.
pub fn histogram(values: &[i64], edges: &[i64]) -> Vec<i64> {
    let mut counts = vec![0i64; edges.len() - 1];
    for &x in values {
        counts[bin_of(x, edges)] += 1;
    }
    counts
}

/// A quantile level as an exact fraction `num/den` (`den = 10⁶`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantileLevel {
    pub num: i64,
    pub den: i64,
}

impl QuantileLevel {
    pub const DEN: i64 = 1_000_000;
    /// `q ∈ [0, 1]` rounded to 6 decimals.
    pub fn new(q: f64) -> Option<Self> {
        (0.0..=1.0).contains(&q).then(|| Self {
            num: (q * Self::DEN as f64).round() as i64,
            den: Self::DEN,
        })
    }
    pub fn as_f64(&self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The sensitivity of [`quantile_utilities`] at this level, in its
    /// units of `1/den`. Change-one (`n` fixed): `#{x < c}` and `#{x ≤ c}`
    /// each move by at most `k`, so each term by at most `k·den`.
    /// Add-remove: one record moves `num·n` by `num` and each count by 0 or
    /// 1 (`den`), so `den·#{x < c} − num·n` moves by `−num` or `den − num`
    /// and `num·n − den·#{x ≤ c}` by `num` or `num − den`: at most
    /// `max(num, den − num)` each, `k` times that for `k` records; the
    /// maximum with 0 moves by no more than its terms. (`k·den` for every
    /// level was loose by up to 2× at the median.)
    pub fn utility_sensitivity(&self, nb: Neighbouring) -> u64 {
        let k = u64::from(nb.k);
        let (num, den) = (self.num as u64, self.den as u64);
        match nb.relation {
            Relation::ChangeOne => k * den,
            Relation::AddRemove => k * num.max(den - num),
        }
    }
}

/// `values` in ascending order, for the quantiles. A window's values lie
/// on its universe's grid, and a large window holds more values than the
/// span it covers has grid points: they are then counted per point, in
/// `O(n + span)`, instead of compared, in `O(n log n)`. A sorted list is
/// the same whichever way it is made (a test compares them).
pub fn sorted(values: &[i64]) -> Vec<i64> {
    let bounds = values
        .iter()
        .fold(None, |b: Option<(i64, i64)>, &v| match b {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        });
    let Some((lo, hi)) = bounds else {
        return Vec::new();
    };
    let span = hi.abs_diff(lo);
    if values.len() < COUNTED_FROM || span >= 2 * values.len() as u64 {
        let mut s = values.to_vec();
        s.sort_unstable();
        return s;
    }
    let mut counts = vec![0usize; span as usize + 1];
    for &v in values {
        counts[v.abs_diff(lo) as usize] += 1;
    }
    let mut out = Vec::with_capacity(values.len());
    for (at, &n) in counts.iter().enumerate() {
        // `lo + at` ≤ `hi`: no overflow.
        out.extend(std::iter::repeat_n(lo + at as i64, n));
    }
    out
}

/// Fewest values [`sorted`] counts instead of comparing.
const COUNTED_FROM: usize = 64;

/// Utilities (in units of `1/den`) of each candidate `c`: minus the distance
/// from the target rank `q·n` to the ranks `c` can take,
/// `−max(0, den·#{x < c} − num·n, num·n − den·#{x ≤ c})`. Every candidate
/// whose tie block contains the target rank scores 0, so ties on the grid
/// never push the choice below the quantile (`−|#{x ≤ c} − q·n|` did).
/// `sorted` must be sorted ascending. Sensitivity in these units:
/// [`QuantileLevel::utility_sensitivity`].
///
/// Ascending candidates (a stream's grid, or its adaptive subset) are
/// counted in one merge-like pass over both lists, each step galloping
/// over the values below the next candidate, `O(m log(n/m))`; others by
/// two binary searches each, `O(m log n)`. The counts, hence the
/// utilities, are the same either way (a test compares them).
pub fn quantile_utilities(sorted: &[i64], candidates: &[i64], q: QuantileLevel) -> Vec<i128> {
    let n = sorted.len() as i128;
    let (num, den) = (q.num as i128, q.den as i128);
    let target = num * n;
    let utility = |below: usize, at_most: usize| {
        -(den * below as i128 - target)
            .max(target - den * at_most as i128)
            .max(0)
    };
    if candidates.is_sorted() {
        // #{x < c} and #{x ≤ c} only grow as c does.
        let (mut below, mut at_most) = (0, 0);
        return candidates
            .iter()
            .map(|&c| {
                below += leading(&sorted[below..], |x| x < c);
                at_most = at_most.max(below);
                at_most += leading(&sorted[at_most..], |x| x <= c);
                utility(below, at_most)
            })
            .collect();
    }
    candidates
        .iter()
        .map(|&c| {
            let below = sorted.partition_point(|&x| x < c);
            let at_most = below + sorted[below..].partition_point(|&x| x == c);
            utility(below, at_most)
        })
        .collect()
}

/// How many leading values of `s` meet `below` (true, then false along
/// `s`): doubling steps until one fails, then a binary search within the
/// last step, `O(log k)` for an answer of `k` (the window's values
/// between two neighbouring candidates).
fn leading(s: &[i64], below: impl Fn(i64) -> bool) -> usize {
    let mut step = 1;
    while step <= s.len() && below(s[step - 1]) {
        step *= 2;
    }
    // All of `s[..step / 2]` meet it, and the first that does not is by
    // `s[step - 1]` (or the end).
    let from = step / 2;
    from + s[from..step.min(s.len())].partition_point(|&x| below(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The one-pass count over ascending candidates gives exactly the
    /// utilities of two binary searches per candidate (the reference),
    /// with ties, repeated candidates, candidates outside the data and
    /// empty data.
    #[test]
    fn one_pass_counts_as_binary_searches_do() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let reference = |d: &[i64], cands: &[i64], q: QuantileLevel| -> Vec<i128> {
            let (n, num, den) = (d.len() as i128, q.num as i128, q.den as i128);
            cands
                .iter()
                .map(|&c| {
                    let below = d.partition_point(|&x| x < c) as i128;
                    let at_most = d.partition_point(|&x| x <= c) as i128;
                    -(den * below - num * n).max(num * n - den * at_most).max(0)
                })
                .collect()
        };
        for _ in 0..20_000 {
            // Short windows, and long ones whose candidates lie far apart
            // in them (long gallops).
            let longest = [30, 300][rng.gen_range(0..2)];
            let n = rng.gen_range(0..longest);
            let spread = rng.gen_range(1..12);
            let mut d: Vec<i64> = (0..n).map(|_| rng.gen_range(-spread..=spread)).collect();
            d.sort_unstable();
            let m = rng.gen_range(0..15);
            let mut cands: Vec<i64> = (0..m)
                .map(|_| rng.gen_range(-spread - 2..=spread + 2))
                .collect();
            if rng.gen_bool(0.7) {
                cands.sort_unstable();
            }
            let q = QuantileLevel::new([0.0, 0.1, 0.5, 0.75, 1.0][rng.gen_range(0..5)]).unwrap();
            assert_eq!(
                quantile_utilities(&d, &cands, q),
                reference(&d, &cands, q),
                "{d:?} {cands:?}"
            );
        }
    }

    /// Counting gives the list sorting gives: windows on either side of
    /// the counting thresholds (few values, a wide span), with repeats,
    /// negative values and the ends of `i64`.
    #[test]
    fn counted_values_are_sorted_values() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for case in 0..3_000 {
            let n = rng.gen_range(0..300);
            let span: i64 = [1, 10, 100, 1_000, i64::MAX][case % 5];
            let base = [0, -500, i64::MIN, i64::MAX - span][rng.gen_range(0..4)];
            let d: Vec<i64> = (0..n)
                .map(|_| base.saturating_add(rng.gen_range(0..=span.min(i64::MAX - 1))))
                .collect();
            let mut expected = d.clone();
            expected.sort_unstable();
            assert_eq!(sorted(&d), expected, "{d:?}");
        }
        // A constant window (counted) and an empty one.
        assert_eq!(sorted(&[3; 100]), vec![3; 100]);
        assert_eq!(sorted(&[]), Vec::<i64>::new());
    }

    /// On data with ties on the grid, every candidate of top utility is a
    /// true `q`-quantile: the target rank `q·n` lies within its tie block
    /// or between it and its neighbour. (`−|#{x ≤ c} − q·n|` preferred the
    /// grid point below the quantile whenever the block straddled `q·n`.)
    #[test]
    fn the_best_candidates_are_exact_quantiles() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let candidates: Vec<i64> = (0..=20).collect();
        let mut old_misses = 0;
        for _ in 0..2_000 {
            let n = rng.gen_range(1..40);
            let mut d: Vec<i64> = (0..n).map(|_| rng.gen_range(0..=6) * 3).collect();
            d.sort_unstable();
            let q = QuantileLevel::new([0.1, 0.25, 0.5, 0.9][rng.gen_range(0..4)]).unwrap();
            let u = quantile_utilities(&d, &candidates, q);
            let best = *u.iter().max().unwrap();
            assert_eq!(best, 0, "some candidate holds rank q·n");
            let target = q.num as i128 * n as i128;
            for (c, _) in candidates.iter().zip(&u).filter(|(_, &v)| v == best) {
                let below = d.iter().filter(|&&x| x < *c).count() as i128 * q.den as i128;
                let at_most = d.iter().filter(|&&x| x <= *c).count() as i128 * q.den as i128;
                assert!(
                    below <= target && target <= at_most,
                    "{c} is not a quantile of {d:?}"
                );
            }
            // The old utility's noiseless choice (smallest best candidate).
            let old: Vec<i128> = candidates
                .iter()
                .map(|&c| {
                    let rank = d.iter().filter(|&&x| x <= c).count() as i128;
                    -(q.den as i128 * rank - target).abs()
                })
                .collect();
            let old_best = *old.iter().max().unwrap();
            let c = candidates[old.iter().position(|&v| v == old_best).unwrap()];
            let below = d.iter().filter(|&&x| x < c).count() as i128 * q.den as i128;
            let at_most = d.iter().filter(|&&x| x <= c).count() as i128 * q.den as i128;
            old_misses += usize::from(!(below <= target && target <= at_most));
        }
        assert!(old_misses > 100, "the old utility missed only {old_misses}");
    }
}
