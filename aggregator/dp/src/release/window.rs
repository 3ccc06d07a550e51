//! A lane's releases, window after window — the main path: the keyed noise of
//! docs/DESIGN.md §5 (one generator per stream, partition and window seq,
//! seeded from the release key and a digest of the window's values, so a
//! replay repeats every draw) and the quantile candidates the lane's
//! [`QuantileTrack`] gives (the declared ones unless the stream adapts
//! them: `adaptive.rs`), and the lane's running totals (`running.rs`).
//!
//! Privacy argument: the noise is calibrated in `evaluate.rs`; keying it
//! only makes the draws repeatable (the same window always gets the same
//! release, so a replay publishes nothing new), and the candidates are a
//! function of earlier releases only (`adaptive.rs`).

use super::*;
use crate::continual::RunningState;
use crate::rng::{window_digest, window_rng, ReleaseKey, WindowId};

impl StreamPlan {
    /// The declared candidates of this stream's quantiles (shared by every
    /// level), if it releases quantiles.
    fn declared_candidates(&self) -> Option<&[i64]> {
        self.measurements
            .iter()
            .find_map(|m| m.measurement.candidates())
    }

    /// The index of the first quantile selection (selections are measured
    /// last), if the stream has one.
    fn first_selection(&self) -> Option<usize> {
        self.measurements
            .iter()
            .position(|m| m.measurement.candidates().is_some())
    }

    /// The keyed generator of window `seq` (docs/DESIGN.md §5).
    fn keyed_rng(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
    ) -> impl rand::RngCore {
        let id = WindowId {
            stream: &self.spec.name,
            partition,
            seq,
        };
        window_rng(key, id, &window_digest(values))
    }

    /// The favoured candidates of a window released after `track`: `None`
    /// (no prior) unless the stream adapts them.
    pub fn candidates_after(&self, track: &QuantileTrack) -> Option<Vec<i64>> {
        if !self.spec.adaptive_quantiles {
            return None;
        }
        self.declared_candidates().map(|d| track.candidates(d))
    }

    /// Release a window with the keyed noise of docs/DESIGN.md §5 and the
    /// quantile candidates its lane's `track` gives.
    pub fn release_after(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
        track: &QuantileTrack,
    ) -> Vec<ReleasedStatistic> {
        self.release_with_moments(key, partition, seq, values, track, None)
            .0
    }

    /// [`Self::release_after`] and the raw noisy moments its statistics
    /// were derived from, out of the same measurements (unclamped): a fleet
    /// record's box intervals add them up (`fleet.rs`). The count is among
    /// them under add-remove only (change-one's `n` is public); `None` when
    /// the plan measures none of them. `chosen`: the window's quantile
    /// selections as [`Self::track_step`] made them for the same window and
    /// track, taken with the noise drawn before them instead of drawing
    /// again (the same draws: quantiles are measured last), so a lane's
    /// step and its release draw, sort and select once between them.
    pub fn release_with_moments(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
        track: &QuantileTrack,
        chosen: Option<&QuantileChoices>,
    ) -> (Vec<ReleasedStatistic>, Option<RawMoments>) {
        let (out, measured) = match chosen.and_then(|c| self.with_choices(values, c)) {
            Some(measured) => (self.post_process(values, &measured, true), measured),
            None => {
                let adaptive = self.candidates_after(track);
                let mut rng = self.keyed_rng(key, partition, seq, values);
                self.evaluate_measured(values, Some(&mut rng), adaptive.as_deref())
            }
        };
        (out, self.moments_of(&measured))
    }

    /// The window's measurements with its quantile selections taken from
    /// `chosen` (every earlier measurement drawn as a whole release draws
    /// it); `None` if `chosen` does not fit the plan's quantiles.
    fn with_choices(&self, values: &[i64], chosen: &QuantileChoices) -> Option<Vec<Measured>> {
        let first = self.first_selection()?;
        if chosen.measured.len() != self.measurements.len() - first
            || self.measurements[first..]
                .iter()
                .any(|m| m.measurement.candidates().is_none())
        {
            return None;
        }
        if self.neighbouring.size_is_public() {
            assert_eq!(
                values.len() as u64,
                self.spec.window_size,
                "a window holds exactly n values"
            );
        }
        let mut measured = self.measure_drawn(values, first, &chosen.draws);
        measured.extend(chosen.measured.iter().cloned());
        Some(measured)
    }

    /// The raw moments among a window's `measured` values (the first ones
    /// measured, or all).
    fn moments_of(&self, measured: &[Measured]) -> Option<RawMoments> {
        let at = |want: Measurement| self.find(|m| *m == want).map(|(i, _)| i);
        let idx = [
            Measurement::Count,
            Measurement::CentredSum,
            Measurement::CentredSumSq,
            Measurement::Boundary,
            Measurement::Sum,
        ]
        .map(at);
        idx.iter().flatten().max()?;
        let scalar = |i: Option<usize>| match measured.get(i?)? {
            Measured::Scalar(v) => Some(*v as f64),
            _ => None,
        };
        Some(RawMoments {
            count: scalar(idx[0]),
            centred_sum: scalar(idx[1]),
            centred_sum_sq: scalar(idx[2]),
            boundary: scalar(idx[3]),
            sum: scalar(idx[4]),
        })
    }

    /// Advance this lane's running totals by window `seq` (noise keyed like
    /// the window's, in its own domain; `running.rs`); `None` without
    /// running totals or past a pure-DP tree's lifetime.
    pub fn running_step(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
        state: &mut RunningState,
    ) -> Option<Vec<RunningValue>> {
        running::running_step(self, key, partition, seq, values, state)
    }

    /// Advance a lane's track past window `seq`: its quantiles exactly as
    /// [`Self::release_after`] releases them (the same keyed draws), for the
    /// next window's candidates. Lanes are stepped in window order. Returns
    /// the window's selections, for [`Self::release_with_moments`] to take
    /// (`None` without adaptive quantiles).
    pub fn track_step(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
        track: &mut QuantileTrack,
    ) -> Option<QuantileChoices> {
        if !self.spec.adaptive_quantiles || self.declared_candidates().is_none() {
            return None;
        }
        let adaptive = self.candidates_after(track);
        let mut rng = self.keyed_rng(key, partition, seq, values);
        // Only the selections, measured last: the noise drawn before them
        // is kept for the release, not measured.
        let first = self.first_selection()?;
        let draws = self.draw_first(&mut rng, first);
        let all = first..self.measurements.len();
        let measured = self.measure_first(values, Some(&mut rng), all, adaptive.as_deref());
        track.push(
            measured
                .iter()
                .flat_map(|m| match m {
                    Measured::Choice(c) => vec![*c],
                    Measured::Choices(cs) => cs.clone(),
                    _ => vec![],
                })
                .collect(),
        );
        Some(QuantileChoices { draws, measured })
    }
}

/// A window's quantile selections (they are measured last) and the noise
/// drawn before them, as [`StreamPlan::track_step`] drew them from the
/// window's keyed generator: what its release takes instead of drawing
/// again.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantileChoices {
    draws: Vec<i128>,
    measured: Vec<Measured>,
}
