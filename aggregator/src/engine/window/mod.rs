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
            .get((stream, partition))
            .map_or(0, |l| l.devices.len() + l.hosted.live())
    }
}
mod admit;
mod counts;
mod group_cap;
mod hosted;
mod lane;
mod lanes;
mod types;

pub(crate) use admit::Offer;
pub(crate) use hosted::Hosted;
pub use lane::RestoredLane;
pub use types::*;

use counts::{DeviceCounts, DeviceHorizon, Layout};
use group_cap::GroupTable;
use hosted::{HostedParts, Tags};
use lane::{close, close_count_window, first_open_window, window_end};
use lane::{Lane, Open};
use lanes::Lanes;
use std::collections::BTreeMap;

/// All windows of one process.
#[derive(Debug)]
pub struct Windower {
    rules: Vec<StreamRules>,
    horizon_ms: i64,
    lateness_ms: i64,
    /// The seq of the window the last accepted reading went to.
    last_accepted_seq: u64,
    lanes: Lanes,
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
            lanes: Lanes::default(),
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
        let lane = self.lanes.get_or_make((stream, partition), self.layout);
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
            .map(|(k, l)| (k, l.devices.len() + l.hosted.live(), l.devices.bytes()))
    }

    /// Devices counted in the lane (stream, partition), if it exists.
    pub fn lane_device_count(&self, stream: usize, partition: i32) -> Option<usize> {
        self.lanes
            .get((stream, partition))
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
            let lane = self.lanes.get_or_make((s, partition), self.layout);
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
            .map(|(k, _)| k)
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
            let lane = self.lanes.get_mut((s, p)).expect("listed");
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
        let lane = self.lanes.get_or_make((stream, partition), self.layout);
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
        let lane = self.lanes.get_or_make((stream, partition), self.layout);
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
        self.lanes.retain(|(_, p)| p != partition);
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
        self.lanes.get((stream, partition)).is_some_and(|l| {
            l.resume_after.is_none_or(|(o, _)| offset > o)
                && l.reference_event_ms
                    .is_some_and(|r| event_ms < r.saturating_sub(self.lateness_ms))
        })
    }

    /// Offer one top-coded reading from a message stamped `msg_ms`; returns
    /// what happened and any windows that closed (count windows: a timed-out
    /// one before it, a full one with it; time windows close in
    /// [`Windower::close_due`]).
    #[allow(clippy::too_many_arguments)] // tests' and benches' shorthand for an `Offer`
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
    #[allow(clippy::too_many_arguments)] // as `admit`
    pub fn admit_at(
        &mut self,
        stream: usize,
        partition: i32,
        (offset, index): (i64, u32),
        device: u64,
        units: i64,
        event_ms: i64,
        msg_ms: i64,
        closed: &mut Vec<ClosedWindow>,
    ) -> Admission {
        let offer = Offer {
            stream,
            partition,
            offset,
            index,
            device,
            units,
            event_ms,
            msg_ms,
        };
        self.admit_hosted(offer, closed, None)
    }

    /// Offer a reading of a device with a slot in the loop's registry
    /// replica (`host`), which may keep its entries of a grouped stream
    /// (module `hosted`).
    pub(crate) fn admit_hosted(
        &mut self,
        offer: Offer,
        closed: &mut Vec<ClosedWindow>,
        host: Option<&mut Hosted>,
    ) -> Admission {
        let before = closed.len();
        let a = self.admit_one(&offer, closed, host);
        if closed.len() > before {
            self.sweep_groups(offer.stream, offer.partition);
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
            .filter_map(|s| self.lanes.get((s, partition)).map(|l| l.swept_before))
            .min()
            .unwrap_or(0);
        if let Some(t) = self.groups.get_mut(&(g.first, partition)) {
            t.sweep(before);
        }
    }

    /// [`Windower::admit_hosted`] without the group sweep: the reading's
    /// window or why none (`admit::window_of`: replay, lateness, timeout),
    /// a swept horizon, the device limit, then the caps and the charge
    /// (`admit::Judge`); a count window it fills closes.
    fn admit_one(
        &mut self,
        o: &Offer,
        closed: &mut Vec<ClosedWindow>,
        host: Option<&mut Hosted>,
    ) -> Admission {
        let id = o.lane();
        let mut lane = self.lanes.get_or_make(id, self.layout);
        // A slot that may keep this lane's entries gets them first (most
        // often it holds them already: one look at the lane's tag).
        let host = match (host, self.rules[o.stream].group) {
            (Some(h), Some(g)) if h.holds_lane(lane.tag, g.index) => Some(h),
            (Some(h), Some(g)) => {
                let hosted = self.host(h, o.device, o.stream, o.partition, g);
                lane = self.lanes.get_or_make(id, self.layout);
                hosted.then_some(h)
            }
            _ => None,
        };
        let rules = &self.rules[o.stream];
        let timing = (self.horizon_ms, self.lateness_ms);
        let seq = match admit::window_of(lane, rules, o, timing, closed) {
            Ok(seq) => seq,
            Err(dropped) => return dropped,
        };
        // One probe per reading: the device's horizon count and its count
        // in its latest window live in one entry.
        let horizon = o.event_ms.div_euclid(self.horizon_ms);
        // A horizon swept from the table (over for every reading still
        // accepted) cannot be charged again: its devices' counts are gone.
        // Only a count window's message judged before a close moved the
        // lane on reaches this (time windows never hold such readings).
        if horizon < lane.swept_before {
            return Admission::DroppedLate;
        }
        let open_from = lane.next_seq;
        let Lane {
            devices,
            open,
            timed,
            hosted,
            swept_before,
            ..
        } = &mut *lane;
        let (held_counts, held_group) = match host.map(|h| h.parts()) {
            Some(HostedParts { counts, group }) => (Some(counts), Some(group)),
            None => (None, None),
        };
        // Grouped streams: the device's groups of this horizon are looked
        // up only when it first reaches this group's lane in the horizon
        // (after that, the lane's own count shows it is in).
        let judge = admit::Judge {
            rules,
            seq,
            horizon,
            offer: o,
            groups: &mut self.groups,
            held_group,
            count_open: open,
            timed,
            opened: &mut self.opened[o.stream],
            last_accepted_seq: &mut self.last_accepted_seq,
        };
        let (fresh, limit) = (DeviceHorizon::fresh(horizon), self.device_limit);
        let judged = match held_counts {
            Some(counts) => {
                let room = devices.len() + hosted.live() < limit;
                Self::judge_hosted(counts, hosted, room, *swept_before, fresh, |e| {
                    judge.decide(e)
                })
            }
            None => {
                let room = limit.saturating_sub(hosted.live());
                devices.update(o.device, fresh, open_from, room, |e| judge.decide(e))
            }
        };
        // A new device in a lane that holds `device_limit` devices.
        let Some(judged) = judged else {
            return Admission::DroppedDeviceLimit;
        };
        if judged == Admission::Accepted
            && rules.window_ms.is_none()
            && lane.open.values.len() >= rules.window_size
        {
            closed.push(close_count_window(lane, rules, id, timing.0, timing.1));
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
        if let Some(lane) = self.lanes.get((stream, partition)) {
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
