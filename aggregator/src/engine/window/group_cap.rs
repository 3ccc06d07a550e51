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
//!
//! Storage: an entry is packed into 8 bytes beside its key in a
//! [`DeviceTable`]: one random read, at a device's first reading in a lane
//! and horizon, its slot prefetched with every reading of the stream once
//! the reading's group is found (a message before it is admitted; most
//! readings never look, yet it measured faster with three readings a
//! device and no slower with ten). An entry
//! the packed form cannot hold is kept whole in a side map, so packing
//! never changes a decision (a test runs it against a plain map of whole
//! entries).

use super::FastMap;
use crate::engine::devices::DeviceTable;

/// No group in a slot. Group indices are below
/// [`MAX_GROUPS_PER_STREAM`](crate::dp::release::MAX_GROUPS_PER_STREAM), so
/// every index fits the 12 bits a packed slot has, and none is `EMPTY`.
const EMPTY: u16 = 0xFFF;
const _: () = assert!(crate::dp::release::MAX_GROUPS_PER_STREAM < EMPTY as usize);

/// A device's groups in one horizon: two inline (G ≤ 2, the common case),
/// more in the table's spill map.
type Slots = [u16; 2];

/// A device's groups in its latest horizon and the one before.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Entry {
    horizon: i64,
    now: Slots,
    prev: Slots,
}

impl Default for Entry {
    fn default() -> Self {
        Entry::fresh(0)
    }
}

impl Entry {
    fn fresh(horizon: i64) -> Self {
        Entry {
            horizon,
            now: [EMPTY; 2],
            prev: [EMPTY; 2],
        }
    }
}

/// Packed form of an [`Entry`] (8 bytes, so a device's entry and its key
/// share one 16-byte slot of a prefetchable [`DeviceTable`]): four 12-bit
/// group slots, then the horizon's distance from the table's base in 16
/// bits. An entry whose horizon does not fit is kept whole in a side map,
/// its slot holding `WHOLE` (a distance of `0xFFFF` is never packed).
const WHOLE: u64 = u64::MAX;
/// A slot [`GroupTable::admit`] just took for a new device (a distance of
/// `0xFFFF` too, so never a packed entry); rewritten before it returns.
const FRESH: u64 = u64::MAX - 1;
const GROUP_BITS: u32 = 12;
const HORIZON_SHIFT: u32 = 4 * GROUP_BITS;
const MAX_DISTANCE: i64 = 0xFFFF;

fn pack(base: i64, e: &Entry) -> Option<u64> {
    let d = e.horizon.checked_sub(base)?;
    if !(0..MAX_DISTANCE).contains(&d) {
        return None;
    }
    let groups = [e.now[0], e.now[1], e.prev[0], e.prev[1]]
        .iter()
        .enumerate()
        .fold(0u64, |v, (i, &g)| {
            v | u64::from(g) << (i as u32 * GROUP_BITS)
        });
    Some(groups | (d as u64) << HORIZON_SHIFT)
}

fn unpack(base: i64, v: u64) -> Entry {
    let g = |i: u32| ((v >> (i * GROUP_BITS)) & ((1 << GROUP_BITS) - 1)) as u16;
    Entry {
        horizon: base + (v >> HORIZON_SHIFT) as i64,
        now: [g(0), g(1)],
        prev: [g(2), g(3)],
    }
}

/// The groups of each device of one (grouped stream, partition).
#[derive(Debug, Clone, Default)]
pub(super) struct GroupTable {
    devices: DeviceTable<u64>,
    /// Entries whose slot holds `WHOLE`.
    whole: FastMap<u64, Entry>,
    /// Horizon that packed distances count from (set by the first entry).
    base: Option<i64>,
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

/// `known` (the device's entry, if any) with `group` recorded in
/// `horizon`: the entry to store, or `None` when nothing changes there
/// (groups past the two inline ones go to `spill`).
fn changed(
    known: Option<Entry>,
    spill: &mut FastMap<(u64, i64), Vec<u16>>,
    device: u64,
    horizon: i64,
    group: u32,
) -> Option<Entry> {
    let group = group as u16;
    let mut e = known.unwrap_or(Entry::fresh(horizon));
    let d = horizon - e.horizon;
    if d > 0 {
        let old = e.horizon;
        e.prev = if d == 1 { e.now } else { [EMPTY; 2] };
        e.now = [EMPTY; 2];
        e.horizon = horizon;
        // Spilled groups of horizons no longer kept go.
        spill.remove(&(device, old - 1));
        if d > 1 {
            spill.remove(&(device, old));
        }
    }
    let slots = match horizon - e.horizon {
        0 => &mut e.now,
        -1 => &mut e.prev,
        _ => return None,
    };
    if slots.contains(&group) {
        return None;
    }
    if let Some(free) = slots.iter_mut().find(|s| **s == EMPTY) {
        *free = group;
        return Some(e);
    }
    let extra = spill.entry((device, horizon)).or_default();
    if !extra.contains(&group) {
        extra.push(group);
    }
    (d > 0 || known.is_none()).then_some(e)
}

/// Whether a reading of `device` in `horizon` may count in `group` (at
/// most `g` groups there), given the device's entry `known` (`None`: it has
/// none); and the entry to store when that changes it.
fn decide(
    known: Option<Entry>,
    spill: &mut FastMap<(u64, i64), Vec<u16>>,
    device: u64,
    horizon: i64,
    group: u32,
    g: u32,
) -> (bool, Option<Entry>) {
    let slots = match known.map(|e| horizon - e.horizon) {
        None => None,
        Some(d) if d > 0 => None,
        Some(0) => Some(known.expect("known").now),
        Some(-1) => Some(known.expect("known").prev),
        Some(_) => return (false, None),
    };
    if let Some(slots) = slots {
        let (present, n) = find(&slots, spill.get(&(device, horizon)), group as u16);
        if present {
            return (true, None);
        }
        if n >= g as usize {
            return (false, None);
        }
    }
    // A device without an entry always gets one (its first group).
    (true, changed(known, spill, device, horizon, group))
}

/// Put entry `e` of `device` in its table slot: packed, or whole.
fn write(slot: &mut u64, whole: &mut FastMap<u64, Entry>, base: i64, device: u64, e: Entry) {
    match pack(base, &e) {
        Some(v) => {
            *slot = v;
            if !whole.is_empty() {
                whole.remove(&device);
            }
        }
        None => {
            *slot = WHOLE;
            whole.insert(device, e);
        }
    }
}

impl GroupTable {
    fn load(&self, device: u64) -> Option<Entry> {
        let &v = self.devices.get(device)?;
        Some(match (v, self.base) {
            (WHOLE, _) | (_, None) => self.whole[&device],
            (v, Some(base)) => unpack(base, v),
        })
    }

    fn store(&mut self, device: u64, e: Entry) {
        let base = *self.base.get_or_insert(e.horizon.saturating_sub(1));
        let slot = self
            .devices
            .get_or_insert_if(device, WHOLE, |_| true)
            .expect("always inserted");
        write(slot, &mut self.whole, base, device, e);
    }

    /// Whether a reading of `device` in `horizon` may count in `group`
    /// (at most `g` groups per device and horizon); if so, `group` is
    /// recorded as one of the device's groups there. One probe of the
    /// table: the device's slot is found (or taken) once, then rewritten.
    pub(super) fn admit(&mut self, device: u64, horizon: i64, group: u32, g: u32) -> bool {
        if horizon < self.swept_before {
            return false;
        }
        let base = *self.base.get_or_insert(horizon.saturating_sub(1));
        let slot = self
            .devices
            .get_or_insert_if(device, FRESH, |_| true)
            .expect("always inserted");
        let known = match *slot {
            FRESH => None,
            WHOLE => Some(self.whole[&device]),
            v => Some(unpack(base, v)),
        };
        // A fresh slot always changes (the device's first group), so no
        // slot is left `FRESH`.
        let (ok, store) = decide(known, &mut self.spill, device, horizon, group, g);
        if let Some(e) = store {
            write(slot, &mut self.whole, base, device, e);
        }
        ok
    }

    /// [`GroupTable::admit`] for a device whose entry is kept outside the
    /// table, in its replica slot (`held`: its entry, if it has one there;
    /// docs/DESIGN.md §4, group-by, "the whole device slot"). The spilled
    /// groups past two stay in this table. An entry of a horizon this table
    /// swept is the absent entry the sweep would have left.
    pub(super) fn admit_held(
        &mut self,
        held: &mut Option<Entry>,
        device: u64,
        horizon: i64,
        group: u32,
        g: u32,
    ) -> bool {
        if horizon < self.swept_before {
            return false;
        }
        let known = held.filter(|e| e.horizon >= self.swept_before);
        let (ok, store) = decide(known, &mut self.spill, device, horizon, group, g);
        if let Some(e) = store {
            *held = Some(e);
        }
        ok
    }

    /// Take `device`'s entry out of the table (to be held in its replica
    /// slot); its spilled groups stay.
    pub(super) fn take(&mut self, device: u64) -> Option<Entry> {
        let e = self.load(device)?;
        self.devices.remove(device);
        if !self.whole.is_empty() {
            self.whole.remove(&device);
        }
        Some(e)
    }

    /// Put a held entry back (the device has none in the table); an entry
    /// of a horizon already swept is dropped, as the sweep would have.
    pub(super) fn put(&mut self, device: u64, e: Entry) {
        if e.horizon >= self.swept_before {
            self.store(device, e);
        }
    }

    /// Record that `device` counts in `group` in `horizon` (restore records
    /// in any order; a horizon older than the device's latest but one is
    /// ignored: its readings are refused anyway).
    pub(super) fn record(&mut self, device: u64, horizon: i64, group: u32) {
        let known = self.load(device);
        if let Some(e) = changed(known, &mut self.spill, device, horizon, group) {
            self.store(device, e);
        }
    }

    /// Forget horizons before `before` (no lane of the stream accepts their
    /// readings any more); later readings of them are dropped. One pass,
    /// in place, which also moves the packed distances' base to `before`.
    pub(super) fn sweep(&mut self, before: i64) {
        if before <= self.swept_before {
            return;
        }
        self.swept_before = before;
        let new_base = before.saturating_sub(1);
        let old_base = self.base.replace(new_base);
        let mut old_whole = std::mem::take(&mut self.whole);
        let mut whole = FastMap::default();
        self.devices.retain_mut(|dk, v| {
            let e = match (*v, old_base) {
                (WHOLE, _) | (_, None) => {
                    old_whole.remove(&dk).expect("a WHOLE slot has its entry")
                }
                (v, Some(base)) => unpack(base, v),
            };
            if e.horizon < before {
                return false;
            }
            *v = pack(new_base, &e).unwrap_or_else(|| {
                whole.insert(dk, e);
                WHOLE
            });
            true
        });
        self.whole = whole;
        self.spill
            .retain(|&(_, h), _| h >= before.saturating_sub(1));
    }

    /// Start fetching `device`'s slot (a hint for a coming
    /// [`GroupTable::admit`]).
    #[inline]
    pub(super) fn prefetch(&self, device: u64) {
        self.devices.prefetch(device);
    }

    /// Devices held (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.devices.len()
    }

    /// Merge `other` (one lane's restored charges) into this table.
    pub(super) fn merge(&mut self, other: &GroupTable) {
        let mut entries = Vec::with_capacity(other.devices.len());
        other.devices.for_each(|d, _| {
            entries.push((d, other.load(d).expect("present")));
        });
        for (d, e) in entries {
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

    /// The table as it was before its entries were packed (a hash map of
    /// whole entries): the oracle for the packed form.
    #[derive(Default, Clone)]
    struct Plain {
        devices: std::collections::HashMap<u64, Entry>,
        spill: std::collections::HashMap<(u64, i64), Vec<u16>>,
        swept_before: i64,
    }

    impl Plain {
        fn admit(&mut self, device: u64, horizon: i64, group: u32, g: u32) -> bool {
            if horizon < self.swept_before {
                return false;
            }
            if let Some(e) = self.devices.get(&device).copied() {
                let slots = match horizon - e.horizon {
                    0 => Some(e.now),
                    -1 => Some(e.prev),
                    d if d < -1 => return false,
                    _ => None,
                };
                if let Some(slots) = slots {
                    let (present, n) =
                        find(&slots, self.spill.get(&(device, horizon)), group as u16);
                    if present || n >= g as usize {
                        return present;
                    }
                }
            }
            self.record(device, horizon, group);
            true
        }

        fn record(&mut self, device: u64, horizon: i64, group: u32) {
            let group = group as u16;
            let e = self.devices.entry(device).or_insert(Entry::fresh(horizon));
            let d = horizon - e.horizon;
            if d > 0 {
                let old = e.horizon;
                e.prev = if d == 1 { e.now } else { [EMPTY; 2] };
                e.now = [EMPTY; 2];
                e.horizon = horizon;
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

        fn sweep(&mut self, before: i64) {
            if before > self.swept_before {
                self.swept_before = before;
                self.devices.retain(|_, e| e.horizon >= before);
                self.spill.retain(|&(_, h), _| h >= before - 1);
            }
        }
    }

    /// Random admissions, restore records, sweeps and merges, with horizons
    /// that jump further than a packed distance reaches (entries kept whole,
    /// then packed again after a sweep moves the base), device key 0, and
    /// `G` up to 4 (spilled groups): the packed table decides exactly as the
    /// plain map.
    #[test]
    fn packed_entries_decide_as_a_plain_map() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(18);
        for round in 0..40 {
            let (mut t, mut plain) = (GroupTable::default(), Plain::default());
            let mut horizon: i64 = rng.gen_range(0..1_000_000);
            let mut swept = 0;
            for step in 0..3_000 {
                match rng.gen_range(0..100) {
                    0 => horizon += rng.gen_range(60_000..200_000),
                    1..=5 => horizon += 1,
                    6 => horizon = (horizon - rng.gen_range(1..100_000)).max(0),
                    _ => {}
                }
                let device = rng.gen_range(0..40u64);
                let h = horizon - rng.gen_range(0..3);
                let group = rng.gen_range(0..6) * 200 % 1_024;
                let g = rng.gen_range(1..=4);
                match rng.gen_range(0..50) {
                    0 => {
                        swept = swept.max(horizon - rng.gen_range(0..3));
                        t.sweep(swept);
                        plain.sweep(swept);
                    }
                    1..=5 => {
                        t.record(device, h, group);
                        plain.record(device, h, group);
                    }
                    _ => assert_eq!(
                        t.admit(device, h, group, g),
                        plain.admit(device, h, group, g),
                        "round {round} step {step}"
                    ),
                }
            }
            // A merge into a fresh table keeps every decision.
            let mut merged = GroupTable::default();
            merged.merge(&t);
            for device in 0..40 {
                for h in horizon - 3..=horizon + 1 {
                    for group in [0, 200, 400, 600, 800, 1_000] {
                        for g in 1..=4 {
                            let want = plain.clone().admit(device, h, group, g);
                            assert_eq!(t.clone().admit(device, h, group, g), want);
                            if h >= swept {
                                assert_eq!(merged.clone().admit(device, h, group, g), want);
                            }
                        }
                    }
                }
            }
            assert_eq!(t.len(), plain.devices.len());
        }
    }

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
