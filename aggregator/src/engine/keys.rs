//! Private keys in the service: per (grouped stream, input partition), the
//! distinct devices seen with each value of the stream's private dimension
//! per horizon, the DP key selection once a horizon is over, and the slots
//! the selected values are bound to (docs/DESIGN.md §4, private keys).
//!
//! Privacy argument. A reading counts for horizon `h` iff its event time is
//! in `h` and its message timestamp is before `h`'s end plus
//! `max_lateness` — a test of the reading alone — and a device counts
//! towards at most `G` values per horizon (its first, by its own arrival
//! order). So a device moves the vector of counts by at most `G` in L1 and
//! `√G` in L2, which is what [`KeySelection`] is calibrated to; it is run
//! once per (stream, partition, horizon) with noise keyed by the counts
//! (a replay draws the same), and never again after a restart (the
//! selection is persisted before anything that used it is released:
//! [`KeyTable::take_updates`]). A device is on one input partition, so the
//! partitions' selections compose in parallel.
//!
//! Timing: horizon `h`'s selection runs when the first message stamped at
//! or after `h`'s end plus `max_lateness` is handled — under LogAppendTime
//! every message that can count for `h` came before it (the same rule that
//! closes time windows). Its keys route readings from horizon `h + 2` on: a
//! reading of horizon `h + 2` is stamped at least its start minus
//! `max_clock_skew`, which the configuration requires to be after `h`'s
//! selection moment (`max_lateness + max_clock_skew ≤ horizon`), so which
//! slot a reading goes to depends only on the reading and on selections
//! already made. Bound slots stay bound; their windows are released from
//! then on like public keys' (a post-processing of the selection).

use crate::dp::keyselect::KeySelection;
use crate::dp::rng::{selection_rng, ReleaseKey, WindowId};
use crate::engine::window::FastMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most distinct values counted per (stream, partition, horizon): a memory
/// guard (docs/configuration.md, limits); values beyond it are not counted that horizon.
pub const MAX_CANDIDATE_KEYS: usize = 100_000;

/// A slot's binding: its value, and the first horizon it routes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bound {
    pub value: String,
    pub from_horizon: i64,
}

/// What is persisted of a table (the state topic's `keys` record).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bindings {
    /// Every horizon up to this one has had its selection.
    pub selected_through: i64,
    /// Per slot (`#1` first), its binding.
    pub slots: Vec<Option<Bound>>,
}

/// One horizon's counts.
#[derive(Default)]
struct Counts {
    /// Per value: its number and distinct devices.
    keys: FastMap<Arc<str>, (u32, u64)>,
    /// (device, value number) pairs seen, and values per device.
    pairs: FastMap<(u64, u32), ()>,
    per_device: FastMap<u64, u32>,
}

/// The private keys of one (grouped stream, partition).
pub struct KeyTable {
    stream: String,
    partition: i32,
    selection: KeySelection,
    horizon_ms: i64,
    lateness_ms: i64,
    bindings: Bindings,
    by_value: FastMap<Arc<str>, (u32, i64)>,
    counting: BTreeMap<i64, Counts>,
    /// Whether `bindings` changed since [`KeyTable::take_updates`].
    changed: bool,
    /// Slots bound since the last [`KeyTable::take_new_slots`].
    new_slots: Vec<(u32, i64)>,
}

impl KeyTable {
    /// An empty table for `stream` (the declared name) on `partition`.
    pub fn new(
        stream: &str,
        partition: i32,
        selection: KeySelection,
        slots: usize,
        horizon_ms: i64,
        lateness_ms: i64,
    ) -> Self {
        Self {
            stream: stream.to_string(),
            partition,
            selection,
            horizon_ms,
            lateness_ms,
            bindings: Bindings {
                selected_through: i64::MIN,
                slots: vec![None; slots],
            },
            by_value: FastMap::default(),
            counting: BTreeMap::new(),
            changed: false,
            new_slots: Vec::new(),
        }
    }

    /// Continue from persisted bindings (a restart or a handover).
    pub fn restore(&mut self, b: Bindings) {
        self.by_value.clear();
        for (i, s) in b.slots.iter().enumerate() {
            if let Some(s) = s {
                self.by_value
                    .insert(s.value.as_str().into(), (i as u32, s.from_horizon));
            }
        }
        self.counting.retain(|&h, _| h > b.selected_through);
        self.new_slots = b
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s.from_horizon)))
            .collect();
        self.bindings = b;
    }

    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// The last horizon whose selection is due by a message stamped `msg_ms`.
    fn due_through(&self, msg_ms: i64) -> i64 {
        (msg_ms.saturating_sub(self.lateness_ms)).div_euclid(self.horizon_ms) - 1
    }

    /// Handle a message stamped `msg_ms`: run every selection now due.
    pub fn advance(&mut self, key: &ReleaseKey, msg_ms: i64) {
        let through = self.due_through(msg_ms);
        if through <= self.bindings.selected_through {
            return;
        }
        while let Some((&h, _)) = self.counting.first_key_value() {
            if h > through {
                break;
            }
            let counts = self.counting.remove(&h).expect("listed");
            self.select(key, h, counts);
            // Persisted, so a restart never selects `h` again (a horizon
            // with no counts had no selection to protect).
            self.changed = true;
        }
        self.bindings.selected_through = through;
    }

    /// The slot a reading of `value` with event time `event_ms` goes to
    /// (`None`: `other`). Call [`KeyTable::advance`] first.
    pub fn slot(&self, value: Option<&str>, event_ms: i64) -> Option<usize> {
        let h = event_ms.div_euclid(self.horizon_ms);
        let &(slot, from) = self.by_value.get(value?)?;
        (from <= h).then_some(slot as usize)
    }

    /// Count a reading of `device` with `value` (after its message was
    /// accepted whole); `false`: a new value refused, the table being full.
    pub fn count(&mut self, device: u64, value: &str, event_ms: i64, msg_ms: i64) -> bool {
        let h = event_ms.div_euclid(self.horizon_ms);
        let end = (h + 1).saturating_mul(self.horizon_ms);
        if h <= self.bindings.selected_through || msg_ms >= end.saturating_add(self.lateness_ms) {
            return true;
        }
        let g = self.selection.groups_per_device;
        let c = self.counting.entry(h).or_default();
        let next = c.keys.len() as u32;
        let id = match c.keys.get(value) {
            Some(&(id, _)) => id,
            None if c.keys.len() >= MAX_CANDIDATE_KEYS => return false,
            None => next,
        };
        if c.pairs.contains_key(&(device, id)) {
            return true;
        }
        let n = c.per_device.entry(device).or_insert(0);
        if *n >= g {
            return true;
        }
        *n += 1;
        c.pairs.insert((device, id), ());
        c.keys.entry(value.into()).or_insert((id, 0)).1 += 1;
        true
    }

    /// Horizon `h`'s selection: noisy counts against the threshold; newly
    /// selected values, most devices (noisy) first, fill free slots.
    fn select(&mut self, key: &ReleaseKey, h: i64, counts: Counts) {
        let mut keys: Vec<(Arc<str>, u64)> =
            counts.keys.into_iter().map(|(v, (_, c))| (v, c)).collect();
        keys.sort_unstable();
        let mut digest = blake3::Hasher::new();
        for (v, c) in &keys {
            digest.update(&(v.len() as u64).to_le_bytes());
            digest.update(v.as_bytes());
            digest.update(&c.to_le_bytes());
        }
        let id = WindowId {
            stream: &self.stream,
            partition: self.partition,
            seq: h as u64,
        };
        let mut rng = selection_rng(key, id, digest.finalize().as_bytes());
        let mut picked: Vec<(i128, Arc<str>)> = keys
            .into_iter()
            .filter_map(|(v, c)| {
                let noisy = self.selection.noisy(&mut rng, c);
                (noisy >= self.selection.threshold && !self.by_value.contains_key(&v))
                    .then_some((noisy, v))
            })
            .collect();
        picked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut picked = picked.into_iter();
        for (i, s) in self.bindings.slots.iter_mut().enumerate() {
            if s.is_some() {
                continue;
            }
            let Some((_, v)) = picked.next() else { break };
            *s = Some(Bound {
                value: v.to_string(),
                from_horizon: h + 2,
            });
            self.by_value.insert(v, (i as u32, h + 2));
            self.new_slots.push((i as u32, h + 2));
        }
    }

    /// The bindings to persist, if they changed since the last call.
    pub fn take_updates(&mut self) -> Option<Bindings> {
        std::mem::take(&mut self.changed).then(|| self.bindings.clone())
    }

    /// Slots bound since the last call, with the horizon they route from.
    pub fn take_new_slots(&mut self) -> Vec<(u32, i64)> {
        std::mem::take(&mut self.new_slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::mechanism::Measure;

    const H: i64 = 1_000;
    const L: i64 = 100;

    fn table(g: u32, slots: usize) -> KeyTable {
        let s = KeySelection::calibrate(Measure::Pure, g, 1.0, 1e-6).unwrap();
        KeyTable::new("s", 0, s, slots, H, L)
    }

    fn key() -> ReleaseKey {
        ReleaseKey::from_bytes([3; 32])
    }

    /// A value many devices report is selected at its horizon's due moment
    /// and routes from two horizons later; a value of one device is not.
    #[test]
    fn well_supported_values_are_bound_two_horizons_later() {
        let mut t = table(1, 2);
        for d in 0..100 {
            t.count(d, "4.3", 10 * H + 5, 10 * H + 5);
        }
        t.count(500, "rare", 10 * H + 5, 10 * H + 5);
        // Not due yet: nothing bound.
        t.advance(&key(), 11 * H + L - 1);
        assert_eq!(t.bindings().selected_through, 9);
        assert_eq!(t.slot(Some("4.3"), 12 * H), None);
        t.advance(&key(), 11 * H + L);
        assert_eq!(t.bindings().selected_through, 10);
        assert_eq!(t.slot(Some("4.3"), 12 * H - 1), None);
        assert_eq!(t.slot(Some("4.3"), 12 * H), Some(0));
        assert_eq!(t.slot(Some("rare"), 12 * H), None);
        assert_eq!(t.slot(None, 12 * H), None);
        assert_eq!(t.take_new_slots(), vec![(0, 12)]);
        let b = t.take_updates().unwrap();
        assert_eq!(
            b.slots,
            vec![
                Some(Bound {
                    value: "4.3".into(),
                    from_horizon: 12
                }),
                None
            ]
        );
        assert!(t.take_updates().is_none());
        // A reading of a selected horizon, or stamped after its due moment,
        // no longer counts.
        t.count(1, "late", 10 * H + 5, 10 * H + 6);
        t.count(1, "late", 11 * H + 5, 12 * H + L);
        assert!(t.counting.values().all(|c| !c.keys.contains_key("late")));
    }

    /// A device counts towards at most `G` values per horizon, once each.
    #[test]
    fn a_device_counts_in_g_values_once() {
        let mut t = table(2, 4);
        for v in ["a", "b", "c", "a"] {
            t.count(7, v, 5, 5);
            t.count(7, v, 6, 6);
        }
        let c = &t.counting[&0];
        let count = |v: &str| c.keys.get(v).map_or(0, |x| x.1);
        assert_eq!((count("a"), count("b"), count("c")), (1, 1, 0));
    }

    /// Restored bindings route as before and are not selected again.
    #[test]
    fn restore_keeps_bindings_and_selected_horizons() {
        let mut t = table(1, 2);
        for d in 0..100 {
            t.count(d, "x", 5, 5);
        }
        t.advance(&key(), H + L);
        let b = t.take_updates().unwrap();
        let mut u = table(1, 2);
        u.restore(b.clone());
        assert_eq!(u.slot(Some("x"), 2 * H), Some(0));
        assert_eq!(u.take_new_slots(), vec![(0, 2)]);
        // Readings of horizon 0 replayed after the restore do not count.
        u.count(1, "y", 5, 5);
        assert!(u.counting.is_empty());
        assert_eq!(u.bindings(), &b);
    }

    /// More selected values than slots: the slots go to the most devices.
    #[test]
    fn slots_go_to_the_best_supported_values() {
        let mut t = table(1, 1);
        for d in 0..60 {
            t.count(d, "small", 5, 5);
        }
        for d in 100..400 {
            t.count(d, "big", 5, 5);
        }
        t.advance(&key(), H + L);
        assert_eq!(t.slot(Some("big"), 2 * H), Some(0));
        assert_eq!(t.slot(Some("small"), 2 * H), None);
    }
}
