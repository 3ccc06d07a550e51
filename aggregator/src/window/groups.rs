//! The groups each device counts in, per grouped stream and partition: the
//! `G` of group-by (docs/DESIGN.md §4, group-by).
//!
//! Privacy argument: a reading of a grouped stream is admitted only when its
//! group is one of the device's groups in the reading's horizon, or the
//! device has fewer than `G` there ([`GroupTable::admit`]); it reads and
//! writes only that device's entry, so another device's presence never
//! changes what is kept of this one (as `crate::dp::groups::bound_contributions`,
//! the reference). An entry keeps the device's latest horizon and the one
//! before (a window may hold readings of two horizons); a reading of an
//! older horizon, or of a horizon swept from the table, is dropped, which
//! can only keep fewer groups, never more. Restore rebuilds the entries from
//! the charges of released windows (each charge names its horizon), so a
//! restart never hands a device fresh groups.

use super::FastMap;

/// No group in a slot.
const EMPTY: u16 = u16::MAX;

/// A device's groups in one horizon: two inline (G ≤ 2, the common case),
/// more in the table's spill map.
type Slots = [u16; 2];

/// A device's groups in its latest horizon and the one before: 24 bytes
/// with its key.
#[derive(Debug, Clone, Copy)]
struct Entry {
    horizon: i64,
    now: Slots,
    prev: Slots,
}

/// The groups of each device of one (grouped stream, partition).
#[derive(Debug, Clone, Default)]
pub(super) struct GroupTable {
    devices: FastMap<u64, Entry>,
    /// Groups past the two inline ones, by (device, horizon).
    spill: FastMap<(u64, i64), Vec<u16>>,
    /// Readings of horizons before this one are dropped (their entries may
    /// have been swept).
    swept_before: i64,
}

/// Whether `group` is among a horizon's groups, and how many there are.
fn find(slots: &Slots, spill: Option<&Vec<u16>>, group: u16) -> (bool, usize) {
    let inline = slots.iter().filter(|&&s| s != EMPTY).count();
    let extra = spill.map_or(&[][..], |v| v.as_slice());
    (
        slots.contains(&group) || extra.contains(&group),
        inline + extra.len(),
    )
}

impl GroupTable {
    /// Whether a reading of `device` in `horizon` may count in `group`
    /// (at most `g` groups per device and horizon); if so, `group` is
    /// recorded as one of the device's groups there.
    pub(super) fn admit(&mut self, device: u64, horizon: i64, group: u32, g: u32) -> bool {
        if horizon < self.swept_before {
            return false;
        }
        let known = self.devices.get(&device).copied();
        let slots = match known.map(|e| horizon - e.horizon) {
            None => None,
            Some(d) if d > 0 => None,
            Some(0) => Some(known.expect("known").now),
            Some(-1) => Some(known.expect("known").prev),
            Some(_) => return false,
        };
        if let Some(slots) = slots {
            let (present, n) = find(&slots, self.spill.get(&(device, horizon)), group as u16);
            if present {
                return true;
            }
            if n >= g as usize {
                return false;
            }
        }
        self.record(device, horizon, group);
        true
    }

    /// Record that `device` counts in `group` in `horizon` (restore records
    /// in any order; a horizon older than the device's latest but one is
    /// ignored: its readings are refused anyway).
    pub(super) fn record(&mut self, device: u64, horizon: i64, group: u32) {
        let group = group as u16;
        let e = self.devices.entry(device).or_insert(Entry {
            horizon,
            now: [EMPTY; 2],
            prev: [EMPTY; 2],
        });
        let d = horizon - e.horizon;
        if d > 0 {
            let old = e.horizon;
            e.prev = if d == 1 { e.now } else { [EMPTY; 2] };
            e.now = [EMPTY; 2];
            e.horizon = horizon;
            // Spilled groups of horizons no longer kept go.
            self.spill.remove(&(device, old - 1));
            if d > 1 {
                self.spill.remove(&(device, old));
            }
        }
        let slots = match horizon - e.horizon {
            0 => &mut e.now,
            -1 => &mut e.prev,
            _ => return,
        };
        if slots.contains(&group) {
            return;
        }
        if let Some(free) = slots.iter_mut().find(|s| **s == EMPTY) {
            *free = group;
            return;
        }
        let extra = self.spill.entry((device, horizon)).or_default();
        if !extra.contains(&group) {
            extra.push(group);
        }
    }

    /// Forget horizons before `before` (no lane of the stream accepts their
    /// readings any more); later readings of them are dropped.
    pub(super) fn sweep(&mut self, before: i64) {
        if before > self.swept_before {
            self.swept_before = before;
            self.devices.retain(|_, e| e.horizon >= before);
            self.spill
                .retain(|&(_, h), _| h >= before.saturating_sub(1));
        }
    }

    /// Devices held (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.devices.len()
    }

    /// Merge `other` (one lane's restored charges) into this table.
    pub(super) fn merge(&mut self, other: &GroupTable) {
        for (&d, e) in &other.devices {
            for (h, slots) in [(e.horizon - 1, e.prev), (e.horizon, e.now)] {
                for &g in slots.iter().filter(|&&g| g != EMPTY) {
                    self.record(d, h, g as u32);
                }
                for &g in other.spill.get(&(d, h)).into_iter().flatten() {
                    self.record(d, h, g as u32);
                }
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
            assert_eq!(t.admit(7, 10, group, 2), ok, "group {group}");
        }
        // Another device has its own groups; a new horizon starts afresh.
        assert!(t.admit(8, 10, 2, 2));
        assert!(t.admit(7, 11, 2, 2));
        // The horizon before keeps its own groups ...
        assert!(t.admit(7, 10, 1, 2) && !t.admit(7, 10, 2, 2));
        // ... and older ones are refused.
        assert!(!t.admit(7, 9, 0, 2));
        t.sweep(11);
        assert!(!t.admit(8, 10, 0, 2), "swept horizons are refused");
        // More groups than fit inline (G = 4) spill and still count.
        for group in 0..4 {
            assert!(t.admit(9, 11, group, 4), "group {group}");
        }
        assert!(!t.admit(9, 11, 4, 4) && t.admit(9, 11, 3, 4));
    }

    /// Recording the same (horizon, group) pairs in any order gives the same
    /// decisions: restore reads charges in any order.
    #[test]
    fn records_commute() {
        let pairs = [
            (10, 0),
            (11, 1),
            (10, 2),
            (12, 3),
            (11, 4),
            (9, 5),
            (12, 6),
            (12, 7),
            (11, 8),
        ];
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
            for g in 0..10 {
                for gmax in [2, 3, 4] {
                    let got = [&a, &b, &m].map(|t| t.clone().admit(1, h, g, gmax));
                    assert!(got.iter().all(|&x| x == got[0]), "{h} {g} {gmax}: {got:?}");
                }
            }
        }
    }
}
