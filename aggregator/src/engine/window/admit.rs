//! One reading's decisions once its lane, window and horizon are known —
//! out of order, the window cap `k`, the horizon cap `W`, the group cap `G`
//! — and, when it is kept, the charge: the device's window count in its
//! horizon and the window's charge list (what the state topic persists
//! before any release). The privacy argument is the parent module's: a
//! device is at most `k` readings of a window and charged to at most `W`
//! windows per horizon (and `G` groups), decided from offsets, device keys
//! and event times only.

use super::counts::DeviceHorizon;
use super::group_cap::GroupTable;
use super::hosted::HeldGroup;
use super::lane::{close_count_window, window_end, Lane, Open};
use super::{Admission, ClosedWindow, FastMap, StreamRules, MAX_TIME_WINDOW_READINGS};
use std::collections::BTreeMap;

/// One top-coded reading offered to a lane: which lane, where it sits in
/// its partition and in time, whose it is and its value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offer {
    /// Its lane: planned stream and input partition.
    pub(crate) stream: usize,
    pub(crate) partition: i32,
    /// Its message's offset and its index in the message.
    pub(crate) offset: i64,
    pub(crate) index: u32,
    /// The device key ([`super::device_key`]).
    pub(crate) device: u64,
    /// The top-coded value.
    pub(crate) units: i64,
    /// Its event time and its message's timestamp.
    pub(crate) event_ms: i64,
    pub(crate) msg_ms: i64,
}

impl Offer {
    pub(super) fn lane(&self) -> (usize, i32) {
        (self.stream, self.partition)
    }
}

/// The window a reading goes to, or why it goes to none: already released
/// (a replay) or late. A count window past its `window_timeout` is closed
/// first (into `closed`). Time windows: decided by this reading's own event
/// time and message timestamp alone (the parent module's argument).
pub(super) fn window_of(
    lane: &mut Lane,
    rules: &StreamRules,
    r: &Offer,
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
                    let id = r.lane();
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
    /// The reading.
    pub(super) offer: &'a Offer,
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
        match self.caps(entry) {
            Ok(in_window) => self.charge(entry, in_window),
            Err(dropped) => dropped,
        }
    }

    /// The caps a reading meets before any window is charged: order, `k`,
    /// a forgotten horizon and `G`. Returns the device's readings in the
    /// window so far.
    #[inline]
    fn caps(&mut self, entry: &DeviceHorizon) -> Result<u32, Admission> {
        let (seq, horizon, rules) = (self.seq, self.horizon, self.rules);
        if entry.last_seq != u64::MAX && seq < entry.last_seq {
            // Time windows only (count seqs never go back): a device's
            // window counts are kept for its latest window.
            return Err(Admission::DroppedOutOfOrder);
        }
        let in_window = if entry.last_seq == seq {
            entry.in_window
        } else {
            0
        };
        if in_window >= rules.max_readings_per_device {
            return Err(Admission::DroppedWindowCap);
        }
        if horizon < entry.horizon {
            // An older horizon whose count is no longer kept: dropping is
            // the only choice that cannot exceed W (alternating event
            // times must not reset the count).
            return Err(Admission::DroppedHorizonCap);
        }
        if let Some(g) = rules.group {
            let first_here = horizon > entry.horizon || entry.windows == 0;
            if first_here {
                let (dk, partition) = (self.offer.device, self.offer.partition);
                let t = self.groups.entry((g.first, partition)).or_default();
                let ok = match self.held_group.as_mut() {
                    Some(held) => held.admit(t, dk, horizon, g.index, g.max_groups),
                    None => t.admit(dk, horizon, g.index, g.max_groups),
                };
                if !ok {
                    return Err(Admission::DroppedGroupCap);
                }
            }
        }
        Ok(in_window)
    }

    /// Keep the reading: its window (a full time window refuses it), the
    /// horizon cap `W` and the charge when it is the device's first
    /// reading of the window, then the value.
    #[inline]
    fn charge(self, entry: &mut DeviceHorizon, in_window: u32) -> Admission {
        let (seq, horizon, rules, o) = (self.seq, self.horizon, self.rules, self.offer);
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
            open.charges.push((o.device, horizon));
        } else if in_window == 0 {
            // First reading of this device in this window: charge a window.
            if entry.windows >= rules.max_windows_per_device {
                return Admission::DroppedHorizonCap;
            }
            entry.windows += 1;
            entry.last_seq = seq;
            open.charges.push((o.device, horizon));
        }
        entry.in_window = in_window + 1;
        if open.values.is_empty() {
            *self.opened += 1;
            open.first_offset = o.offset;
            open.first_event_ms = o.event_ms;
            (open.min_event_ms, open.max_event_ms) = (o.event_ms, o.event_ms);
        }
        open.last_offset = o.offset;
        open.last_index = o.index;
        open.min_event_ms = open.min_event_ms.min(o.event_ms);
        open.max_event_ms = open.max_event_ms.max(o.event_ms);
        open.values.push(o.units);
        *self.last_accepted_seq = seq;
        Admission::Accepted
    }
}
