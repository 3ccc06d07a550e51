//! Sample-and-aggregate (*Programming Differential Privacy*, docs/DESIGN.md §10) for a robust statistic: the trimmed
//! mean of a window, computed on `m` disjoint blocks of devices and
//! released as the noisy mean of the blocks' estimates.
//!
//! Privacy argument. A device's readings all fall in one block (blocks are
//! chosen by a keyed hash of the device, not by the data), so adding,
//! removing or changing one device changes one block's estimate, which is
//! clamped to the universe `[lo, hi]`: the mean of the `m` estimates moves
//! by at most `(hi − lo)/m` — whatever the statistic computed per block, so
//! it need not have bounded global sensitivity itself. Discrete Laplace
//! noise of scale `(hi − lo)/(m·ε)` on the integer grid gives ε-DP (pure),
//! for both neighbouring relations (`m` is public; an empty block's
//! estimate is the universe's midpoint, a public constant).
//! `tests/aggregate_bruteforce.rs` checks the bound on every small input and
//! audits the release.

use crate::sampler::DiscreteLaplace;
use rand::Rng;

/// The trimmed mean of `values` (grid units): the mean after dropping
/// `⌊trim·n⌋` readings from each end; an empty block gives `midpoint`.
pub fn trimmed_mean(values: &mut [i64], trim: f64, midpoint: i64) -> f64 {
    if values.is_empty() {
        return midpoint as f64;
    }
    values.sort_unstable();
    let cut = ((values.len() as f64) * trim).floor() as usize;
    let kept = &values[cut.min(values.len() / 2)..values.len() - cut.min((values.len() - 1) / 2)];
    kept.iter().map(|&v| v as f64).sum::<f64>() / kept.len() as f64
}

/// The blocks' estimates: `blocks[b]` holds the readings of the devices
/// whose block is `b` (the caller assigns a device's readings to
/// `block_of(device) < m`); each estimate clamped to `[lo, hi]`.
pub fn estimates(blocks: &mut [Vec<i64>], trim: f64, lo: i64, hi: i64) -> Vec<f64> {
    let mid = lo + (hi - lo) / 2;
    blocks
        .iter_mut()
        .map(|b| trimmed_mean(b, trim, mid).clamp(lo as f64, hi as f64))
        .collect()
}

/// The exact (noiseless) aggregate: the mean of the estimates.
pub fn aggregate(estimates: &[f64]) -> f64 {
    estimates.iter().sum::<f64>() / estimates.len().max(1) as f64
}

/// The released aggregate (grid units, rounded to the grid before noise):
/// ε-DP with `m = estimates.len()` blocks on `[lo, hi]`.
pub fn release<R: Rng + ?Sized>(
    rng: &mut R,
    estimates: &[f64],
    lo: i64,
    hi: i64,
    epsilon: f64,
) -> i64 {
    assert!(epsilon > 0.0 && !estimates.is_empty() && hi >= lo);
    let m = estimates.len() as f64;
    // Rounding moves the mean by < 1/2 before noise: the sensitivity of the
    // rounded value is at most (hi − lo)/m + 1.
    let sensitivity = (hi - lo) as f64 / m + 1.0;
    let noise = DiscreteLaplace::at_least(sensitivity / epsilon).sample(rng);
    (aggregate(estimates).round() as i128 + noise) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_means() {
        assert_eq!(trimmed_mean(&mut [], 0.1, 7), 7.0);
        assert_eq!(trimmed_mean(&mut [1, 2, 3, 100], 0.25, 0), 2.5);
        assert_eq!(trimmed_mean(&mut [5], 0.4, 0), 5.0);
        assert_eq!(trimmed_mean(&mut [1, 2, 3, 4, 1000], 0.2, 0), 3.0);
    }
}
