//! *Programming Differential Privacy*'s way of choosing bounds (docs/DESIGN.md §10), kept beside the advisor's
//! AboveThreshold scans ([`crate::advise`]) so the two can be compared on
//! the same samples (`benches/utility`, docs/performance.md, "The bounds advisor"): noisy
//! clipped sums over growing, log-spaced bounds, taking the bound where the
//! curve stops rising.
//!
//! Method. Per side (`s = +1` for `upper`, `−1` for `lower`) and candidate
//! `c = 2^j` ([`MIN_EXP`]`..=`[`MAX_EXP`]), the statistic is
//! `U(c) = Σ ⌊min(max(s·x, 0), c) / c · 2^20⌋`, the sum of the readings'
//! side clipped at `c`, in units of `c/2^20`, released as
//! `T(c) = c·(U(c) + noise)/2^20`. The proposal on a side is the first `c`
//! after which the curve rises by no more than the coverage allowance of
//! the sum plus twice the two candidates' noise scales (a rise the noise
//! could explain); a side without readings proposes the smallest candidate.
//!
//! Privacy argument. Each term is an integer in `[0, 2^20]` computed from
//! one reading alone, and a device has at most `k` readings in the sample,
//! so `U(c)` moves by at most `k·2^20` between neighbours (add-remove or
//! change-one). The `2·J` released sums (`J` candidates per side) share
//! `2ε/5` per side evenly: each has discrete Laplace noise of scale
//! `k·2^20/(2ε/(5J))`. With the noisy size and clamp count of
//! [`crate::advise`] (ε/5 each) sequential composition gives ε (pure DP).

use crate::advise::{finish, prepare, Advice, AdviseError, AdviseSpec, MAX_EXP, MIN_EXP};
use crate::sampler::DiscreteLaplace;
use rand::Rng;

/// A term's units per candidate: `c / 2^20`.
const UNITS: f64 = (1u64 << 20) as f64;

/// The side's proposal (a magnitude `c ≥ 0`) from its noisy curve.
fn side<R: Rng + ?Sized>(rng: &mut R, sorted: &[f64], sign: f64, spec: &AdviseSpec) -> f64 {
    let k = spec.max_readings_per_device as f64;
    let grid: Vec<f64> = (MIN_EXP..=MAX_EXP).map(|j| 2f64.powi(j)).collect();
    let eps_q = 2.0 * spec.epsilon / 5.0 / grid.len() as f64;
    let noise = DiscreteLaplace::at_least(k * UNITS / eps_q);
    // (T(c), the noise scale in value units) per candidate.
    let curve: Vec<(f64, f64)> = grid
        .iter()
        .map(|&c| {
            let u: i128 = sorted
                .iter()
                .map(|&x| ((sign * x).max(0.0).min(c) / c * UNITS).floor() as i128)
                .sum();
            let t = c * (u + noise.sample(rng)) as f64 / UNITS;
            (t, c * k / eps_q)
        })
        .collect();
    let share = (1.0 - spec.coverage) / 2.0;
    curve
        .windows(2)
        .position(|w| w[1].0 - w[0].0 <= share * w[1].0.max(0.0) + 2.0 * (w[0].1 + w[1].1))
        .map_or(grid[grid.len() - 1], |i| grid[i])
}

/// Propose bounds for `values` by noisy clipped sums, spending
/// `spec.epsilon` (module doc).
pub fn advise_by_sums<R: Rng + ?Sized>(
    rng: &mut R,
    values: &[f64],
    spec: &AdviseSpec,
) -> Result<Advice, AdviseError> {
    let (sorted, n_hat) = prepare(rng, values, spec)?;
    let upper = side(rng, &sorted, 1.0, spec);
    let lower = -side(rng, &sorted, -1.0, spec);
    Ok(finish(rng, &sorted, lower, upper, n_hat, spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    /// A term is an integer in [0, 2^20] of one reading alone: the bound
    /// the sensitivity rests on, over readings of every magnitude and sign.
    #[test]
    fn terms_stay_in_their_range() {
        for x in [-1e300f64, -3.0, -0.0, 0.0, 1e-300, 0.7, 20.0, 1e18, 1e300] {
            for j in MIN_EXP..=MAX_EXP {
                let c = 2f64.powi(j);
                for sign in [1.0, -1.0] {
                    let t = ((sign * x).max(0.0).min(c) / c * UNITS).floor();
                    assert!((0.0..=UNITS).contains(&t), "{x} {c}");
                }
            }
        }
    }

    #[test]
    fn it_brackets_plain_data_and_refuses_bad_settings() {
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let values: Vec<f64> = (0..20_000).map(|i| -10.0 + (i % 41) as f64).collect();
        let a = advise_by_sums(
            &mut rng,
            &values,
            &AdviseSpec {
                epsilon: 1.0,
                max_readings_per_device: 1,
                coverage: 0.99,
            },
        )
        .unwrap();
        assert!(a.lower <= -8.0 && a.upper >= 28.0, "{a:?}");
        assert!(a.lower >= -64.0 && a.upper <= 128.0, "{a:?}");
        let bad = AdviseSpec {
            epsilon: 0.0,
            max_readings_per_device: 1,
            coverage: 0.99,
        };
        assert!(advise_by_sums(&mut rng, &values, &bad).is_err());
    }
}
