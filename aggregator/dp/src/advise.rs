//! The private bounds advisor: proposes a stream's `lower` and `upper` from
//! a sample of its readings without looking at the data non-privately
//! (*Programming Differential Privacy*: choosing clipping bounds from the data is itself a release).
//!
//! Method. Candidates are a signed log grid (`±2^j` for `j` in
//! [`MIN_EXP`]`..=`[`MAX_EXP`], and 0). A noisy count of the sample `n̂`
//! sets the tail each side may leave out, `τ = n̂·(1 − coverage)/4` (half
//! the allowance per side, and half again as margin against the scan's
//! noise). Then, per side, an AboveThreshold (sparse vector) scan: upward
//! for `upper`, the count of readings above each candidate; downward for
//! `lower`, the count below; the first candidate whose noisy count is at or
//! below the noisy `τ` is proposed. Last, a noisy count of the readings
//! outside the proposal estimates the clamp rate.
//!
//! Privacy argument. A device contributes at most `k` readings to the sample
//! (the caller keeps each device's first `k`), so every count moves by at
//! most `Δ = k` between neighbours (add-remove; change-one moves a count by
//! at most `k` too). The budget `ε` is split: `ε/5` for `n̂` (discrete
//! Laplace `Δ/(ε/5)`), `2ε/5` per scan and the remainder for the clamp
//! count. Each scan is AboveThreshold with threshold noise `2Δ/ε_s` and
//! query noise `4Δ/ε_s` (Dwork & Roth, Alg. 1: ε_s-DP whatever the number
//! of candidates, as it releases only the stopping index), with discrete
//! Laplace noise, whose ratio bounds are those of the continuous one. Sequential
//! composition gives ε in total (pure DP); the caller charges it.

use crate::sampler::DiscreteLaplace;
use rand::Rng;

/// Smallest and largest power of two on the candidate grid.
pub const MIN_EXP: i32 = -20;
pub const MAX_EXP: i32 = 60;

/// What the advisor is asked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdviseSpec {
    /// ε the advisor spends (pure DP), in (0, 100].
    pub epsilon: f64,
    /// `k`: most readings one device has in the sample.
    pub max_readings_per_device: u32,
    /// Share of readings the proposed bounds should cover, in [0.5, 0.9999].
    pub coverage: f64,
}

/// The advisor's proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    pub lower: f64,
    pub upper: f64,
    /// A round resolution giving about 10⁴ steps between the bounds.
    pub resolution: f64,
    /// Noisy number of readings in the sample.
    pub readings: i128,
    /// Noisy share of the sample outside the proposal (the clamp rate the
    /// stream would see on data like the sample), clamped to [0, 1].
    pub clamp_rate: f64,
}

/// Why the advisor cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdviseError {
    #[error("advise: epsilon must be in (0, 100], got {0}")]
    Epsilon(f64),
    #[error("advise: coverage must be in [0.5, 0.9999], got {0}")]
    Coverage(f64),
    #[error("advise: max_readings_per_device must be in [1, 10000], got {0}")]
    Readings(u32),
}

/// The candidate grid, ascending.
pub fn candidates() -> Vec<f64> {
    let pos: Vec<f64> = (MIN_EXP..=MAX_EXP).map(|j| 2f64.powi(j)).collect();
    pos.iter()
        .rev()
        .map(|x| -x)
        .chain([0.0])
        .chain(pos.iter().copied())
        .collect()
}

/// AboveThreshold over `counts` (one per candidate, in scan order): the
/// first index whose noisy count is at or below the noisy `tau` (the last
/// one if none is).
fn scan<R: Rng + ?Sized>(rng: &mut R, counts: &[i128], tau: i128, delta: f64, eps: f64) -> usize {
    let threshold = tau + DiscreteLaplace::at_least(2.0 * delta / eps).sample(rng);
    let query = DiscreteLaplace::at_least(4.0 * delta / eps);
    counts
        .iter()
        .position(|&c| c + query.sample(rng) <= threshold)
        .unwrap_or(counts.len() - 1)
}

/// A round resolution (1, 2 or 5 × 10^m) giving at most 10⁴ steps between
/// `lower` and `upper`.
pub fn round_resolution(lower: f64, upper: f64) -> f64 {
    let raw = ((upper - lower) / 1e4).max(1e-9);
    let m = raw.log10().floor();
    let base = 10f64.powf(m);
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|f| f * base)
        .find(|&r| r >= raw)
        .unwrap_or(10.0 * base)
}

/// `units × resolution`, written with no more decimals than the resolution
/// has (so `0.3` is printed as `0.3`, not `0.30000000000000004`).
fn on_grid(units: f64, resolution: f64) -> f64 {
    let decimals = (-resolution.log10().floor()).max(0.0) as usize;
    format!("{:.*}", decimals, units * resolution)
        .parse()
        .unwrap_or(units * resolution)
}

/// Propose bounds for `values` (each device's first `k` readings, in any
/// order), spending `spec.epsilon`.
pub fn advise<R: Rng + ?Sized>(
    rng: &mut R,
    values: &[f64],
    spec: &AdviseSpec,
) -> Result<Advice, AdviseError> {
    let (sorted, n_hat) = prepare(rng, values, spec)?;
    let (delta, eps) = (spec.max_readings_per_device as f64, spec.epsilon);
    let tau = ((n_hat.max(0) as f64) * (1.0 - spec.coverage) / 4.0).floor() as i128;
    let grid = candidates();
    // Readings above each candidate (ascending grid, scanned upwards).
    let above: Vec<i128> = grid
        .iter()
        .map(|&c| (sorted.len() - sorted.partition_point(|&x| x <= c)) as i128)
        .collect();
    let upper = grid[scan(rng, &above, tau, delta, 2.0 * eps / 5.0)];
    // Readings below each candidate, scanned downwards.
    let below: Vec<i128> = grid
        .iter()
        .rev()
        .map(|&c| sorted.partition_point(|&x| x < c) as i128)
        .collect();
    let lower = grid[grid.len() - 1 - scan(rng, &below, tau, delta, 2.0 * eps / 5.0)];
    Ok(finish(rng, &sorted, lower, upper, n_hat, spec))
}

/// Check the settings; the sample's finite readings sorted, and its noisy
/// size (ε/5 of the budget).
pub(crate) fn prepare<R: Rng + ?Sized>(
    rng: &mut R,
    values: &[f64],
    spec: &AdviseSpec,
) -> Result<(Vec<f64>, i128), AdviseError> {
    if !(spec.epsilon.is_finite() && spec.epsilon > 0.0 && spec.epsilon <= 100.0) {
        return Err(AdviseError::Epsilon(spec.epsilon));
    }
    if !(0.5..=0.9999).contains(&spec.coverage) {
        return Err(AdviseError::Coverage(spec.coverage));
    }
    if !(1..=10_000).contains(&spec.max_readings_per_device) {
        return Err(AdviseError::Readings(spec.max_readings_per_device));
    }
    let delta = spec.max_readings_per_device as f64;
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as i128;
    let n_hat = n + DiscreteLaplace::at_least(delta / (spec.epsilon / 5.0)).sample(rng);
    Ok((sorted, n_hat))
}

/// Turn chosen bounds into the proposal: a band when they cross, rounded
/// outwards onto the resolution's grid (the plan must accept it), and the
/// noisy clamp count at the rounded bounds (the last ε/5).
pub(crate) fn finish<R: Rng + ?Sized>(
    rng: &mut R,
    sorted: &[f64],
    lower: f64,
    upper: f64,
    n_hat: i128,
    spec: &AdviseSpec,
) -> Advice {
    let (lower, upper) = if lower < upper {
        (lower, upper)
    } else {
        // Every reading on one grid point: a band around it.
        (upper.min(lower) - 1.0, upper.max(lower) + 1.0)
    };
    let resolution = round_resolution(lower, upper);
    let (lower, upper) = (
        on_grid((lower / resolution).floor(), resolution),
        on_grid((upper / resolution).ceil(), resolution),
    );
    let outside = sorted.partition_point(|&x| x < lower)
        + (sorted.len() - sorted.partition_point(|&x| x <= upper));
    let delta = spec.max_readings_per_device as f64;
    let noisy_out =
        outside as i128 + DiscreteLaplace::at_least(delta / (spec.epsilon / 5.0)).sample(rng);
    let clamp_rate = if n_hat > 0 {
        (noisy_out as f64 / n_hat as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    Advice {
        lower,
        upper,
        resolution,
        readings: n_hat,
        clamp_rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn spec() -> AdviseSpec {
        AdviseSpec {
            epsilon: 1.0,
            max_readings_per_device: 1,
            coverage: 0.99,
        }
    }

    #[test]
    fn the_grid_is_ascending_and_symmetric() {
        let g = candidates();
        assert!(g.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(g.len(), 2 * (MAX_EXP - MIN_EXP + 1) as usize + 1);
        assert_eq!(g[g.len() / 2], 0.0);
    }

    #[test]
    fn round_resolutions() {
        assert_eq!(round_resolution(0.0, 100.0), 0.01);
        assert_eq!(round_resolution(-40.0, 85.0), 0.02);
        assert_eq!(round_resolution(0.0, 3e6), 500.0);
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for s in [
            AdviseSpec {
                epsilon: 0.0,
                ..spec()
            },
            AdviseSpec {
                epsilon: f64::NAN,
                ..spec()
            },
            AdviseSpec {
                coverage: 1.0,
                ..spec()
            },
            AdviseSpec {
                max_readings_per_device: 0,
                ..spec()
            },
        ] {
            assert!(advise(&mut rng, &[1.0], &s).is_err(), "{s:?}");
        }
    }

    /// Every proposal is a universe the plan accepts (on the grid of its
    /// resolution), whatever the data: a proposal of `lower = 0.5` with
    /// `resolution = 1000` was refused by the plan it was printed with.
    #[test]
    fn proposals_are_on_their_grid() {
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let samples: Vec<Vec<f64>> = vec![
            (0..3000).map(|i| 20.0 + (i % 97) as f64 * 0.13).collect(),
            (0..500).map(|i| -3.3 + (i % 7) as f64 * 0.01).collect(),
            (0..2000).map(|i| 1.5f64.powi(i % 40)).collect(),
            vec![0.3; 100],
            vec![],
        ];
        for values in &samples {
            for _ in 0..200 {
                let a = advise(&mut rng, values, &spec()).unwrap();
                crate::universe::Universe::new(a.lower, a.upper, a.resolution)
                    .unwrap_or_else(|e| panic!("{a:?}: {e}"));
                let steps = (a.upper - a.lower) / a.resolution;
                assert!(steps <= 10_002.0, "{a:?}");
            }
        }
    }

    #[test]
    fn grid_values_print_short() {
        assert_eq!(on_grid(3.0, 0.1).to_string(), "0.3");
        assert_eq!(on_grid(-7.0, 1000.0).to_string(), "-7000");
        assert_eq!(on_grid(1.0, 0.0002).to_string(), "0.0002");
    }

    /// Constant data still gets an interval that holds it.
    #[test]
    fn one_value_gets_a_band() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let a = advise(&mut rng, &vec![7.0; 5_000], &spec()).unwrap();
        assert!(
            a.lower <= 7.0 && 7.0 <= a.upper && a.lower < a.upper,
            "{a:?}"
        );
    }
}
