//! Running totals under continual observation: after every window, the sum
//! of all windows so far, with noise whose error grows slowly in time.
//!
//! zCDP — the factorization mechanism with a Buffered Linear Toeplitz (BLT)
//! strategy (Dvijotham et al. 2024; McMahan et al. 2024). The prefix-sum
//! matrix is factored `A = B·C` with `C` lower-triangular Toeplitz,
//! `c₀ = 1, cᵢ = Σⱼ ωⱼ θⱼ^(i−1)`, and the release is `A·x + B·z` =
//! `B·(C·x + z)`, post-processing of the Gaussian mechanism on `C·x`.
//! Noise is produced online with `d` buffers: `u = C⁻¹z` solves `C·u = z`
//! (`uₜ = zₜ − Σⱼ ωⱼ Sⱼ`, `Sⱼ ← θⱼ Sⱼ + uₜ`) and the noise of the running total
//! is `Σ_{s≤t} u_s`.
//!
//! Sensitivity. With `0 < θⱼ < 1`, `ωⱼ > 0` and `Σ ωⱼ ≤ 1`, the `cᵢ` are
//! positive and non-increasing, so the columns' inner products
//! `⟨C eₛ, C eₛ₊ₘ⟩ ≤ G(m) = Σᵢ cᵢ cᵢ₊ₘ` (closed form, infinite stream) are
//! non-negative and `G` is non-increasing in `m`. A device changes at most
//! `W` windows per horizon, each by a vector of L2 norm ≤ `L` (the window
//! statistic's L2 sensitivity); for windows `s₁ < … < s_W`, `|sₐ − s_b| ≥
//! |a − b|`, so `‖C·Δ‖² ≤ L² Σ_{a,b} G(|a − b|) = L² (W·G(0) + 2 Σ_{m<W} (W−m)
//! G(m))`, whatever the stream length: calibrated once, private for an
//! unbounded stream. Tests check this bound against the materialised
//! matrices by brute force.
//!
//! Floating point. The buffers run in f64 but see only `z` — never data —
//! so their rounding errors carry no information about the data; the noise
//! is rounded to the integer grid and added to the exact integer running
//! total, so released values have no data-dependent low-order bits. The
//! residual approximation: the proof is for Gaussian `z`; `zₜ` is an exact
//! discrete Gaussian on the lattice `2⁻¹⁶ℤ` with the same σ (for σ ≫ 2⁻¹⁶ it
//! is indistinguishable from the continuous one at any practical sample
//! size), and the f64 filter adds relative error ~2⁻⁵², independent of data.
//!
//! Pure DP — the binary tree (dyadic intervals) with discrete Laplace noise
//! on every node and Honaker's bottom-up re-weighting (as in TF Privacy's
//! efficient tree aggregation). A window is in one node per level, `ℓ =
//! log₂T + 1` levels for a lifetime of `T` windows, so a device's L1 effect
//! is at most `W·ℓ·L₁`. Node noise is an exact integer; the re-weighting is
//! post-processing of noisy integers. After `T` windows the tree is full and
//! running totals stop (more would need more budget).

mod blt;
mod tree;
#[cfg(feature = "tuner")]
mod tuner;

pub use blt::*;
pub use tree::*;
#[cfg(feature = "tuner")]
pub use tuner::tune;

use super::mechanism::Measure;
use super::rational::{self, exact};
use super::sampler::{DiscreteGaussian, DiscreteLaplace};
use num_bigint::BigInt;
use num_rational::BigRational;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// The fine lattice `2⁻¹⁶ℤ` on which the BLT's Gaussian draws live.
const LATTICE_BITS: u32 = 16;

/// One running total (a scalar or a vector of bins) of a stream.
#[derive(Debug, Clone)]
pub struct RunningGroup {
    /// `sum` or `histogram`.
    pub name: &'static str,
    /// Components (1, or the number of bins).
    pub dim: usize,
    /// Per-window sensitivity: L1 (pure DP) or L2 (zCDP), in the group's units.
    pub window_sensitivity: f64,
    pub noise: RunningNoise,
    /// ε or ρ per device per horizon spent by this group (exact).
    pub spent: BigRational,
}

/// The calibrated noise of a [`RunningGroup`].
#[derive(Debug, Clone)]
pub enum RunningNoise {
    /// zCDP: Gaussian draws of variance σ² through a BLT strategy.
    Blt {
        blt: Blt,
        sigma: f64,
        /// Samples `2¹⁶·z`.
        sampler: DiscreteGaussian,
    },
    /// Pure DP: discrete Laplace on every node of a tree of `levels` levels.
    Tree {
        levels: u32,
        laplace: DiscreteLaplace,
        /// Variance of one node's noise.
        node_variance: f64,
    },
}

impl RunningNoise {
    pub fn name(&self) -> &'static str {
        match self {
            RunningNoise::Blt { .. } => "blt-discrete-gaussian",
            RunningNoise::Tree { .. } => "tree-discrete-laplace-honaker",
        }
    }

    /// Standard deviation of the running total's noise after `t ≥ 1`
    /// windows, in the group's units (`None` past a tree's lifetime).
    pub fn std_after(&self, t: u64) -> Option<f64> {
        match self {
            RunningNoise::Blt { blt, sigma, .. } => Some(sigma * blt.noise_energy(t).sqrt()),
            RunningNoise::Tree {
                levels,
                node_variance,
                ..
            } => {
                if t == 0 || t > 1u64 << (levels - 1) {
                    return None;
                }
                // The prefix of t windows sums one node per set bit of t.
                let v = honaker_variances(*node_variance, *levels);
                Some(
                    (0..*levels)
                        .filter(|h| t >> h & 1 == 1)
                        .map(|h| v[h as usize])
                        .sum::<f64>()
                        .sqrt(),
                )
            }
        }
    }
}

/// What one stream's running totals need: per group, calibrated noise.
#[derive(Debug, Clone)]
pub struct RunningPlan {
    pub groups: Vec<RunningGroup>,
    pub log2_lifetime: u32,
    /// Units → metric value, for sums.
    pub resolution: f64,
}

/// Variance of the discrete Laplace with scale `t`: `2r/(1−r)²`, `r = e^{−1/t}`.
pub fn discrete_laplace_variance(t: f64) -> f64 {
    let r = (-1.0 / t).exp();
    2.0 * r / ((1.0 - r) * (1.0 - r))
}

impl RunningPlan {
    /// Calibrate groups with per-window sensitivities `(name, dim, L1, L2²)`
    /// (integers in the group's units) for `w` windows per device per
    /// horizon, spending `budget` (ε or ρ per horizon) split evenly.
    pub fn calibrate(
        measure: Measure,
        groups: &[(&'static str, usize, i64, i64)],
        w: u32,
        budget: &BigRational,
        log2_lifetime: u32,
        resolution: f64,
    ) -> Self {
        assert!(!groups.is_empty() && w >= 1 && (1..=40).contains(&log2_lifetime));
        let share = budget / BigRational::from_integer(BigInt::from(groups.len()));
        // Γ_W once for every group (it is O(W) to compute).
        let gamma = (measure == Measure::Zcdp)
            .then(|| Blt::for_lifetime(log2_lifetime).sensitivity_sq(w) * (1.0 + 1e-9));
        let groups = groups
            .iter()
            .map(|&(name, dim, l1, l2_sq)| match measure {
                Measure::Zcdp => {
                    let blt = Blt::for_lifetime(log2_lifetime);
                    // σ² = Γ_W·L²/(2ρ), rounded up (with room for Γ's
                    // floating-point error) so the spend stays ≤ ρ.
                    let gamma = gamma.unwrap_or_default();
                    let sigma2 = rational::round_up(
                        &(exact(gamma) * BigRational::from_integer(l2_sq.into())
                            / (BigRational::from_integer(2.into()) * &share)),
                        40,
                    );
                    let lattice =
                        BigRational::from_integer(BigInt::from(1u64 << (2 * LATTICE_BITS)));
                    let sigma = rational::to_f64(&sigma2).sqrt();
                    RunningGroup {
                        name,
                        dim,
                        window_sensitivity: (l2_sq as f64).sqrt(),
                        noise: RunningNoise::Blt {
                            blt,
                            sigma,
                            sampler: DiscreteGaussian::new(&(sigma2 * lattice)),
                        },
                        spent: share.clone(),
                    }
                }
                Measure::Pure => {
                    // λ = W·ℓ·L1/ε, exact: every window is in ℓ nodes.
                    let levels = log2_lifetime + 1;
                    let scale =
                        BigRational::from_integer(BigInt::from(w as i64 * levels as i64 * l1))
                            / &share;
                    let laplace = DiscreteLaplace::new(&scale);
                    let node_variance = discrete_laplace_variance(laplace.scale_f64());
                    RunningGroup {
                        name,
                        dim,
                        window_sensitivity: l1 as f64,
                        noise: RunningNoise::Tree {
                            levels,
                            laplace,
                            node_variance,
                        },
                        spent: share.clone(),
                    }
                }
            })
            .collect();
        Self {
            groups,
            log2_lifetime,
            resolution,
        }
    }

    /// ε or ρ per device per horizon, all groups.
    pub fn spent(&self) -> BigRational {
        self.groups.iter().map(|g| g.spent.clone()).sum()
    }

    /// Advance by one window whose exact per-group values are `window`
    /// (`window[g].len() == groups[g].dim`); noise from `rng` (the window's
    /// keyed generator). Returns the noisy running totals per group, or
    /// `None` past a tree's lifetime (then the state does not move).
    pub fn step<R: Rng + ?Sized>(
        &self,
        state: &mut RunningState,
        window: &[Vec<i128>],
        rng: &mut R,
    ) -> Option<Vec<Vec<f64>>> {
        if state.groups.is_empty() {
            *state = RunningState::new(self);
        }
        if let Some(RunningGroup {
            noise: RunningNoise::Tree { levels, .. },
            ..
        }) = self.groups.first()
        {
            if state.steps >= 1u64 << (levels - 1) {
                return None;
            }
        }
        let mut out = Vec::with_capacity(self.groups.len());
        for ((g, gs), x) in self.groups.iter().zip(&mut state.groups).zip(window) {
            assert_eq!(x.len(), g.dim);
            for (e, v) in gs.exact.iter_mut().zip(x) {
                *e += v;
            }
            let noisy = match &g.noise {
                RunningNoise::Blt { blt, sampler, .. } => gs
                    .blt
                    .iter_mut()
                    .zip(&gs.exact)
                    .map(|(b, &e)| {
                        let z = sampler.sample(rng) as f64 / (1u64 << LATTICE_BITS) as f64;
                        // Data-free noise, rounded to the grid, added exactly.
                        let n = b.step(blt, z).round() as i128;
                        (e + n) as f64
                    })
                    .collect(),
                RunningNoise::Tree {
                    levels,
                    laplace,
                    node_variance,
                } => gs
                    .tree
                    .step(x, *levels, *node_variance, rng, &|r| laplace.sample(r))
                    .expect("lifetime checked above"),
            };
            out.push(noisy);
        }
        state.steps += 1;
        Some(out)
    }
}

/// Durable state of one lane's running totals: exact totals and the noise
/// generators' state. Private (exact totals, noise): never published; kept
/// in the state topic so a restart continues the same noise.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunningState {
    pub steps: u64,
    pub groups: Vec<GroupState>,
    /// The windows' released sums so far (units; noisy, so public).
    #[serde(default)]
    pub summed: f64,
    /// The windows' noisy histogram bins so far, and how many windows
    /// they hold (noisy, so public).
    #[serde(default)]
    pub summed_bins: Vec<f64>,
    #[serde(default)]
    pub summed_bins_steps: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GroupState {
    pub exact: Vec<i128>,
    #[serde(default)]
    pub blt: Vec<BltNoise>,
    #[serde(default)]
    pub tree: TreeState,
}

impl RunningState {
    pub fn new(plan: &RunningPlan) -> Self {
        Self {
            steps: 0,
            groups: plan
                .groups
                .iter()
                .map(|g| GroupState {
                    exact: vec![0; g.dim],
                    blt: match &g.noise {
                        RunningNoise::Blt { blt, .. } => vec![BltNoise::new(blt.buffers()); g.dim],
                        RunningNoise::Tree { .. } => vec![],
                    },
                    tree: TreeState::default(),
                })
                .collect(),
            summed: 0.0,
            summed_bins: vec![],
            summed_bins_steps: 0,
        }
    }
}
