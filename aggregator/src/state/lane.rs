//! What a lane — one (stream, input partition) — carries from one window to
//! the next, and its one owner, [`Lanes`]: stepped in window order as
//! windows are released, written as a [`LaneState`] record with each
//! window's first charges record (docs/DESIGN.md §6), read back from that
//! record when the partition is assigned, dropped when it is revoked.
//!
//! A lane carries its running totals (`dp::continual::RunningState`: the
//! noise already drawn for every released step, which must continue, never
//! be drawn again) and, with adaptive candidates, its quantile track (the
//! quantiles it released last). Device counts and key bindings have records
//! of their own (charges, keys).

use crate::dp::continual::RunningState;
use crate::dp::release::{QuantileChoices, QuantileTrack, RunningValue, StreamPlan};
use crate::dp::rng::ReleaseKey;
use crate::engine::window::ClosedWindow;
use anyhow::{Context as _, Result};
use std::collections::BTreeMap;

/// A lane's state after a window, kept in the window's first charges
/// record: what its next window continues from (serialised JSON; each empty
/// when the stream has no such state).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaneState {
    /// `dp::continual::RunningState` (running totals).
    pub running: Vec<u8>,
    /// `dp::release::QuantileTrack` (adaptive quantile candidates).
    pub quantile_track: Vec<u8>,
}

/// What one lane carries: each part only if its stream has it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Carried {
    running: Option<RunningState>,
    track: Option<QuantileTrack>,
}

/// One window's step of its lane.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    /// The running totals after the window (empty: the stream has none).
    pub running: Vec<RunningValue>,
    /// The quantile track before the window: its candidates come from it.
    pub track: QuantileTrack,
    /// The window's quantile selections, made while stepping the track:
    /// its release takes them instead of selecting again.
    pub choices: Option<QuantileChoices>,
    /// The lane's record after the window.
    pub record: LaneState,
}

/// Every assigned lane's carried state, keyed by (stream index, partition).
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    lanes: BTreeMap<(usize, i32), Carried>,
}

impl Lanes {
    /// Step `w`'s lane over `w` (windows of a lane come in order).
    pub fn step(&mut self, stream: &StreamPlan, key: &ReleaseKey, w: &ClosedWindow) -> Step {
        let mut running = vec![];
        let mut track = QuantileTrack::default();
        let mut record = LaneState::default();
        let mut choices = None;
        // A lane of a stream that carries nothing has no entry.
        if stream.running.is_none() && !stream.spec.adaptive_quantiles {
            return Step {
                running,
                track,
                choices,
                record,
            };
        }
        let lane = self.lanes.entry((w.stream, w.partition)).or_default();
        if stream.running.is_some() {
            let state = lane.running.get_or_insert_with(RunningState::default);
            running = stream
                .running_step(key, w.partition, w.seq, &w.values, state)
                .unwrap_or_default();
            record.running = serde_json::to_vec(state).expect("running state serialises");
        }
        if stream.spec.adaptive_quantiles {
            let lane_track = lane.track.get_or_insert_with(QuantileTrack::default);
            track = lane_track.clone();
            choices = stream.track_step(key, w.partition, w.seq, &w.values, lane_track);
            record.quantile_track = serde_json::to_vec(lane_track).expect("a track serialises");
        }
        Step {
            running,
            track,
            choices,
            record,
        }
    }

    /// Continue a lane with what it carried (nothing: no entry).
    pub fn install(&mut self, lane: (usize, i32), carried: Carried) {
        if carried != Carried::default() {
            self.lanes.insert(lane, carried);
        }
    }

    /// Forget every lane of a revoked partition.
    pub fn drop_partition(&mut self, partition: i32) {
        self.lanes.retain(|&(_, p), _| p != partition);
    }
}

impl Carried {
    /// What a lane of `stream` on `partition` carries after its last
    /// released window `last_seq`, read from that window's record (`None`:
    /// the state topic has no such record).
    ///
    /// Running totals cannot start over mid-lane (a released step would be
    /// noised again), so a missing or unreadable record is fatal for them.
    /// A quantile track without a record starts empty: the next window uses
    /// every declared candidate.
    pub fn from_record(
        stream: &StreamPlan,
        (partition, last_seq): (i32, u64),
        recorded: Option<&LaneState>,
    ) -> Result<Self> {
        let name = &stream.spec.name;
        let mut lane = Carried::default();
        if stream.running.is_some() {
            lane.running = Some(match recorded.map(|l| &l.running) {
                // Running totals start with this window's successor.
                Some(b) if b.is_empty() => RunningState::default(),
                Some(b) => serde_json::from_slice(b).with_context(|| {
                    format!("running-total state of {name}/{partition}#{last_seq} is not readable")
                })?,
                None => {
                    return Err(crate::config::configuration(anyhow::anyhow!(
                        "the state topic has no record of {name}/{partition}#{last_seq}: its running totals cannot continue \
                         without re-noising released steps (see docs/operations.md, Operator's playbook: state topic deleted)"
                    )))
                }
            });
        }
        if stream.spec.adaptive_quantiles {
            lane.track = Some(match recorded.map(|l| &l.quantile_track) {
                Some(b) if !b.is_empty() => serde_json::from_slice(b).with_context(|| {
                    format!(
                        "adaptive quantile track of {name}/{partition}#{last_seq} is not readable"
                    )
                })?,
                _ => QuantileTrack::default(),
            });
        }
        Ok(lane)
    }
}
#[cfg(test)]
pub(super) mod tests {
    //! A lane against its own records: continued from the record of any
    //! window, it steps exactly as the lane that never stopped.

    use super::*;
    use crate::config::{Config, Validated};

    const PLAN: &str = r#"
[kafka]
brokers = "b"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = 4.0
horizon = "24h"
[[stream]]
name = "t"
lower = 0.0
upper = 100.0
resolution = 0.5
window_size = 8
max_windows_per_device = 10
statistics = ["count", "sum", "quantiles"]
quantiles = [0.5, 0.9]
quantile_candidates = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
adaptive_quantiles = true
running_share = 0.5
running_lifetime = 64
"#;

    fn validated(text: &str) -> Validated {
        Config::parse(text).unwrap().validate().unwrap()
    }

    /// Lane (0, 3) continued from its record after window `last_seq`, as
    /// the restoring step and the loop do it.
    fn restore(
        lanes: &mut Lanes,
        stream: &StreamPlan,
        last_seq: u64,
        recorded: Option<&LaneState>,
    ) -> Result<()> {
        lanes.install(
            (0, 3),
            Carried::from_record(stream, (3, last_seq), recorded)?,
        );
        Ok(())
    }

    /// Window `seq` of lane (0, 3), no charges.
    pub(in crate::state) fn window(seq: u64) -> ClosedWindow {
        ClosedWindow {
            stream: 0,
            partition: 3,
            seq,
            values: (0..8).map(|i| (seq as i64 * 7 + i * 13) % 200).collect(),
            first_offset: 0,
            last_offset: 0,
            last_index: 0,
            first_event_ms: 0,
            last_event_ms: 0,
            padded: 0,
            timed: false,
            charges: vec![],
            horizon_devices: None,
            reference_event_ms: 0,
            retired: vec![],
            retired_records: vec![],
        }
    }

    #[test]
    fn a_lane_continued_from_any_record_steps_as_if_it_never_stopped() {
        let v = validated(PLAN);
        let stream = &v.plan.streams[0];
        assert!(stream.running.is_some() && stream.spec.adaptive_quantiles);
        let key = ReleaseKey::from_bytes([7; 32]);
        let mut whole = Lanes::default();
        let steps: Vec<Step> = (0..12)
            .map(|s| whole.step(stream, &key, &window(s)))
            .collect();
        assert!(steps.iter().all(|s| !s.running.is_empty()));
        assert_ne!(steps[11].track, QuantileTrack::default(), "the track moved");
        for stop in 0..11 {
            let mut resumed = Lanes::default();
            let record = &steps[stop as usize].record;
            restore(&mut resumed, stream, stop, Some(record)).unwrap();
            for s in stop + 1..12 {
                assert_eq!(
                    resumed.step(stream, &key, &window(s)),
                    steps[s as usize],
                    "continued after window {stop}, window {s}"
                );
            }
        }
    }

    #[test]
    fn a_lost_or_unreadable_record_stops_running_totals_not_the_track() {
        let v = validated(PLAN);
        let stream = &v.plan.streams[0];
        let mut lanes = Lanes::default();
        let e = restore(&mut lanes, stream, 5, None).unwrap_err();
        assert!(e.to_string().contains("no record of t/3#5"), "{e}");
        let garbled = LaneState {
            running: b"{".to_vec(),
            quantile_track: vec![],
        };
        let e = restore(&mut lanes, stream, 5, Some(&garbled)).unwrap_err();
        assert!(e.to_string().contains("t/3#5 is not readable"), "{e}");
        // Without running totals, no record is no harm: the track starts empty.
        let v = validated(&PLAN.replace("running_share = 0.5\n", ""));
        let stream = &v.plan.streams[0];
        restore(&mut lanes, stream, 5, None).unwrap();
        let empty = LaneState {
            running: vec![],
            quantile_track: b"[".to_vec(),
        };
        let e = restore(&mut lanes, stream, 5, Some(&empty)).unwrap_err();
        assert!(e.to_string().contains("track of t/3#5"), "{e}");
    }

    #[test]
    fn a_revoked_partition_forgets_its_lanes_only() {
        let v = validated(PLAN);
        let stream = &v.plan.streams[0];
        let key = ReleaseKey::from_bytes([7; 32]);
        let mut lanes = Lanes::default();
        let mut other = window(0);
        other.partition = 4;
        let first = lanes.step(stream, &key, &window(0));
        let kept = lanes.step(stream, &key, &other);
        lanes.drop_partition(3);
        // Partition 3 starts over; partition 4 continues.
        assert_eq!(lanes.step(stream, &key, &window(0)), first);
        assert_ne!(lanes.step(stream, &key, &other).record, kept.record);
    }
}
