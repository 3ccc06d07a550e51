//! The router: which planned stream a reading goes to, and the one owner
//! of what decides it — the declared streams, the device registry (the
//! loop's [`Replica`] of its rows when they fit one, else the shared
//! table) and the private-key tables (module `private`).
//!
//! A reading of a grouped stream goes to its group, from the reading's
//! labels, else the registry's row for the device, else `other`
//! (docs/DESIGN.md §4, group-by); for a grouping without private keys, in
//! one pass of its [`Route`]. The group only routes a reading; what a
//! device may add across groups is capped by `G` in the windows.
//!
//! A device with a replica slot has every reading of a grouped stream
//! admitted with that slot, however the reading was routed: the slot may
//! hold the device's window state of that stream (`crate::engine::window`, module
//! `hosted`), which the tables then lack. The router holds no window
//! state: the processor lends it the windower where a route touches it.

use super::declared::{declared, Declared};
use super::private::PrivateKeys;
use super::{Staged, ROUTE_LATER};
use crate::config::Validated;
use crate::dp::rng::ReleaseKey;
use crate::engine::keys::Bindings;
use crate::engine::registry::{group_in, Registry, Replica, Route, ABSENT, NO_ROW};
use crate::engine::window::{Hosted, RestoredLane, Windower};
use std::collections::VecDeque;
use std::sync::Arc;

/// Where a reading goes, before its replica slot is read.
pub(super) struct Placed {
    /// Its planned stream, or [`ROUTE_LATER`]: found by [`Router::route`].
    pub(super) stream: usize,
    /// The planned stream whose universe top-codes it (a group's lanes
    /// share the stream's universe).
    pub(super) coder: usize,
}

/// Routing state of one consuming loop.
pub(super) struct Router {
    declared: Vec<Declared>,
    /// Dimension values of devices (grouped streams), if `[registry]`.
    registry: Option<Arc<Registry>>,
    /// This loop's copy of the registry's rows, when they fit one.
    replica: Option<Replica>,
    /// Whether replica slots may keep grouped streams' window state
    /// (`crate::engine::window`, module `hosted`); off only to compare.
    hosting: bool,
    keys: PrivateKeys,
}

impl Router {
    pub(super) fn new(v: &Validated) -> Self {
        Self {
            declared: declared(v),
            registry: None,
            replica: None,
            hosting: true,
            keys: PrivateKeys::new(v),
        }
    }

    /// Look grouped streams' dimension values up in `registry` (readings'
    /// labels take precedence).
    pub(super) fn set_registry(&mut self, registry: Arc<Registry>, windower: &Windower) {
        for d in &mut self.declared {
            if let Some(g) = &d.grouping {
                d.positions = g.dimensions().map(|n| registry.position(n)).collect();
                d.route = Route::new(g, &d.positions);
            }
        }
        // A copy of the rows now (the registry is loaded before the first
        // reading), not at the first message.
        self.replica = Replica::new(&registry).map(|mut r| {
            r.sync(&registry, |h| windower.holds(h));
            r
        });
        self.registry = Some(registry);
    }

    /// Keep every device's window state in the windows' tables, none in
    /// replica slots (to compare against).
    pub(super) fn disable_hosting(&mut self) {
        self.hosting = false;
    }

    /// Key the private-key selections' noise with the release key.
    pub(super) fn set_release_key(&mut self, key: ReleaseKey) {
        self.keys.set_release_key(key);
    }

    /// Forget a revoked partition's private keys.
    pub(super) fn drop_partition(&mut self, partition: i32) {
        self.keys.drop_partition(partition);
    }

    /// Whether [`Router::take_key_updates`] may find bindings (a private
    /// key table is kept).
    pub(super) fn may_update_keys(&self) -> bool {
        self.keys.any()
    }

    /// Private-key bindings changed since the last call (declared stream
    /// name, partition, bindings).
    pub(super) fn take_key_updates(&mut self) -> Vec<(String, i32, Bindings)> {
        self.keys.take_updates(&self.declared)
    }

    /// Continue a private-key table from persisted bindings.
    pub(super) fn restore_keys(
        &mut self,
        windower: &mut Windower,
        (stream, partition): (&str, i32),
        b: Bindings,
    ) {
        self.keys
            .restore((&self.declared, windower), stream, partition, b);
    }

    /// A slot stream's bound key on `partition` (`None`: not a slot of
    /// private keys).
    pub(super) fn bound_value(&self, stream: usize, partition: i32) -> Option<(String, String)> {
        self.keys.bound_value(&self.declared, stream, partition)
    }

    /// Start a message: bring the replica up to date with the registry.
    /// Staged readings still waiting are routed first, by the rows as they
    /// were when their message was prepared.
    pub(super) fn begin_message(
        &mut self,
        staged: &mut VecDeque<Staged>,
        messages: &VecDeque<(i32, i64, usize)>,
        windower: &mut Windower,
    ) {
        self.keys.begin_message();
        let (Some(rep), Some(reg)) = (&self.replica, &self.registry) else {
            return;
        };
        if rep.is_current(reg) {
            return;
        }
        let mut from = 0;
        for &(p, _, n) in messages {
            self.route(staged, (from, n, p), windower);
            from += n;
        }
        if let (Some(rep), Some(reg)) = (&mut self.replica, &self.registry) {
            rep.sync(reg, |h| windower.holds(h));
        }
    }

    /// Where reading `r` (of a message on `partition`) goes: its private
    /// slot bound if it has one, its group found now unless the registry
    /// alone routes it and a replica slot is to be read first.
    pub(super) fn place(
        &mut self,
        r: ingest::ReadingRef<'_>,
        partition: i32,
        (device, stamp): (u64, i64),
        windower: &mut Windower,
    ) -> Placed {
        let private = self.private_slot(r, partition, (device, stamp), windower);
        let d = &self.declared[r.stream_index];
        // A reading the registry alone routes waits for its replica slot,
        // fetched meanwhile (`route`).
        if r.labels.is_empty() && self.replica.is_some() && d.route.is_some() {
            return Placed {
                stream: ROUTE_LATER,
                coder: d.first,
            };
        }
        let s = d.first + self.group_index(r.stream_index, r, device, private) as usize;
        Placed {
            stream: s,
            coder: s,
        }
    }

    /// Start fetching what admitting a placed reading of declared stream
    /// `d` will read: its replica slot (a grouped stream's comes with it),
    /// its lane's table slot once its lane is known.
    pub(super) fn prefetch(
        &self,
        d: usize,
        (stream, partition, device): (usize, i32, u64),
        windower: &Windower,
    ) {
        match &self.replica {
            Some(rep) if stream == ROUTE_LATER => rep.prefetch(device),
            Some(rep) if self.declared[d].grouping.is_some() => {
                rep.prefetch(device);
                windower.prefetch(stream, partition, device);
            }
            _ => windower.prefetch(stream, partition, device),
        }
    }

    /// The message being staged is accepted whole: its private values count.
    pub(super) fn count_accepted(&mut self, partition: i32) {
        self.keys.count_accepted(&self.declared, partition);
    }

    /// The replica slot a reading of declared stream `d` is admitted with
    /// (grouped streams only, while hosting).
    pub(super) fn host(&mut self, d: u32, device: u64) -> Option<&mut Hosted> {
        match &mut self.replica {
            Some(rep) if self.hosting && self.declared[d as usize].grouping.is_some() => {
                rep.hosted_mut(device)
            }
            _ => None,
        }
    }

    /// The registry digit of dimension `position` of `device` ([`ABSENT`]
    /// without one, or without a registry).
    fn registry_digit(&self, device: u64, position: usize) -> u16 {
        match (&self.replica, &self.registry) {
            (Some(rep), _) => rep.row(device).map_or(ABSENT, |r| r[position]),
            (None, Some(reg)) => reg.with_row(device, |r| r.map_or(ABSENT, |r| r[position])),
            (None, None) => ABSENT,
        }
    }

    /// The index of a reading's group among declared stream `d`'s groups
    /// (0 for a stream without groups); `private`: the slot of its private
    /// dimension's value.
    fn group_index(
        &self,
        d: usize,
        r: ingest::ReadingRef<'_>,
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
            (Some(route), Some(rep), _) => route.index_labelled(r.labels, || rep.packed(device)),
            (Some(route), None, None) => route.index_labelled(r.labels, || NO_ROW),
            (_, Some(rep), _) => rep.with_row(device, |row| group_in(g, p, row, r.labels, private)),
            (_, None, Some(reg)) => reg.group_of(g, p, device, r.labels, private),
            (_, None, None) => group_in(g, p, None, r.labels, private),
        }
    }

    /// A reading's slot of private keys (`None`: `other`, or none
    /// declared; [`PrivateKeys::slot`]), by its private dimension's value
    /// from its labels, else from the registry.
    fn private_slot(
        &mut self,
        r: ingest::ReadingRef<'_>,
        partition: i32,
        (device, stamp): (u64, i64),
        windower: &mut Windower,
    ) -> Option<usize> {
        let d = r.stream_index;
        let decl = &self.declared[d];
        let g = decl.grouping.as_ref()?;
        let pi = g.private_dimension()?;
        let value: Option<Arc<str>> = match r.labels.get(g.dimension(pi)) {
            Some(v) => Some(v.into()),
            None => self
                .registry
                .as_ref()
                .zip(decl.positions.get(pi).copied().flatten())
                .and_then(|(reg, p)| reg.interned_value(self.registry_digit(device, p))),
        };
        let owners = (&self.declared[..], windower);
        self.keys
            .slot(owners, (d, partition), r, (device, stamp), value)
    }

    /// Find the groups of staged readings `from..from + count` (one
    /// message on `partition`) that wait for the registry replica, and
    /// start fetching their lanes' slots.
    pub(super) fn route(
        &self,
        staged: &mut VecDeque<Staged>,
        (from, count, partition): (usize, usize, i32),
        windower: &Windower,
    ) {
        let Some(rep) = &self.replica else {
            return;
        };
        for r in staged.range_mut(from..from + count) {
            if r.stream != ROUTE_LATER {
                continue;
            }
            let d = &self.declared[r.declared as usize];
            let route = d.route.as_ref().expect("only readings with a route wait");
            let (row, hosted) = rep.slot(r.device);
            r.stream = d.first + route.index(row) as usize;
            windower.prefetch_unless_hosted(r.stream, partition, r.device, hosted);
        }
    }

    /// Replace a lane's device counts with restored ones, after moving the
    /// window state its grouped stream keeps in replica slots on
    /// `partition` back into the windows' tables (which a restore merges
    /// into or replaces).
    pub(super) fn install_restored(
        &mut self,
        windower: &mut Windower,
        (stream, partition): (usize, i32),
        restored: RestoredLane,
    ) {
        if windower.hosted_slots(stream, partition) > 0 {
            if let Some(rep) = &mut self.replica {
                rep.for_each_hosted(|device, h| windower.evict(device, h, stream, partition));
            }
        }
        windower.install_restored(stream, partition, restored);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::engine::process::Processor;
    use crate::engine::registry::Registry;
    use crate::engine::window::tests::released;
    use crate::engine::window::ClosedWindow;
    use crate::telemetry::Counters;
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;

    const HOUR: i64 = 3_600_000;
    const T0: i64 = 1_700_000_000_000 / (24 * HOUR) * (24 * HOUR) + HOUR;

    /// Two grouped streams (firmware, `G` = 2; region, `G` = 1) and an
    /// ungrouped one; horizons of 6 h, so two days sweep often; few
    /// devices a lane, so the device limit bites.
    fn config(relation: &str) -> String {
        let windows = match relation {
            "add-remove" => "window = \"1h\"",
            _ => "window_size = 4\nwindow_timeout = \"1h\"",
        };
        let stream = |name: &str, group: &str| {
            format!(
                "[[stream]]\nname = \"{name}\"\nlower = 0.0\nupper = 100.0\nresolution = 1.0\n{windows}\n\
                 max_windows_per_device = 3\nmax_readings_per_device = 2\nstatistics = [\"sum\"]\n\
                 budget_share = 0.3\n{group}\n"
            )
        };
        format!(
            "[kafka]\nbrokers = \"127.0.0.1:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\n\
             dead_letter_topic = \"dlq\"\n[privacy]\nrelation = \"{relation}\"\nepsilon_per_device = 1.0\n\
             horizon = \"6h\"\n[limits]\nmax_lateness = \"30m\"\nmax_devices_per_lane = 14\n\
             [dimensions]\nfirmware = [\"4.1\", \"4.2\", \"4.3\"]\nregion = [\"eu\", \"us\"]\n{}{}{}",
            stream("temp", "group_by = [\"firmware\"]\nmax_groups_per_device = 2"),
            stream("volt", "group_by = [\"region\"]\nmax_groups_per_device = 1"),
            stream("speed", ""),
        )
    }

    type Run = (Vec<Result<(), String>>, Vec<ClosedWindow>, Vec<u64>, usize);

    /// One run over the same random input, registry changes, closes and
    /// restores; with or without hosting.
    fn run(relation: &str, seed: u64, hosting: bool) -> Run {
        let v = Config::parse(&config(relation))
            .unwrap()
            .validate()
            .unwrap();
        let reg = Arc::new(Registry::new(
            vec![
                (
                    "firmware".into(),
                    Some(vec!["4.1".into(), "4.2".into(), "4.3".into()]),
                ),
                ("region".into(), Some(vec!["eu".into(), "us".into()])),
            ],
            1_000_000,
        ));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let row = |rng: &mut rand::rngs::StdRng| {
            let fw = ["4.1", "4.2", "4.3", "9"][rng.gen_range(0..4)];
            let region = ["eu", "us"][rng.gen_range(0..2)];
            format!(r#"{{"firmware":"{fw}","region":"{region}"}}"#)
        };
        for d in 0..60 {
            if d % 4 != 0 {
                let r = row(&mut rng);
                reg.apply(Some(format!("d{d}").as_bytes()), Some(r.as_bytes()))
                    .unwrap();
            }
        }
        let counters = Arc::new(Counters::default());
        let mut p = Processor::new(&v, counters.clone()).with_registry(reg.clone());
        if !hosting {
            p = p.without_hosting();
        }
        for part in 0..2 {
            p.windower_mut().start_time_lanes(part, T0 - HOUR);
        }
        let (mut outcomes, mut closed) = (Vec::new(), Vec::new());
        let (mut hosted, mut group_cap, mut bursts) = (0, 0, 0);
        let mut now = T0;
        for i in 0..4_000i64 {
            now += rng.gen_range(0..90_000);
            // A message of 1-3 readings of one device (one partition).
            let d = rng.gen_range(0..60);
            let part = d % 2;
            let readings: Vec<String> = (0..rng.gen_range(1..4))
                .map(|_| {
                    let stream = ["temp", "volt", "speed"][rng.gen_range(0..3)];
                    let labels = match rng.gen_range(0..12) {
                        0 => r#","labels":{"firmware":"4.3"}"#,
                        1 => r#","labels":{"region":"us","firmware":"8"}"#,
                        _ => "",
                    };
                    let t = now - rng.gen_range(0..40 * 60_000);
                    format!(
                        r#"{{"device_id":"d{d}","stream":"{stream}","value":{},"event_time_ms":{t}{labels}}}"#,
                        rng.gen_range(0..100)
                    )
                })
                .collect();
            let body = format!(r#"{{"readings":[{}]}}"#, readings.join(","));
            let r = p
                .prepare(
                    part,
                    i,
                    body.as_bytes(),
                    Some("application/json"),
                    Some(now),
                )
                .and_then(|()| p.apply(&mut closed));
            outcomes.push(r.map_err(|e| e.to_string()));
            group_cap += p
                .metrics
                .iter_mut()
                .map(|m| std::mem::take(&mut m.pending.dropped_group_cap))
                .sum::<u64>();
            hosted = hosted.max(p.windower().hosted_slots(0, part));
            if i % 7 == 0 {
                p.windower_mut()
                    .close_due(now, |_| now, |_| 0, usize::MAX, &mut closed);
            }
            // The registry: rows change, go and come (devices move group,
            // lose their row, get one), now and then more changes than
            // its journal holds (the replica copies afresh).
            match rng.gen_range(0..100) {
                0..=5 => {
                    let r = row(&mut rng);
                    let d = rng.gen_range(0..60);
                    reg.apply(Some(format!("d{d}").as_bytes()), Some(r.as_bytes()))
                        .unwrap();
                }
                6 => {
                    let d = rng.gen_range(0..60);
                    reg.apply(Some(format!("d{d}").as_bytes()), None).unwrap();
                }
                7 if rng.gen_ratio(1, 8) => {
                    bursts += 1;
                    let value = ["us", "eu"][bursts % 2];
                    let value = format!(r#"{{"region":"{value}"}}"#);
                    for k in 0..17_000 {
                        let key = format!("other{k}");
                        reg.apply(Some(key.as_bytes()), Some(value.as_bytes()))
                            .unwrap();
                    }
                }
                // A restart: partition 1 revoked and assigned again, or a
                // restore of it while held; from its released windows.
                8 if rng.gen_ratio(1, 3) => {
                    let q = 1;
                    if rng.gen_bool(0.5) {
                        p.drop_partition(q);
                    }
                    for s in 0..v.plan.streams.len() {
                        let Some((at, charges)) = released(&closed, s, q) else {
                            continue;
                        };
                        p.windower_mut().resume(s, q, at);
                        let mut r = p.windower().restorer(s, 0);
                        for (seq, c) in &charges {
                            r.add(*seq, 1, c);
                        }
                        p.install_restored(s, q, r);
                    }
                    p.windower_mut().start_time_lanes(q, now);
                }
                _ => {}
            }
        }
        p.flush_counters();
        let c = &counters;
        let mut counts = [
            &c.readings_accepted,
            &c.dropped_horizon_cap,
            &c.dropped_window_cap,
            &c.dropped_device_limit,
            &c.dropped_time_window,
        ]
        .map(Counters::get)
        .to_vec();
        counts.push(group_cap);
        (outcomes, closed, counts, hosted)
    }

    /// Hosting window state in replica slots changes nothing the service
    /// does (`crate::engine::window`, module `hosted`): over registry changes,
    /// labelled readings (which also come with their slots), group moves,
    /// horizon sweeps, the device limit, fresh replica copies, partitions
    /// dropped and restored and restores of a held partition, both
    /// relations give the same outcomes, windows and counts as a run with
    /// every entry in the tables.
    #[test]
    fn hosting_changes_nothing_in_the_processor() {
        for (relation, seed) in [("add-remove", 1), ("change-one", 2), ("add-remove", 3)] {
            let (a, b) = (run(relation, seed, false), run(relation, seed, true));
            assert_eq!(a.0, b.0, "{relation}: outcomes");
            assert_eq!(a.1.len(), b.1.len(), "{relation}: windows");
            for (x, y) in a.1.iter().zip(&b.1) {
                assert_eq!(x, y, "{relation}: window");
            }
            assert_eq!(a.2, b.2, "{relation}: counts");
            assert_eq!(a.3, 0, "{relation}: nothing hosted without hosting");
            assert!(b.3 > 5, "{relation}: {} slots hosted", b.3);
            let [accepted, horizon_cap, _, device_limit, _, group_cap] = b.2[..] else {
                unreachable!()
            };
            assert!(
                accepted > 1_000 && group_cap > 10 && horizon_cap > 10 && device_limit > 10,
                "{relation}: {:?}",
                b.2
            );
        }
    }
}
