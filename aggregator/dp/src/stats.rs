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
    /// Quantile utility `−|rank(c) − q·n|` for every candidate `c`.
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
            Statistic::QuantileUtility => Sensitivity::scalar(int(k)),
        }
    }
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
}

/// Utilities `−|den·rank(c) − num·n|` (in units of `1/den`) of each candidate
/// `c`, where `rank(c) = #{x ≤ c}`; `sorted` must be sorted ascending.
/// Sensitivity in these units is `k·den` ([`Statistic::QuantileUtility`] × den).
pub fn quantile_utilities(sorted: &[i64], candidates: &[i64], q: QuantileLevel) -> Vec<i128> {
    let n = sorted.len() as i128;
    let target = q.num as i128 * n;
    candidates
        .iter()
        .map(|&c| {
            let rank = sorted.partition_point(|&x| x <= c) as i128;
            -(q.den as i128 * rank - target).abs()
        })
        .collect()
}
