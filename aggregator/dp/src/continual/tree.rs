//! The pure-DP running tree: dyadic nodes with discrete Laplace noise and
//! Honaker's re-weighting (post-processing). The privacy argument is in the
//! parent module's doc.

use rand::Rng;

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
