//! Local sensitivity of the median (*Programming Differential Privacy*, docs/DESIGN.md §10) and propose-test-release.
//!
//! For `n` readings sorted `x_1 ≤ … ≤ x_n` on the universe `[lo, hi]` (grid
//! units) and the lower median `x_m`, `m = ⌈n/2⌉`, under change-one
//! (neighbours differ in one reading, `n` fixed): the local sensitivity at
//! distance `k` — the largest local sensitivity of any window that differs
//! from `x` in at most `k` readings — is
//! `A⁽ᵏ⁾(x) = max_{0 ≤ t ≤ k+1} (x_{m+t} − x_{m+t−k−1})`, with `x_i = lo`
//! below the data and `hi` above it (Nissim, Raskhodnikova & Smith 2007).
//! `tests/local_bruteforce.rs` checks it against the definition on every
//! window of small universes, and that the smooth sensitivity
//! `S_β(x) = max_k e^{−kβ} A⁽ᵏ⁾(x)` is an upper bound on the local
//! sensitivity that changes by at most `e^β` between neighbours — the
//! properties that make smooth sensitivity and PTR safe.
//!
//! Propose-test-release ([`ptr_median`], Dwork & Lei 2009). Privacy
//! argument: the distance `γ(x)` to the nearest window whose local
//! sensitivity exceeds the proposed bound `b` changes by at most 1 between
//! neighbours, so testing `γ + Lap(1/ε) > ln(1/δ)/ε` is ε-DP; if it passes
//! and the local sensitivity were above `b`, `γ = 0` and the test passes
//! with probability at most δ/2; otherwise the median moves by at most `b`
//! between the neighbours in question and `+ Lap(b/ε)` is ε-DP. In all,
//! (2ε, δ)-DP. Noise is discrete Laplace on the integer grid (exact).
//!
//! Where these stand: `benches/utility` compares PTR's median with the
//! default exponential-mechanism quantile on the same data;
//! docs/performance.md records why FleetDP does not default to it. Neither is a
//! `quantile_mechanism` option of the service.

use crate::sampler::DiscreteLaplace;
use rand::Rng;

/// The lower median's index (0-based) of `n` readings.
pub fn median_index(n: usize) -> usize {
    n.div_ceil(2) - 1
}

/// `A⁽ᵏ⁾(x)` of the lower median for sorted `x` on `[lo, hi]`.
pub fn ls_at_distance(sorted: &[i64], lo: i64, hi: i64, k: usize) -> i64 {
    let n = sorted.len() as i64;
    if n == 0 {
        return hi - lo;
    }
    // 1-based order statistics, padded with the universe's bounds.
    let at = |i: i64| -> i64 {
        if i < 1 {
            lo
        } else if i > n {
            hi
        } else {
            sorted[(i - 1) as usize]
        }
    };
    let m = median_index(sorted.len()) as i64 + 1;
    let k = k as i64;
    (0..=k + 1)
        .map(|t| at(m + t) - at(m + t - k - 1))
        .max()
        .unwrap_or(0)
}

/// The local sensitivity (`A⁽⁰⁾`).
pub fn local_sensitivity(sorted: &[i64], lo: i64, hi: i64) -> i64 {
    ls_at_distance(sorted, lo, hi, 0)
}

/// `S_β(x) = max_k e^{−kβ} A⁽ᵏ⁾(x)`; `k` stops where `e^{−kβ}·(hi − lo)`
/// cannot beat the maximum so far (or at `n + 1`, where `A⁽ᵏ⁾ = hi − lo`).
pub fn smooth_sensitivity(sorted: &[i64], lo: i64, hi: i64, beta: f64) -> f64 {
    let mut best = 0.0f64;
    for k in 0..=sorted.len() + 1 {
        let weight = (-(k as f64) * beta).exp();
        if weight * ((hi - lo) as f64) <= best {
            break;
        }
        best = best.max(weight * ls_at_distance(sorted, lo, hi, k) as f64);
    }
    best
}

/// `γ(x)`: the fewest changed readings that make the local sensitivity
/// exceed `b` (`n + 1` changes always reach `hi − lo`).
pub fn distance_to_unstable(sorted: &[i64], lo: i64, hi: i64, b: i64) -> usize {
    (0..=sorted.len() + 1)
        .find(|&k| ls_at_distance(sorted, lo, hi, k) > b)
        .unwrap_or(sorted.len() + 2)
}

/// Propose-test-release of the lower median with proposed bound `b` (grid
/// units): `None` when the test refuses; (2ε, δ)-DP (module doc).
pub fn ptr_median<R: Rng + ?Sized>(
    rng: &mut R,
    sorted: &[i64],
    lo: i64,
    hi: i64,
    b: i64,
    epsilon: f64,
    delta: f64,
) -> Option<i64> {
    assert!(epsilon > 0.0 && delta > 0.0 && delta < 1.0 && b >= 1 && !sorted.is_empty());
    let gamma = distance_to_unstable(sorted, lo, hi, b) as i128;
    let noisy = gamma + DiscreteLaplace::at_least(1.0 / epsilon).sample(rng);
    // Pass iff the noisy distance exceeds ln(1/δ)/ε (integer comparison).
    if (noisy as f64) <= (1.0 / delta).ln() / epsilon {
        return None;
    }
    let m = sorted[median_index(sorted.len())];
    Some((m as i128 + DiscreteLaplace::at_least(b as f64 / epsilon).sample(rng)) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_values() {
        // 1 2 3 4 5 on [0, 10]: median 3 (index 2).
        let x = [1, 2, 3, 4, 5];
        assert_eq!(local_sensitivity(&x, 0, 10), 1);
        // k = 1: max over t of x_{3+t} − x_{1+t}: 3−1, 4−2, 5−3 → 2.
        assert_eq!(ls_at_distance(&x, 0, 10, 1), 2);
        // k = 5 reaches both bounds.
        assert_eq!(ls_at_distance(&x, 0, 10, 5), 10);
        assert_eq!(distance_to_unstable(&x, 0, 10, 1), 1);
        // Dense data: a constant window is stable for a while.
        let c = [5; 9];
        assert_eq!(distance_to_unstable(&c, 0, 10, 0), 4);
    }
}
