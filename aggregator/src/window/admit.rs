//! One reading's decisions once its lane, window and horizon are known —
//! out of order, the window cap `k`, the horizon cap `W`, the group cap `G`
//! — and, when it is kept, the charge: the device's window count in its
//! horizon and the window's charge list (what the state topic persists
//! before any release). The privacy argument is the parent module's: a
//! device is at most `k` readings of a window and charged to at most `W`
//! windows per horizon (and `G` groups), decided from offsets, device keys
//! and event times only.

use super::counts::DeviceHorizon;
use super::groups::GroupTable;
use super::hosted::HeldGroup;
use super::lane::{close_count_window, window_end, Lane, Open};
use super::{Admission, ClosedWindow, FastMap, StreamRules, MAX_TIME_WINDOW_READINGS};
use std::collections::BTreeMap;

/// Where a reading sits in its partition and in time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    /// Its message's offset and its index in the message.
    pub(super) offset: i64,
    pub(super) index: u32,
    /// Its event time and its message's timestamp.
    pub(super) event_ms: i64,
    pub(super) msg_ms: i64,
}

/// The window a reading goes to, or why it goes to none: already released
/// (a replay) or late. A count window past its `window_timeout` is closed
/// first (into `closed`). Time windows: decided by this reading's own event
/// time and message timestamp alone (the parent module's argument).
pub(super) fn window_of(
    lane: &mut Lane,
    rules: &StreamRules,
    id: (usize, i32),
    r: Reading,
    (horizon_ms, lateness_ms): (i64, i64),
    closed: &mut Vec<ClosedWindow>,
) -> Result<u64, Admission> {
    let replayed = |lane: &Lane| {
        lane.resume_after
            .is_some_and(|at| (r.offset, r.index) <= at)
    };
    match rules.window_ms {
        None => {
            if replayed(lane) {
                return Err(Admission::AlreadyReleased);
            }
            if let Some(t) = rules.timeout_ms {
                if !lane.open.values.is_empty()
                    && r.event_ms.saturating_sub(lane.open.first_event_ms) >= t
                {
                    closed.push(close_count_window(lane, rules, id, horizon_ms, lateness_ms));
                }
            }
            Ok(lane.next_seq)
        }
        Some(len) => {
            if r.event_ms < 0 {
                return Err(Admission::DroppedLate);
            }
            let seq = (r.event_ms / len) as u64;
            if !lane.started {
                // Only callers that never start lanes (unit tests, benches).
                lane.started = true;
                lane.next_seq = seq;
            }
            if seq < lane.next_seq || r.msg_ms >= window_end(seq, len).saturating_add(lateness_ms) {
                // Replayed input up to the last released window's last
                // reading is counted apart from late readings.
                if replayed(lane) {
                    return Err(Admission::AlreadyReleased);
                }
                return Err(Admission::DroppedLate);
            }
            Ok(seq)
        }
    }
}

/// Where a reading stands and what a decision may change.
pub(super) struct Judge<'a> {
    pub(super) rules: &'a StreamRules,
    /// The reading's window and horizon.
    pub(super) seq: u64,
    pub(super) horizon: i64,
    pub(super) partition: i32,
    /// The device key.
    pub(super) dk: u64,
    /// The reading: its top-coded value, position and event time.
    pub(super) units: i64,
    pub(super) offset: i64,
    pub(super) index: u32,
    pub(super) event_ms: i64,
    /// The stream's group tables, or the device's slot entry when hosted.
    pub(super) groups: &'a mut FastMap<(usize, i32), GroupTable>,
    pub(super) held_group: Option<HeldGroup<'a>>,
    /// The lane's open count window and open time windows.
    pub(super) count_open: &'a mut Open,
    pub(super) timed: &'a mut BTreeMap<u64, Open>,
    /// Windows opened in the stream, and the seq the last kept reading
    /// went to (public counts).
    pub(super) opened: &'a mut u64,
    pub(super) last_accepted_seq: &'a mut u64,
}

impl Judge<'_> {
    /// Decide on the reading given the device's counts `entry` in this
    /// lane (fresh when it has none), charging it when kept.
    #[inline]
    pub(super) fn decide(mut self, entry: &mut DeviceHorizon) -> Admission {
        let (seq, horizon, rules) = (self.seq, self.horizon, self.rules);
        if entry.last_seq != u64::MAX && seq < entry.last_seq {
            // Time windows only (count seqs never go back): a device's
            // window counts are kept for its latest window.
            return Admission::DroppedOutOfOrder;
        }
        let in_window = if entry.last_seq == seq {
            entry.in_window
        } else {
            0
        };
        if in_window >= rules.max_readings_per_device {
            return Admission::DroppedWindowCap;
        }
        if horizon < entry.horizon {
            // An older horizon whose count is no longer kept: dropping is
            // the only choice that cannot exceed W (alternating event
            // times must not reset the count).
            return Admission::DroppedHorizonCap;
        }
        if let Some(g) = rules.group {
            let first_here = horizon > entry.horizon || entry.windows == 0;
            if first_here {
                let t = self.groups.entry((g.first, self.partition)).or_default();
                let ok = match self.held_group.as_mut() {
                    Some(held) => held.admit(t, self.dk, horizon, g.index, g.max_groups),
                    None => t.admit(self.dk, horizon, g.index, g.max_groups),
                };
                if !ok {
                    return Admission::DroppedGroupCap;
                }
            }
        }
        let open = match rules.window_ms {
            None => self.count_open,
            Some(_) => {
                let o = self.timed.entry(seq).or_default();
                if o.values.len() >= MAX_TIME_WINDOW_READINGS {
                    return Admission::DroppedWindowFull;
                }
                o
            }
        };
        if horizon > entry.horizon {
            // A newer horizon: its count starts with this window, which is
            // charged to it — also when the device already holds readings
            // of an older horizon here (that one stays charged too).
            *entry = DeviceHorizon {
                horizon,
                windows: 1,
                in_window,
                last_seq: seq,
            };
            open.charges.push((self.dk, horizon));
        } else if in_window == 0 {
            // First reading of this device in this window: charge a window.
            if entry.windows >= rules.max_windows_per_device {
                return Admission::DroppedHorizonCap;
            }
            entry.windows += 1;
            entry.last_seq = seq;
            open.charges.push((self.dk, horizon));
        }
        entry.in_window = in_window + 1;
        let (offset, event_ms) = (self.offset, self.event_ms);
        if open.values.is_empty() {
            *self.opened += 1;
            open.first_offset = offset;
            open.first_event_ms = event_ms;
            (open.min_event_ms, open.max_event_ms) = (event_ms, event_ms);
        }
        open.last_offset = offset;
        open.last_index = self.index;
        open.min_event_ms = open.min_event_ms.min(event_ms);
        open.max_event_ms = open.max_event_ms.max(event_ms);
        open.values.push(self.units);
        *self.last_accepted_seq = seq;
        Admission::Accepted
    }
}
