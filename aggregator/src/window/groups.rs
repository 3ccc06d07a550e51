//! The groups each device counts in, per grouped stream and partition: the
//! `G` of group-by (docs/DESIGN.md §4, group-by).
//!
//! Privacy argument: a reading of a grouped stream is admitted only when its
//! group is one of the device's groups in the reading's horizon, or the
//! device has fewer than `G` there ([`GroupTable::admits`]); it reads and
//! writes only that device's entry, so another device's presence never
//! changes what is kept of this one (as `crate::dp::groups::bound_contributions`,
//! the reference). An entry keeps the device's latest horizon and the one
//! before (a window may hold readings of two horizons); a reading of an
//! older horizon, or of a horizon swept from the table, is dropped, which
//! can only keep fewer groups, never more. Restore rebuilds the entries from
//! the charges of released windows (each charge names its horizon), so a
//! restart never hands a device fresh groups.

use super::FastMap;

/// A device's groups in its latest horizon and the one before.
#[derive(Debug, Clone, Default)]
struct Entry {
    horizon: i64,
    now: Vec<u32>,
    prev: Vec<u32>,
}

/// The groups of each device of one (grouped stream, partition).
#[derive(Debug, Clone, Default)]
pub(super) struct GroupTable {
    devices: FastMap<u64, Entry>,
    /// Readings of horizons before this one are dropped (their entries may
    /// have been swept).
    swept_before: i64,
}

impl GroupTable {
    /// Whether a reading of `device` in `horizon` may count in `group` with
    /// at most `g` groups per device and horizon.
    pub(super) fn admits(&self, device: u64, horizon: i64, group: u32, g: u32) -> bool {
        if horizon < self.swept_before {
            return false;
        }
        let Some(e) = self.devices.get(&device) else {
            return true;
        };
        let fits = |set: &Vec<u32>| set.contains(&group) || set.len() < g as usize;
        match horizon - e.horizon {
            d if d > 0 => true,
            0 => fits(&e.now),
            -1 => fits(&e.prev),
            _ => false,
        }
    }

    /// Record that `device` counts in `group` in `horizon` (after
    /// [`GroupTable::admits`]; restore records in any order).
    pub(super) fn record(&mut self, device: u64, horizon: i64, group: u32) {
        let e = self.devices.entry(device).or_insert_with(|| Entry {
            horizon,
            ..Entry::default()
        });
        let set = match horizon - e.horizon {
            d if d > 0 => {
                e.prev = if d == 1 {
                    std::mem::take(&mut e.now)
                } else {
                    Vec::new()
                };
                e.now.clear();
                e.horizon = horizon;
                &mut e.now
            }
            0 => &mut e.now,
            -1 => &mut e.prev,
            _ => return,
        };
        if !set.contains(&group) {
            set.push(group);
        }
    }

    /// Forget horizons before `before` (no lane of the stream accepts their
    /// readings any more); later readings of them are dropped.
    pub(super) fn sweep(&mut self, before: i64) {
        if before > self.swept_before {
            self.swept_before = before;
            self.devices.retain(|_, e| e.horizon >= before);
        }
    }

    /// Merge `other` (one lane's restored charges) into this table.
    pub(super) fn merge(&mut self, other: &GroupTable) {
        for (&d, e) in &other.devices {
            for &g in &e.prev {
                self.record(d, e.horizon - 1, g);
            }
            for &g in &e.now {
                self.record(d, e.horizon, g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_counts_in_at_most_g_groups_per_horizon() {
        let mut t = GroupTable::default();
        for (group, ok) in [(0, true), (1, true), (0, true), (2, false)] {
            assert_eq!(t.admits(7, 10, group, 2), ok, "group {group}");
            if ok {
                t.record(7, 10, group);
            }
        }
        // Another device has its own groups; a new horizon starts afresh.
        assert!(t.admits(8, 10, 2, 2));
        assert!(t.admits(7, 11, 2, 2));
        t.record(7, 11, 2);
        // The horizon before keeps its own groups ...
        assert!(t.admits(7, 10, 1, 2) && !t.admits(7, 10, 2, 2));
        // ... and older ones are refused.
        assert!(!t.admits(7, 9, 0, 2));
        t.sweep(11);
        assert!(!t.admits(8, 10, 0, 2), "swept horizons are refused");
    }

    /// Recording the same (horizon, group) pairs in any order gives the same
    /// decisions: restore reads charges in any order.
    #[test]
    fn records_commute() {
        let pairs = [(10, 0), (11, 1), (10, 2), (12, 3), (11, 4), (9, 5)];
        let mut a = GroupTable::default();
        let mut b = GroupTable::default();
        for &(h, g) in &pairs {
            a.record(1, h, g);
        }
        for &(h, g) in pairs.iter().rev() {
            b.record(1, h, g);
        }
        let mut m = GroupTable::default();
        m.merge(&a);
        for h in 8..14 {
            for g in 0..7 {
                assert_eq!(a.admits(1, h, g, 2), b.admits(1, h, g, 2), "{h} {g}");
                assert_eq!(a.admits(1, h, g, 2), m.admits(1, h, g, 2), "{h} {g}");
            }
        }
    }
}
