//! The per-device table of a lane: device key → that device's window counts.
//!
//! It is read once per reading and, with 100 k+ devices, almost every read
//! misses the CPU caches. A general hash map keeps control bytes and entries
//! apart (two misses) and hides where a key lives; this table stores keys
//! inline with their state (open addressing, linear probing, one cache line
//! per lookup), and because device keys are already uniform hashes the slot
//! of a key is known in advance, so the pipeline can prefetch it while it
//! finishes the previous message. A device's state is reset in place when
//! its horizon moves on; [`DeviceTable::retain`] drops the entries of
//! devices whose horizon is over, so device churn does not grow the table.

/// Open-addressing map from device keys to `V`.
#[derive(Debug, Clone)]
pub(crate) struct DeviceTable<V> {
    /// Power-of-two length; key 0 marks an empty slot.
    slots: Vec<Slot<V>>,
    /// Entries in `slots` (key 0's entry is `zero`).
    used: usize,
    /// The entry of key 0, which cannot live in a slot.
    zero: Option<V>,
}

/// A key and its value, aligned so that one slot never straddles two cache
/// lines (for a `V` of up to 24 bytes a slot is 32).
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(32))]
struct Slot<V> {
    key: u64,
    value: V,
}

impl<V> Default for DeviceTable<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            used: 0,
            zero: None,
        }
    }
}

/// Grow when more than 7 in 10 slots are used: short probe runs, and the
/// table stays within about three times the entries' size.
const LOAD_NUM: usize = 7;
const LOAD_DEN: usize = 10;

impl<V: Copy + Default> DeviceTable<V> {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.used + usize::from(self.zero.is_some())
    }

    fn home(&self, key: u64) -> usize {
        (key as usize) & (self.slots.len() - 1)
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
            _mm_prefetch::<_MM_HINT_T0>(slot as *const Slot<V> as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    #[cfg(test)]
    pub(crate) fn get(&self, key: u64) -> Option<&V> {
        if key == 0 {
            return self.zero.as_ref();
        }
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match self.slots[i].key {
                k if k == key => return Some(&self.slots[i].value),
                0 => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// The entry of `key`, inserted as `fresh` if absent.
    pub(crate) fn get_or_insert(&mut self, key: u64, fresh: V) -> &mut V {
        if key == 0 {
            return self.zero.get_or_insert(fresh);
        }
        if (self.used + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match self.slots[i].key {
                k if k == key => break,
                0 => {
                    self.slots[i] = Slot { key, value: fresh };
                    self.used += 1;
                    break;
                }
                _ => i = (i + 1) & mask,
            }
        }
        &mut self.slots[i].value
    }

    /// Keep only the entries `keep` accepts, in a table sized for them (so
    /// its load is again between about 0.35 and 0.7).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        if self.zero.as_ref().is_some_and(|v| !keep(v)) {
            self.zero = None;
        }
        let kept: Vec<Slot<V>> = std::mem::take(&mut self.slots)
            .into_iter()
            .filter(|s| s.key != 0 && keep(&s.value))
            .collect();
        self.used = 0;
        if kept.is_empty() {
            return;
        }
        let size = (kept.len() * LOAD_DEN / LOAD_NUM + 1)
            .next_power_of_two()
            .max(16);
        self.slots = vec![Slot::default(); size];
        let mask = size - 1;
        for s in kept {
            let mut i = (s.key as usize) & mask;
            while self.slots[i].key != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
            self.used += 1;
        }
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); size]);
        let mask = size - 1;
        for s in old.into_iter().filter(|s| s.key != 0) {
            let mut i = (s.key as usize) & mask;
            while self.slots[i].key != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
        assert_eq!(table.len(), reference.len());
        for (k, v) in &reference {
            assert_eq!(table.get(*k), Some(v), "key {k}");
        }
        for _ in 0..10_000 {
            let k = rng.gen::<u64>();
            assert_eq!(table.get(k), reference.get(&k));
        }
        assert!(table.used * LOAD_DEN <= table.slots.len() * LOAD_NUM);
        assert_eq!(std::mem::size_of::<Slot<[u64; 3]>>(), 32);
    }

    #[test]
    fn retain_drops_entries_and_shrinks() {
        let mut t: DeviceTable<u32> = DeviceTable::default();
        for k in 0..10_000u64 {
            *t.get_or_insert(k, 0) = k as u32;
        }
        t.retain(|v| v % 10 == 0);
        assert_eq!(t.len(), 1000);
        for k in 0..10_000u64 {
            assert_eq!(t.get(k).is_some(), k % 10 == 0, "{k}");
        }
        assert!(t.slots.len() <= 2048, "{}", t.slots.len());
        // Still a working table.
        *t.get_or_insert(123_456, 0) = 7;
        assert_eq!(t.get(123_456), Some(&7));
        t.retain(|_| false);
        assert_eq!(t.len(), 0);
        assert_eq!(t.get(10), None);
    }
}
