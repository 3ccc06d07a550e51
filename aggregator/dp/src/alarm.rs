//! The device-limit alarm: AboveThreshold (the sparse vector's first
//! answer) on a lane's device count, so that the paging signal for a lane
//! nearing `limits.max_devices_per_lane` survives `hide_exact_counts`
//! (docs/privacy.md#the-device-limit-alarm).
//!
//! Privacy argument. A check's query is the number of devices whose counts
//! of one horizon `ĥ` sit in the lane's table when a window closes; one
//! device adds or removes at most one (sensitivity 1, either relation).
//! One instance runs per (lane, horizon `ĥ`): a threshold `T + ρ` with
//! `ρ ~ DLap(2/ε)` drawn once, and at each check `count + ν ≥ T + ρ` with
//! `ν ~ DLap(4/ε)` drawn afresh; the instance halts at its first "above".
//! That is ε-DP however many checks run (Dwork & Roth 2014, Theorem 3.23): the
//! proof shifts `ρ` by 1 and the firing check's `ν` by 2, integer shifts
//! that cost `ε/2` each under the discrete Laplace as under the continuous
//! one. `tests::the_first_answer_is_eps_dp_exactly` computes the output
//! distribution exactly on neighbouring count sequences. A device's
//! readings of horizon `h` move the counts of two instances: `h` (its
//! entry) and `h − 1` (its entry of `h − 1` is replaced when it first
//! reads in `h`), so the plan charges `2ε` per device per horizon, per
//! lane it counts in (`G` for a grouped stream). The noise is keyed like a
//! window's (`crate::rng`): a retried check draws the same bits.

use crate::mechanism::Measure;
use crate::rational;
use crate::rng::{alarm_check_rng, alarm_threshold_rng, window_digest, ReleaseKey, WindowId};
use crate::sampler::DiscreteLaplace;
use num_rational::BigRational;

/// One stream's alarm, calibrated from what it may spend per horizon.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmPlan {
    /// ε of one instance (one lane, one horizon).
    pub epsilon: f64,
    /// ε or ρ one device spends on it per horizon and lane it counts in
    /// (two instances).
    pub spent: BigRational,
    threshold_noise: DiscreteLaplace,
    check_noise: DiscreteLaplace,
}

/// The share of the limit at which the alarm aims to fire.
pub const ALARM_FRACTION: f64 = 0.9;

impl AlarmPlan {
    /// The alarm that spends `budget` (ε, or ρ under zCDP) per device per
    /// horizon in one lane: two instances of `ε = budget / 2`, or of
    /// `ρ = budget / 2 = ε²/2` (an ε-DP answer is `ε²/2`-zCDP).
    /// (The caller checks [`Self::epsilon_for`] against the measurement
    /// floor first: an ε near 0 has no finite scale.)
    pub fn calibrate(measure: Measure, budget: &BigRational) -> Self {
        let epsilon = Self::epsilon_for(measure, budget);
        Self {
            epsilon,
            spent: budget.clone(),
            threshold_noise: DiscreteLaplace::at_least(2.0 / epsilon),
            check_noise: DiscreteLaplace::at_least(4.0 / epsilon),
        }
    }

    /// ε of one instance when a device spends `budget` per horizon on it.
    pub fn epsilon_for(measure: Measure, budget: &BigRational) -> f64 {
        let b = rational::to_f64(budget);
        match measure {
            Measure::Pure => b / 2.0,
            Measure::Zcdp => b.sqrt(),
        }
    }

    /// The count at which a lane of `limit` devices aims to fire.
    pub fn threshold(limit: usize) -> u64 {
        (limit as f64 * ALARM_FRACTION).ceil() as u64
    }

    /// Whether the check at window `seq` of the lane (`stream`,
    /// `partition`) fires for `count` devices of horizon `horizon`, against
    /// `threshold`. The caller runs at most one instance per lane and
    /// horizon and stops checking it after the first `true`.
    pub fn fires(
        &self,
        key: &ReleaseKey,
        (stream, partition): (&str, i32),
        horizon: i64,
        seq: u64,
        count: u64,
        threshold: u64,
    ) -> bool {
        let instance = WindowId {
            stream,
            partition,
            seq: horizon as u64,
        };
        let rho = self
            .threshold_noise
            .sample(&mut alarm_threshold_rng(key, instance));
        let check = WindowId {
            stream,
            partition,
            seq,
        };
        let digest = window_digest(&[horizon, count as i64]);
        let nu = self
            .check_noise
            .sample(&mut alarm_check_rng(key, check, &digest));
        count as i128 + nu >= threshold as i128 + rho
    }

    /// The smallest `m ≥ 0` such that one check at `count = threshold + m`
    /// fires with probability at least `p` (and, by symmetry, one at
    /// `threshold − m` with at most `1 − p`): `P(ν − ρ ≥ −m) ≥ p`, summed
    /// exactly over the threshold noise.
    pub fn margin_for(&self, p: f64) -> u64 {
        let (t, c) = self.scales();
        let (rt, rc) = ((-1.0 / t).exp(), (-1.0 / c).exp());
        let pmf = |x: i64| (1.0 - rt) / (1.0 + rt) * rt.powf(x.unsigned_abs() as f64);
        // P(ν ≥ x) in closed form.
        let tail = |x: i64| match x >= 1 {
            true => rc.powf(x as f64) / (1.0 + rc),
            false => 1.0 - rc.powf((1 - x) as f64) / (1.0 + rc),
        };
        let reach = (60.0 * t).ceil() as i64;
        let fires = |m: i64| {
            (-reach..=reach)
                .map(|rho| pmf(rho) * tail(rho - m))
                .sum::<f64>()
        };
        let (mut lo, mut hi) = (0i64, (60.0 * (t + c)).ceil() as i64);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match fires(mid) >= p {
                true => hi = mid,
                false => lo = mid + 1,
            }
        }
        lo as u64
    }

    /// The noises' scales (threshold, check).
    pub fn scales(&self) -> (f64, f64) {
        (
            self.threshold_noise.scale_f64(),
            self.check_noise.scale_f64(),
        )
    }
}

#[cfg(test)]
mod tests;
