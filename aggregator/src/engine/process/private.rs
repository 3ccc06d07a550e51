//! Private keys (docs/DESIGN.md §4): their one owner, [`PrivateKeys`] —
//! the key tables per (declared stream, partition) ([`crate::engine::keys`], where
//! the privacy argument is), which slot a reading of a private dimension
//! goes to, binding slots to their lanes and releases, and persisting and
//! restoring the bindings. The processor hands it the declared streams and
//! the windower; it keeps nothing of theirs.

use super::declared::Declared;
use crate::config::Validated;
use crate::dp::keyselect::KeySelection;
use crate::dp::rng::ReleaseKey;
use crate::engine::keys::{Bindings, KeyTable};
use crate::engine::window::{FastMap, Windower};
use std::sync::Arc;

/// A reading of a private dimension to count once its message is accepted.
struct ToCount {
    declared: usize,
    device: u64,
    value: Arc<str>,
    event_ms: i64,
    msg_ms: i64,
}

/// Every private-key table of the loop and what it binds.
pub(super) struct PrivateKeys {
    /// Per (declared stream, partition), its key table.
    tables: FastMap<(usize, i32), KeyTable>,
    /// The value each bound slot carries, per (plan index of the declared
    /// stream's first group, partition, slot): releases publish it.
    slot_values: FastMap<(usize, i32, u32), Arc<str>>,
    /// Values of the message being staged, counted once it is accepted.
    to_count: Vec<ToCount>,
    /// Keys the selections' noise.
    release_key: ReleaseKey,
    /// Plan index → its key selection, if it is a slot of private keys.
    selection: Vec<Option<KeySelection>>,
    /// Plan index → its time windows' length (slot lanes start when bound).
    window_ms: Vec<Option<i64>>,
    horizon_ms: i64,
    lateness_ms: i64,
}

impl PrivateKeys {
    pub fn new(v: &Validated) -> Self {
        let streams = &v.plan.streams;
        Self {
            tables: FastMap::default(),
            slot_values: FastMap::default(),
            to_count: Vec::new(),
            release_key: ReleaseKey::ephemeral(),
            selection: streams
                .iter()
                .map(|s| s.selection.as_ref().map(|s| s.mechanism.clone()))
                .collect(),
            window_ms: streams
                .iter()
                .map(|s| s.spec.window_ms.map(|w| w as i64))
                .collect(),
            horizon_ms: v.horizon.as_millis() as i64,
            lateness_ms: v.max_lateness.as_millis() as i64,
        }
    }

    /// Key the selections' noise with the release key.
    pub fn set_release_key(&mut self, key: ReleaseKey) {
        self.release_key = key;
    }

    /// Forget a revoked partition.
    pub fn drop_partition(&mut self, partition: i32) {
        self.tables.retain(|&(_, p), _| p != partition);
        self.slot_values.retain(|&(_, p, _), _| p != partition);
    }

    /// Whether any key table is kept (none without private keys): only
    /// then can [`PrivateKeys::take_updates`] find bindings to persist.
    pub fn any(&self) -> bool {
        !self.tables.is_empty()
    }

    /// Key tables whose bindings changed since the last call, to persist
    /// before anything routed by them is released: (declared stream name,
    /// partition, bindings).
    pub fn take_updates(&mut self, declared: &[Declared]) -> Vec<(String, i32, Bindings)> {
        // No private keys (the common case): nothing to look at per message.
        if self.tables.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<(String, i32, Bindings)> = self
            .tables
            .iter_mut()
            .filter_map(|(&(d, p), t)| t.take_updates().map(|b| (declared[d].name.clone(), p, b)))
            .collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }

    /// Continue a key table from persisted bindings.
    pub fn restore(
        &mut self,
        (declared, windower): (&[Declared], &mut Windower),
        stream: &str,
        partition: i32,
        b: Bindings,
    ) {
        let Some(d) = declared.iter().position(|d| d.name == stream) else {
            return;
        };
        if let Some(t) = self.table(declared, d, partition) {
            t.restore(b);
            self.bind_new_slots((declared, windower), d, partition);
        }
    }

    /// The key table of a declared stream with private keys on `partition`.
    fn table(&mut self, declared: &[Declared], d: usize, partition: i32) -> Option<&mut KeyTable> {
        let decl = &declared[d];
        let g = decl.grouping.as_ref()?;
        g.private_dimension()?;
        if self.tables.contains_key(&(d, partition)) {
            return self.tables.get_mut(&(d, partition));
        }
        let selection = self.selection[decl.first].clone()?;
        let (slots, h, l) = (g.slots(), self.horizon_ms, self.lateness_ms);
        Some(
            self.tables
                .entry((d, partition))
                .or_insert_with(|| KeyTable::new(&decl.name, partition, selection, slots, h, l)),
        )
    }

    /// Publish newly bound slots and start their time lanes at the first
    /// window of the horizon they route from.
    fn bind_new_slots(
        &mut self,
        (declared, windower): (&[Declared], &mut Windower),
        d: usize,
        partition: i32,
    ) {
        let Some(t) = self.tables.get_mut(&(d, partition)) else {
            return;
        };
        let new = t.take_new_slots();
        if new.is_empty() {
            return;
        }
        let decl = &declared[d];
        let g = decl.grouping.as_ref().expect("private keys are grouped");
        let pi = g.private_dimension().expect("private keys");
        for (slot, from) in new {
            if let Some(Some(b)) = t.bindings().slots.get(slot as usize) {
                self.slot_values
                    .insert((decl.first, partition, slot), b.value.as_str().into());
            }
            for index in 0..g.keys().len() as u32 {
                if g.digit_of(index, pi) != slot as usize {
                    continue;
                }
                let s = decl.first + index as usize;
                if let Some(len) = self.window_ms[s] {
                    let first = from.saturating_mul(self.horizon_ms) / len;
                    windower.start_lane_at(s, partition, first.max(0) as u64);
                }
            }
        }
    }

    /// A slot stream's bound key on `partition`: (dimension, value) for its
    /// releases' `group` (`None`: not a slot of private keys).
    pub fn bound_value(
        &self,
        declared: &[Declared],
        stream: usize,
        partition: i32,
    ) -> Option<(String, String)> {
        let d = declared.iter().rev().find(|d| d.first <= stream)?;
        let g = d.grouping.as_ref()?;
        let pi = g.private_dimension()?;
        let slot = g.digit_of((stream - d.first) as u32, pi);
        let v = self.slot_values.get(&(d.first, partition, slot as u32))?;
        Some((g.dimension(pi).to_string(), v.to_string()))
    }

    /// A message is being staged: nothing of it is counted yet.
    pub fn begin_message(&mut self) {
        self.to_count.clear();
    }

    /// A reading of declared stream `d` whose private dimension has
    /// `value` (`None`: absent): run the selections its message's
    /// timestamp `stamp` makes due, note its value to count, and return the
    /// slot it goes to (`None`: `other`, or no private keys).
    pub fn slot(
        &mut self,
        (declared, windower): (&[Declared], &mut Windower),
        (d, partition): (usize, i32),
        r: ingest::ReadingRef<'_>,
        (device, stamp): (u64, i64),
        value: Option<Arc<str>>,
    ) -> Option<usize> {
        let key = self.release_key.clone();
        let t = self.table(declared, d, partition)?;
        t.advance(&key, stamp);
        let slot = t.slot(value.as_deref(), r.event_time_ms);
        self.bind_new_slots((declared, windower), d, partition);
        if let Some(value) = value {
            self.to_count.push(ToCount {
                declared: d,
                device,
                value,
                event_ms: r.event_time_ms,
                msg_ms: stamp,
            });
        }
        slot
    }

    /// The message staged on `partition` is accepted whole: its private
    /// values count.
    pub fn count_accepted(&mut self, declared: &[Declared], partition: i32) {
        if self.to_count.is_empty() {
            return;
        }
        for c in self.to_count.drain(..) {
            if let Some(t) = self.tables.get_mut(&(c.declared, partition)) {
                if !t.count(c.device, &c.value, c.event_ms, c.msg_ms) {
                    crate::telemetry::key_value_refused(&declared[c.declared].name);
                }
            }
        }
    }
}
