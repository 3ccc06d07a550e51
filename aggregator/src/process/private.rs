//! The processor's private keys: which slot a reading of a private
//! dimension goes to, the key tables per (declared stream, partition)
//! ([`crate::keys`], where the privacy argument is), binding slots to
//! their lanes and releases, and persisting and restoring the bindings.

use super::{Processor, ToCount};
use crate::keys::{Bindings, KeyTable};
use std::sync::Arc;

impl Processor {
    /// Key tables whose bindings changed since the last call, to persist
    /// before anything routed by them is released: (declared stream name,
    /// partition, bindings).
    pub fn take_key_updates(&mut self) -> Vec<(String, i32, Bindings)> {
        let mut out: Vec<(String, i32, Bindings)> = self
            .keys
            .iter_mut()
            .filter_map(|(&(d, p), t)| {
                t.take_updates()
                    .map(|b| (self.declared[d].name.clone(), p, b))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }

    /// Continue a private-key table from persisted bindings.
    pub fn restore_keys(&mut self, stream: &str, partition: i32, b: Bindings) {
        let Some(d) = self.declared.iter().position(|d| d.name == stream) else {
            return;
        };
        if let Some(t) = self.key_table(d, partition) {
            t.restore(b);
            self.bind_new_slots(d, partition);
        }
    }

    /// The key table of a declared stream with private keys on `partition`.
    fn key_table(&mut self, d: usize, partition: i32) -> Option<&mut KeyTable> {
        let decl = &self.declared[d];
        let g = decl.grouping.as_ref()?;
        g.private_dimension()?;
        if self.keys.contains_key(&(d, partition)) {
            return self.keys.get_mut(&(d, partition));
        }
        let selection = self.selection[decl.first].clone()?;
        let name = decl.name.clone();
        let (slots, h, l) = (g.slots(), self.horizon_ms, self.lateness_ms);
        Some(
            self.keys
                .entry((d, partition))
                .or_insert_with(|| KeyTable::new(&name, partition, selection, slots, h, l)),
        )
    }

    /// Publish newly bound slots and start their time lanes at the first
    /// window of the horizon they route from.
    fn bind_new_slots(&mut self, d: usize, partition: i32) {
        let Some(t) = self.keys.get_mut(&(d, partition)) else {
            return;
        };
        let new = t.take_new_slots();
        if new.is_empty() {
            return;
        }
        let decl = &self.declared[d];
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
                    self.windower
                        .start_lane_at(s, partition, first.max(0) as u64);
                }
            }
        }
    }

    /// A slot stream's bound key on `partition`: (dimension, value) for its
    /// releases' `group` (`None`: not a slot of private keys).
    pub fn bound_value(&self, stream: usize, partition: i32) -> Option<(String, String)> {
        let d = self.declared.iter().rev().find(|d| d.first <= stream)?;
        let g = d.grouping.as_ref()?;
        let pi = g.private_dimension()?;
        let slot = g.digit_of((stream - d.first) as u32, pi);
        let v = self.slot_values.get(&(d.first, partition, slot as u32))?;
        Some((g.dimension(pi).to_string(), v.to_string()))
    }

    /// A reading of a stream with private keys: run the selections its
    /// message's timestamp makes due, note its value to count, and return
    /// the slot it goes to (`None`: `other`, or no private dimension).
    pub(super) fn private_slot(
        &mut self,
        r: &ingest::Reading,
        partition: i32,
        device: u64,
        stamp: i64,
    ) -> Option<usize> {
        let d = r.stream_index;
        let decl = &self.declared[d];
        let pi = decl.grouping.as_ref()?.private_dimension()?;
        let dim = decl.grouping.as_ref()?.dimension(pi);
        let value: Option<Arc<str>> = match r.labels.get(dim) {
            Some(v) => Some(v.into()),
            None => self
                .registry
                .as_ref()
                .zip(decl.positions.get(pi).copied().flatten())
                .and_then(|(reg, p)| reg.interned_value(self.registry_digit(device, p))),
        };
        let key = self.release_key.clone();
        let t = self.key_table(d, partition)?;
        t.advance(&key, stamp);
        let slot = t.slot(value.as_deref(), r.event_time_ms);
        self.bind_new_slots(d, partition);
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
}
