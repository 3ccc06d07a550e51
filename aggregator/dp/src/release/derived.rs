//! Intervals for the figures add-remove derives from several noisy
//! measurements: the sum, mean and clamped share divide or scale one
//! measurement by the noisy count; variance and std combine `Σc`, `Σc²` and
//! the count. (Under change-one `n` is public: `evaluate.rs` and
//! `moments.rs` give those intervals.)
//!
//! The same box serves fleet-wide figures (`fleet.rs`): the partitions'
//! raw moments add up to the fleet's, and their summed noise has its own
//! exact `1 − 0.05/k` half-widths ([`crate::sums::sum_half_width_at`]).
//!
//! Privacy argument: everything here reads released noisy measurements and
//! public noise parameters only, so it is post-processing and costs nothing.
//!
//! Coverage: a figure built from `k` measurements asks each for its exact
//! `1 − 0.05/k` half-width `hᵢ` ([`super::MeasurementPlan::joint_half_widths`]); by the union
//! bound every noise lies within its `hᵢ` with probability ≥ 95%. On that
//! event the true measurements lie in the box `Π [m̂ᵢ − hᵢ, m̂ᵢ + hᵢ]`, so
//! the true figure lies in the box's image under the figure's formula. That
//! image is computed exactly (the sum is linear in `(n, Σc)`; `Σc/n` is
//! monotone in each coordinate for `n ≥ 1`, so its extremes are corners;
//! the variance `Σc²/n − (Σc/n)²` is, in `t = 1/n`, the concave parabola
//! `Σc²·t − (Σc)²·t²`, maximised at its clamped vertex and minimised at an
//! end) and cut to what the truth always satisfies (a sum in `[nL, nU]`, a
//! mean in `[L, U]`, a share in `[0, 1]`, a variance in `[0, Δ²/4]`). The
//! published half-width is the smallest symmetric one around the released
//! value holding that range: at least 95% coverage, conservative. The
//! `release` tests check it by Monte Carlo for small and large windows, and
//! that the normal approximation (the delta method) under-covers where the
//! count's noise is comparable to `n`, which is why it is not used.

/// One noisy measurement: its released value (the measurement's own units)
/// and its noise's joint half-widths ([`super::MeasurementPlan::joint_half_widths`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Noisy {
    pub value: f64,
    pub half_widths: [f64; 2],
}

impl Noisy {
    /// A measurement without noise (change-one's public `n`).
    pub fn exact(value: f64) -> Self {
        Self {
            value,
            half_widths: [0.0; 2],
        }
    }

    fn is_exact(&self) -> bool {
        self.half_widths == [0.0; 2]
    }

    /// Where the true value lies when the noise is within its exact
    /// `1 − 0.05/k` half-width (`k` = 2 or 3).
    fn within(&self, k: usize) -> Range {
        let h = self.half_widths[k - 2];
        Range {
            lo: self.value - h,
            hi: self.value + h,
        }
    }

    /// [`Self::within`] for a count: never below 0.
    fn count_within(&self, k: usize) -> Range {
        let r = self.within(k);
        Range {
            lo: r.lo.max(0.0),
            hi: r.hi.max(0.0),
        }
    }
}

/// A closed range the truth lies in (with probability ≥ 95%).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Range {
    pub lo: f64,
    pub hi: f64,
}

impl Range {
    fn cut(self, lo: f64, hi: f64) -> Range {
        Range {
            lo: self.lo.max(lo),
            hi: self.hi.min(hi),
        }
    }

    /// The smallest symmetric half-width around `value` that holds the
    /// range.
    pub fn half_width_about(&self, value: f64) -> f64 {
        (value - self.lo).max(self.hi - value).max(0.0)
    }

    /// The extremes of `f` over the corners of `a × b`.
    fn corners(a: Range, b: Range, f: impl Fn(f64, f64) -> f64) -> Range {
        let v = [f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)];
        Range {
            lo: v.iter().copied().fold(f64::INFINITY, f64::min),
            hi: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// The true count's range for a ratio: windows with readings (`n ≥ 1`), or
/// `None` when the box holds no such window (then nothing bounds a ratio
/// but its natural range).
fn divisor(n: &Noisy, k: usize) -> Option<Range> {
    let r = n.count_within(k);
    (r.hi >= 1.0).then_some(Range {
        lo: r.lo.max(1.0),
        hi: r.hi,
    })
}

/// `Σx = (Σc + n(L + U))/2` (units) from the noisy count `n` and centred sum
/// `c` (half units); `lo`, `hi`: the universe's bounds (units).
pub(super) fn sum(n: Noisy, c: Noisy, lo: f64, hi: f64) -> Range {
    let count = n.count_within(2);
    Range::corners(c.within(2), count, |c, n| (c + n * (lo + hi)) / 2.0).cut(
        (count.lo * lo).min(count.hi * lo),
        (count.lo * hi).max(count.hi * hi),
    )
}

/// The mean `(Σc/n + L + U)/2` (units).
pub(super) fn mean(n: Noisy, c: Noisy, lo: f64, hi: f64) -> Range {
    match divisor(&n, 2) {
        Some(count) => Range::corners(c.within(2), count, |c, n| (c / n + lo + hi) / 2.0),
        None => Range { lo, hi },
    }
    .cut(lo, hi)
}

/// The share `b/n` of a count `b` among the window's readings.
pub(super) fn share(n: Noisy, b: Noisy) -> Range {
    match divisor(&n, 2) {
        Some(count) => Range::corners(b.within(2), count, |b, n| b / n),
        None => Range { lo: 0.0, hi: 1.0 },
    }
    .cut(0.0, 1.0)
}

/// The variance `(Σc²/n − (Σc/n)²)/4` (units²) from the noisy count, `Σc`
/// (half units) and `Σc²` (quarter units²); `width`: the universe's width
/// (units).
/// With an exact count only `Σc` and `Σc²` are noisy: each within its
/// `1 − 0.05/2` half-width, else all three within `1 − 0.05/3`.
pub(super) fn variance(n: Noisy, c: Noisy, q: Noisy, width: f64) -> Range {
    let top = width * width / 4.0;
    let k = if n.is_exact() { 2 } else { 3 };
    let Some(count) = divisor(&n, k) else {
        return Range { lo: 0.0, hi: top };
    };
    let (c, q) = (c.within(k), q.within(k));
    // In t = 1/n: g(t) = a·t − b·t² with a = Σc², b = (Σc)².
    let (t_lo, t_hi) = (1.0 / count.hi, 1.0 / count.lo);
    let g = |a: f64, b: f64, t: f64| a * t - b * t * t;
    let b_least = if c.lo <= 0.0 && 0.0 <= c.hi {
        0.0
    } else {
        (c.lo * c.lo).min(c.hi * c.hi)
    };
    let b_most = (c.lo * c.lo).max(c.hi * c.hi);
    // Largest: the most Σc², the least (Σc)², at the parabola's vertex
    // `a/(2b)` if it lies in range (a line when b = 0).
    let t_best = if b_least > 0.0 {
        (q.hi / (2.0 * b_least)).clamp(t_lo, t_hi)
    } else if q.hi >= 0.0 {
        t_hi
    } else {
        t_lo
    };
    let high = g(q.hi, b_least, t_best);
    // Smallest: the least Σc², the most (Σc)², at an end (concave in t).
    let low = g(q.lo, b_most, t_lo).min(g(q.lo, b_most, t_hi));
    Range {
        lo: low / 4.0,
        hi: high / 4.0,
    }
    .cut(0.0, top)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Each range is the exact image of its box: every point of a fine
    /// grid over the box maps inside it, and its ends are reached (within
    /// the grid's step) unless cut by the figure's natural range.
    /// A figure of `(n, Σc, Σc²)`, `None` where it is undefined.
    type Figure<'a> = Box<dyn Fn(f64, f64, f64) -> Option<f64> + 'a>;

    #[test]
    fn ranges_are_the_images_of_their_boxes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // Half-widths of a Laplace of scale 3 at 97.5% and 98.3%.
        let (h2, h3) = (11.0, 12.0);
        let steps = 40;
        let grid =
            |r: Range| (0..=steps).map(move |i| r.lo + (r.hi - r.lo) * i as f64 / steps as f64);
        for _ in 0..300 {
            let (lo, hi) = (rng.gen_range(-50.0..10.0), rng.gen_range(11.0..80.0));
            let width: f64 = hi - lo;
            let count = rng.gen_range(-5.0..60.0f64).round();
            let mean_c = rng.gen_range(-width..=width);
            let cs = (mean_c * count.max(1.0) + rng.gen_range(-9.0..9.0)).round();
            let sq = (mean_c * mean_c * count.max(1.0) * rng.gen_range(0.5..1.5)).round();
            let at = |value| Noisy {
                value,
                half_widths: [11.0, 12.0],
            };
            let (n, c, q) = (at(count), at(cs), at(sq));
            let checks: [(&str, Range, f64, Figure<'_>); 3] = [
                (
                    "sum",
                    sum(n, c, lo, hi),
                    h2,
                    Box::new(|n, c, _| Some((c + n * (lo + hi)) / 2.0)),
                ),
                (
                    "mean",
                    mean(n, c, lo, hi),
                    h2,
                    Box::new(|n, c, _| (n >= 1.0).then(|| (c / n + lo + hi) / 2.0)),
                ),
                (
                    "variance",
                    variance(n, c, q, width),
                    h3,
                    Box::new(|n, c, q| (n >= 1.0).then(|| (q / n - (c / n) * (c / n)) / 4.0)),
                ),
            ];
            for (name, range, h, f) in checks {
                let bx = |v: f64| Range {
                    lo: v - h,
                    hi: v + h,
                };
                let (nb, cb, qb) = (bx(count), bx(cs), bx(sq));
                let nb = Range {
                    lo: nb.lo.max(if name == "sum" { 0.0 } else { 1.0 }),
                    hi: nb.hi.max(0.0),
                };
                if nb.hi < nb.lo {
                    continue;
                }
                let (mut least, mut most) = (f64::INFINITY, f64::NEG_INFINITY);
                for n in grid(nb) {
                    for c in grid(cb) {
                        for q in grid(qb).take(if name == "variance" { steps + 1 } else { 1 }) {
                            let Some(v) = f(n, c, if name == "variance" { q } else { 0.0 }) else {
                                continue;
                            };
                            least = least.min(v);
                            most = most.max(v);
                        }
                    }
                }
                if !least.is_finite() {
                    continue;
                }
                let natural = match name {
                    "sum" => Range {
                        lo: (nb.lo * lo).min(nb.hi * lo),
                        hi: (nb.lo * hi).max(nb.hi * hi),
                    },
                    "mean" => Range { lo, hi },
                    _ => Range {
                        lo: 0.0,
                        hi: width * width / 4.0,
                    },
                };
                let tol = 1e-9 * (1.0 + most.abs() + least.abs());
                let cut = Range {
                    lo: least,
                    hi: most,
                }
                .cut(natural.lo, natural.hi);
                assert!(
                    range.lo <= cut.lo + tol && cut.hi <= range.hi + tol,
                    "{name}: {range:?} misses {cut:?}"
                );
                // Tight: the ends are reached up to the grid's resolution.
                let slack = 0.05 * (most - least).abs() + tol;
                assert!(
                    range.lo >= cut.lo - slack && range.hi <= cut.hi + slack,
                    "{name}: {range:?} wider than {cut:?}"
                );
            }
        }
    }

    #[test]
    fn a_box_without_readings_bounds_ratios_by_their_natural_range() {
        let at = |value| Noisy {
            value,
            half_widths: [2.0, 3.0],
        };
        let h = at(0.0).within(2).hi;
        let n = at(-h - 3.0);
        assert_eq!(mean(n, at(5.0), -4.0, 6.0), Range { lo: -4.0, hi: 6.0 });
        assert_eq!(share(n, at(5.0)), Range { lo: 0.0, hi: 1.0 });
        assert_eq!(
            variance(n, at(5.0), at(9.0), 10.0),
            Range { lo: 0.0, hi: 25.0 }
        );
        assert_eq!(Range { lo: 2.0, hi: 9.0 }.half_width_about(4.0), 5.0);
    }
}
