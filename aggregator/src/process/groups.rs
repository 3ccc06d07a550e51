//! Which planned stream a reading of a grouped stream goes to: its group,
//! from the reading's labels, else the device registry's row for the
//! device (the loop's [`Replica`] when the registry's rows fit one, else
//! the shared table), else `other` (docs/DESIGN.md §4, group-by); for a
//! grouping without private keys, in one pass of its [`Route`]. The
//! group only routes a reading; what a device may add across groups is
//! capped by `G` in the windows.

use super::{Processor, ROUTE_LATER};
use crate::registry::{group_in, Replica, Route, NO_ROW};

impl Processor {
    /// Look grouped streams' dimension values up in `registry` (readings'
    /// labels take precedence).
    pub fn with_registry(mut self, registry: std::sync::Arc<crate::registry::Registry>) -> Self {
        for d in &mut self.declared {
            if let Some(g) = &d.grouping {
                d.positions = g.dimensions().map(|n| registry.position(n)).collect();
            }
        }
        // A copy of the rows now (the registry is loaded before the first
        // reading), not at the first message.
        self.replica = Replica::new(&registry).map(|mut r| {
            r.sync(&registry);
            r
        });
        for d in &mut self.declared {
            if let Some(g) = &d.grouping {
                d.route = Route::new(g, &d.positions);
            }
        }
        self.registry = Some(registry);
        self
    }

    /// Bring the replica up to date with the registry (before a message's
    /// readings are routed). Staged readings still waiting are routed
    /// first, by the rows as they were when their message was prepared.
    pub(super) fn sync_registry(&mut self) {
        let (Some(rep), Some(reg)) = (&self.replica, &self.registry) else {
            return;
        };
        if rep.is_current(reg) {
            return;
        }
        let mut from = 0;
        for i in 0..self.messages_staged.len() {
            let (p, _, n) = self.messages_staged[i];
            self.route(from, n, p);
            from += n;
        }
        if let (Some(rep), Some(reg)) = (&mut self.replica, &self.registry) {
            rep.sync(reg);
        }
    }

    /// The registry digit of dimension `position` of `device` ([`ABSENT`]
    /// without one, or without a registry).
    ///
    /// [`ABSENT`]: crate::registry::ABSENT
    pub(super) fn registry_digit(&self, device: u64, position: usize) -> u16 {
        let absent = crate::registry::ABSENT;
        match (&self.replica, &self.registry) {
            (Some(rep), _) => rep.row(device).map_or(absent, |r| r[position]),
            (None, Some(reg)) => reg.with_row(device, |r| r.map_or(absent, |r| r[position])),
            (None, None) => absent,
        }
    }

    /// The index of a reading's group among declared stream `d`'s groups
    /// (0 for a stream without groups); `private`: the slot of its private
    /// dimension's value.
    pub(super) fn group_index(
        &self,
        d: usize,
        r: &ingest::Reading,
        device: u64,
        private: Option<usize>,
    ) -> u32 {
        let decl = &self.declared[d];
        let Some(g) = &decl.grouping else {
            return 0;
        };
        let p = &decl.positions;
        // Without private keys, one pass of the stream's route; with them
        // (or a registry too wide for a replica), the general lookup.
        match (&decl.route, &self.replica, &self.registry) {
            (Some(route), Some(rep), _) => route.index_labelled(&r.labels, || rep.packed(device)),
            (Some(route), None, None) => route.index_labelled(&r.labels, || NO_ROW),
            (_, Some(rep), _) => {
                rep.with_row(device, |row| group_in(g, p, row, &r.labels, private))
            }
            (_, None, Some(reg)) => reg.group_of(g, p, device, &r.labels, private),
            (_, None, None) => group_in(g, p, None, &r.labels, private),
        }
    }

    /// Find the groups of staged readings `from..from + count` (one
    /// message on `partition`) that wait for the registry replica, and
    /// start fetching their lanes' slots.
    pub(super) fn route(&mut self, from: usize, count: usize, partition: i32) {
        let Some(rep) = &self.replica else {
            return;
        };
        for r in self.staged.range_mut(from..from + count) {
            if r.stream != ROUTE_LATER {
                continue;
            }
            let d = &self.declared[r.declared as usize];
            let route = d.route.as_ref().expect("only readings with a route wait");
            let index = route.index(rep.packed(r.device));
            r.stream = d.first + index as usize;
            self.windower.prefetch(r.stream, partition, r.device);
        }
    }
}
