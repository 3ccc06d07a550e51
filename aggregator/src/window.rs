//! Windowing and contribution bounding per (stream, input partition): cuts
//! blocks of exactly `n` accepted readings at deterministic offsets, drops a
//! device's readings beyond `k` per window and beyond `W` windows per
//! horizon, and says how far the input may be committed.
//!
//! Privacy argument: after bounding, one device is at most `k` records of any
//! window and touches at most `W` windows of a stream per horizon (aligned
//! intervals of event time), which is what the sensitivities and the
//! accountant assume. Everything here is decided by public data (arrival
//! order, offsets, device ids, event times), never by values, so replaying
//! the same input rebuilds the same windows and the keyed noise repeats.

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
    /// (event time) than the window's first reading.
    pub timeout_ms: Option<i64>,
}

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
    pub first_event_ms: i64,
    pub last_event_ms: i64,
    /// How many of the values are midpoint padding (public).
    pub padded: u64,
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
    first_event_ms: i64,
    last_event_ms: i64,
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
    lanes: FastMap<(usize, i32), Lane>,
    /// Per stream: windows opened so far (a public count).
    opened: Vec<u64>,
}

impl Windower {
    /// Readings more than `lateness_ms` older than a lane's reference are
    /// refused ([`Windower::is_too_old`]).
    pub fn new(rules: Vec<StreamRules>, horizon_ms: i64, lateness_ms: i64) -> Self {
        assert!(horizon_ms > 0 && lateness_ms >= 0);
        Self {
            opened: vec![0; rules.len()],
            rules,
            horizon_ms,
            lateness_ms,
            lanes: FastMap::default(),
        }
    }

    /// Continue a (stream, partition) after its last released window.
    pub fn resume(&mut self, stream: usize, partition: i32, r: Resume) {
        let lane = self.lanes.entry((stream, partition)).or_default();
        lane.next_seq = r.last_seq + 1;
        lane.resume_after_offset = Some(r.last_offset);
        lane.reference_event_ms = Some(r.reference_event_ms);
        lane.open = Open::default();
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
    pub fn is_too_old(&self, stream: usize, partition: i32, offset: i64, event_ms: i64) -> bool {
        self.lanes.get(&(stream, partition)).is_some_and(|l| {
            l.resume_after_offset.is_none_or(|o| offset > o)
                && l.reference_event_ms
                    .is_some_and(|r| event_ms < r.saturating_sub(self.lateness_ms))
        })
    }

    /// Offer one top-coded reading; returns what happened and any windows
    /// that closed (a timed-out one before it, a full one with it).
    #[allow(clippy::too_many_arguments)] // the hot path: plain values, no struct to build per reading
    pub fn admit(
        &mut self,
        stream: usize,
        partition: i32,
        offset: i64,
        dk: u64,
        units: i64,
        event_ms: i64,
        closed: &mut Vec<ClosedWindow>,
    ) -> Admission {
        let rules = &self.rules[stream];
        let lane = self.lanes.entry((stream, partition)).or_default();
        if lane.resume_after_offset.is_some_and(|o| offset <= o) {
            return Admission::AlreadyReleased;
        }
        if let Some(t) = rules.timeout_ms {
            if !lane.open.values.is_empty()
                && event_ms.saturating_sub(lane.open.first_event_ms) >= t
            {
                closed.push(close(
                    lane,
                    stream,
                    partition,
                    rules,
                    self.horizon_ms,
                    self.lateness_ms,
                ));
            }
        }
        let seq = lane.next_seq;
        // One probe per reading: the device's horizon count and its count
        // in the open window live in one entry.
        let horizon = event_ms.div_euclid(self.horizon_ms);
        let entry = lane
            .devices
            .get_or_insert(dk, DeviceHorizon::fresh(horizon));
        let in_window = if entry.last_seq == seq {
            entry.in_window
        } else {
            0
        };
        if in_window >= rules.max_readings_per_device {
            return Admission::DroppedWindowCap;
        }
        if in_window == 0 {
            // First reading of this device in this window: charge a window.
            if horizon < entry.horizon {
                // An older horizon whose count is no longer kept: dropping is
                // the only choice that cannot exceed W (alternating event
                // times must not reset the count).
                return Admission::DroppedHorizonCap;
            }
            if horizon > entry.horizon {
                *entry = DeviceHorizon::fresh(horizon);
            }
            if entry.windows >= rules.max_windows_per_device {
                return Admission::DroppedHorizonCap;
            }
            entry.windows += 1;
            entry.last_seq = seq;
            lane.open.charges.push((dk, horizon));
        }
        entry.in_window = in_window + 1;
        let open = &mut lane.open;
        if open.values.is_empty() {
            self.opened[stream] += 1;
            open.first_offset = offset;
            open.first_event_ms = event_ms;
        }
        open.last_offset = offset;
        open.last_event_ms = event_ms;
        open.values.push(units);
        if open.values.len() >= rules.window_size {
            closed.push(close(
                lane,
                stream,
                partition,
                rules,
                self.horizon_ms,
                self.lateness_ms,
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
            .filter(|((_, p), l)| *p == partition && !l.open.values.is_empty())
            .map(|(_, l)| l.open.first_offset)
            .fold(next_offset, i64::min)
    }
}

fn close(
    lane: &mut Lane,
    stream: usize,
    partition: i32,
    rules: &StreamRules,
    horizon_ms: i64,
    lateness_ms: i64,
) -> ClosedWindow {
    let open = std::mem::replace(
        &mut lane.open,
        Open {
            values: Vec::with_capacity(rules.window_size),
            ..Open::default()
        },
    );
    let reference = lane
        .reference_event_ms
        .map_or(open.last_event_ms, |r| r.max(open.last_event_ms));
    lane.reference_event_ms = Some(reference);
    // Horizons ending at or before the oldest event time still accepted can
    // never be charged again: windows that charged only those are retired.
    let oldest_accepted = reference.saturating_sub(lateness_ms);
    let seq = lane.next_seq;
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
    let padded = rules.window_size.saturating_sub(values.len()) as u64;
    values.resize(rules.window_size, rules.midpoint);
    let w = ClosedWindow {
        stream,
        partition,
        seq: lane.next_seq,
        values,
        first_offset: open.first_offset,
        last_offset: open.last_offset,
        first_event_ms: open.first_event_ms,
        last_event_ms: open.last_event_ms,
        padded,
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

    fn windower(n: usize, k: u32, w: u32, timeout: Option<i64>) -> Windower {
        Windower::new(
            vec![StreamRules {
                name: "s".into(),
                window_size: n,
                max_readings_per_device: k,
                max_windows_per_device: w,
                midpoint: 50,
                timeout_ms: timeout,
            }],
            1000,
            3000,
        )
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
        w.admit(0, 0, 9, device_key("x"), 1, 10, &mut closed);
        assert_eq!(w.committable(0, 10), 9);
    }

    #[test]
    fn per_window_and_per_horizon_caps() {
        let mut w = windower(2, 1, 2, None);
        let mut closed = Vec::new();
        assert_eq!(
            w.admit(0, 0, 0, device_key("a"), 1, 0, &mut closed),
            Admission::Accepted
        );
        assert_eq!(
            w.admit(0, 0, 1, device_key("a"), 1, 0, &mut closed),
            Admission::DroppedWindowCap
        );
        assert_eq!(
            w.admit(0, 0, 2, device_key("b"), 1, 0, &mut closed),
            Admission::Accepted
        ); // window 0 closes
        assert_eq!(
            w.admit(0, 0, 3, device_key("a"), 1, 0, &mut closed),
            Admission::Accepted
        ); // a: 2nd window
        assert_eq!(
            w.admit(0, 0, 4, device_key("c"), 1, 0, &mut closed),
            Admission::Accepted
        ); // window 1 closes
        assert_eq!(
            w.admit(0, 0, 5, device_key("a"), 1, 0, &mut closed),
            Admission::DroppedHorizonCap
        );
        // Next horizon (event time ≥ 1000): a may contribute again.
        assert_eq!(
            w.admit(0, 0, 6, device_key("a"), 1, 1000, &mut closed),
            Admission::Accepted
        );
        assert_eq!(closed.len(), 2);
    }

    #[test]
    fn alternating_horizons_cannot_reset_the_cap() {
        let mut w = windower(1, 1, 1, None);
        let mut closed = Vec::new();
        assert_eq!(
            w.admit(0, 0, 0, device_key("a"), 1, 1000, &mut closed),
            Admission::Accepted
        );
        assert_eq!(
            w.admit(0, 0, 1, device_key("a"), 1, 0, &mut closed),
            Admission::DroppedHorizonCap
        );
        assert_eq!(
            w.admit(0, 0, 2, device_key("a"), 1, 1500, &mut closed),
            Admission::DroppedHorizonCap
        );
        assert_eq!(closed[0].charges, vec![(device_key("a"), 1)]);
    }

    #[test]
    fn restored_charges_keep_the_cap_across_a_restart() {
        let mut w = windower(1, 1, 2, None);
        let mut closed = Vec::new();
        w.admit(0, 0, 0, device_key("a"), 1, 0, &mut closed);
        w.admit(0, 0, 1, device_key("a"), 1, 0, &mut closed);
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
            w2.admit(0, 0, 2, device_key("a"), 1, 0, &mut closed2),
            Admission::DroppedHorizonCap
        );
        assert_eq!(
            w2.admit(0, 0, 3, device_key("b"), 1, 0, &mut closed2),
            Admission::Accepted
        );
    }

    #[test]
    fn timeout_pads_with_the_midpoint() {
        let mut w = windower(4, 1, 100, Some(500));
        let mut closed = Vec::new();
        w.admit(0, 0, 0, device_key("a"), 7, 0, &mut closed);
        w.admit(0, 0, 1, device_key("b"), 8, 100, &mut closed);
        w.admit(0, 0, 2, device_key("c"), 9, 600, &mut closed);
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
            w.admit(0, 0, 9, device_key("a"), 1, 5000, &mut closed),
            Admission::AlreadyReleased
        );
        assert!(w.is_too_old(0, 0, 20, 1000));
        assert!(!w.is_too_old(0, 0, 20, 2000));
        assert!(
            !w.is_too_old(0, 0, 9, 1000),
            "a released offset is skipped, not too old"
        );
        w.admit(0, 0, 10, device_key("a"), 1, 5000, &mut closed);
        w.admit(0, 0, 11, device_key("b"), 1, 5000, &mut closed);
        assert_eq!(closed[0].seq, 5);
    }

    #[test]
    fn windows_retire_once_their_horizons_are_beyond_lateness() {
        // horizon 1000 ms, lateness 3000 ms, n = 1.
        let mut w = windower(1, 1, 100, None);
        let mut closed = Vec::new();
        w.admit(0, 0, 0, device_key("a"), 1, 500, &mut closed); // horizon 0
        w.admit(0, 0, 1, device_key("a"), 1, 1500, &mut closed); // horizon 1
        w.admit(0, 0, 2, device_key("a"), 1, 3999, &mut closed); // oldest accepted 999: nothing retires
        assert!(closed.iter().all(|c| c.retired.is_empty()));
        w.admit(0, 0, 3, device_key("a"), 1, 4000, &mut closed); // oldest accepted 1000: horizon 0 retires
        assert_eq!(closed[3].retired, vec![0]);
        assert_eq!(closed[3].reference_event_ms, 4000);
        // An older event time does not move the reference back.
        w.admit(0, 0, 4, device_key("b"), 1, 3500, &mut closed);
        assert_eq!(closed[4].reference_event_ms, 4000);
        w.admit(0, 0, 5, device_key("a"), 1, 5000, &mut closed); // oldest accepted 2000: horizon 1 retires
        assert_eq!(closed[5].retired, vec![1]);
        assert!(w.is_too_old(0, 0, 6, 1999));
        assert!(!w.is_too_old(0, 0, 6, 2000));
    }
}
