//! A consuming loop's own copy of the registry's rows, in the prefetchable
//! [`DeviceTable`] the windows use (docs/DESIGN.md §4, group-by).
//!
//! Looking a device up in the shared [`DashMap`](dashmap::DashMap) costs a
//! shard lock (an atomic read-modify-write, which x86 orders against every
//! earlier load, so no other memory access overlaps it) and two or three
//! dependent cache misses: control bytes, entry, boxed row. With 10⁶
//! devices that was ≈ 40% of a grouped reading's time. The replica packs a
//! row of up to [`MAX_DIMENSIONS`] digits into one 8-byte value next to its
//! key, so a lookup is one slot, and the processor starts fetching that slot
//! a message ahead.
//!
//! Freshness: the registry appends every changed device key to a bounded
//! journal and bumps a version ([`Registry::changes_since`]); the replica
//! reads the version (a plain load) before each message and re-reads the
//! changed devices' rows from the shared table, or copies the whole table
//! when it fell further behind than the journal holds. A row it holds is
//! therefore the shared table's row as of that check, as a direct lookup
//! would have seen it a moment earlier; a device without a row is held as
//! a row of [`ABSENT`] digits, which decides every group exactly as no row
//! does (`other`). Privacy is unaffected: the registry only picks a group,
//! and `G` caps a device whatever it says (the module above).
//!
//! A slot also keeps the device's window state of one grouped stream
//! ([`Hosted`], 48 bytes: a slot is one 64-byte cache line), so that a
//! routed reading reads nothing else at random; the windows decide what it
//! holds (`crate::engine::window`, module `hosted`). A fresh copy of the rows
//! keeps every slot whose state is live, with or without a row.

use super::{Registry, ABSENT};
use crate::engine::devices::{Align64, DeviceTable};
use crate::engine::window::Hosted;

/// A device's slot: its row, packed, and its hosted window state (with
/// the table's key, 64 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    row: u64,
    hosted: Hosted,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 56);

impl Default for Slot {
    fn default() -> Self {
        Slot {
            row: NO_ROW,
            hosted: Hosted::default(),
        }
    }
}

/// Most dimensions a registry may keep for a replica to hold its rows (four
/// two-byte digits in eight bytes); with more, lookups go to the shared
/// table (docs/configuration.md, limits).
pub const MAX_DIMENSIONS: usize = 4;

/// Every digit [`ABSENT`]: no row.
pub(crate) const NO_ROW: u64 = u64::MAX;

/// A loop-local copy of a [`Registry`]'s rows.
pub(crate) struct Replica {
    /// One 64-byte slot a device, aligned to a cache line.
    rows: DeviceTable<Slot, Align64>,
    /// Slots a fresh copy kept for their live state without a row.
    kept: usize,
    /// Registry changes applied (a position in its journal).
    seen: u64,
    /// Dimensions per row.
    width: usize,
}

impl Replica {
    /// An empty copy, or `None` when the registry keeps more than
    /// [`MAX_DIMENSIONS`] dimensions.
    pub(crate) fn new(registry: &Registry) -> Option<Self> {
        let width = registry.dimensions.len();
        (width <= MAX_DIMENSIONS).then(|| Self {
            rows: DeviceTable::default(),
            kept: 0,
            seen: 0,
            width,
        })
    }

    /// Whether no change came since the last [`Replica::sync`].
    #[inline]
    pub(crate) fn is_current(&self, registry: &Registry) -> bool {
        registry.version() == self.seen
    }

    /// Catch up with the registry's changes (`live`: whether a slot's
    /// hosted state must be kept).
    pub(crate) fn sync(&mut self, registry: &Registry, live: impl Fn(&Hosted) -> bool) {
        if self.is_current(registry) {
            return;
        }
        match registry.changes_since(self.seen) {
            Some((changed, now)) => {
                for device in changed {
                    let row = registry.with_row(device, |r| r.map_or(NO_ROW, pack));
                    self.put(device, row);
                }
                self.seen = now;
            }
            None => self.copy_all(registry, &live),
        }
        // Devices removed since the last copy stay as rows of ABSENT
        // digits; copy afresh once they are as many as the live ones.
        if self.rows.len() > 2 * (registry.len() + self.kept) + 1024 {
            self.copy_all(registry, &live);
        }
    }

    /// Replace every row by the registry's current ones, keeping the slots
    /// of live hosted state (for a moment both copies exist).
    fn copy_all(&mut self, registry: &Registry, live: &impl Fn(&Hosted) -> bool) {
        // The version first: a row changed while copying is in the journal
        // after it, so the next sync re-reads it.
        let now = registry.version();
        let old = std::mem::replace(&mut self.rows, DeviceTable::with_capacity(registry.len()));
        for r in registry.devices.iter() {
            self.put(*r.key(), pack(r.value()));
        }
        self.kept = 0;
        old.for_each(|device, s| {
            if live(&s.hosted) {
                let slot = self
                    .rows
                    .get_or_insert_if(device, Slot::default(), |_| true)
                    .expect("always inserted");
                if slot.row == NO_ROW {
                    self.kept += 1;
                }
                slot.hosted = s.hosted;
            }
        });
        self.seen = now;
    }

    fn put(&mut self, device: u64, row: u64) {
        let fresh = Slot {
            row,
            hosted: Hosted::default(),
        };
        if let Some(v) = self.rows.get_or_insert_if(device, fresh, |_| true) {
            v.row = row;
        }
    }

    /// `device`'s row as packed ([`NO_ROW`] without one) and its hosted
    /// window state, if it has a slot.
    #[inline]
    pub(crate) fn slot(&self, device: u64) -> (u64, Option<&Hosted>) {
        match self.rows.get(device) {
            Some(s) => (s.row, Some(&s.hosted)),
            None => (NO_ROW, None),
        }
    }

    /// `device`'s hosted window state, if it has a slot.
    #[inline]
    pub(crate) fn hosted_mut(&mut self, device: u64) -> Option<&mut Hosted> {
        self.rows.get_mut(device).map(|s| &mut s.hosted)
    }

    /// Call `f` on every slot's hosted state (a restore moving it back).
    pub(crate) fn for_each_hosted(&mut self, mut f: impl FnMut(u64, &mut Hosted)) {
        self.rows.retain_mut(|device, s| {
            f(device, &mut s.hosted);
            true
        });
    }

    /// Start fetching `device`'s slot (a hint for a coming [`Replica::row`]).
    #[inline]
    pub(crate) fn prefetch(&self, device: u64) {
        self.rows.prefetch(device);
    }

    /// `device`'s row as packed (every digit [`ABSENT`] without one), for
    /// a [`Route`](super::Route).
    #[inline]
    pub(crate) fn packed(&self, device: u64) -> u64 {
        self.rows.get(device).map_or(NO_ROW, |s| s.row)
    }

    /// `device`'s digits, `None` without a row.
    pub(crate) fn row(&self, device: u64) -> Option<[u16; MAX_DIMENSIONS]> {
        let packed = self.rows.get(device)?.row;
        (packed != NO_ROW).then(|| {
            let mut row = [ABSENT; MAX_DIMENSIONS];
            for (i, d) in row.iter_mut().enumerate().take(self.width) {
                *d = (packed >> (16 * i)) as u16;
            }
            row
        })
    }

    /// Call `f` with `device`'s digits (its row's used prefix), if it has
    /// a row — as [`Registry::with_row`] does on the shared table.
    pub(crate) fn with_row<R>(&self, device: u64, f: impl FnOnce(Option<&[u16]>) -> R) -> R {
        let row = self.row(device);
        f(row.as_ref().map(|r| &r[..self.width]))
    }

    /// Devices held (rows of removed devices included until a fresh copy).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }
}

/// A row's digits in eight bytes, the first dimension lowest; the rest
/// [`ABSENT`].
pub(super) fn pack(row: &[u16]) -> u64 {
    let mut packed = NO_ROW;
    for (i, &d) in row.iter().take(MAX_DIMENSIONS).enumerate() {
        packed = packed & !(0xffff << (16 * i)) | (u64::from(d) << (16 * i));
    }
    packed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(max: usize) -> Registry {
        Registry::new(
            vec![
                ("firmware".into(), Some(vec!["4.1".into(), "4.2".into()])),
                ("region".into(), Some(vec!["eu".into(), "us".into()])),
            ],
            max,
        )
    }

    fn key(d: &str) -> u64 {
        crate::engine::window::device_key(d)
    }

    /// Whatever happened since the last sync, the replica answers as the
    /// shared table does: rows added, changed, removed, re-added, a device
    /// with every value undeclared (digits, not "no row"), the journal
    /// overrun (a full copy), and the removed rows' cleanup.
    #[test]
    fn answers_as_the_shared_table() {
        let r = registry(100_000);
        let mut rep = Replica::new(&r).unwrap();
        // No row and a row of ABSENT digits route alike (`other`).
        let none = vec![ABSENT; 2];
        let agree = |rep: &Replica, r: &Registry, upto: usize| {
            for i in 0..upto {
                let d = key(&format!("d{i}"));
                let want = r.with_row(d, |row| row.map_or(none.clone(), <[u16]>::to_vec));
                let got = rep.with_row(d, |row| row.map_or(none.clone(), <[u16]>::to_vec));
                assert_eq!(got, want, "device d{i}");
            }
        };
        rep.sync(&r, |_| false);
        agree(&rep, &r, 10);
        r.apply(Some(b"d1"), Some(br#"{"firmware":"4.2","region":"us"}"#))
            .unwrap();
        r.apply(Some(b"d2"), Some(br#"{"firmware":"9"}"#)).unwrap();
        r.apply(Some(b"d3"), Some(br#"{"region":"eu"}"#)).unwrap();
        rep.sync(&r, |_| false);
        agree(&rep, &r, 10);
        // Changed, removed, removed and back.
        r.apply(Some(b"d1"), Some(br#"{"firmware":"4.1"}"#))
            .unwrap();
        r.apply(Some(b"d2"), None).unwrap();
        r.apply(Some(b"d3"), None).unwrap();
        r.apply(Some(b"d3"), Some(br#"{"firmware":"4.2"}"#))
            .unwrap();
        rep.sync(&r, |_| false);
        agree(&rep, &r, 10);
        assert_eq!(rep.row(key("d2")), None);
        // More changes than the journal holds: a full copy.
        for i in 0..JOURNAL + 10 {
            let v = format!(r#"{{"firmware":"4.{}"}}"#, 1 + i % 2);
            r.apply(Some(format!("d{i}").as_bytes()), Some(v.as_bytes()))
                .unwrap();
        }
        assert!(r.changes_since(rep.seen).is_none(), "journal overrun");
        rep.sync(&r, |_| false);
        agree(&rep, &r, JOURNAL + 20);
        // Removed rows are dropped by a fresh copy once they dominate.
        for i in 0..JOURNAL / 2 {
            r.apply(Some(format!("d{i}").as_bytes()), None).unwrap();
            if i % 100 == 0 {
                rep.sync(&r, |_| false);
            }
        }
        rep.sync(&r, |_| false);
        agree(&rep, &r, JOURNAL + 20);
        assert!(rep.len() <= 2 * r.len() + 1024, "{} rows held", rep.len());
    }

    /// A fresh copy (the journal overrun) keeps the slots whose hosted
    /// state is live, with their state, also for devices whose row went;
    /// other slots of removed devices go; kept slots do not make every
    /// later sync copy afresh.
    #[test]
    fn fresh_copies_keep_live_hosted_state() {
        let r = registry(100_000);
        let mut rep = Replica::new(&r).unwrap();
        for d in ["live", "dead", "plain", "live-row"] {
            r.apply(Some(d.as_bytes()), Some(br#"{"firmware":"4.1"}"#))
                .unwrap();
        }
        rep.sync(&r, |_| false);
        *rep.hosted_mut(key("live")).unwrap() = Hosted::tagged(7);
        *rep.hosted_mut(key("live-row")).unwrap() = Hosted::tagged(7);
        *rep.hosted_mut(key("dead")).unwrap() = Hosted::tagged(3);
        for d in ["live", "dead", "plain"] {
            r.apply(Some(d.as_bytes()), None).unwrap();
        }
        for i in 0..JOURNAL + 10 {
            r.apply(
                Some(format!("d{i}").as_bytes()),
                Some(br#"{"region":"eu"}"#),
            )
            .unwrap();
        }
        let live = |h: &Hosted| h.tag() == 7;
        rep.sync(&r, live);
        assert_eq!(rep.slot(key("live")).0, NO_ROW);
        assert_eq!(rep.hosted_mut(key("live")).map(|h| h.tag()), Some(7));
        assert_eq!(rep.hosted_mut(key("live-row")).map(|h| h.tag()), Some(7));
        assert_ne!(rep.slot(key("live-row")).0, NO_ROW, "its row stays");
        assert!(rep.hosted_mut(key("dead")).is_none());
        assert!(rep.hosted_mut(key("plain")).is_none());
        assert_eq!(rep.kept, 1);
        // Nothing changed: no copy, the state stays.
        let seen = rep.seen;
        rep.sync(&r, live);
        assert_eq!(rep.seen, seen);
        assert_eq!(rep.hosted_mut(key("live")).map(|h| h.tag()), Some(7));
    }

    /// With more dimensions than a slot packs, there is no replica.
    #[test]
    fn five_dimensions_have_no_replica() {
        let dims = (0..5).map(|i| (format!("d{i}"), None)).collect();
        assert!(Replica::new(&Registry::new(dims, 10)).is_none());
        assert_eq!(pack(&[1, 2]), 0xffff_ffff_0002_0001);
    }

    use super::super::JOURNAL;
    use crate::engine::window::Hosted;
}
