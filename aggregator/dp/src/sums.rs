//! Accuracy of a sum of independent noise draws: the 95% half-width of
//! `Z₁ + … + Z_m` for `m` independent copies of one discrete noise. A
//! fleet-wide release adds one draw per partition (docs/DESIGN.md §6).
//!
//! A normal approximation under-covers for Laplace sums (94.1% at `m = 2`),
//! so the distribution is convolved. While the noise's scale is small this
//! is exact on its integer lattice. Above, each draw is split as
//! `Z = g·Q + R` with `Q` its nearest cell of odd width `g` and
//! `|R| ≤ r = (g − 1)/2`; the cells' masses are convolved, and
//! `|ΣZ| ≤ g·|ΣQ| + |ΣR|` with `|ΣR| ≤ m·r`, or (many copies) with
//! probability `1 − 10⁻⁴` at most `r·√(2m·ln(2·10⁴))` by Hoeffding's
//! inequality, the 10⁻⁴ then taken from `ΣQ`'s coverage. The cell width keeps
//! `scale/g ≥ T` with `T = clamp(2048/√m, 32, 64)`: the rounding adds
//! below 2% of the width up to 1,024 copies and below 4% beyond.
//! Tails below 10⁻¹⁵ are cut after each convolution; the mass counted is
//! then a lower bound of the true coverage. Public parameters only.

use super::accuracy::{half_width_at, LEVEL};
use super::mechanism::Noise;

/// Mass cut from each tail after a convolution.
const TRIM: f64 = 1e-15;
/// Margin on the coverage target for floating-point error in the sums.
const MARGIN: f64 = 1e-9;
/// Probability left to the cells' rounding when it is bounded by Hoeffding.
const ROUNDING_DELTA: f64 = 1e-4;

/// Smallest (or, with cells, a conservative) `h` in the noise's units with
/// `P(|Z₁ + … + Z_m| ≤ h) ≥ 95%` for `copies` independent draws of `noise`.
pub fn sum_half_width(noise: &Noise, copies: usize) -> f64 {
    sum_half_widths(noise, copies)[0]
}

/// [`sum_half_width`] at coverage 95%, `1 − 0.05/2` and `1 − 0.05/3` (the
/// union bounds of `release/derived.rs`), read off one convolution and
/// remembered per process: a pure function of public parameters, which
/// every fleet stream and group with the same noise would otherwise
/// convolve again (≈ 0.1 s of CPU each for a wide Laplace noise).
pub fn sum_half_widths(noise: &Noise, copies: usize) -> [f64; 3] {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Known = HashMap<(String, usize), [f64; 3]>;
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    let key = match noise {
        Noise::Exact => "exact".to_string(),
        Noise::Laplace(d) => format!("laplace {}", d.scale()),
        Noise::Gaussian(d) => format!("gaussian {}", d.sigma2()),
    };
    let known = KNOWN.get_or_init(Default::default);
    if let Some(w) = known
        .lock()
        .ok()
        .and_then(|m| m.get(&(key.clone(), copies)).copied())
    {
        return w;
    }
    let levels = [LEVEL, 1.0 - 0.05 / 2.0, 1.0 - 0.05 / 3.0];
    let w = match convolved(noise, copies) {
        None => levels.map(|l| half_width_at(noise, l) as f64),
        Some(sum) => levels.map(|l| sum.half_width_at(l)),
    };
    if let Ok(mut m) = known.lock() {
        m.insert((key, copies), w);
    }
    w
}

/// [`sum_half_width`] at coverage `level`.
pub fn sum_half_width_at(noise: &Noise, copies: usize, level: f64) -> f64 {
    match convolved(noise, copies) {
        None => half_width_at(noise, level) as f64,
        Some(sum) => sum.half_width_at(level),
    }
}

/// The cells' distribution of a sum of `m` copies (`g`: the cell width).
struct Convolved {
    g: f64,
    m: usize,
    dist: Vec<f64>,
}

/// The sum's distribution, or `None` where the single draw's own
/// half-width is the answer (one copy, or exact noise).
fn convolved(noise: &Noise, copies: usize) -> Option<Convolved> {
    if copies <= 1 || matches!(noise, Noise::Exact) {
        return None;
    }
    let g = cell_width(noise.scale_f64(), copies);
    let single = cells(noise, g);
    Some(Convolved {
        g,
        m: copies,
        dist: power(&single, copies),
    })
}

impl Convolved {
    /// The half-width at coverage `level`.
    fn half_width_at(&self, level: f64) -> f64 {
        let (g, copies, dist) = (self.g, self.m, &self.dist);
        // The cells' rounding: at most m·r in all, or with probability
        // ≥ 1 − δ' at most r·√(2m·ln(2/δ')) (Hoeffding: the R's are independent,
        // symmetric and within ±r), whichever is smaller; δ' is then asked of ΣQ.
        let r = (g - 1.0) / 2.0;
        let m = copies as f64;
        let hoeffding = r * (2.0 * m * (2.0 / ROUNDING_DELTA).ln()).sqrt();
        let (rounding, target) = if g > 1.0 && hoeffding < m * r {
            (hoeffding, level + ROUNDING_DELTA)
        } else {
            (m * r, level)
        };
        let centre = dist.len() / 2;
        let mut mass = dist[centre];
        let mut h = 0usize;
        while mass < target + MARGIN && h < centre {
            h += 1;
            mass += dist[centre - h] + dist[centre + h];
        }
        g * h as f64 + rounding
    }
}

/// Variance of the sum of `copies` draws, in the noise's units².
pub fn sum_variance(noise: &Noise, copies: usize) -> f64 {
    noise.variance() * copies as f64
}

/// Odd cell width `g` with `scale/g ≥ T` (1: exact lattice). An integer
/// in f64: above 2⁵³ "odd" is approximate, the cell still within `g/2`.
fn cell_width(scale: f64, copies: usize) -> f64 {
    let t = (2048.0 / (copies as f64).sqrt()).clamp(32.0, 64.0);
    let g = (scale / t).floor();
    if g < 2.0 {
        1.0
    } else if g % 2.0 == 0.0 {
        g - 1.0
    } else {
        g
    }
}

/// Masses of the cells `[c·g − r, c·g + r]` (`r = (g − 1)/2`), `c` from
/// `−C` to `C`, index `c + C`, until the tail beyond is below [`TRIM`].
fn cells(noise: &Noise, g: f64) -> Vec<f64> {
    let r = (g - 1.0) / 2.0;
    let mut half: Vec<f64> = Vec::new(); // cells 0, 1, 2, …
    match noise {
        Noise::Exact => half.push(1.0),
        Noise::Laplace(d) => {
            let t = d.scale_f64();
            let q = (-1.0 / t).exp();
            // P(Z ≥ a) = r^a/(1 + q) for a ≥ 1; cell 0 holds [−r, r].
            let tail = |a: f64| (-a / t).exp() / (1.0 + q);
            half.push(1.0 - 2.0 * tail(r + 1.0));
            let mut c = 1.0;
            loop {
                let (a, b) = (c * g - r, c * g + r);
                half.push(tail(a) - tail(b + 1.0));
                if tail(b + 1.0) < TRIM {
                    break;
                }
                c += 1.0;
            }
        }
        Noise::Gaussian(dg) => {
            let sigma = dg.sigma_f64();
            if g == 1.0 && sigma <= 1000.0 {
                let norm = dg.normaliser();
                let mut x = 0i128;
                loop {
                    let w = dg.weight(x) / norm;
                    half.push(w);
                    if x as f64 > 8.0 * sigma + 2.0 && w < TRIM * 1e-3 {
                        break;
                    }
                    x += 1;
                }
            } else {
                // Midpoint rule on the lattice (the discrete Gaussian's mass
                // of [a, b] is the normal's of [a − ½, b + ½] within
                // 10⁻²/σ², see accuracy.rs; σ > 1000 or cells of ≥ 4σ/T).
                let s = sigma * std::f64::consts::SQRT_2;
                let above = |x: f64| 0.5 * libm::erfc(x / s);
                half.push(1.0 - 2.0 * above(r + 0.5));
                let mut c = 1.0;
                loop {
                    let (a, b) = (c * g - r - 0.5, c * g + r + 0.5);
                    half.push(above(a) - above(b));
                    if above(b) < TRIM {
                        break;
                    }
                    c += 1.0;
                }
            }
        }
    }
    let mut full: Vec<f64> = half.iter().skip(1).rev().copied().collect();
    full.extend(half);
    full
}

/// `a * b`, both symmetric around their middle, tails cut at [`TRIM`]
/// (symmetrically, so the middle stays the middle).
fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; a.len() + b.len() - 1];
    for (i, &x) in a.iter().enumerate() {
        if x == 0.0 {
            continue;
        }
        for (o, &y) in out[i..].iter_mut().zip(b) {
            *o += x * y;
        }
    }
    let (mut cut, mut tail) = (0usize, 0.0);
    while cut + 1 < out.len() / 2 && tail + out[cut] < TRIM {
        tail += out[cut];
        cut += 1;
    }
    out.drain(..cut);
    out.truncate(out.len() - cut);
    out
}

/// The `copies`-fold convolution by squaring.
fn power(single: &[f64], copies: usize) -> Vec<f64> {
    let (mut result, mut base, mut k) = (vec![1.0], single.to_vec(), copies);
    while k > 0 {
        if k & 1 == 1 {
            result = convolve(&result, &base);
        }
        k >>= 1;
        if k > 0 {
            base = convolve(&base, &base);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::half_width;
    use crate::rational::exact;
    use crate::sampler::{DiscreteGaussian, DiscreteLaplace};

    fn laplace(t: f64) -> Noise {
        Noise::Laplace(DiscreteLaplace::new(&exact(t)))
    }

    fn gaussian(sigma: f64) -> Noise {
        Noise::Gaussian(DiscreteGaussian::new(&exact(sigma * sigma)))
    }

    /// The three levels read off one convolution (and remembered) are
    /// exactly the half-widths convolved for each level alone.
    #[test]
    fn the_remembered_levels_are_each_level_convolved_alone() {
        let noises = [laplace(3.0), laplace(5000.0), gaussian(2.0), gaussian(3e4)];
        for n in noises.iter().chain([&Noise::Exact]) {
            for copies in [1, 2, 3, 4, 7] {
                let alone = [0.95, 1.0 - 0.05 / 2.0, 1.0 - 0.05 / 3.0]
                    .map(|l| sum_half_width_at(n, copies, l));
                assert_eq!(sum_half_widths(n, copies), alone, "{n:?} × {copies}");
                assert_eq!(sum_half_widths(n, copies), alone, "remembered");
                assert!(alone[0] <= alone[1] && alone[1] <= alone[2]);
            }
        }
    }

    /// One copy is the single draw's exact half-width; the cells of one
    /// copy hold all its mass.
    #[test]
    fn one_copy_is_the_single_half_width() {
        for n in [laplace(3.0), laplace(5000.0), gaussian(2.0), gaussian(3e4)] {
            assert_eq!(sum_half_width(&n, 1), half_width(&n) as f64);
            for g in [1.0, cell_width(n.scale_f64(), 2)] {
                let total: f64 = cells(&n, g).iter().sum();
                assert!((total - 1.0).abs() < 1e-9, "{n:?} g={g}: {total}");
            }
        }
    }

    /// On the exact lattice, two Laplace copies: the convolution by hand.
    #[test]
    fn two_laplace_copies_match_a_direct_sum() {
        let n = laplace(4.0);
        let Noise::Laplace(d) = &n else {
            unreachable!()
        };
        let p = |k: i128| d.pmf(k);
        let cover = |h: i128| {
            (-h..=h)
                .map(|s| (-400..=400).map(|k| p(k) * p(s - k)).sum::<f64>())
                .sum::<f64>()
        };
        let h = sum_half_width(&n, 2) as i128;
        assert!(cover(h) >= LEVEL, "{}", cover(h));
        assert!(cover(h - 1) < LEVEL, "not the smallest: {}", cover(h - 1));
    }

    /// Cells never narrow the lattice-exact width and stay within 1.5% of
    /// it where both can be computed.
    #[test]
    fn cells_are_conservative_and_close() {
        for copies in [2, 4, 9, 40] {
            let n = laplace(300.0);
            let g = cell_width(300.0, copies);
            assert!(g > 1.0);
            let exact_lattice = {
                let dist = power(&cells(&n, 1.0), copies);
                let c = dist.len() / 2;
                let (mut m, mut h) = (dist[c], 0);
                while m < LEVEL {
                    h += 1;
                    m += dist[c - h] + dist[c + h];
                }
                h as f64
            };
            let w = sum_half_width(&n, copies);
            assert!(w >= exact_lattice, "m={copies}: {w} < {exact_lattice}");
            assert!(
                w <= exact_lattice * 1.015,
                "m={copies}: {w} vs {exact_lattice}"
            );
        }
    }

    /// Large scales and many copies stay quick and near the normal width
    /// (Gaussian copies sum to a Gaussian); Laplace sums of many copies
    /// likewise approach it from above.
    #[test]
    fn large_gaussian_sums_are_near_normal() {
        for (sigma, copies) in [(1e6, 2), (5e3, 64), (40.0, 200), (1e9, 300), (1e4, 4096)] {
            let started = std::time::Instant::now();
            let w = sum_half_width(&gaussian(sigma), copies);
            let normal = 1.959964 * sigma * (copies as f64).sqrt();
            assert!(w >= normal * 0.999, "{sigma} × {copies}: {w} < {normal}");
            assert!(w <= normal * 1.04, "{sigma} × {copies}: {w} vs {normal}");
            println!(
                "{sigma} × {copies}: {w} vs {normal} in {:?}",
                started.elapsed()
            );
        }
        for (t, copies) in [(1e5, 64), (30.0, 1000)] {
            let started = std::time::Instant::now();
            let n = laplace(t);
            let w = sum_half_width(&n, copies);
            let normal = 1.959964 * (n.variance() * copies as f64).sqrt();
            assert!(w >= normal, "{t} × {copies}: {w} < {normal}");
            assert!(w <= normal * 1.06, "{t} × {copies}: {w} vs {normal}");
            println!("{t} × {copies}: {w} vs {normal} in {:?}", started.elapsed());
        }
    }
}
