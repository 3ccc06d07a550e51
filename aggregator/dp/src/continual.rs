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

use rand::Rng;

/// A BLT strategy `C`: `c₀ = 1`, `cᵢ = Σⱼ ωⱼ θⱼ^(i−1)` for `i ≥ 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Blt {
    theta: Vec<f64>,
    omega: Vec<f64>,
}

impl Blt {
    /// Needs `0 < θⱼ < 1`, `ωⱼ > 0`, `Σ ωⱼ ≤ 1` (so `cᵢ ≥ 0` is non-increasing,
    /// which the sensitivity bound uses).
    pub fn new(theta: Vec<f64>, omega: Vec<f64>) -> Result<Self, String> {
        if theta.len() != omega.len() || theta.is_empty() {
            return Err("θ and ω need the same, non-zero length".into());
        }
        if !theta.iter().all(|&t| t > 0.0 && t < 1.0) {
            return Err("every decay θ must lie in (0, 1)".into());
        }
        if !omega.iter().all(|&w| w > 0.0 && w.is_finite()) || omega.iter().sum::<f64>() > 1.0 {
            return Err("every ω must be positive and Σω ≤ 1".into());
        }
        Ok(Self { theta, omega })
    }

    /// Number of buffers.
    pub fn buffers(&self) -> usize {
        self.theta.len()
    }

    pub fn theta(&self) -> &[f64] {
        &self.theta
    }

    pub fn omega(&self) -> &[f64] {
        &self.omega
    }

    /// The tuned strategy (d = 4) for a lifetime of `2^log2_lifetime` windows:
    /// the smallest tabled lifetime that covers it (2¹⁰ … 2²⁴; longer
    /// lifetimes use 2²⁴'s, still private, with error growing past it).
    pub fn for_lifetime(log2_lifetime: u32) -> Self {
        let (_, theta, omega) = TUNED
            .iter()
            .find(|(l, _, _)| *l >= log2_lifetime)
            .unwrap_or(TUNED.last().expect("non-empty"));
        Self::new(theta.to_vec(), omega.to_vec()).expect("tabled parameters are valid")
    }

    /// `cᵢ`.
    pub fn c(&self, i: usize) -> f64 {
        if i == 0 {
            return 1.0;
        }
        self.theta
            .iter()
            .zip(&self.omega)
            .map(|(t, w)| w * t.powi(i as i32 - 1))
            .sum()
    }

    /// `G(m) = Σ_{i≥0} cᵢ cᵢ₊ₘ` over an infinite stream, in closed form.
    pub fn gram(&self, m: usize) -> f64 {
        let mut g = self.c(m);
        for (tj, wj) in self.theta.iter().zip(&self.omega) {
            for (tk, wk) in self.theta.iter().zip(&self.omega) {
                g += wj * wk * tk.powi(m as i32) / (1.0 - tj * tk);
            }
        }
        g
    }

    /// `Γ_W = Σ_{a,b<W} G(|a − b|)`: the squared L2 sensitivity of `C·x` when
    /// a device changes `W` windows by a unit each (multiply by `L²`).
    pub fn sensitivity_sq(&self, w: u32) -> f64 {
        let w = w as usize;
        let mut s = w as f64 * self.gram(0);
        for m in 1..w {
            s += 2.0 * (w - m) as f64 * self.gram(m);
        }
        s
    }

    /// `Σ_{i<t} bᵢ²` where `b` is a row of `B = A·C⁻¹` (the noise of the
    /// running total after `t` windows has variance `σ²` times this; it grows
    /// with `t`). By doubling on the state-space form: O(d³ log t).
    pub fn noise_energy(&self, t: u64) -> f64 {
        if t == 0 {
            return 0.0;
        }
        // For steps s ≥ 1 the impulse response's state is x = (S₁..S_d, acc),
        // x₁ = 1, x_{s+1} = F x_s, b_s = h·x_s.
        let d = self.buffers();
        let n = d + 1;
        let mut f = Mat::zeros(n);
        for j in 0..d {
            for k in 0..d {
                f.set(
                    j,
                    k,
                    if j == k { self.theta[j] } else { 0.0 } - self.omega[k],
                );
            }
            f.set(d, j, -self.omega[j]);
        }
        f.set(d, d, 1.0);
        let h: Vec<f64> = self.omega.iter().map(|w| -w).chain([1.0]).collect();
        let hh = Mat::outer(&h);
        // (P, Q) for k steps: P = F^k, Q = Σ_{i<k} (Fᵀ)^i H F^i.
        let combine = |(pa, qa): &(Mat, Mat), (pb, qb): &(Mat, Mat)| -> (Mat, Mat) {
            (pb.mul(pa), qa.add(&pa.t().mul(qb).mul(pa)))
        };
        let mut acc = (Mat::identity(n), Mat::zeros(n));
        let mut pow = (f.clone(), hh);
        let mut k = t - 1;
        while k > 0 {
            if k & 1 == 1 {
                acc = combine(&acc, &pow);
            }
            pow = combine(&pow, &pow);
            k >>= 1;
        }
        let x1 = vec![1.0; n];
        1.0 + acc.1.quad(&x1)
    }

    /// Direct O(t·d) form of [`Blt::noise_energy`] (tests): the running
    /// total's noise coefficients `b₀ … b_{t−1}`.
    pub fn noise_coefficients(&self, t: usize) -> Vec<f64> {
        let mut s = BltNoise::new(self.buffers());
        (0..t)
            .map(|i| s.step(self, if i == 0 { 1.0 } else { 0.0 }))
            .collect()
    }

    /// The strategy's loss for a lifetime of `t` windows at `W = 1`:
    /// `G(0) · Σ_{i<t} bᵢ²` (the worst variance at unit ρ is half of it).
    pub fn loss(&self, t: u64) -> f64 {
        self.sensitivity_sq(1) * self.noise_energy(t)
    }
}

/// The online noise generator of one running total: `d` buffers and the
/// accumulated noise. Its state is durable (it depends on no data).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BltNoise {
    pub buffers: Vec<f64>,
    pub total: f64,
}

impl BltNoise {
    pub fn new(d: usize) -> Self {
        Self {
            buffers: vec![0.0; d],
            total: 0.0,
        }
    }

    /// Feed one fresh Gaussian `z`; returns the running total's noise.
    pub fn step(&mut self, blt: &Blt, z: f64) -> f64 {
        let u = z - blt
            .omega
            .iter()
            .zip(&self.buffers)
            .map(|(w, s)| w * s)
            .sum::<f64>();
        for (s, t) in self.buffers.iter_mut().zip(&blt.theta) {
            *s = t * *s + u;
        }
        self.total += u;
        self.total
    }
}

/// Tuned BLT strategies: (log₂ lifetime, θ, ω), d = 4, found by [`tune`]
/// minimising [`Blt::loss`] at that lifetime (`examples/tune_blt.rs` prints
/// this table). Fixed constants, so every instance on every platform runs
/// the same strategy and a restart continues the same noise.
#[rustfmt::skip]
const TUNED: &[(u32, [f64; 4], [f64; 4])] = &[
    (10, [0.6878362881226231, 0.9664693781225497, 0.9982045679761383, 0.998204568124521], [0.28957597286684583, 0.13652422731252173, 0.019895024410167893, 0.040923257032073224]),
    (12, [0.7988684416599783, 0.9875778423763582, 0.9995255644806202, 0.999525566423476], [0.3269544119541411, 0.10080431755418237, 0.022025445890569168, 0.010151933252927459]),
    (14, [0.715532936881536, 0.9725157489962142, 0.9977124004418001, 0.9998867368445448], [0.3011623656810934, 0.12717405612536492, 0.038262743693234375, 0.015380491481242087]),
    (16, [0.793740002049482, 0.986779957471791, 0.9992379168853169, 0.9999704638494349], [0.32602868015261943, 0.10256999046513952, 0.025038153041802565, 0.008018445176466682]),
    (18, [0.850273029062191, 0.9934522513623842, 0.9997348033060054, 0.9999921526220872], [0.33289790575643985, 0.08131621540902893, 0.016470913805917885, 0.004236576821733651]),
    (20, [0.8912031062057755, 0.9966906488222124, 0.9999048027663995, 0.9999978790540343], [0.3269298134212186, 0.06375776580975465, 0.01083855054934058, 0.0022616976197484756]),
    (22, [0.9208624941422302, 0.998302687483536, 0.9999650485412394, 0.9999994183001932], [0.31232589653777487, 0.04958212523134405, 0.007119414178089943, 0.0012164230065977786]),
    (24, [0.9423765399927564, 0.9991199910676422, 0.9999869540756542, 0.9999998385293057], [0.2923393641554209, 0.038300646293129105, 0.004663194912663293, 0.0006575086204627863]),
];

/// Search a d-buffer strategy minimising [`Blt::loss`] at `lifetime` windows
/// (deterministic Nelder–Mead with restarts in an unconstrained
/// parametrisation: `θ = logistic(a)`, `ω = softmax(b, 0)`).
pub fn tune(d: usize, lifetime: u64) -> Blt {
    let decode = |p: &[f64]| -> Blt {
        let theta: Vec<f64> = p[..d]
            .iter()
            .map(|a| (1.0 / (1.0 + (-a).exp())).clamp(1e-12, 1.0 - 1e-15))
            .collect();
        let z: f64 = 1.0 + p[d..].iter().map(|b| b.exp()).sum::<f64>();
        let omega: Vec<f64> = p[d..].iter().map(|b| (b.exp() / z).max(1e-300)).collect();
        Blt { theta, omega }
    };
    let objective = |p: &[f64]| -> f64 {
        let l = decode(p).loss(lifetime);
        if l.is_finite() {
            l.ln()
        } else {
            f64::MAX
        }
    };
    // Start: decays spread geometrically between 1/2 and 1 − 1/lifetime.
    let mut best: Vec<f64> = (0..d)
        .map(|j| {
            let gap = (lifetime as f64).powf(-((j + 1) as f64) / d as f64);
            ((1.0 - gap) / gap).ln()
        })
        .chain((0..d).map(|j| -1.0 - j as f64))
        .collect();
    let mut best_val = objective(&best);
    for round in 0..6 {
        let step = 1.0 / (1 + round) as f64;
        let (p, v) = nelder_mead(&objective, &best, step, 3000);
        if v < best_val {
            (best, best_val) = (p, v);
        }
    }
    decode(&best)
}

fn nelder_mead(f: &dyn Fn(&[f64]) -> f64, x0: &[f64], step: f64, iters: usize) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut pts: Vec<Vec<f64>> = vec![x0.to_vec()];
    for i in 0..n {
        let mut p = x0.to_vec();
        p[i] += step;
        pts.push(p);
    }
    let mut vals: Vec<f64> = pts.iter().map(|p| f(p)).collect();
    for _ in 0..iters {
        let mut idx: Vec<usize> = (0..=n).collect();
        idx.sort_by(|&a, &b| vals[a].total_cmp(&vals[b]));
        pts = idx.iter().map(|&i| pts[i].clone()).collect();
        vals = idx.iter().map(|&i| vals[i]).collect();
        let centroid: Vec<f64> = (0..n)
            .map(|k| pts[..n].iter().map(|p| p[k]).sum::<f64>() / n as f64)
            .collect();
        let along = |c: f64| -> Vec<f64> {
            (0..n)
                .map(|k| centroid[k] + c * (pts[n][k] - centroid[k]))
                .collect()
        };
        let r = along(-1.0);
        let fr = f(&r);
        if fr < vals[0] {
            let e = along(-2.0);
            let fe = f(&e);
            (pts[n], vals[n]) = if fe < fr { (e, fe) } else { (r, fr) };
        } else if fr < vals[n - 1] {
            (pts[n], vals[n]) = (r, fr);
        } else {
            let c = along(0.5);
            let fc = f(&c);
            if fc < vals[n] {
                (pts[n], vals[n]) = (c, fc);
            } else {
                for i in 1..=n {
                    pts[i] = (0..n)
                        .map(|k| pts[0][k] + 0.5 * (pts[i][k] - pts[0][k]))
                        .collect();
                    vals[i] = f(&pts[i]);
                }
            }
        }
    }
    let i = (0..=n)
        .min_by(|&a, &b| vals[a].total_cmp(&vals[b]))
        .expect("n ≥ 0");
    (pts[i].clone(), vals[i])
}

/// Small dense square matrices for [`Blt::noise_energy`].
#[derive(Debug, Clone)]
struct Mat {
    n: usize,
    a: Vec<f64>,
}

impl Mat {
    fn zeros(n: usize) -> Self {
        Self {
            n,
            a: vec![0.0; n * n],
        }
    }
    fn identity(n: usize) -> Self {
        let mut m = Self::zeros(n);
        for i in 0..n {
            m.set(i, i, 1.0);
        }
        m
    }
    fn outer(v: &[f64]) -> Self {
        let mut m = Self::zeros(v.len());
        for i in 0..v.len() {
            for j in 0..v.len() {
                m.set(i, j, v[i] * v[j]);
            }
        }
        m
    }
    fn get(&self, i: usize, j: usize) -> f64 {
        self.a[i * self.n + j]
    }
    fn set(&mut self, i: usize, j: usize, v: f64) {
        self.a[i * self.n + j] = v;
    }
    fn mul(&self, o: &Mat) -> Mat {
        let mut m = Mat::zeros(self.n);
        for i in 0..self.n {
            for k in 0..self.n {
                let x = self.get(i, k);
                for j in 0..self.n {
                    m.a[i * self.n + j] += x * o.get(k, j);
                }
            }
        }
        m
    }
    fn add(&self, o: &Mat) -> Mat {
        Mat {
            n: self.n,
            a: self.a.iter().zip(&o.a).map(|(x, y)| x + y).collect(),
        }
    }
    fn t(&self) -> Mat {
        let mut m = Mat::zeros(self.n);
        for i in 0..self.n {
            for j in 0..self.n {
                m.set(j, i, self.get(i, j));
            }
        }
        m
    }
    fn quad(&self, x: &[f64]) -> f64 {
        (0..self.n)
            .map(|i| {
                (0..self.n)
                    .map(|j| x[i] * self.get(i, j) * x[j])
                    .sum::<f64>()
            })
            .sum()
    }
}

/// Baselines at equal privacy, as losses comparable to [`Blt::loss`]
/// (sensitivity² × worst noise energy over a lifetime of `t` windows, W = 1).
pub mod baseline {
    /// The square-root factorization `C = B = A^{1/2}` (finite `t`; its
    /// sensitivity grows like log t, so it is calibrated for `t` only).
    pub fn sqrt_factorization(t: u64) -> f64 {
        let mut r = 1.0f64;
        let mut s = 0.0;
        for i in 0..t {
            s += r * r;
            r *= (2 * i + 1) as f64 / (2 * i + 2) as f64;
        }
        s * s
    }

    /// Levels of a binary tree over `t` leaves.
    pub fn tree_levels(t: u64) -> u32 {
        64 - (t.max(1) - 1).leading_zeros() + 1
    }

    /// The Gaussian binary tree: sensitivity² = levels; the worst prefix
    /// sums `levels − 1` nodes (without Honaker's weights) or their
    /// re-weighted variances (with).
    pub fn gaussian_tree(t: u64, honaker: bool) -> f64 {
        let l = tree_levels(t);
        let used = (l - 1).max(1);
        let energy: f64 = if honaker {
            super::honaker_variances(1.0, used).iter().sum()
        } else {
            used as f64
        };
        l as f64 * energy
    }

    /// Each window's sum released with its own noise at the same budget:
    /// sensitivity 1, `t` independent noises summed.
    pub fn summed_windows(t: u64) -> f64 {
        t as f64
    }
}

/// Variances of Honaker's bottom-up estimates of a node at levels `0..levels`
/// when each node's own noise has variance `v`.
pub fn honaker_variances(v: f64, levels: u32) -> Vec<f64> {
    let mut out = Vec::with_capacity(levels as usize);
    let mut cur = v;
    for h in 0..levels {
        if h > 0 {
            let children = 2.0 * cur;
            cur = v * children / (v + children);
        }
        out.push(cur);
    }
    out
}

/// One node of the running tree: exact sum, its noisy version and the
/// re-weighted estimate.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TreeNode {
    pub exact: Vec<i128>,
    pub noisy: Vec<i128>,
    pub estimate: Vec<f64>,
}

/// The pure-DP running tree's durable state: for each level, the completed
/// node waiting for its right sibling (the dyadic decomposition of the
/// windows so far).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct TreeState {
    pub steps: u64,
    pub pending: Vec<Option<TreeNode>>,
}

impl TreeState {
    /// Add window `x` (a vector: one entry per component) with node noise
    /// drawn by `noise`; node variance `v` (for the weights), `levels` of
    /// the lifetime. Returns the running estimate, or `None` past the
    /// lifetime.
    pub fn step<R: Rng + ?Sized>(
        &mut self,
        x: &[i128],
        levels: u32,
        v: f64,
        rng: &mut R,
        noise: &dyn Fn(&mut R) -> i128,
    ) -> Option<Vec<f64>> {
        if self.steps >= 1u64 << (levels - 1) {
            return None;
        }
        let weights = honaker_variances(v, levels);
        let noisy = |exact: &[i128], rng: &mut R| -> Vec<i128> {
            exact.iter().map(|e| e + noise(rng)).collect()
        };
        let n = noisy(x, rng);
        let mut carry = TreeNode {
            exact: x.to_vec(),
            estimate: n.iter().map(|&y| y as f64).collect(),
            noisy: n,
        };
        let mut h = 0usize;
        loop {
            if self.pending.len() <= h {
                self.pending.resize(h + 1, None);
            }
            match self.pending[h].take() {
                None => {
                    self.pending[h] = Some(carry);
                    break;
                }
                Some(left) => {
                    let exact: Vec<i128> = left
                        .exact
                        .iter()
                        .zip(&carry.exact)
                        .map(|(a, b)| a + b)
                        .collect();
                    let n = noisy(&exact, rng);
                    // Inverse-variance weights: own noise v, children 2·v_h.
                    let children = 2.0 * weights[h];
                    let w_own = children / (v + children);
                    let estimate = n
                        .iter()
                        .zip(left.estimate.iter().zip(&carry.estimate))
                        .map(|(&own, (l, r))| w_own * own as f64 + (1.0 - w_own) * (l + r))
                        .collect();
                    carry = TreeNode {
                        exact,
                        noisy: n,
                        estimate,
                    };
                    h += 1;
                }
            }
        }
        self.steps += 1;
        let dim = x.len();
        Some(
            self.pending
                .iter()
                .flatten()
                .fold(vec![0.0; dim], |mut acc, node| {
                    for (a, e) in acc.iter_mut().zip(&node.estimate) {
                        *a += e;
                    }
                    acc
                }),
        )
    }
}

use super::mechanism::Measure;
use super::rational::{self, exact};
use super::sampler::{DiscreteGaussian, DiscreteLaplace};
use num_bigint::BigInt;
use num_rational::BigRational;
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
        let groups = groups
            .iter()
            .map(|&(name, dim, l1, l2_sq)| match measure {
                Measure::Zcdp => {
                    let blt = Blt::for_lifetime(log2_lifetime);
                    // σ² = Γ_W·L²/(2ρ), rounded up (with room for Γ's
                    // floating-point error) so the spend stays ≤ ρ.
                    let gamma = blt.sensitivity_sq(w) * (1.0 + 1e-9);
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
        }
    }
}
