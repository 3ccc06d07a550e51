//! Windowing and contribution bounding per (stream, input partition), and
//! how far the input may be committed. Two kinds of window:
//!
//! - **count windows** (change-one): blocks of exactly `n` accepted readings
//!   cut at deterministic offsets; `n` and every position are public;
//! - **time windows** (add-remove): a reading's window is `⌊event time /
//!   length⌋`, a function of that reading alone; a window closes at a moment
//!   no reading decides ([`Windower::close_due`]) and is released even when
//!   empty, with no padding. See docs/DESIGN.md §3.
//!
//! Privacy argument: after bounding, one device is at most `k` records of any
//! window, and for every horizon `h` at most `W` windows hold its readings
//! of `h`: a window is charged to *every* horizon whose readings of the
//! device it holds (a window straddling a horizon boundary counts against
//! both), which is what the sensitivities and the accountant assume. Every
//! decision uses arrival order, offsets, device ids and event times, never
//! values (change-one: those are public). Under add-remove with time
//! windows, whether a reading is kept depends only on its own event time,
//! its own message timestamp, its own device's earlier readings and on which
//! windows were already released, never on another device's presence; so
//! adding or removing one device changes only windows that hold its
//! readings. Replaying the same input rebuilds the same windows and the
//! keyed noise repeats. A device's counts and groups live in the lanes'
//! and group tables or, for a registry device, in its slot of the loop's
//! registry replica (module `hosted`); where they live changes no decision.

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
impl Windower {
    /// Devices in a lane's table (tests).
    fn devices_in(&self, stream: usize, partition: i32) -> usize {
        self.lanes
            .get(&(stream, partition))
            .map_or(0, |l| l.devices.len() + l.hosted.live())
    }
}
mod counts;
mod groups;
mod hosted;
mod types;

pub(crate) use hosted::Hosted;
pub use types::*;

use counts::{DeviceCounts, Layout};
use groups::GroupTable;
use hosted::{HostedCount, HostedParts, Tags};
use std::collections::BTreeMap;

#[derive(Debug, Default)]
struct Open {
    values: Vec<i64>,
    first_offset: i64,
    last_offset: i64,
    last_index: u32,
    /// Event time of the first reading to arrive (timeouts count from it).
    first_event_ms: i64,
    /// Earliest and latest event time among the readings.
    min_event_ms: i64,
    max_event_ms: i64,
    charges: Vec<(u64, i64)>,
}

#[derive(Debug, Default)]
struct Lane {
    next_seq: u64,
    /// The last released reading's position (offset, index in its
    /// message): count windows skip readings up to it on replay.
    resume_after: Option<(i64, u32)>,
    reference_event_ms: Option<i64>,
    open: Open,
    /// Each device's windows in its current horizon. Kept per lane: a
    /// device stays on one partition (checked upstream), so a lane's counts
    /// are complete, and dropping a revoked partition drops exactly them.
    devices: DeviceCounts,
    /// Windows whose charges are still needed: (seq, latest horizon
    /// charged, state records holding them).
    live: Vec<(u64, i64, u32)>,
    /// Time windows: the open windows by seq (= window index), the first
    /// seq not yet released is `next_seq`; set once the lane has started.
    timed: std::collections::BTreeMap<u64, Open>,
    started: bool,
    /// Horizons before this one were swept from `devices`.
    swept_before: i64,
    /// Devices whose counts here are kept in their replica slots
    /// (module `hosted`).
    hosted: HostedCount,
    /// The tag of the lane's grouped stream and partition (0: not known
    /// yet); the lane goes when the tag dies (a dropped partition).
    tag: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct DeviceHorizon {
    horizon: i64,
    windows: u32,
    /// Readings in window `last_seq` (the window charged last); a device
    /// has readings in the open window exactly when it was charged in it.
    in_window: u32,
    last_seq: u64,
}

impl DeviceHorizon {
    /// No window charged yet in `horizon`.
    fn fresh(horizon: i64) -> Self {
        Self {
            horizon,
            windows: 0,
            in_window: 0,
            last_seq: u64::MAX,
        }
    }
}

/// A lane's device counts rebuilt from the charges of its released
/// windows, one state record at a time (the records of a window in any
/// order, windows in any order: a device's count per horizon is the number
/// of windows charging it, its latest horizon wins), so restore never holds
/// all charges at once. Built off the consuming loop, then
/// [`Windower::install_restored`].
#[derive(Debug, Clone)]
pub struct RestoredLane {
    devices: DeviceCounts,
    /// Grouped streams: the devices' groups from the same charges (one
    /// group: this lane's).
    groups: Option<(u32, GroupTable)>,
    /// Per window: (latest horizon charged, state records declared).
    live: std::collections::BTreeMap<u64, (i64, u32)>,
}

impl RestoredLane {
    /// Count one state record of window `seq` (which has `records` in all).
    /// Each device is charged once per window and horizon.
    pub fn add(&mut self, seq: u64, records: u32, charges: &[(u64, i64)]) {
        if let Some((group, t)) = &mut self.groups {
            for &(dk, h) in charges {
                t.record(dk, h, *group);
            }
        }
        for &(dk, h) in charges {
            // Every restored device is kept, whatever the device limit:
            // refusing one would hand it fresh caps.
            self.devices
                .update(dk, DeviceHorizon::fresh(h), seq, usize::MAX, |e| {
                    if h > e.horizon {
                        *e = DeviceHorizon::fresh(h);
                    }
                    if h == e.horizon && e.last_seq != seq {
                        e.windows += 1;
                        e.last_seq = seq;
                    }
                });
        }
        let newest = charges.iter().map(|x| x.1).max().unwrap_or(i64::MIN);
        let w = self.live.entry(seq).or_insert((i64::MIN, records));
        w.0 = w.0.max(newest);
    }
}

/// All windows of one process.
#[derive(Debug)]
pub struct Windower {
    rules: Vec<StreamRules>,
    horizon_ms: i64,
    lateness_ms: i64,
    /// The seq of the window the last accepted reading went to.
    last_accepted_seq: u64,
    lanes: FastMap<(usize, i32), Lane>,
    /// Grouped streams: each device's groups, per (first group's stream
    /// index, partition).
    groups: FastMap<(usize, i32), GroupTable>,
    /// Per stream: windows opened so far (a public count).
    opened: Vec<u64>,
    /// Most devices a lane counts ([`Admission::DroppedDeviceLimit`]).
    device_limit: usize,
    /// How lanes pack their device counts.
    layout: Layout,
    /// Streams whose time lanes start only when told
    /// ([`Windower::start_lane_at`]): slots of private keys.
    bound_only: Vec<bool>,
    /// Which (grouped stream, partition) a replica slot's entries belong to.
    tags: Tags,
}

/// The lane `key`, made if new.
fn lane_mut(
    lanes: &mut FastMap<(usize, i32), Lane>,
    key: (usize, i32),
    layout: Layout,
) -> &mut Lane {
    lanes.entry(key).or_insert_with(|| Lane {
        devices: DeviceCounts::with_layout(layout),
        ..Lane::default()
    })
}

impl Windower {
    /// Readings more than `lateness_ms` older than a lane's reference are
    /// refused ([`Windower::is_too_old`]).
    pub fn new(rules: Vec<StreamRules>, horizon_ms: i64, lateness_ms: i64) -> Self {
        assert!(horizon_ms > 0 && lateness_ms >= 0);
        assert!(rules
            .iter()
            .all(|r| r.window_ms.is_none_or(|l| l > 0 && horizon_ms % l == 0)));
        Self {
            opened: vec![0; rules.len()],
            rules,
            horizon_ms,
            lateness_ms,
            last_accepted_seq: 0,
            lanes: FastMap::default(),
            groups: FastMap::default(),
            device_limit: usize::MAX,
            layout: Layout::DEFAULT,
            bound_only: Vec::new(),
            tags: Tags::default(),
        }
    }

    /// Time lanes of `streams` start only by [`Windower::start_lane_at`]
    /// (slots of private keys release nothing until bound).
    pub fn with_bound_only(mut self, streams: impl IntoIterator<Item = usize>) -> Self {
        self.bound_only = vec![false; self.rules.len()];
        for s in streams {
            self.bound_only[s] = true;
        }
        self
    }

    /// Start a time lane at window `first_seq` unless it has started (a
    /// slot bound to a key, from the first window it routes).
    pub fn start_lane_at(&mut self, stream: usize, partition: i32, first_seq: u64) {
        if self.rules[stream].window_ms.is_none() {
            return;
        }
        let lane = lane_mut(&mut self.lanes, (stream, partition), self.layout);
        if !lane.started {
            lane.started = true;
            lane.next_seq = first_seq;
        }
    }

    /// Count at most `limit` devices per lane; readings of further devices
    /// are dropped ([`Admission::DroppedDeviceLimit`]) until a horizon
    /// sweep makes room.
    pub fn with_device_limit(mut self, limit: usize) -> Self {
        self.device_limit = limit;
        self
    }

    /// Devices counted in each lane and the bytes their counts hold.
    pub fn lane_devices(&self) -> impl Iterator<Item = ((usize, i32), usize, usize)> + '_ {
        self.lanes
            .iter()
            .map(|(k, l)| (*k, l.devices.len() + l.hosted.live(), l.devices.bytes()))
    }

    /// Devices counted in the lane (stream, partition), if it exists.
    pub fn lane_device_count(&self, stream: usize, partition: i32) -> Option<usize> {
        self.lanes
            .get(&(stream, partition))
            .map(|l| l.devices.len() + l.hosted.live())
    }

    /// The seq of the window the last [`Admission::Accepted`] reading joined.
    pub fn last_accepted_seq(&self) -> u64 {
        self.last_accepted_seq
    }

    /// Start the time-window lanes of `partition` that have not started
    /// (no release ledger): the first window is the oldest one still open
    /// at `now_ms`, a moment no reading decides. A lane resumed from the
    /// ledger continues after its last released window instead.
    pub fn start_time_lanes(&mut self, partition: i32, now_ms: i64) {
        for (s, r) in self.rules.iter().enumerate() {
            let Some(len) = r.window_ms else { continue };
            if self.bound_only.get(s) == Some(&true) {
                continue;
            }
            let lane = lane_mut(&mut self.lanes, (s, partition), self.layout);
            if !lane.started {
                lane.started = true;
                lane.next_seq = first_open_window(now_ms, len, self.lateness_ms);
            }
        }
    }

    /// Close every time window that is due at `now_ms` (wall clock): its
    /// end plus the allowed lateness has passed, and every message appended
    /// before that moment has been handled (`read_until(partition)`, the
    /// moment up to which the caller knows that, is past it). Then every
    /// reading whose message timestamp is before the due moment was offered
    /// first, and whether a reading is in its window depends on that reading
    /// alone. Empty windows are released too. At most `limit` windows per
    /// lane and call, oldest first.
    ///
    /// Due order per output partition (`output_of(partition)`): a window
    /// closes only once every started time lane whose releases share its
    /// output partition can close the same due moment (the least
    /// `read_until` of their partitions), and the windows closed here come
    /// out ordered by (end, stream, partition). Releases then reach an
    /// output partition in an order no input decides: a partition whose
    /// reading happened to lag (one more message to handle) cannot let
    /// another partition's release of a later or equal due moment overtake
    /// it (docs/DESIGN.md §8).
    pub fn close_due(
        &mut self,
        now_ms: i64,
        read_until: impl Fn(i32) -> i64,
        output_of: impl Fn(i32) -> i32,
        limit: usize,
        closed: &mut Vec<ClosedWindow>,
    ) {
        let mut keys: Vec<(usize, i32)> = self
            .lanes
            .iter()
            .filter(|((s, _), l)| l.started && self.rules[*s].window_ms.is_some())
            .map(|(k, _)| *k)
            .collect();
        keys.sort_unstable();
        // Per output partition: the moment up to which all its input is read.
        let mut read: BTreeMap<i32, i64> = BTreeMap::new();
        for &(_, p) in &keys {
            let r = read_until(p);
            read.entry(output_of(p))
                .and_modify(|m| *m = (*m).min(r))
                .or_insert(r);
        }
        let first = closed.len();
        for (s, p) in keys {
            let rules = &self.rules[s];
            let len = rules.window_ms.expect("time lanes");
            let lane = self.lanes.get_mut(&(s, p)).expect("listed");
            let read = read[&output_of(p)];
            let lane_before = closed.len();
            while closed.len() - lane_before < limit {
                let due = window_end(lane.next_seq, len).saturating_add(self.lateness_ms);
                if now_ms < due || read < due {
                    break;
                }
                let seq = lane.next_seq;
                let open = lane.timed.remove(&seq).unwrap_or_default();
                let oldest_accepted = window_end(seq, len);
                closed.push(close(
                    lane,
                    open,
                    (s, p),
                    rules,
                    self.horizon_ms,
                    oldest_accepted,
                    window_end(seq, len),
                ));
            }
            if closed.len() > lane_before {
                self.sweep_groups(s, p);
            }
        }
        // Stable: a lane's windows keep their order (ends grow with seqs).
        closed[first..].sort_by_key(|w| (w.last_event_ms, w.stream, w.partition));
    }

    /// Continue a (stream, partition) after its last released window.
    pub fn resume(&mut self, stream: usize, partition: i32, r: Resume) {
        let lane = lane_mut(&mut self.lanes, (stream, partition), self.layout);
        lane.next_seq = r.last_seq + 1;
        lane.resume_after = Some((r.last_offset, r.last_index));
        lane.reference_event_ms = Some(r.reference_event_ms);
        lane.open = Open::default();
        lane.timed.clear();
        lane.started = true;
    }

    /// Restore the per-device window counts of a (stream, partition) from
    /// the charges of its released windows (`seq ≤ last released`). The
    /// lane's counts are replaced, so a restore after a hand-over never
    /// counts a window twice; windows after the last release are charged
    /// again when the input is replayed.
    pub fn restore_charges(
        &mut self,
        stream: usize,
        partition: i32,
        windows: Vec<(u64, Vec<(u64, i64)>)>,
    ) {
        let mut r = self.restorer(stream, 0);
        for (seq, charges) in windows {
            r.add(seq, charge_records(charges.len()), &charges);
        }
        self.install_restored(stream, partition, r);
    }

    /// An empty [`RestoredLane`] for a lane of `stream`, its table sized
    /// for about `devices` devices (a hint: it grows past it as needed).
    pub fn restorer(&self, stream: usize, devices: usize) -> RestoredLane {
        RestoredLane {
            devices: DeviceCounts::with_capacity(self.layout, devices),
            groups: self.rules[stream]
                .group
                .map(|g| (g.index, GroupTable::default())),
            live: std::collections::BTreeMap::new(),
        }
    }

    /// Replace a lane's device counts with restored ones (a grouped lane's
    /// device groups are added to its stream's table). Panics if entries of
    /// its grouped stream on `partition` are in replica slots: the caller
    /// moves them back first (`Windower::evict`).
    pub fn install_restored(&mut self, stream: usize, partition: i32, r: RestoredLane) {
        self.check_nothing_hosted(stream, partition);
        if let (Some(g), Some((_, t))) = (self.rules[stream].group, &r.groups) {
            self.groups
                .entry((g.first, partition))
                .or_default()
                .merge(t);
        }
        let lane = lane_mut(&mut self.lanes, (stream, partition), self.layout);
        lane.devices = r.devices;
        // Counts of horizons the lane already swept are left out, as its
        // sweep would have: no reading of them is admitted, and a lane's
        // table holds only horizons from `swept_before` on (which hosted
        // counts rely on: module `hosted`, rule 3).
        let from = lane.swept_before;
        lane.devices
            .rebase(from, lane.next_seq, |d| d.horizon >= from);
        lane.live = r
            .live
            .into_iter()
            .map(|(seq, (h, records))| (seq, h, records))
            .collect();
    }

    /// Forget a partition's open windows (revoked; they rebuild by replay).
    pub fn drop_partition(&mut self, partition: i32) {
        self.lanes.retain(|&(_, p), _| p != partition);
        self.groups.retain(|&(_, p), _| p != partition);
        // Replica slots holding its entries now hold nothing.
        self.tags.drop_partition(partition);
    }

    /// Whether a reading is older than the lane's reference (the latest
    /// event time of its closed windows, a deterministic figure) by more
    /// than the allowed lateness. A replayed reading inside a window released
    /// before a restart is never too old: the windower skips it, and judging
    /// it against the newer reference would dead-letter a released reading.
    /// Time windows judge lateness per reading in [`Windower::admit`] instead.
    pub fn is_too_old(&self, stream: usize, partition: i32, offset: i64, event_ms: i64) -> bool {
        if self.rules[stream].window_ms.is_some() {
            return false;
        }
        self.lanes.get(&(stream, partition)).is_some_and(|l| {
            l.resume_after.is_none_or(|(o, _)| offset > o)
                && l.reference_event_ms
                    .is_some_and(|r| event_ms < r.saturating_sub(self.lateness_ms))
        })
    }

    /// Offer one top-coded reading from a message stamped `msg_ms`; returns
    /// what happened and any windows that closed (count windows: a timed-out
    /// one before it, a full one with it; time windows close in
    /// [`Windower::close_due`]).
    #[allow(clippy::too_many_arguments)] // the hot path: plain values, no struct to build per reading
    pub fn admit(
        &mut self,
        stream: usize,
        partition: i32,
        offset: i64,
        dk: u64,
        units: i64,
        event_ms: i64,
        msg_ms: i64,
        closed: &mut Vec<ClosedWindow>,
    ) -> Admission {
        self.admit_at(
            stream,
            partition,
            (offset, 0),
            dk,
            units,
            event_ms,
            msg_ms,
            closed,
        )
    }

    /// [`Windower::admit`] for the reading at `index` of the message at
    /// `offset`: a restart inside a message resumes at the reading after
    /// the last one released.
    #[allow(clippy::too_many_arguments)] // the hot path, as `admit`
    pub fn admit_at(
        &mut self,
        stream: usize,
        partition: i32,
        at: (i64, u32),
        dk: u64,
        units: i64,
        event_ms: i64,
        msg_ms: i64,
        closed: &mut Vec<ClosedWindow>,
    ) -> Admission {
        self.admit_hosted(
            stream, partition, at, dk, units, event_ms, msg_ms, closed, None,
        )
    }

    /// [`Windower::admit_at`] for a device with a slot in the loop's
    /// registry replica (`host`), which may keep its entries of a grouped
    /// stream (module `hosted`).
    #[allow(clippy::too_many_arguments)] // the hot path, as `admit`
    pub(crate) fn admit_hosted(
        &mut self,
        stream: usize,
        partition: i32,
        at: (i64, u32),
        dk: u64,
        units: i64,
        event_ms: i64,
        msg_ms: i64,
        closed: &mut Vec<ClosedWindow>,
        host: Option<&mut Hosted>,
    ) -> Admission {
        let before = closed.len();
        let a = self.admit_one(
            stream, partition, at, dk, units, event_ms, msg_ms, closed, host,
        );
        if closed.len() > before {
            self.sweep_groups(stream, partition);
        }
        a
    }

    /// A grouped lane closed a window: forget device groups of horizons no
    /// lane of its stream accepts any more (the slowest lane decides). A
    /// group without a lane here yet does not hold the sweep back: the
    /// table refuses swept horizons itself, so a lane made later cannot
    /// count a device in a group of a forgotten horizon.
    fn sweep_groups(&mut self, stream: usize, partition: i32) {
        let Some(g) = self.rules[stream].group else {
            return;
        };
        let before = (g.first..g.first + g.count)
            .filter_map(|s| self.lanes.get(&(s, partition)).map(|l| l.swept_before))
            .min()
            .unwrap_or(0);
        if let Some(t) = self.groups.get_mut(&(g.first, partition)) {
            t.sweep(before);
        }
    }

    /// [`Windower::admit_at`] without the group sweep.
    #[allow(clippy::too_many_arguments)] // the hot path, as `admit`
    fn admit_one(
        &mut self,
        stream: usize,
        partition: i32,
        (offset, index): (i64, u32),
        dk: u64,
        units: i64,
        event_ms: i64,
        msg_ms: i64,
        closed: &mut Vec<ClosedWindow>,
        host: Option<&mut Hosted>,
    ) -> Admission {
        let mut lane = lane_mut(&mut self.lanes, (stream, partition), self.layout);
        // A slot that may keep this lane's entries gets them first (most
        // often it holds them already: one look at the lane's tag).
        let mut host = match (host, self.rules[stream].group) {
            (Some(h), Some(g)) if h.holds_lane(lane.tag, g.index) => Some(h),
            (Some(h), Some(g)) => {
                let hosted = self.host(h, dk, stream, partition, g);
                lane = lane_mut(&mut self.lanes, (stream, partition), self.layout);
                hosted.then_some(h)
            }
            _ => None,
        };
        let rules = &self.rules[stream];
        let seq = match rules.window_ms {
            None => {
                if lane.resume_after.is_some_and(|at| (offset, index) <= at) {
                    return Admission::AlreadyReleased;
                }
                if let Some(t) = rules.timeout_ms {
                    if !lane.open.values.is_empty()
                        && event_ms.saturating_sub(lane.open.first_event_ms) >= t
                    {
                        closed.push(close_count_window(
                            lane,
                            rules,
                            (stream, partition),
                            self.horizon_ms,
                            self.lateness_ms,
                        ));
                    }
                }
                lane.next_seq
            }
            Some(len) => {
                // Late and out-of-order are decided by this reading
                // and this device alone (module doc).
                if event_ms < 0 {
                    return Admission::DroppedLate;
                }
                let seq = (event_ms / len) as u64;
                if !lane.started {
                    // Only callers that never start lanes (unit tests, benches).
                    lane.started = true;
                    lane.next_seq = seq;
                }
                if seq < lane.next_seq
                    || msg_ms >= window_end(seq, len).saturating_add(self.lateness_ms)
                {
                    // Replayed input up to the last released window's last
                    // reading is counted apart from late readings.
                    if lane.resume_after.is_some_and(|at| (offset, index) <= at) {
                        return Admission::AlreadyReleased;
                    }
                    return Admission::DroppedLate;
                }
                seq
            }
        };
        // One probe per reading: the device's horizon count and its count
        // in its latest window live in one entry.
        let horizon = event_ms.div_euclid(self.horizon_ms);
        // A horizon swept from the table (over for every reading still
        // accepted) cannot be charged again: its devices' counts are gone.
        // Only a count window's message judged before a close moved the
        // lane on reaches this (time windows never hold such readings).
        if horizon < lane.swept_before {
            return Admission::DroppedLate;
        }
        // Grouped streams: the device's groups of this horizon, looked up
        // only when it first reaches this group's lane in the horizon
        // (after that, the lane's own count shows it is in).
        let groups = &mut self.groups;
        let open_from = lane.next_seq;
        let Lane {
            devices,
            open: count_open,
            timed,
            hosted,
            swept_before,
            ..
        } = &mut *lane;
        let opened = &mut self.opened[stream];
        let last_accepted_seq = &mut self.last_accepted_seq;
        let fresh = DeviceHorizon::fresh(horizon);
        let (held_counts, mut held_group) = match host.as_mut().map(|h| h.parts()) {
            Some(HostedParts { counts, group }) => (Some(counts), Some(group)),
            None => (None, None),
        };
        let judge = |entry: &mut DeviceHorizon| {
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
                    let t = groups.entry((g.first, partition)).or_default();
                    let ok = match held_group.as_mut() {
                        Some(held) => held.admit(t, dk, horizon, g.index, g.max_groups),
                        None => t.admit(dk, horizon, g.index, g.max_groups),
                    };
                    if !ok {
                        return Admission::DroppedGroupCap;
                    }
                }
            }
            let open = match rules.window_ms {
                None => count_open,
                Some(_) => {
                    let o = timed.entry(seq).or_default();
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
                open.charges.push((dk, horizon));
            } else if in_window == 0 {
                // First reading of this device in this window: charge a window.
                if entry.windows >= rules.max_windows_per_device {
                    return Admission::DroppedHorizonCap;
                }
                entry.windows += 1;
                entry.last_seq = seq;
                open.charges.push((dk, horizon));
            }
            entry.in_window = in_window + 1;
            if open.values.is_empty() {
                *opened += 1;
                open.first_offset = offset;
                open.first_event_ms = event_ms;
                (open.min_event_ms, open.max_event_ms) = (event_ms, event_ms);
            }
            open.last_offset = offset;
            open.last_index = index;
            open.min_event_ms = open.min_event_ms.min(event_ms);
            open.max_event_ms = open.max_event_ms.max(event_ms);
            open.values.push(units);
            *last_accepted_seq = seq;
            Admission::Accepted
        };
        let limit = self.device_limit;
        let judged = match held_counts {
            Some(counts) => {
                let room = devices.len() + hosted.live() < limit;
                Self::judge_hosted(counts, hosted, room, *swept_before, fresh, judge)
            }
            None => devices.update(
                dk,
                fresh,
                open_from,
                limit.saturating_sub(hosted.live()),
                judge,
            ),
        };
        // A new device in a lane that holds `device_limit` devices.
        let Some(judged) = judged else {
            return Admission::DroppedDeviceLimit;
        };
        if judged == Admission::Accepted
            && rules.window_ms.is_none()
            && lane.open.values.len() >= rules.window_size
        {
            closed.push(close_count_window(
                lane,
                rules,
                (stream, partition),
                self.horizon_ms,
                self.lateness_ms,
            ));
        }
        judged
    }

    /// Start fetching the table slot of `device` in its lane and, for a
    /// group's lane, in its stream's group table (a hint for a coming
    /// [`Windower::admit`]; the group table is read only at a device's first
    /// reading in a lane and horizon, but fetched a message ahead its miss
    /// costs less than it does in the middle of `admit`: docs/performance.md,
    /// group-by).
    #[inline]
    pub fn prefetch(&self, stream: usize, partition: i32, device: u64) {
        if let Some(lane) = self.lanes.get(&(stream, partition)) {
            lane.devices.prefetch(device);
        }
        if let Some(g) = self.rules[stream].group {
            if let Some(t) = self.groups.get(&(g.first, partition)) {
                t.prefetch(device);
            }
        }
    }

    /// Windows of `stream` opened so far.
    pub fn windows_opened(&self, stream: usize) -> u64 {
        self.opened[stream]
    }

    /// The offset up to which `partition` may be committed, given that every
    /// message before `next_offset` has been handled: no further than the
    /// first reading of any open window on it.
    pub fn committable(&self, partition: i32, next_offset: i64) -> i64 {
        self.lanes
            .iter()
            .filter(|((_, p), _)| *p == partition)
            .flat_map(|(_, l)| std::iter::once(&l.open).chain(l.timed.values()))
            .filter(|o| !o.values.is_empty())
            .map(|o| o.first_offset)
            .fold(next_offset, i64::min)
    }
}

fn window_end(seq: u64, len: i64) -> i64 {
    (seq as i64).saturating_add(1).saturating_mul(len)
}

/// The first time window not yet due at `now_ms`.
fn first_open_window(now_ms: i64, len: i64, lateness_ms: i64) -> u64 {
    now_ms.saturating_sub(lateness_ms).max(0).div_euclid(len) as u64
}

/// Take a count window's open block out of its lane.
/// Close the lane's open count window (full, or timed out).
fn close_count_window(
    lane: &mut Lane,
    rules: &StreamRules,
    id: (usize, i32),
    horizon_ms: i64,
    lateness_ms: i64,
) -> ClosedWindow {
    let open = take_open(lane, rules);
    let (oldest, reference) = oldest_count(lane, &open, lateness_ms);
    close(lane, open, id, rules, horizon_ms, oldest, reference)
}

fn take_open(lane: &mut Lane, rules: &StreamRules) -> Open {
    std::mem::replace(
        &mut lane.open,
        Open {
            values: Vec::with_capacity(rules.window_size),
            ..Open::default()
        },
    )
}

/// Count windows: (oldest event time still accepted, new lateness
/// reference) after closing `open`: the reference is the latest event time
/// of any window so far (monotone).
fn oldest_count(lane: &Lane, open: &Open, lateness_ms: i64) -> (i64, i64) {
    let reference = lane
        .reference_event_ms
        .map_or(open.max_event_ms, |r| r.max(open.max_event_ms));
    (reference.saturating_sub(lateness_ms), reference)
}

/// Close the lane's window `lane.next_seq` holding `open`.
fn close(
    lane: &mut Lane,
    open: Open,
    (stream, partition): (usize, i32),
    rules: &StreamRules,
    horizon_ms: i64,
    oldest_accepted: i64,
    reference: i64,
) -> ClosedWindow {
    lane.reference_event_ms = Some(reference);
    let seq = lane.next_seq;
    // Horizons ending at or before the oldest event time still accepted can
    // never be charged again: windows that charged only those are retired.
    lane.live.push((
        seq,
        open.charges.iter().map(|c| c.1).max().unwrap_or(i64::MIN),
        charge_records(open.charges.len()),
    ));
    let (mut retired, mut retired_records) = (Vec::new(), Vec::new());
    lane.live.retain(|&(s, h, records)| {
        // The newest window stays: a restart restores from its record.
        let dead =
            s != seq && (h == i64::MIN || (h + 1).saturating_mul(horizon_ms) <= oldest_accepted);
        if dead {
            retired.push(s);
            retired_records.push(records);
        }
        !dead
    });
    // Devices whose horizon is over carry nothing a later reading needs (it
    // starts its own horizon afresh): dropped once per horizon, so device
    // churn does not grow the table. Readings of the open windows are never
    // older than `oldest_accepted`, so no device in them is dropped.
    let oldest_horizon = oldest_accepted.div_euclid(horizon_ms);
    if oldest_horizon > lane.swept_before {
        // Every window but those after `seq` is closed now.
        lane.devices.rebase(oldest_horizon, seq + 1, |d| {
            (d.horizon + 1).saturating_mul(horizon_ms) > oldest_accepted
        });
        lane.hosted.sweep(oldest_horizon);
        lane.swept_before = oldest_horizon;
    }
    let mut values = open.values;
    let (padded, first_event_ms, last_event_ms) = match rules.window_ms {
        None => {
            let padded = rules.window_size.saturating_sub(values.len()) as u64;
            values.resize(rules.window_size, rules.midpoint);
            (padded, open.min_event_ms, open.max_event_ms)
        }
        Some(len) => (0, (seq as i64).saturating_mul(len), window_end(seq, len)),
    };
    let w = ClosedWindow {
        stream,
        partition,
        seq,
        values,
        first_offset: open.first_offset,
        last_offset: open.last_offset,
        last_index: open.last_index,
        first_event_ms,
        last_event_ms,
        padded,
        timed: rules.window_ms.is_some(),
        charges: open.charges,
        reference_event_ms: reference,
        retired,
        retired_records,
    };
    lane.next_seq += 1;
    w
}
