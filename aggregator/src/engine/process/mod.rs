//! The per-message work of the pipeline, with no Kafka in it: decode,
//! validate, top-code, check lateness, bound contributions and window. The
//! pipeline wraps it with I/O; the benchmarks drive it directly.

use crate::config::Validated;
use crate::dp::rng::ReleaseKey;
use crate::dp::universe::TopCoder;
use crate::engine::keys::Bindings;

mod declared;
mod private;
mod router;
use crate::clients::partitioner::Partitioner;
use crate::engine::registry::Registry;
use crate::engine::window::{
    device_key, Admission, ClosedWindow, FastMap, LaneGroup, Offer, RestoredLane, StreamRules,
    Windower,
};
use crate::telemetry::{Counters, MessageMetrics, StreamMetrics};
use ingest::{Decoder, Limits, Reason, Rejection};
use router::Router;
use std::collections::VecDeque;
use std::sync::Arc;

/// A prepared reading, waiting for [`Processor::apply`].
struct Staged {
    /// Its planned stream ([`ROUTE_LATER`]: its group is found by
    /// `Router::route`).
    stream: usize,
    /// Its declared stream.
    declared: u32,
    /// Its index within its message.
    index: u32,
    device: u64,
    units: i64,
    event_ms: i64,
    /// Its message's Kafka timestamp (its event time when the message has none).
    msg_ms: i64,
}

/// Messages the consuming loop prepares ahead of the one it applies. Two,
/// not one: a reading the registry routes finds its group by a random
/// read of the loop's replica, which is then started two messages before
/// it is needed (measured, 10⁶ devices and 504 groups: ≈ 1.1× the
/// readings/s of one ahead in the registry case, ≈ 1.0× ungrouped, in
/// runs alternating in one process; docs/performance.md). Deeper gave no
/// more.
pub const PREPARE_AHEAD: usize = 2;

/// Busy flushes ([`Processor::flush_counters_busy`]) per flush of the
/// streams' counts.
pub const STREAM_FLUSH_EVERY: u32 = 16;

/// A staged reading whose group is to be looked up in the registry replica
/// once its slot has had time to arrive (`Router::route`).
const ROUTE_LATER: usize = usize::MAX;

/// Rules of each stream for the windower.
pub fn stream_rules(v: &Validated) -> Vec<StreamRules> {
    v.plan
        .streams
        .iter()
        .enumerate()
        .map(|(i, s)| StreamRules {
            name: s.spec.name.clone(),
            window_size: s.spec.window_size as usize,
            max_readings_per_device: s.spec.max_readings_per_device,
            max_windows_per_device: s.spec.max_windows_per_device,
            midpoint: (s.universe.lower() + s.universe.upper()).div_euclid(2),
            timeout_ms: s.spec.window_timeout_ms.map(|t| t as i64),
            window_ms: s.spec.window_ms.map(|w| w as i64),
            count_devices: s.alarm.is_some(),
            group: s.group.as_ref().map(|g| LaneGroup {
                first: i - g.index as usize,
                count: v.plan.streams[i - g.index as usize..]
                    .iter()
                    .take_while(|o| o.group.as_ref().is_some_and(|o| o.base == g.base))
                    .count(),
                index: g.index,
                max_groups: g.max_groups_per_device,
            }),
        })
        .collect()
}

/// Plan indices of the streams that are slots of private keys (their
/// group key holds a `#` value).
fn slot_streams(v: &Validated) -> Vec<usize> {
    v.plan
        .streams
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.selection.is_some()
                && s.group
                    .as_ref()
                    .is_some_and(|g| g.values().any(|(_, v)| v.starts_with('#')))
        })
        .map(|(i, _)| i)
        .collect()
}

/// The service's decoder for a configuration: its declared streams in
/// order (a reading's `stream_index` is its stream's index in the
/// configuration; [`Processor`] finds its planned stream, the group's for
/// a grouped stream), its input format and limits.
pub fn decoder(v: &Validated) -> Decoder {
    let d = Decoder::new(
        v.config.streams.iter().map(|s| s.name.clone()),
        v.config.kafka.input_format,
        Limits {
            max_message_bytes: v.config.limits.max_message_bytes,
            max_readings_per_message: v.config.limits.max_readings_per_message,
            ..Limits::default()
        },
    );
    let mut d = d.with_framing(v.config.kafka.input_framing);
    if let Some(a) = &v.avro {
        d = d.with_avro(a.clone());
    }
    if v.schema_registry.is_some() {
        d = d.with_avro_registry();
    }
    if let Some(described) = &v.described {
        d = d.with_described(described.clone());
    }
    if let Some(o) = &v.otlp {
        d = d.with_otlp(o.clone());
    }
    match &v.mapping {
        Some(m) => d.with_mapping(m.clone()),
        None => d,
    }
}

/// Staging one message's readings (the caller drops what was staged if
/// one is refused). Format and value faults are found here, lateness only
/// in [`Processor::apply`]: a batch with both is dead-lettered for the
/// former.
struct Stage<'p> {
    router: &'p mut Router,
    windower: &'p mut Windower,
    staged: &'p mut VecDeque<Staged>,
    messages: &'p VecDeque<(i32, i64, usize)>,
    coders: &'p [TopCoder],
    partitioner: Partitioner,
    input_partitions: Option<i32>,
    skew_ms: i64,
    partition: i32,
    timestamp_ms: Option<i64>,
}

impl Stage<'_> {
    /// Check and stage reading `i` of the message.
    fn reading(&mut self, i: usize, r: ingest::ReadingRef<'_>) -> Result<(), Rejection> {
        if i == 0 {
            self.router
                .begin_message(self.staged, self.messages, self.windower);
        }
        let partition = self.partition;
        let device = device_key(r.device_id);
        // A wrong clock must not move any lane: judged against the
        // message's own timestamp, stored with it (the same on replay).
        let stamp = self.timestamp_ms.unwrap_or(r.event_time_ms);
        if r.event_time_ms < 0 || r.event_time_ms > stamp.saturating_add(self.skew_ms) {
            return Err(Rejection::new(
                Reason::Future,
                format!(
                    "reading {i}: event_time_ms is before 1970 or more than limits.max_clock_skew ahead of the message timestamp"
                ),
            ));
        }
        let placed = self
            .router
            .place(r, partition, (device, stamp), self.windower);
        let Ok(t) = self.coders[placed.coder].top_code(r.value) else {
            return Err(Rejection::new(
                Reason::NotFinite,
                format!("reading {i}: value is NaN or infinite"),
            ));
        };
        if let Some(n) = self.input_partitions {
            match self.partitioner.partition(r.device_id.as_bytes(), n) {
                Some(p) if p != partition => {
                    return Err(Rejection::new(
                        Reason::WrongPartition,
                        format!(
                            "reading {i}: its device belongs on partition {p}, not {partition}"
                        ),
                    ));
                }
                _ => {}
            }
        }
        let s = placed.stream;
        self.router
            .prefetch(r.stream_index, (s, partition, device), self.windower);
        self.staged.push_back(Staged {
            stream: s,
            declared: r.stream_index as u32,
            index: u32::try_from(i).unwrap_or(u32::MAX),
            device,
            units: t.units,
            event_ms: r.event_time_ms,
            msg_ms: stamp,
        });
        Ok(())
    }
}

/// Message-by-message processing state.
pub struct Processor {
    decoder: Decoder,
    /// Which planned stream a reading goes to (module `router`).
    router: Router,
    /// Plan index of each planned stream's name.
    names: FastMap<String, usize>,
    coders: Vec<TopCoder>,
    windower: Windower,
    counters: Arc<Counters>,
    metrics: Vec<StreamMetrics>,
    /// Streams with readings since the last [`Processor::flush_counters`]
    /// (a grouped stream has hundreds of planned streams: only these are
    /// flushed), with the partitions they were read on.
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    partitions_seen: Vec<i32>,
    message_metrics: MessageMetrics,
    /// Readings of prepared messages, oldest first, and per message its
    /// (partition, offset, reading count).
    staged: VecDeque<Staged>,
    messages_staged: VecDeque<(i32, i64, usize)>,
    partitioner: Partitioner,
    /// Partition count of the input topic (for the partition check).
    input_partitions: Option<i32>,
    /// How far an event time may run ahead of its message's timestamp.
    skew_ms: i64,
    /// Busy flushes since the streams' counts were last flushed.
    busy_flushes: u32,
}

impl Processor {
    pub fn new(v: &Validated, counters: Arc<Counters>) -> Self {
        let names: FastMap<String, usize> = v
            .plan
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| (s.spec.name.clone(), i))
            .collect();
        let decoder = decoder(v);
        let metrics: Vec<StreamMetrics> = v
            .plan
            .streams
            .iter()
            .map(|s| StreamMetrics::new(&s.spec.name))
            .collect();
        Self {
            decoder,
            router: Router::new(v),
            coders: v.plan.streams.iter().map(|s| s.top_coder()).collect(),
            windower: Windower::new(
                stream_rules(v),
                v.horizon.as_millis() as i64,
                v.max_lateness.as_millis() as i64,
            )
            .with_device_limit(v.config.limits.max_devices_per_lane)
            .with_bound_only(slot_streams(v)),
            names,
            counters,
            dirty: Vec::new(),
            is_dirty: vec![false; metrics.len()],
            partitions_seen: Vec::new(),
            metrics,
            message_metrics: MessageMetrics::new(),
            staged: VecDeque::new(),
            messages_staged: VecDeque::new(),
            partitioner: v.config.kafka.input_partitioner,
            input_partitions: None,
            skew_ms: v.max_clock_skew.as_millis() as i64,
            busy_flushes: 0,
        }
    }

    /// Key the private-key selections' noise with the release key (else an
    /// ephemeral one).
    pub fn with_release_key(mut self, key: ReleaseKey) -> Self {
        self.router.set_release_key(key);
        self
    }

    /// Look grouped streams' dimension values up in `registry` (readings'
    /// labels take precedence).
    pub fn with_registry(mut self, registry: Arc<Registry>) -> Self {
        self.router.set_registry(registry, &self.windower);
        self
    }

    /// Keep every device's window state in the windows' tables, none in
    /// replica slots: what the service did before slots kept it, to
    /// compare against (tests, the `groups` bench).
    pub fn without_hosting(mut self) -> Self {
        self.router.disable_hosting();
        self
    }

    /// Replace a lane's device counts with restored ones (the window
    /// state kept in replica slots moved back to the tables first).
    pub fn install_restored(&mut self, stream: usize, partition: i32, restored: RestoredLane) {
        self.router
            .install_restored(&mut self.windower, (stream, partition), restored);
    }

    /// Forget a revoked partition.
    pub fn drop_partition(&mut self, partition: i32) {
        self.windower.drop_partition(partition);
        self.router.drop_partition(partition);
    }

    /// Private-key bindings changed since the last call, to persist before
    /// anything routed by them is released: (declared stream name,
    /// partition, bindings).
    pub fn take_key_updates(&mut self) -> Vec<(String, i32, Bindings)> {
        self.router.take_key_updates()
    }

    /// Whether [`Processor::take_key_updates`] may find bindings (none
    /// without private keys): most messages need not ask.
    pub fn may_update_keys(&self) -> bool {
        self.router.may_update_keys()
    }

    /// Continue a private-key table from persisted bindings.
    pub fn restore_keys(&mut self, stream: &str, partition: i32, b: Bindings) {
        self.router
            .restore_keys(&mut self.windower, (stream, partition), b);
    }

    /// A slot stream's bound key on `partition`: (dimension, value) for its
    /// releases' `group` (`None`: not a slot of private keys).
    pub fn bound_value(&self, stream: usize, partition: i32) -> Option<(String, String)> {
        self.router.bound_value(stream, partition)
    }

    /// The input topic's partition count; until it is set, the partition
    /// of readings is not checked.
    pub fn set_input_partitions(&mut self, partitions: i32) {
        self.input_partitions = (partitions > 0).then_some(partitions);
    }

    pub fn windower(&self) -> &Windower {
        &self.windower
    }

    pub fn windower_mut(&mut self) -> &mut Windower {
        &mut self.windower
    }

    /// Index of a declared stream.
    pub fn stream_index(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// Process one message; closed windows are appended to `closed`. A
    /// message is accepted whole or rejected whole (then nothing of it is
    /// applied and the caller dead-letters it). The same as
    /// [`Processor::prepare`] then [`Processor::apply`].
    pub fn process(
        &mut self,
        partition: i32,
        offset: i64,
        payload: &[u8],
        content_type: Option<&str>,
        timestamp_ms: Option<i64>,
        closed: &mut Vec<ClosedWindow>,
    ) -> Result<(), Rejection> {
        let r = self
            .prepare(partition, offset, payload, content_type, timestamp_ms)
            .and_then(|()| self.apply(closed));
        self.flush_counters();
        r
    }

    /// The decoder, to hand it writers' schemas fetched from a Schema
    /// Registry ([`crate::clients::schemas::SchemaRegistry::ensure`]).
    pub fn decoder_mut(&mut self) -> &mut Decoder {
        &mut self.decoder
    }

    /// The first half of processing, which depends on nothing but the
    /// message: decode, validate, top-code, check the partition and hash
    /// the device ids; the readings wait in order for [`Processor::apply`].
    /// Meanwhile the devices' table slots are being fetched from memory, so
    /// a caller that prepares the next message before applying the previous
    /// one hides most of that latency. A rejected message stages nothing.
    /// `timestamp_ms` is the message's Kafka timestamp (time windows judge
    /// lateness by it; stored with the message, so a replay judges alike).
    pub fn prepare(
        &mut self,
        partition: i32,
        offset: i64,
        payload: &[u8],
        content_type: Option<&str>,
        timestamp_ms: Option<i64>,
    ) -> Result<(), Rejection> {
        self.message_metrics.pending_messages += 1;
        self.message_metrics.pending_bytes += payload.len() as u64;
        let start = self.staged.len();
        let mut stage = Stage {
            router: &mut self.router,
            windower: &mut self.windower,
            staged: &mut self.staged,
            messages: &self.messages_staged,
            coders: &self.coders,
            partitioner: self.partitioner,
            input_partitions: self.input_partitions,
            skew_ms: self.skew_ms,
            partition,
            timestamp_ms,
        };
        // Each reading staged as it is handed over: decoding has already
        // accepted the message whole (module `ingest`'s `Decoder::visit`).
        match self
            .decoder
            .visit(payload, content_type, |i, r| stage.reading(i, r))
        {
            Ok(n) => {
                // The message is accepted whole: its private values count.
                self.router.count_accepted(partition);
                self.messages_staged.push_back((partition, offset, n));
                Ok(())
            }
            Err(e) => {
                self.staged.truncate(start);
                Err(e)
            }
        }
    }

    /// Apply the oldest prepared message: refuse it whole if a reading is
    /// older than its lane allows (judged now, after every earlier message
    /// has moved the lanes on), else offer each reading to the windower;
    /// closed windows are appended to `closed`.
    pub fn apply(&mut self, closed: &mut Vec<ClosedWindow>) -> Result<(), Rejection> {
        let (partition, offset, count) = self
            .messages_staged
            .pop_front()
            .expect("apply follows a successful prepare");
        if !self.partitions_seen.contains(&partition) {
            self.partitions_seen.push(partition);
        }
        let route = |p: &mut Self, at| p.router.route(&mut p.staged, at, &p.windower);
        route(self, (0, count, partition));
        let r = self.admit_staged(partition, offset, count, closed);
        // The next message's groups, now that its replica slots had the
        // time this one took (a caller two messages ahead: a whole
        // message's more); its lanes' slots are fetched meanwhile.
        if let Some(&(p, _, n)) = self.messages_staged.front() {
            route(self, (0, n, p));
        }
        r
    }

    /// Apply the oldest prepared message's `count` readings.
    fn admit_staged(
        &mut self,
        partition: i32,
        offset: i64,
        count: usize,
        closed: &mut Vec<ClosedWindow>,
    ) -> Result<(), Rejection> {
        let too_old = self.staged.range(..count).position(|r| {
            self.windower
                .is_too_old(r.stream, partition, offset, r.event_ms)
        });
        if let Some(i) = too_old {
            self.staged.drain(..count);
            return Err(Rejection::new(
                Reason::TooOld,
                format!("reading {i}: event time is older than the allowed lateness"),
            ));
        }
        for _ in 0..count {
            let r = self.staged.pop_front().expect("counted");
            let s = r.stream;
            // A grouped reading comes with its device's replica slot, if
            // any (module `router`).
            let host = self.router.host(r.declared, r.device);
            let offer = Offer {
                stream: s,
                partition,
                offset,
                index: r.index,
                device: r.device,
                units: r.units,
                event_ms: r.event_ms,
                msg_ms: r.msg_ms,
            };
            let a = self.windower.admit_hosted(offer, closed, host);
            if !self.is_dirty[s] {
                self.is_dirty[s] = true;
                self.dirty.push(s);
            }
            let t = &mut self.metrics[s].pending;
            match a {
                Admission::Accepted => t.accepted += 1,
                Admission::AlreadyReleased => t.already_released += 1,
                Admission::DroppedWindowCap => t.dropped_window_cap += 1,
                Admission::DroppedHorizonCap => t.dropped_horizon_cap += 1,
                Admission::DroppedLate => t.dropped_late += 1,
                Admission::DroppedOutOfOrder => t.dropped_out_of_order += 1,
                Admission::DroppedWindowFull => t.dropped_window_full += 1,
                Admission::DroppedDeviceLimit => t.dropped_device_limit += 1,
                Admission::DroppedGroupCap => t.dropped_group_cap += 1,
            }
        }
        Ok(())
    }

    /// Add the counts kept since the last call to the shared counters and
    /// Prometheus. The pipeline calls it whenever it is about to wait for
    /// input, so what observers read is exact whenever the input is idle.
    pub fn flush_counters(&mut self) {
        self.busy_flushes = 0;
        self.message_metrics.flush(&self.counters);
        for s in self.dirty.drain(..) {
            self.is_dirty[s] = false;
            let m = &mut self.metrics[s];
            m.flush(&self.counters, self.windower.windows_opened(s));
            for &p in &self.partitions_seen {
                if let Some(devices) = self.windower.lane_device_count(s, p) {
                    m.lane_devices(p, devices);
                }
            }
        }
    }

    /// [`Processor::flush_counters`] while messages keep coming (the
    /// pipeline calls it every 64 messages): message counts are flushed,
    /// streams' counts every `STREAM_FLUSH_EVERY`th call — a grouped
    /// stream has hundreds of planned streams, and flushing each (counters,
    /// Prometheus handles, lane gauges) every 64 messages cost ≈ 3% of a
    /// reading's time. Streams' counts are thus at most 1,024 messages
    /// behind while busy, exact when idle.
    pub fn flush_counters_busy(&mut self) {
        self.busy_flushes += 1;
        if self.busy_flushes >= STREAM_FLUSH_EVERY {
            self.flush_counters();
        } else {
            self.message_metrics.flush(&self.counters);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::sim::{Fleet, FleetSpec, Signal};
    use crate::config::Config;

    const CONFIG: &str = r#"
[kafka]
brokers = "unused"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
group_id = "g"
[limits]
max_lateness = "1h"
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
[[stream]]
name = "cabin_temp_c"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 50
max_readings_per_device = 1
max_windows_per_device = 30
statistics = ["mean"]
window_timeout = "2h"
"#;

    /// Messages from a small fleet with malformed ones, repeats (dropped by
    /// the caps), batches and readings hours late (too old once a lane has
    /// moved on), over several hours of event time; 80 devices fill windows
    /// of 50 (k = 1) every round, so lanes keep moving.
    fn messages() -> Vec<(Vec<u8>, Option<&'static str>)> {
        let mut fleet = Fleet::new(FleetSpec {
            devices: 80,
            signals: vec![Signal::CabinTemp],
            bad_fraction: 0.05,
            interval_ms: 10 * 60 * 1000,
            ..FleetSpec::default()
        });
        let start = FleetSpec::default().start_ms;
        let mut out = Vec::new();
        for i in 0..3000i64 {
            let m = fleet.next_message();
            out.push((m.payload, Some(m.content_type)));
            if i % 97 == 0 {
                let late = start + (i / 80) * 10 * 60 * 1000 - 2 * 3_600_000;
                let body = format!(
                    r#"{{"readings":[{{"device_id":"d{}","stream":"cabin_temp_c","value":20.5,"event_time_ms":{}}},{{"device_id":"e{i}","stream":"cabin_temp_c","value":21.0,"event_time_ms":{late}}}]}}"#,
                    i % 7,
                    late + 2 * 3_600_000
                );
                out.push((body.into_bytes(), Some("application/json")));
            }
        }
        out
    }

    /// While busy, message counts are flushed at every call and streams'
    /// counts every `STREAM_FLUSH_EVERY`th; an idle flush makes both exact.
    #[test]
    fn busy_flushes_hold_stream_counts_back_a_bounded_while() {
        let v = Config::parse(CONFIG).unwrap().validate().unwrap();
        let c = Arc::new(Counters::default());
        let mut p = Processor::new(&v, c.clone());
        let msg = |i: i64| {
            format!(
                r#"{{"device_id":"d{i}","stream":"cabin_temp_c","value":20.5,"event_time_ms":{}}}"#,
                1_795_541_400_000 + i
            )
        };
        let mut closed = Vec::new();
        let mut flushed_at = Vec::new();
        for i in 0..(2 * STREAM_FLUSH_EVERY as i64) {
            p.prepare(0, i, msg(i).as_bytes(), Some("application/json"), None)
                .unwrap();
            p.apply(&mut closed).unwrap();
            p.flush_counters_busy();
            assert_eq!(Counters::get(&c.messages), i as u64 + 1);
            if Counters::get(&c.readings_accepted) == i as u64 + 1 {
                flushed_at.push(i);
            }
        }
        let every = STREAM_FLUSH_EVERY as i64;
        assert_eq!(flushed_at, [every - 1, 2 * every - 1]);
        p.prepare(0, 99, msg(99).as_bytes(), Some("application/json"), None)
            .unwrap();
        p.apply(&mut closed).unwrap();
        p.flush_counters();
        assert_eq!(Counters::get(&c.readings_accepted), 2 * every as u64 + 1);
    }

    type Outcome = (Result<(), Option<Reason>>, Vec<ClosedWindow>);

    /// What the pipeline's consuming loop does: prepare each message
    /// [`PREPARE_AHEAD`] messages before applying it must give exactly what
    /// processing them one by one gives — outcomes, windows and counts.
    #[test]
    fn preparing_ahead_changes_nothing() {
        let v = Config::parse(CONFIG).unwrap().validate().unwrap();
        let msgs = messages();

        let one_by_one = Arc::new(Counters::default());
        let mut p = Processor::new(&v, one_by_one.clone());
        let mut expected: Vec<Outcome> = Vec::new();
        for (i, (payload, ct)) in msgs.iter().enumerate() {
            let mut closed = Vec::new();
            let r = p.process(0, i as i64, payload, *ct, None, &mut closed);
            expected.push((r.map_err(|e| Some(e.reason)), closed));
        }

        // The loop's depth, and deeper: whatever the depth, the same.
        for depth in [1, PREPARE_AHEAD, PREPARE_AHEAD + 1] {
            let ahead = Arc::new(Counters::default());
            let mut p = Processor::new(&v, ahead.clone());
            let mut got: Vec<Outcome> = vec![(Err(None), vec![]); msgs.len()];
            let mut staged: VecDeque<usize> = VecDeque::new();
            let apply = |p: &mut Processor, got: &mut Vec<Outcome>, j: usize| {
                let mut closed = Vec::new();
                let r = p.apply(&mut closed);
                got[j] = (r.map_err(|e| Some(e.reason)), closed);
            };
            for (i, (payload, ct)) in msgs.iter().enumerate() {
                match p.prepare(0, i as i64, payload, *ct, None) {
                    Ok(()) => {
                        if staged.len() >= depth {
                            apply(&mut p, &mut got, staged.pop_front().expect("staged"));
                        }
                        staged.push_back(i);
                    }
                    Err(e) => {
                        // As the loop: what was prepared before it first.
                        while let Some(j) = staged.pop_front() {
                            apply(&mut p, &mut got, j);
                        }
                        got[i] = (Err(Some(e.reason)), vec![]);
                    }
                }
            }
            while let Some(j) = staged.pop_front() {
                apply(&mut p, &mut got, j);
            }
            p.flush_counters();
            for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
                assert_eq!(e, g, "message {i}, {depth} ahead");
            }
            for c in [
                |c: &Counters| Counters::get(&c.messages),
                |c: &Counters| Counters::get(&c.bytes),
                |c: &Counters| Counters::get(&c.readings_accepted),
                |c: &Counters| Counters::get(&c.dropped_window_cap),
                |c: &Counters| Counters::get(&c.dropped_horizon_cap),
            ] {
                assert_eq!(c(&one_by_one), c(&ahead), "{depth} ahead");
            }
            assert!(Counters::get(&ahead.dropped_horizon_cap) > 0);
        }
        // The input exercised every path.
        let reasons: Vec<_> = expected.iter().filter_map(|(r, _)| r.err()).collect();
        assert!(reasons.contains(&Some(Reason::TooOld)), "{reasons:?}");
        assert!(reasons.iter().any(|r| *r != Some(Reason::TooOld)));
        assert!(expected.iter().filter(|(_, w)| !w.is_empty()).count() > 10);
    }
}
