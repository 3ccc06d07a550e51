//! The per-device table of a lane: device key → one packed 8-byte value.
//!
//! It is read once per reading and, with 100 k+ devices, almost every read
//! misses the CPU caches. A general hash map keeps control bytes and entries
//! apart (two misses) and hides where a key lives; this table stores keys
//! inline with their value (open addressing, linear probing, 16-byte slots,
//! four to a cache line), and because device keys are already uniform
//! hashes the slot of a key is known in advance, so the pipeline can
//! prefetch it while it finishes the previous message.
//!
//! Memory (docs/DESIGN.md §9, "Memory"): a table of 16-byte slots grows at
//! load 0.8 to 1.5 times its size (any size: a key's home slot is its hash
//! scaled to the length, not masked), so it holds 20–30 B per entry, and
//! 50 B per entry while it grows, when the old and new slot arrays both
//! exist; a table of 64-byte slots doubles (80–160 B per entry), since each
//! of its probe steps is a cache line. Removing
//! entries ([`DeviceTable::retain_mut`]) works in place (backward-shift
//! deletion); the array shrinks when fewer than 1 in 5 slots were used at
//! any time since the previous removal pass. A lane sweeps once per
//! horizon, so the table follows the largest device count of the last
//! horizon: with churn (new ids every horizon) it keeps its size instead of
//! shrinking and regrowing through every doubling.

/// Open-addressing map from device keys to `V`, its slots aligned as `A`
/// ([`Align16`] for 8-byte values, four slots a cache line; [`Align64`]
/// for a 56-byte value, one slot a line).
#[derive(Debug, Clone)]
pub(crate) struct DeviceTable<V, A = Align16> {
    /// Any length (at least [`MIN_SLOTS`] once used); key 0 marks an
    /// empty slot.
    slots: Vec<Slot<V, A>>,
    /// Entries in `slots` (key 0's entry is `zero`).
    used: usize,
    /// The entry of key 0, which cannot live in a slot.
    zero: Option<V>,
    /// Most entries in `slots` since the last [`DeviceTable::retain_mut`].
    peak: usize,
}

/// A key and its value, aligned as `A` so that a slot never straddles two
/// cache lines (for a `V` of 8 bytes and [`Align16`] a slot is 16 bytes;
/// an allocation of 64-byte slots aligned only to 16 would put most of
/// them across two lines: two misses a lookup).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Slot<V, A> {
    /// No bytes: only its alignment.
    align: [A; 0],
    key: u64,
    value: V,
}

/// Slots aligned to 16 bytes.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(16))]
pub(crate) struct Align16;

/// Slots aligned to a cache line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(64))]
pub(crate) struct Align64;

impl<V, A> Default for DeviceTable<V, A> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            used: 0,
            zero: None,
            peak: 0,
        }
    }
}

/// Grow by half when more than 8 in 10 slots are used (see the module doc
/// for the bytes per entry this gives); shrink below 2 in 10.
const LOAD_NUM: usize = 8;
const LOAD_DEN: usize = 10;
const SHRINK_NUM: usize = 2;
const MIN_SLOTS: usize = 16;

impl<V: Copy + Default, A: Copy + Default> DeviceTable<V, A> {
    /// An empty table that holds `entries` without growing.
    pub(crate) fn with_capacity(entries: usize) -> Self {
        if entries == 0 {
            return Self::default();
        }
        let size = Self::holding(entries);
        Self {
            slots: vec![Slot::default(); size],
            ..Self::default()
        }
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.used + usize::from(self.zero.is_some())
    }

    /// Bytes held by the slot array.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot<V, A>>()
    }

    /// Whether a slot fills a cache line (each probe step a line of its own).
    const LINE_SIZED: bool = std::mem::size_of::<Slot<V, A>>() >= 64;

    /// The size a full table grows to: by half for slots of a quarter
    /// line (four a line, so the longer probe runs of a fuller table stay
    /// within a line or two), doubled for a line-sized slot, where each
    /// probe step is a cache line and a page walk of its own.
    fn grown(len: usize) -> usize {
        if Self::LINE_SIZED {
            len * 2
        } else {
            len + len / 2
        }
    }

    /// Slots that hold `entries` at the growth load; for line-sized slots
    /// the next power of two above that, as doubling would reach (a fuller
    /// table of them costs a cache line per extra probe step).
    fn holding(entries: usize) -> usize {
        let at_growth = entries.saturating_mul(LOAD_DEN) / LOAD_NUM + 1;
        match Self::LINE_SIZED {
            true => at_growth.next_power_of_two(),
            false => at_growth,
        }
        .max(MIN_SLOTS)
    }

    /// `key`'s home slot: the key, mixed by an odd multiplier (a bijection,
    /// so uniform keys stay uniform and sequential ones spread), scaled to
    /// the length by its high bits, which needs no power-of-two length.
    #[inline]
    fn home(&self, key: u64) -> usize {
        let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((u128::from(mixed) * self.slots.len() as u128) >> 64) as usize
    }

    /// The slot after `i`, wrapping.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Hint the CPU to load `key`'s slot; no effect on the contents.
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        if self.slots.is_empty() {
            return;
        }
        let slot = &self.slots[self.home(key)];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults nor changes memory,
        // and the pointer is to a live element anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(slot as *const Slot<V, A> as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// The entry of `key`, if present.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<&V> {
        if key == 0 {
            return self.zero.as_ref();
        }
        let i = self.find(key)?;
        Some(&self.slots[i].value)
    }

    /// The entry of `key`, if present, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        if key == 0 {
            return self.zero.as_mut();
        }
        let i = self.find(key)?;
        Some(&mut self.slots[i].value)
    }

    /// Take `key`'s entry out of the table.
    pub(crate) fn remove(&mut self, key: u64) -> Option<V> {
        if key == 0 {
            return self.zero.take();
        }
        let i = self.find(key)?;
        let v = self.slots[i].value;
        self.remove_at(i);
        Some(v)
    }

    /// The slot holding `key` (not 0), if any.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(key);
        loop {
            match self.slots[i].key {
                k if k == key => return Some(i),
                0 => return None,
                _ => i = self.next(i),
            }
        }
    }

    /// The entry of `key`, inserted as `fresh` if absent and `may_insert`
    /// allows it (`None`: absent and not inserted).
    pub(crate) fn get_or_insert_if(
        &mut self,
        key: u64,
        fresh: V,
        may_insert: impl FnOnce(usize) -> bool,
    ) -> Option<&mut V> {
        if key == 0 {
            if self.zero.is_none() && !may_insert(self.len()) {
                return None;
            }
            return Some(self.zero.get_or_insert(fresh));
        }
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); MIN_SLOTS];
        }
        let mut i = self.home(key);
        loop {
            match self.slots[i].key {
                k if k == key => return Some(&mut self.slots[i].value),
                0 => break,
                _ => i = self.next(i),
            }
        }
        if !may_insert(self.len()) {
            return None;
        }
        if (self.used + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.resize(Self::grown(self.slots.len()));
            i = self.home(key);
            while self.slots[i].key != 0 {
                i = self.next(i);
            }
        }
        self.slots[i] = Slot {
            align: [],
            key,
            value: fresh,
        };
        self.used += 1;
        self.peak = self.peak.max(self.used);
        Some(&mut self.slots[i].value)
    }

    /// The entry of `key`, inserted as `fresh` if absent.
    #[cfg(test)]
    pub(crate) fn get_or_insert(&mut self, key: u64, fresh: V) -> &mut V {
        self.get_or_insert_if(key, fresh, |_| true)
            .expect("always inserted")
    }

    /// Visit every entry (in slot order).
    pub(crate) fn for_each(&self, mut f: impl FnMut(u64, &V)) {
        if let Some(v) = &self.zero {
            f(0, v);
        }
        for s in self.slots.iter().filter(|s| s.key != 0) {
            f(s.key, &s.value);
        }
    }

    /// Visit every entry; `keep` may change it and returns whether it stays.
    /// Removal is in place (no second array); the array shrinks when fewer
    /// than 1 in 5 slots were used at any time since the previous call.
    pub(crate) fn retain_mut(&mut self, mut keep: impl FnMut(u64, &mut V) -> bool) {
        if let Some(v) = self.zero.as_mut() {
            if !keep(0, v) {
                self.zero = None;
            }
        }
        let size = self.slots.len();
        if size == 0 {
            return;
        }
        // Start after an empty slot (one exists: the load is below 1), so
        // no probe run wraps past the start: every entry is visited once,
        // and an entry shifted back into the visited position is visited
        // there (backward shifts never move an entry forward).
        let start = (0..size)
            .find(|&i| self.slots[i].key == 0)
            .expect("load < 1");
        for step in 1..=size {
            let i = (start + step) % size;
            while self.slots[i].key != 0 {
                let Slot { key, mut value, .. } = self.slots[i];
                if keep(key, &mut value) {
                    self.slots[i].value = value;
                    break;
                }
                self.remove_at(i);
            }
        }
        let peak = std::mem::replace(&mut self.peak, self.used);
        if size > MIN_SLOTS && peak * LOAD_DEN < size * SHRINK_NUM {
            self.resize(Self::holding(self.used));
        }
    }

    /// Empty slot `hole`, moving later entries of its probe run back so
    /// that every entry stays reachable from its home slot.
    fn remove_at(&mut self, mut hole: usize) {
        let size = self.slots.len();
        // How far `j` lies after `from`, cyclically.
        let behind = |from: usize, j: usize| (j + size - from) % size;
        let mut j = hole;
        loop {
            j = self.next(j);
            let key = self.slots[j].key;
            if key == 0 {
                break;
            }
            let home = self.home(key);
            // The entry at j may move to the hole when its home is not
            // strictly between the hole and j (cyclically).
            if behind(home, j) >= behind(hole, j) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = Slot::default();
        self.used -= 1;
    }

    /// Move every entry into a new array of `size` slots. Growing, both
    /// arrays exist for a moment; shrinking, the entries are first copied
    /// out so the old array is freed before the new one is made.
    fn resize(&mut self, size: usize) {
        let old = std::mem::take(&mut self.slots);
        let old: Vec<Slot<V, A>> = if size < old.len() {
            old.into_iter().filter(|s| s.key != 0).collect()
        } else {
            old
        };
        self.slots = vec![Slot::default(); size];
        for s in old.into_iter().filter(|s| s.key != 0) {
            let mut i = self.home(s.key);
            while self.slots[i].key != 0 {
                i = self.next(i);
            }
            self.slots[i] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check_reachable(t: &DeviceTable<u32>, reference: &HashMap<u64, u32>) {
        assert_eq!(t.len(), reference.len());
        for (k, v) in reference {
            assert_eq!(t.get(*k), Some(v), "key {k}");
        }
    }

    /// Against std's map on random and adversarial keys (equal low bits,
    /// key 0, growth): every key finds its own value, absent keys are absent.
    #[test]
    fn agrees_with_a_hash_map() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut table = DeviceTable::default();
        let mut reference = HashMap::new();
        for round in 0..50_000u64 {
            let key = match round % 4 {
                0 => rng.gen::<u64>(),
                1 => rng.gen::<u64>() << 20, // same home slot for small tables
                2 => round % 97,             // repeats, including 0
                _ => u64::MAX - (round % 13),
            };
            table.prefetch(key);
            let v = table.get_or_insert(key, 0u32);
            *v += 1;
            *reference.entry(key).or_insert(0u32) += 1;
        }
        check_reachable(&table, &reference);
        for _ in 0..10_000 {
            let k = rng.gen::<u64>();
            assert_eq!(table.get(k), reference.get(&k));
        }
        assert!(table.used * LOAD_DEN <= table.slots.len() * LOAD_NUM);
        assert_eq!(std::mem::size_of::<Slot<u64, Align16>>(), 16);
        assert_eq!(std::mem::align_of::<Slot<u64, Align16>>(), 16);
        assert_eq!(std::mem::size_of::<Slot<[u64; 7], Align64>>(), 64);
        assert_eq!(std::mem::align_of::<Slot<[u64; 7], Align64>>(), 64);
    }

    /// Single removals and changes in place, mixed with inserts, on keys
    /// that share home slots and wrap (and key 0): the table answers as
    /// std's map after every step.
    #[test]
    fn remove_and_get_mut_agree_with_a_hash_map() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let mut t: DeviceTable<u32> = DeviceTable::default();
        let mut reference = HashMap::new();
        for step in 0..40_000u32 {
            let key = match rng.gen_range(0..4) {
                0 => rng.gen_range(0..3),
                1 => (rng.gen_range(0..50u64) << 12) | 0xFFF,
                _ => rng.gen_range(0..300u64) << 20,
            };
            match rng.gen_range(0..3) {
                0 => assert_eq!(t.remove(key), reference.remove(&key), "step {step}"),
                1 => {
                    if let Some(v) = t.get_mut(key) {
                        *v += 7;
                    }
                    if let Some(v) = reference.get_mut(&key) {
                        *v += 7;
                    }
                }
                _ => {
                    t.get_or_insert(key, step);
                    reference.entry(key).or_insert(step);
                }
            }
            if step % 1_000 == 0 {
                check_reachable(&t, &reference);
            }
        }
        check_reachable(&t, &reference);
    }

    /// In-place removal keeps every remaining key reachable, including
    /// probe runs that wrap around the end of the array and keys sharing a
    /// home slot; values changed by `keep` are kept.
    #[test]
    fn retain_mut_keeps_runs_reachable() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for round in 0..200u64 {
            let mut t: DeviceTable<u32> = DeviceTable::default();
            let mut reference = HashMap::new();
            let n = rng.gen_range(1..400);
            for _ in 0..n {
                // Few distinct home slots, many near the end: long runs that wrap.
                let key = match rng.gen_range(0..3) {
                    0 => rng.gen::<u64>(),
                    1 => (rng.gen::<u64>() << 12) | 0xFFF,
                    _ => (rng.gen::<u64>() << 12) | rng.gen_range(0xFF0..0x1000),
                };
                *t.get_or_insert(key, 0) += 1;
                *reference.entry(key).or_insert(0) += 1;
            }
            let modulus = 2 + round % 5;
            t.retain_mut(|k, v| {
                *v += 100;
                k % modulus != 0
            });
            reference.retain(|k, v| {
                *v += 100;
                k % modulus != 0
            });
            check_reachable(&t, &reference);
            assert!(t.used * LOAD_DEN <= t.slots.len() * LOAD_NUM);
        }
    }

    #[test]
    fn retain_drops_entries_and_shrinks() {
        let mut t: DeviceTable<u32> = DeviceTable::default();
        for k in 0..10_000u64 {
            *t.get_or_insert(k, 0) = k as u32;
        }
        let size = t.slots.len();
        t.retain_mut(|_, v| *v % 10 == 0);
        assert_eq!(t.len(), 1000);
        for k in 0..10_000u64 {
            assert_eq!(t.get(k).is_some(), k % 10 == 0, "{k}");
        }
        // 10,000 entries were there since the last pass: the size stays
        // (the next horizon may bring as many again) ...
        assert!(t.slots.len() * 8 >= 10_000 * 10, "{}", t.slots.len());
        assert_eq!(t.slots.len(), size);
        // ... and goes once a whole pass period stayed small.
        t.retain_mut(|_, _| true);
        assert!(t.slots.len() <= 2048, "{}", t.slots.len());
        // Still a working table.
        *t.get_or_insert(123_456, 0) = 7;
        assert_eq!(t.get(123_456), Some(&7));
        t.retain_mut(|_, _| false);
        assert_eq!(t.len(), 0);
        assert_eq!(t.get(10), None);
    }

    /// A refused insert leaves the table unchanged; present keys are found
    /// whatever the predicate says.
    #[test]
    fn insert_if_respects_the_predicate() {
        let mut t: DeviceTable<u32> = DeviceTable::default();
        for k in 1..=5u64 {
            assert!(t.get_or_insert_if(k, 1, |len| len < 5).is_some());
        }
        assert!(t.get_or_insert_if(6, 1, |len| len < 5).is_none());
        assert!(t.get_or_insert_if(0, 1, |len| len < 5).is_none());
        assert_eq!(t.len(), 5);
        assert_eq!(t.get_or_insert_if(3, 9, |_| false).copied(), Some(1));
    }

    /// A table made for `n` entries takes them without growing, and at
    /// most the size growth would have reached.
    #[test]
    fn with_capacity_holds_its_entries() {
        for n in [1usize, 16, 1000, 838_860, 838_861, 1_000_000] {
            let mut t: DeviceTable<u64> = DeviceTable::with_capacity(n);
            let before = t.slots.len();
            let mut grown: DeviceTable<u64> = DeviceTable::default();
            for k in 1..=n as u64 {
                t.get_or_insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k);
                grown.get_or_insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k);
            }
            assert_eq!(t.slots.len(), before, "{n}: grew");
            assert!(
                t.slots.len() <= grown.slots.len(),
                "{n}: larger than growth gives"
            );
        }
    }

    /// Bytes per entry stay within the documented bounds as the table
    /// grows: at most 30 B between growths (above 16 entries), at least 20.
    #[test]
    fn bytes_per_entry_are_bounded() {
        let mut t: DeviceTable<u64> = DeviceTable::default();
        for k in 1..2_000_000u64 {
            t.get_or_insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k);
            if k > 16 {
                assert!(t.bytes() <= 30 * t.len(), "{} bytes for {k}", t.bytes());
                assert!(t.bytes() >= 20 * t.len(), "{} bytes for {k}", t.bytes());
            }
        }
    }
}
