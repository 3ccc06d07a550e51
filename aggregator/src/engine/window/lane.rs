//! A lane: what one (stream, input partition) carries between readings —
//! its open windows, its devices' counts per horizon, the windows whose
//! charges are still live — and how a window closes (full, timed out or
//! due). The caps' decisions are `admit.rs`'s; the privacy argument is the
//! parent module's.

use super::counts::{DeviceCounts, DeviceHorizon, HostedCount};
use super::group_cap::GroupTable;
use super::{charge_records, ClosedWindow, StreamRules};

#[derive(Debug, Default)]
pub(super) struct Open {
    pub(super) values: Vec<i64>,
    pub(super) first_offset: i64,
    pub(super) last_offset: i64,
    pub(super) last_index: u32,
    /// Event time of the first reading to arrive (timeouts count from it).
    pub(super) first_event_ms: i64,
    /// Earliest and latest event time among the readings.
    pub(super) min_event_ms: i64,
    pub(super) max_event_ms: i64,
    pub(super) charges: Vec<(u64, i64)>,
}

#[derive(Debug, Default)]
pub(super) struct Lane {
    pub(super) next_seq: u64,
    /// The last released reading's position (offset, index in its
    /// message): count windows skip readings up to it on replay.
    pub(super) resume_after: Option<(i64, u32)>,
    pub(super) reference_event_ms: Option<i64>,
    pub(super) open: Open,
    /// Each device's windows in its current horizon. Kept per lane: a
    /// device stays on one partition (checked upstream), so a lane's counts
    /// are complete, and dropping a revoked partition drops exactly them.
    pub(super) devices: DeviceCounts,
    /// Windows whose charges are still needed: (seq, latest horizon
    /// charged, state records holding them).
    pub(super) live: Vec<(u64, i64, u32)>,
    /// Time windows: the open windows by seq (= window index), the first
    /// seq not yet released is `next_seq`; set once the lane has started.
    pub(super) timed: std::collections::BTreeMap<u64, Open>,
    pub(super) started: bool,
    /// Horizons before this one were swept from `devices`.
    pub(super) swept_before: i64,
    /// Devices whose counts here are kept in their replica slots
    /// (module `hosted`).
    pub(super) hosted: HostedCount,
    /// The tag of the lane's grouped stream and partition (0: not known
    /// yet); the lane goes when the tag dies (a dropped partition).
    pub(super) tag: u32,
}

/// A lane's device counts rebuilt from the charges of its released
/// windows, one state record at a time (the records of a window in any
/// order, windows in any order: a device's count per horizon is the number
/// of windows charging it, its latest horizon wins), so restore never holds
/// all charges at once. Built off the consuming loop, then
/// [`super::Windower::install_restored`].
#[derive(Debug, Clone)]
pub struct RestoredLane {
    pub(super) devices: DeviceCounts,
    /// Grouped streams: the devices' groups from the same charges (one
    /// group: this lane's).
    pub(super) groups: Option<(u32, GroupTable)>,
    /// Per window: (latest horizon charged, state records declared).
    pub(super) live: std::collections::BTreeMap<u64, (i64, u32)>,
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

pub(super) fn window_end(seq: u64, len: i64) -> i64 {
    (seq as i64).saturating_add(1).saturating_mul(len)
}

/// The first time window not yet due at `now_ms`.
pub(super) fn first_open_window(now_ms: i64, len: i64, lateness_ms: i64) -> u64 {
    now_ms.saturating_sub(lateness_ms).max(0).div_euclid(len) as u64
}

/// Take a count window's open block out of its lane.
/// Close the lane's open count window (full, or timed out).
pub(super) fn close_count_window(
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
pub(super) fn close(
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
    let horizon_devices = rules.count_devices.then(|| {
        let h = reference.div_euclid(horizon_ms);
        (
            h,
            (lane.devices.of_horizon(h) + lane.hosted.of_horizon(h)) as u64,
        )
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
        last_index: open.last_index,
        first_event_ms,
        last_event_ms,
        padded,
        timed: rules.window_ms.is_some(),
        charges: open.charges,
        horizon_devices,
        reference_event_ms: reference,
        retired,
        retired_records,
    };
    lane.next_seq += 1;
    w
}
