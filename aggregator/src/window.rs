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
//! keyed noise repeats.

use crate::devices::DeviceTable;
use std::collections::HashMap;

/// Device ids are keyed by their 64-bit rapidhash V3 (the portable variant
/// with the default secrets, whose output the crate keeps stable across
/// versions, so keys written to the state topic stay valid): one hash per
/// reading, a few nanoseconds, no allocation. A collision (≈ n²/2⁶⁵ for
/// random ids; an input producer could craft one, the hash is not
/// cryptographic) can only make two devices share caps, which drops
/// readings and never lets a device exceed its bounds.
pub fn device_key(device: &str) -> u64 {
    rapidhash::v3::rapidhash_v3(device.as_bytes())
}

/// Names the [`device_key`] function in state records: charges written under
/// another scheme cannot be matched to devices and are refused on restore.
pub const DEVICE_KEY_SCHEME: &str = "rapidhash-v3";

/// Small maps read per reading (lanes, stream names): a fast seeded hash, not SipHash.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Per-stream settings the windower needs (public parameters).
#[derive(Debug, Clone)]
pub struct StreamRules {
    pub name: String,
    pub window_size: usize,
    pub max_readings_per_device: u32,
    pub max_windows_per_device: u32,
    /// Midpoint of the universe in units (padding value).
    pub midpoint: i64,
    /// Close a window padded to `n` once a reading arrives this much later
    /// (event time) than the window's first reading (count windows only).
    pub timeout_ms: Option<i64>,
    /// Time windows of this length (ms); `None`: count windows of `window_size`.
    pub window_ms: Option<i64>,
}

/// Most readings one time window holds; later ones are dropped
/// (`window_full`): the bound the plan's overflow proof assumes.
const MAX_TIME_WINDOW_READINGS: usize = crate::dp::release::MAX_TIME_WINDOW_READINGS as usize;

/// What happened to one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Accepted,
    /// Its offset is inside a window released before a restart.
    AlreadyReleased,
    /// The device already has `k` readings in this window.
    DroppedWindowCap,
    /// The device already touched `W` windows in this horizon.
    DroppedHorizonCap,
    /// Time windows: its window was already released, or its message
    /// arrived after the window's end plus the allowed lateness.
    DroppedLate,
    /// Time windows: its device already has readings in a later window.
    DroppedOutOfOrder,
    /// Time windows: the window holds [`MAX_TIME_WINDOW_READINGS`].
    DroppedWindowFull,
}

/// A full window, ready to release.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedWindow {
    pub stream: usize,
    pub partition: i32,
    pub seq: u64,
    pub values: Vec<i64>,
    pub first_offset: i64,
    pub last_offset: i64,
    /// Count windows: the earliest and latest event time among the
    /// window's readings. Time windows: the window's bounds `[start, end)`.
    pub first_event_ms: i64,
    pub last_event_ms: i64,
    /// How many of the values are midpoint padding (count windows; public).
    pub padded: u64,
    /// A time window: its size and offsets are private (add-remove) and
    /// only its bounds and seq are published ([`ClosedWindow::published`]).
    pub timed: bool,
    /// Devices charged one of their `W` windows by this window, with the
    /// horizon charged (internal state, never published).
    pub charges: Vec<(u64, i64)>,
    /// The lane's lateness reference after this window: the latest event
    /// time of any window so far (monotone).
    pub reference_event_ms: i64,
    /// Earlier windows whose charges can no longer matter (every horizon
    /// they charged is older than any reading the lane still accepts): their
    /// state records can be deleted (compaction tombstones).
    pub retired: Vec<u64>,
}

/// The window metadata a release publishes beside its noisy statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedWindow {
    pub seq: u64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub first_event_ms: i64,
    pub last_event_ms: i64,
    pub n: u64,
    pub padded: u64,
    /// The release time to publish; `None`: the moment it is built.
    pub released_at_ms: Option<i64>,
}

impl ClosedWindow {
    /// What a release may say about this window without noise.
    ///
    /// Count windows (change-one): offsets, arrival event times, `n` and
    /// padding are functions of who sent readings and when, which that
    /// relation makes public. Time windows (add-remove): only the seq and
    /// the window's bounds, which no reading decides; offsets, `n` and
    /// padding would count the readings, so they are published as 0, and
    /// the release time is the window's due moment (end + `lateness_ms`).
    pub fn published(&self, lateness_ms: i64) -> PublishedWindow {
        if self.timed {
            PublishedWindow {
                seq: self.seq,
                first_offset: 0,
                last_offset: 0,
                first_event_ms: self.first_event_ms,
                last_event_ms: self.last_event_ms,
                n: 0,
                padded: 0,
                released_at_ms: Some(self.last_event_ms.saturating_add(lateness_ms)),
            }
        } else {
            PublishedWindow {
                seq: self.seq,
                first_offset: self.first_offset,
                last_offset: self.last_offset,
                first_event_ms: self.first_event_ms,
                last_event_ms: self.last_event_ms,
                n: self.values.len() as u64,
                padded: self.padded,
                released_at_ms: None,
            }
        }
    }
}

/// Where a (stream, partition) resumes after a restart, from the release ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Seq of the last released window.
    pub last_seq: u64,
    /// Last input offset of that window.
    pub last_offset: i64,
    /// The lane's lateness reference after it ([`ClosedWindow::reference_event_ms`]).
    pub reference_event_ms: i64,
}

#[derive(Debug, Default)]
struct Open {
    values: Vec<i64>,
    first_offset: i64,
    last_offset: i64,
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
    resume_after_offset: Option<i64>,
    reference_event_ms: Option<i64>,
    open: Open,
    /// Each device's windows in its current horizon. Kept per lane: a
    /// device stays on one partition (checked upstream), so a lane's counts
    /// are complete, and dropping a revoked partition drops exactly them.
    devices: DeviceTable<DeviceHorizon>,
    /// Windows whose charges are still needed: (seq, latest horizon charged).
    live: Vec<(u64, i64)>,
    /// Time windows: the open windows by seq (= window index), the first
    /// seq not yet released is `next_seq`; set once the lane has started.
    timed: std::collections::BTreeMap<u64, Open>,
    started: bool,
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

/// All windows of one process.
#[derive(Debug)]
pub struct Windower {
    rules: Vec<StreamRules>,
    horizon_ms: i64,
    lateness_ms: i64,
    /// The seq of the window the last accepted reading went to.
    last_accepted_seq: u64,
    lanes: FastMap<(usize, i32), Lane>,
    /// Per stream: windows opened so far (a public count).
    opened: Vec<u64>,
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
        }
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
            let lane = self.lanes.entry((s, partition)).or_default();
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
    pub fn close_due(
        &mut self,
        now_ms: i64,
        read_until: impl Fn(i32) -> i64,
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
        for (s, p) in keys {
            let rules = &self.rules[s];
            let len = rules.window_ms.expect("time lanes");
            let lane = self.lanes.get_mut(&(s, p)).expect("listed");
            let read = read_until(p);
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
        }
    }

    /// Continue a (stream, partition) after its last released window.
    pub fn resume(&mut self, stream: usize, partition: i32, r: Resume) {
        let lane = self.lanes.entry((stream, partition)).or_default();
        lane.next_seq = r.last_seq + 1;
        lane.resume_after_offset = Some(r.last_offset);
        lane.reference_event_ms = Some(r.reference_event_ms);
        lane.open = Open::default();
        lane.timed.clear();
        lane.started = true;
    }

    /// Restore the per-device window counts of a (stream, partition) from
    /// the charges of its released windows (`seq ≤ last released`), in seq
    /// order. The lane's counts are replaced, so a restore after a hand-over
    /// never counts a window twice; windows after the last release are
    /// charged again when the input is replayed.
    pub fn restore_charges(
        &mut self,
        stream: usize,
        partition: i32,
        windows: &[(u64, Vec<(u64, i64)>)],
    ) {
        let mut restored: DeviceTable<DeviceHorizon> = DeviceTable::default();
        for (seq, charges) in windows {
            for &(dk, h) in charges {
                let e = restored.get_or_insert(dk, DeviceHorizon::fresh(h));
                if h > e.horizon {
                    *e = DeviceHorizon::fresh(h);
                }
                if h == e.horizon && e.last_seq != *seq {
                    e.windows += 1;
                    e.last_seq = *seq;
                }
            }
        }
        let lane = self.lanes.entry((stream, partition)).or_default();
        lane.devices = restored;
        lane.live = windows
            .iter()
            .map(|(seq, c)| (*seq, c.iter().map(|x| x.1).max().unwrap_or(i64::MIN)))
            .collect();
    }

    /// Forget a partition's open windows (revoked; they rebuild by replay).
    pub fn drop_partition(&mut self, partition: i32) {
        self.lanes.retain(|&(_, p), _| p != partition);
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
            l.resume_after_offset.is_none_or(|o| offset > o)
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
        let rules = &self.rules[stream];
        let lane = self.lanes.entry((stream, partition)).or_default();
        let seq = match rules.window_ms {
            None => {
                if lane.resume_after_offset.is_some_and(|o| offset <= o) {
                    return Admission::AlreadyReleased;
                }
                if let Some(t) = rules.timeout_ms {
                    if !lane.open.values.is_empty()
                        && event_ms.saturating_sub(lane.open.first_event_ms) >= t
                    {
                        let open = take_open(lane, rules);
                        let oldest = oldest_count(lane, &open, self.lateness_ms);
                        closed.push(close(
                            lane,
                            open,
                            (stream, partition),
                            rules,
                            self.horizon_ms,
                            oldest.0,
                            oldest.1,
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
                    if lane.resume_after_offset.is_some_and(|o| offset <= o) {
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
        let entry = lane
            .devices
            .get_or_insert(dk, DeviceHorizon::fresh(horizon));
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
        let open = match rules.window_ms {
            None => &mut lane.open,
            Some(_) => {
                let o = lane.timed.entry(seq).or_default();
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
            self.opened[stream] += 1;
            open.first_offset = offset;
            open.first_event_ms = event_ms;
            (open.min_event_ms, open.max_event_ms) = (event_ms, event_ms);
        }
        open.last_offset = offset;
        open.min_event_ms = open.min_event_ms.min(event_ms);
        open.max_event_ms = open.max_event_ms.max(event_ms);
        open.values.push(units);
        self.last_accepted_seq = seq;
        if rules.window_ms.is_none() && open.values.len() >= rules.window_size {
            let open = take_open(lane, rules);
            let oldest = oldest_count(lane, &open, self.lateness_ms);
            closed.push(close(
                lane,
                open,
                (stream, partition),
                rules,
                self.horizon_ms,
                oldest.0,
                oldest.1,
            ));
        }
        Admission::Accepted
    }

    /// Start fetching the table slot of `device` in its lane (a hint for a
    /// coming [`Windower::admit`]).
    #[inline]
    pub fn prefetch(&self, stream: usize, partition: i32, device: u64) {
        if let Some(lane) = self.lanes.get(&(stream, partition)) {
            lane.devices.prefetch(device);
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
    ));
    let mut retired = Vec::new();
    lane.live.retain(|&(s, h)| {
        // The newest window stays: a restart restores from its record.
        let dead =
            s != seq && (h == i64::MIN || (h + 1).saturating_mul(horizon_ms) <= oldest_accepted);
        if dead {
            retired.push(s);
        }
        !dead
    });
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
        first_event_ms,
        last_event_ms,
        padded,
        timed: rules.window_ms.is_some(),
        charges: open.charges,
        reference_event_ms: reference,
        retired,
    };
    lane.next_seq += 1;
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are stored in the state topic: the function must never change
    /// under a dependency update (pinned values; a change needs a new
    /// [`DEVICE_KEY_SCHEME`]).
    #[test]
    fn device_keys_are_stable() {
        let got: Vec<u64> = ["", "a", "device-000042", &"x".repeat(300)]
            .iter()
            .map(|d| device_key(d))
            .collect();
        assert_eq!(got, PINNED);
    }
    const PINNED: [u64; 4] = [
        232177599295442350,
        6457959414642172395,
        5447221867655961863,
        5437776271325206279,
    ];

    /// A one-stream windower: horizon 1000 ms, midpoint 50; count windows
    /// of `n` (`window_ms` None) or time windows.
    fn rules(
        n: usize,
        k: u32,
        w: u32,
        timeout: Option<i64>,
        window_ms: Option<i64>,
    ) -> Vec<StreamRules> {
        vec![StreamRules {
            name: "s".into(),
            window_size: n,
            max_readings_per_device: k,
            max_windows_per_device: w,
            midpoint: 50,
            timeout_ms: timeout,
            window_ms,
        }]
    }

    fn windower(n: usize, k: u32, w: u32, timeout: Option<i64>) -> Windower {
        Windower::new(rules(n, k, w, timeout, None), 1000, 3000)
    }

    #[test]
    fn windows_of_n_with_contiguous_seqs_and_tiling_offsets() {
        let mut w = windower(3, 1, 100, None);
        let mut closed = Vec::new();
        for off in 0..9 {
            assert_eq!(
                w.admit(
                    0,
                    0,
                    off,
                    device_key(&format!("d{off}")),
                    off,
                    10,
                    10,
                    &mut closed
                ),
                Admission::Accepted
            );
        }
        assert_eq!(closed.len(), 3);
        for (i, c) in closed.iter().enumerate() {
            assert_eq!(c.seq, i as u64);
            assert_eq!(
                (c.first_offset, c.last_offset),
                (3 * i as i64, 3 * i as i64 + 2)
            );
            assert_eq!(c.values.len(), 3);
        }
        assert_eq!(w.committable(0, 9), 9);
        w.admit(0, 0, 9, device_key("x"), 1, 10, 0, &mut closed);
        assert_eq!(w.committable(0, 10), 9);
    }

    #[test]
    fn per_window_and_per_horizon_caps() {
        let mut w = windower(2, 1, 2, None);
        let mut closed = Vec::new();
        assert_eq!(
            w.admit(0, 0, 0, device_key("a"), 1, 0, 0, &mut closed),
            Admission::Accepted
        );
        assert_eq!(
            w.admit(0, 0, 1, device_key("a"), 1, 0, 0, &mut closed),
            Admission::DroppedWindowCap
        );
        assert_eq!(
            w.admit(0, 0, 2, device_key("b"), 1, 0, 0, &mut closed),
            Admission::Accepted
        ); // window 0 closes
        assert_eq!(
            w.admit(0, 0, 3, device_key("a"), 1, 0, 0, &mut closed),
            Admission::Accepted
        ); // a: 2nd window
        assert_eq!(
            w.admit(0, 0, 4, device_key("c"), 1, 0, 0, &mut closed),
            Admission::Accepted
        ); // window 1 closes
        assert_eq!(
            w.admit(0, 0, 5, device_key("a"), 1, 0, 0, &mut closed),
            Admission::DroppedHorizonCap
        );
        // Next horizon (event time ≥ 1000): a may contribute again.
        assert_eq!(
            w.admit(0, 0, 6, device_key("a"), 1, 1000, 0, &mut closed),
            Admission::Accepted
        );
        assert_eq!(closed.len(), 2);
    }

    #[test]
    fn alternating_horizons_cannot_reset_the_cap() {
        let mut w = windower(1, 1, 1, None);
        let mut closed = Vec::new();
        assert_eq!(
            w.admit(0, 0, 0, device_key("a"), 1, 1000, 0, &mut closed),
            Admission::Accepted
        );
        assert_eq!(
            w.admit(0, 0, 1, device_key("a"), 1, 0, 0, &mut closed),
            Admission::DroppedHorizonCap
        );
        assert_eq!(
            w.admit(0, 0, 2, device_key("a"), 1, 1500, 0, &mut closed),
            Admission::DroppedHorizonCap
        );
        assert_eq!(closed[0].charges, vec![(device_key("a"), 1)]);
    }

    #[test]
    fn restored_charges_keep_the_cap_across_a_restart() {
        let mut w = windower(1, 1, 2, None);
        let mut closed = Vec::new();
        w.admit(0, 0, 0, device_key("a"), 1, 0, 0, &mut closed);
        w.admit(0, 0, 1, device_key("a"), 1, 0, 0, &mut closed);
        let charges: Vec<_> = closed.iter().map(|c| (c.seq, c.charges.clone())).collect();
        // A new process: resume after window 1 and restore its charges.
        let mut w2 = windower(1, 1, 2, None);
        w2.resume(
            0,
            0,
            Resume {
                last_seq: 1,
                last_offset: 1,
                reference_event_ms: 0,
            },
        );
        w2.restore_charges(0, 0, &charges);
        w2.restore_charges(0, 0, &charges); // idempotent
        let mut closed2 = Vec::new();
        assert_eq!(
            w2.admit(0, 0, 2, device_key("a"), 1, 0, 0, &mut closed2),
            Admission::DroppedHorizonCap
        );
        assert_eq!(
            w2.admit(0, 0, 3, device_key("b"), 1, 0, 0, &mut closed2),
            Admission::Accepted
        );
    }

    #[test]
    fn timeout_pads_with_the_midpoint() {
        let mut w = windower(4, 1, 100, Some(500));
        let mut closed = Vec::new();
        w.admit(0, 0, 0, device_key("a"), 7, 0, 0, &mut closed);
        w.admit(0, 0, 1, device_key("b"), 8, 100, 0, &mut closed);
        w.admit(0, 0, 2, device_key("c"), 9, 600, 0, &mut closed);
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].values, vec![7, 8, 50, 50]);
        assert_eq!(closed[0].padded, 2);
        assert_eq!(w.committable(0, 3), 2);
    }

    #[test]
    fn resume_skips_released_offsets_and_continues_seq() {
        let mut w = windower(2, 1, 100, None);
        w.resume(
            0,
            0,
            Resume {
                last_seq: 4,
                last_offset: 9,
                reference_event_ms: 5000,
            },
        );
        let mut closed = Vec::new();
        assert_eq!(
            w.admit(0, 0, 9, device_key("a"), 1, 5000, 0, &mut closed),
            Admission::AlreadyReleased
        );
        assert!(w.is_too_old(0, 0, 20, 1000));
        assert!(!w.is_too_old(0, 0, 20, 2000));
        assert!(
            !w.is_too_old(0, 0, 9, 1000),
            "a released offset is skipped, not too old"
        );
        w.admit(0, 0, 10, device_key("a"), 1, 5000, 0, &mut closed);
        w.admit(0, 0, 11, device_key("b"), 1, 5000, 0, &mut closed);
        assert_eq!(closed[0].seq, 5);
    }

    #[test]
    fn windows_retire_once_their_horizons_are_beyond_lateness() {
        // horizon 1000 ms, lateness 3000 ms, n = 1.
        let mut w = windower(1, 1, 100, None);
        let mut closed = Vec::new();
        w.admit(0, 0, 0, device_key("a"), 1, 500, 0, &mut closed); // horizon 0
        w.admit(0, 0, 1, device_key("a"), 1, 1500, 0, &mut closed); // horizon 1
        w.admit(0, 0, 2, device_key("a"), 1, 3999, 0, &mut closed); // oldest accepted 999: nothing retires
        assert!(closed.iter().all(|c| c.retired.is_empty()));
        w.admit(0, 0, 3, device_key("a"), 1, 4000, 0, &mut closed); // oldest accepted 1000: horizon 0 retires
        assert_eq!(closed[3].retired, vec![0]);
        assert_eq!(closed[3].reference_event_ms, 4000);
        // An older event time does not move the reference back.
        w.admit(0, 0, 4, device_key("b"), 1, 3500, 0, &mut closed);
        assert_eq!(closed[4].reference_event_ms, 4000);
        w.admit(0, 0, 5, device_key("a"), 1, 5000, 0, &mut closed); // oldest accepted 2000: horizon 1 retires
        assert_eq!(closed[5].retired, vec![1]);
        assert!(w.is_too_old(0, 0, 6, 1999));
        assert!(!w.is_too_old(0, 0, 6, 2000));
    }

    /// The repro: n = 2, k = 2, W = 1, horizon 1000 ms. A at 999
    /// and 1001 share window 0 with A at 1002 going to window 1: before the
    /// fix window 0 was charged to horizon 0 only, so A's readings of
    /// horizon 1 sat in two windows.
    #[test]
    fn a_window_straddling_a_horizon_is_charged_to_both() {
        let mut w = windower(2, 2, 1, None);
        let mut closed = Vec::new();
        let a = device_key("a");
        let mut admit =
            |w: &mut Windower, off, dk, ev| w.admit(0, 0, off, dk, 1, ev, ev, &mut closed);
        assert_eq!(admit(&mut w, 0, a, 999), Admission::Accepted);
        assert_eq!(admit(&mut w, 1, a, 1001), Admission::Accepted); // window 0 closes
        assert_eq!(admit(&mut w, 2, a, 1002), Admission::DroppedHorizonCap);
        assert_eq!(admit(&mut w, 3, device_key("b"), 1003), Admission::Accepted);
        assert_eq!(closed[0].charges, vec![(a, 0), (a, 1)]);
        // Restored from those charges, horizon 1 is used up too.
        let charges: Vec<_> = closed.iter().map(|c| (c.seq, c.charges.clone())).collect();
        let mut w2 = windower(2, 2, 1, None);
        w2.restore_charges(0, 0, &charges);
        let mut c2 = Vec::new();
        assert_eq!(
            w2.admit(0, 0, 9, a, 1, 1500, 1500, &mut c2),
            Admission::DroppedHorizonCap
        );
    }

    /// Out of order inside one window: a device's first reading there is of
    /// the newer horizon; a later one of the older horizon is dropped (its
    /// count is no longer kept), never admitted uncharged.
    #[test]
    fn an_older_horizon_inside_a_window_charged_newer_is_dropped() {
        let mut w = windower(3, 2, 1, None);
        let mut closed = Vec::new();
        let a = device_key("a");
        assert_eq!(
            w.admit(0, 0, 0, a, 1, 1001, 0, &mut closed),
            Admission::Accepted
        );
        assert_eq!(
            w.admit(0, 0, 1, a, 1, 999, 0, &mut closed),
            Admission::DroppedHorizonCap
        );
    }

    fn timed(len: i64, k: u32, w: u32) -> Windower {
        Windower::new(rules(0, k, w, None, Some(len)), 1000, 50)
    }

    #[test]
    fn time_windows_follow_event_time_and_close_on_the_clock() {
        // Windows of 100 ms, lateness 50 ms, started at t = 120: window 0
        // (end 100 + 50 = 150 > 120) is the first still open.
        let mut w = timed(100, 1, 100);
        w.start_time_lanes(0, 120);
        let mut closed = Vec::new();
        let mut admit = |w: &mut Windower, off, d: &str, ev, msg| {
            w.admit(0, 0, off, device_key(d), 7, ev, msg, &mut closed)
        };
        assert_eq!(admit(&mut w, 0, "a", 90, 95), Admission::Accepted); // window 0
        assert_eq!(admit(&mut w, 1, "b", 210, 212), Admission::Accepted); // window 2
        assert_eq!(admit(&mut w, 2, "c", 50, 151), Admission::DroppedLate); // arrived after 150
        assert_eq!(
            admit(&mut w, 4, "b", 110, 215),
            Admission::DroppedOutOfOrder
        );
        assert_eq!(admit(&mut w, 5, "e", 150, 149), Admission::Accepted); // window 1
        assert!(closed.is_empty(), "time windows never close on a reading");
        assert_eq!(w.committable(0, 6), 0);
        // Due at 150 (window 0), 250 (window 1), 350 (window 2).
        w.close_due(149, |_| i64::MAX, 100, &mut closed);
        assert!(closed.is_empty());
        w.close_due(260, |_| 240, 100, &mut closed); // read until 240 < 250: window 1 waits
        assert_eq!(closed.len(), 1);
        w.close_due(260, |_| 255, 100, &mut closed);
        w.close_due(1000, |_| 1000, 100, &mut closed);
        let got: Vec<_> = closed
            .iter()
            .map(|c| {
                (
                    c.seq,
                    c.values.clone(),
                    c.first_event_ms,
                    c.last_event_ms,
                    c.padded,
                    c.timed,
                )
            })
            .collect();
        let mut want = vec![
            (0, vec![7], 0, 100, 0, true),
            (1, vec![7], 100, 200, 0, true),
            (2, vec![7], 200, 300, 0, true),
        ];
        // Windows 3..=8 are due by 1000 and released empty.
        want.extend((3..9).map(|s| (s, vec![], s as i64 * 100, s as i64 * 100 + 100, 0, true)));
        assert_eq!(got, want);
        // A released window accepts nothing more.
        assert_eq!(
            w.admit(0, 0, 9, device_key("z"), 1, 850, 860, &mut closed),
            Admission::DroppedLate
        );
        assert_eq!(w.committable(0, 10), 10);
    }

    #[test]
    fn time_windows_resume_after_the_ledger_and_bound_each_call() {
        let mut w = timed(100, 1, 100);
        w.resume(
            0,
            0,
            Resume {
                last_seq: 4,
                last_offset: 3,
                reference_event_ms: 500,
            },
        );
        let mut closed = Vec::new();
        // Replayed input up to the last release's last offset, then a
        // reading of a released window arriving later.
        assert_eq!(
            w.admit(0, 0, 0, device_key("a"), 1, 450, 460, &mut closed),
            Admission::AlreadyReleased
        );
        assert_eq!(
            w.admit(0, 0, 4, device_key("b"), 1, 450, 460, &mut closed),
            Admission::DroppedLate
        );
        assert_eq!(
            w.admit(0, 0, 5, device_key("a"), 1, 520, 530, &mut closed),
            Admission::Accepted
        );
        w.close_due(10_000, |_| 10_000, 3, &mut closed);
        assert_eq!(
            closed.iter().map(|c| c.seq).collect::<Vec<_>>(),
            vec![5, 6, 7]
        );
        assert_eq!(closed[0].values, vec![1]);
    }

    /// A count window's published event-time span is the earliest and
    /// latest event time it holds, whatever the arrival order.
    #[test]
    fn the_event_time_span_is_min_and_max_of_the_readings() {
        let mut w = windower(3, 1, 100, None);
        let mut closed = Vec::new();
        for (off, (d, t)) in [("a", 50), ("b", 10), ("c", 30)].into_iter().enumerate() {
            w.admit(0, 0, off as i64, device_key(d), 1, t, t, &mut closed);
        }
        assert_eq!(
            (closed[0].first_event_ms, closed[0].last_event_ms),
            (10, 50)
        );
        assert_eq!(closed[0].reference_event_ms, 50);
    }
}
