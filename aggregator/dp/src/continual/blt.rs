//! The BLT strategy (zCDP running totals): the Toeplitz factor `C`, its
//! closed-form sensitivity and noise energy, the online noise filter, the
//! tuned constants and the baselines it is compared against. The privacy
//! argument is in the parent module's doc.

/// A BLT strategy `C`: `c₀ = 1`, `cᵢ = Σⱼ ωⱼ θⱼ^(i−1)` for `i ≥ 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Blt {
    pub(super) theta: Vec<f64>,
    pub(super) omega: Vec<f64>,
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
        // θₖᵐ once per k, not per (j, k): the same terms added in the same
        // order (Γ_W over W = 10⁶ windows took 1.5 s to plan).
        let powers: Vec<f64> = self.theta.iter().map(|t| t.powi(m as i32)).collect();
        for (tj, wj) in self.theta.iter().zip(&self.omega) {
            for ((tk, wk), pk) in self.theta.iter().zip(&self.omega).zip(&powers) {
                g += wj * wk * pk / (1.0 - tj * tk);
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

/// Tuned BLT strategies: (log₂ lifetime, θ, ω), d = 4, found by the offline tuner (`tuner`, feature `tuner`)
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
            crate::continual::honaker_variances(1.0, used).iter().sum()
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
