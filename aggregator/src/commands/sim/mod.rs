//! A simulated device fleet: realistic signals with outliers and a few
//! malformed messages, deterministic for a seed. Drives the demo, the
//! `simulate` load generator and the integration tests.

use anyhow::{anyhow, Context as _, Result};
use ingest::Format;
use prost::Message as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;
use std::time::{Duration, Instant};

pub mod command;
mod registry;
pub use registry::produce_rows;

/// Signals the fleet knows how to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `cabin_temp_c`: a daily cycle around a per-device base, outliers.
    CabinTemp,
    /// `battery_v`: around 12.6 V, sometimes a dead cell (0 V).
    BatteryVolts,
    /// `speed_kmh`: parked (0) or driving.
    Speed,
}

impl Signal {
    pub const ALL: [Signal; 3] = [Signal::CabinTemp, Signal::BatteryVolts, Signal::Speed];

    pub fn stream(&self) -> &'static str {
        match self {
            Signal::CabinTemp => "cabin_temp_c",
            Signal::BatteryVolts => "battery_v",
            Signal::Speed => "speed_kmh",
        }
    }

    pub fn from_stream(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.stream() == name)
    }
}

/// What the fleet looks like.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub devices: usize,
    pub seed: u64,
    pub signals: Vec<Signal>,
    /// Event time of the first round, ms since the epoch.
    pub start_ms: i64,
    /// Stamp each message with the wall clock instead (a service with time
    /// windows drops readings past its lateness bound).
    pub wall_clock: bool,
    /// Event-time step between a device's readings of one stream.
    pub interval_ms: i64,
    /// Fraction of messages replaced by a malformed one.
    pub bad_fraction: f64,
    /// Fraction of readings that are wild outliers (top-coded on arrival).
    pub outlier_fraction: f64,
    pub format: Format,
    /// One JSON document per device per round carrying every signal, in a
    /// fleet's own shape ([`DOCUMENT_MAPPING`]) instead of FleetDP's
    /// readings; `format` is then ignored.
    pub documents: bool,
    /// A firmware rollout: at this round the share of devices on 4.2 goes
    /// from a fifth to three fifths ([`Fleet::registry_rows`]).
    pub rollout_round: Option<i64>,
    /// Where [`produce_fleet`] publishes the rollout's registry updates.
    pub registry_topic: Option<String>,
    /// `(active, cycle)`: each device reports only in `active` consecutive
    /// rounds of every `cycle` (a car driven two hours a day: `(2, 24)` with
    /// hourly rounds), starting at its own offset; `None`: every round.
    pub duty: Option<(u32, u32)>,
}

/// Where the simulated documents keep each field, as an `[input]` table:
/// `{"vin", "ts" (RFC 3339), "cabin": {"temp_c"}, "battery": {"volts"},
/// "speed_kmh", "odo_km"}`.
pub const DOCUMENT_MAPPING: &str = r#"
device_id = "vin"
event_time = "ts"
event_time_unit = "rfc3339"
[streams]
cabin_temp_c = "cabin.temp_c"
battery_v = "/battery/volts"
speed_kmh = "speed_kmh"
"#;

impl Default for FleetSpec {
    fn default() -> Self {
        Self {
            devices: 500,
            seed: 1,
            signals: Signal::ALL.to_vec(),
            start_ms: 1_767_225_600_000, // 2026-01-01T00:00:00Z
            wall_clock: false,
            interval_ms: 15 * 60 * 1000,
            bad_fraction: 0.002,
            outlier_fraction: 0.005,
            format: Format::Protobuf,
            documents: false,
            rollout_round: None,
            registry_topic: None,
            duty: None,
        }
    }
}

/// One message for the input topic.
#[derive(Debug, Clone)]
pub struct SimMessage {
    /// Kafka key: the device id.
    pub key: String,
    pub payload: Vec<u8>,
    pub content_type: &'static str,
    /// The reading it carries, when well-formed: (stream, raw value).
    pub reading: Option<(Signal, f64)>,
    /// The malformed kind, when not.
    pub bad: Option<BadKind>,
}

/// Classes of malformed input the fleet emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadKind {
    Garbage,
    NaN,
    UnknownStream,
    MissingField,
}

struct Device {
    id: String,
    temp_base: f64,
    volts_base: f64,
    phase: f64,
    /// Its firmware: 4.1, or 4.2 (which drains the battery by 0.3 V).
    on_4_2: bool,
}

/// Volts a device on firmware 4.2 loses (what the demo's group-by finds).
pub const FIRMWARE_4_2_DRAIN: f64 = 0.3;

/// The fleet: yields messages round by round (every device, every signal).
pub struct Fleet {
    spec: FleetSpec,
    rng: ChaCha8Rng,
    devices: Vec<Device>,
    round: i64,
    cursor: usize,
    bad_counter: usize,
    /// Registry rows changed since the last [`Fleet::take_registry_updates`].
    updates: Vec<(String, Vec<u8>)>,
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    // Box–Muller: simulation only, never on the privacy path.
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl Fleet {
    pub fn new(spec: FleetSpec) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let devices = (0..spec.devices)
            .map(|i| Device {
                id: format!("dev-{i:06}"),
                temp_base: 20.0 + 4.0 * normal(&mut rng),
                volts_base: 12.6 + 0.2 * normal(&mut rng),
                phase: rng.gen::<f64>(),
                on_4_2: registry::on_4_2(i, false),
            })
            .collect();
        Self {
            spec,
            rng,
            devices,
            round: 0,
            cursor: 0,
            bad_counter: 0,
            updates: Vec::new(),
        }
    }

    /// What this fleet was made from.
    pub fn spec(&self) -> &FleetSpec {
        &self.spec
    }

    /// Messages a round holds on average: [`Fleet::round_len`] times the
    /// share of devices active in a round.
    pub fn messages_per_round(&self) -> f64 {
        let share = self.spec.duty.map_or(1.0, |(active, cycle)| {
            f64::from(active.min(cycle)) / f64::from(cycle.max(1))
        });
        self.round_len() as f64 * share
    }

    /// Whether device `d` reports in `round` (its duty cycle starts at an
    /// offset spread over the cycle by its index).
    fn is_active(&self, d: usize, round: i64) -> bool {
        let Some((active, cycle)) = self.spec.duty else {
            return true;
        };
        let cycle = i64::from(cycle.max(1));
        let offset = ((d as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as i64 % cycle;
        (round + offset).rem_euclid(cycle) < i64::from(active)
    }

    /// Move the cursor past devices that do not report this round (whole
    /// rounds too); a device is checked at its first message only.
    fn skip_inactive(&mut self) {
        if self.spec.duty.is_none() {
            return;
        }
        let per_device = if self.spec.documents {
            1
        } else {
            self.spec.signals.len().max(1)
        };
        // At most a whole cycle of rounds without an active device.
        let mut left = self.devices.len() * (1 + self.spec.duty.map_or(1, |(_, c)| c as usize));
        while self.cursor.is_multiple_of(per_device)
            && !self.is_active(self.cursor / per_device, self.round)
        {
            self.cursor += per_device;
            if self.cursor >= self.round_len() {
                self.cursor = 0;
                self.next_round();
            }
            left -= 1;
            if left == 0 {
                return;
            }
        }
    }

    fn next_round(&mut self) {
        self.round += 1;
        if self.spec.rollout_round == Some(self.round) {
            self.roll_out();
        }
    }

    /// Messages in one round.
    pub fn round_len(&self) -> usize {
        match self.spec.documents {
            true => self.devices.len(),
            false => self.devices.len() * self.spec.signals.len(),
        }
    }

    /// Event time of the current round.
    pub fn round_start_ms(&self) -> i64 {
        self.spec.start_ms + self.round * self.spec.interval_ms
    }

    fn value(&mut self, d: usize, signal: Signal, t_ms: i64) -> f64 {
        let rng = &mut self.rng;
        let dev = &self.devices[d];
        if rng.gen::<f64>() < self.spec.outlier_fraction {
            return match signal {
                Signal::CabinTemp => [250.0, -120.0][rng.gen_range(0..2)],
                Signal::BatteryVolts => [0.0, 48.0][rng.gen_range(0..2)],
                Signal::Speed => 900.0,
            };
        }
        let day = (t_ms as f64 / 86_400_000.0 + dev.phase) * std::f64::consts::TAU;
        match signal {
            Signal::CabinTemp => dev.temp_base + 6.0 * day.sin() + normal(rng),
            Signal::BatteryVolts => {
                dev.volts_base - if dev.on_4_2 { FIRMWARE_4_2_DRAIN } else { 0.0 }
                    + 0.05 * normal(rng)
            }
            Signal::Speed => {
                if rng.gen::<f64>() < 0.3 {
                    0.0
                } else {
                    (60.0 + 25.0 * normal(rng)).clamp(0.0, 200.0)
                }
            }
        }
    }

    fn encode(
        &self,
        device_id: &str,
        stream: &str,
        value: Option<f64>,
        t: i64,
    ) -> (Vec<u8>, &'static str) {
        match self.spec.format {
            Format::Json => {
                let v = match value {
                    Some(x) if x.is_finite() => serde_json::json!(x),
                    Some(_) => serde_json::json!("NaN"),
                    None => serde_json::Value::Null,
                };
                let mut obj = serde_json::json!({"device_id": device_id, "stream": stream, "event_time_ms": t});
                if !v.is_null() {
                    obj["value"] = v;
                }
                (
                    serde_json::to_vec(&obj).expect("json"),
                    Format::Json.content_type(),
                )
            }
            // The simulator writes FleetDP's own messages: Avro (a fleet's
            // own record) and OTLP are written as protobuf readings.
            Format::Protobuf
            | Format::ProtobufBatch
            | Format::Avro
            | Format::OtlpProto
            | Format::OtlpJson => {
                let r = proto::DeviceReading {
                    device_id: device_id.to_string(),
                    stream: stream.to_string(),
                    value,
                    event_time_ms: Some(t),
                    labels: Default::default(),
                };
                if self.spec.format == Format::ProtobufBatch {
                    let b = proto::ReadingBatch { readings: vec![r] };
                    (b.encode_to_vec(), Format::ProtobufBatch.content_type())
                } else {
                    (r.encode_to_vec(), Format::Protobuf.content_type())
                }
            }
        }
    }

    /// Device `d`'s event time in this round (devices spread over the
    /// round, deterministically); then move the cursor on.
    fn step(&mut self, d: usize) -> i64 {
        let t = if self.spec.wall_clock {
            crate::clock::now_ms()
        } else {
            self.round_start_ms()
                + (d as i64 * self.spec.interval_ms / self.devices.len().max(1) as i64)
        };
        self.cursor += 1;
        if self.cursor == self.round_len() {
            self.cursor = 0;
            self.next_round();
        }
        t
    }

    /// The next message.
    pub fn next_message(&mut self) -> SimMessage {
        self.skip_inactive();
        if self.spec.documents {
            return self.next_document();
        }
        let n_sig = self.spec.signals.len();
        let (d, s) = (self.cursor / n_sig, self.cursor % n_sig);
        let signal = self.spec.signals[s];
        let t = self.step(d);
        let id = self.devices[d].id.clone();
        if self.rng.gen::<f64>() < self.spec.bad_fraction {
            let kind = [
                BadKind::Garbage,
                BadKind::NaN,
                BadKind::UnknownStream,
                BadKind::MissingField,
            ][self.bad_counter % 4];
            self.bad_counter += 1;
            let (payload, ct) = match kind {
                BadKind::Garbage => (
                    vec![0xff, 0x00, 0x13, 0x37, 0xfe],
                    Format::Protobuf.content_type(),
                ),
                BadKind::NaN => self.encode(&id, signal.stream(), Some(f64::NAN), t),
                BadKind::UnknownStream => self.encode(&id, "engine_rpm", Some(1.0), t),
                BadKind::MissingField => self.encode(&id, signal.stream(), None, t),
            };
            return SimMessage {
                key: id,
                payload,
                content_type: ct,
                reading: None,
                bad: Some(kind),
            };
        }
        let v = self.value(d, signal, t);
        let (payload, ct) = self.encode(&id, signal.stream(), Some(v), t);
        SimMessage {
            key: id,
            payload,
            content_type: ct,
            reading: Some((signal, v)),
            bad: None,
        }
    }
}

impl Fleet {
    /// The next device report as a document ([`DOCUMENT_MAPPING`]); bad
    /// ones are garbage, a time that is not RFC 3339, or a `"NaN"` metric.
    fn next_document(&mut self) -> SimMessage {
        let d = self.cursor;
        let t = self.step(d);
        let id = self.devices[d].id.clone();
        let at = std::time::UNIX_EPOCH + Duration::from_millis(t.max(0) as u64);
        let mut doc = serde_json::json!({
            "vin": id,
            "ts": humantime::format_rfc3339_millis(at).to_string(),
            "odo_km": 10_000 + d,
        });
        let bad = (self.rng.gen::<f64>() < self.spec.bad_fraction).then(|| {
            let kind =
                [BadKind::Garbage, BadKind::MissingField, BadKind::NaN][self.bad_counter % 3];
            self.bad_counter += 1;
            kind
        });
        for signal in self.spec.signals.clone() {
            let v = self.value(d, signal, t);
            let v = match bad {
                Some(BadKind::NaN) => serde_json::json!("NaN"),
                _ => serde_json::json!(v),
            };
            match signal {
                Signal::CabinTemp => doc["cabin"] = serde_json::json!({ "temp_c": v }),
                Signal::BatteryVolts => doc["battery"] = serde_json::json!({ "volts": v }),
                Signal::Speed => doc["speed_kmh"] = v,
            }
        }
        if bad == Some(BadKind::MissingField) {
            doc["ts"] = serde_json::json!("yesterday");
        }
        let payload = match bad {
            Some(BadKind::Garbage) => b"{\"vin\": ".to_vec(),
            _ => serde_json::to_vec(&doc).expect("json"),
        };
        SimMessage {
            key: id,
            payload,
            content_type: Format::Json.content_type(),
            reading: None,
            bad,
        }
    }
}

/// Produce a simulated fleet's messages to `topic` at `rate` messages per
/// second (0: as fast as possible) until `limit` messages, `duration` or
/// shutdown; reports progress through `on_progress(sent)`. Returns how many
/// were sent (all delivered: the producer is flushed).
#[allow(clippy::too_many_arguments)] // each knob is a plain CLI option
pub async fn produce_fleet(
    config: &ClientConfig,
    topic: &str,
    fleet: &mut Fleet,
    rate: f64,
    limit: Option<u64>,
    duration: Option<Duration>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut on_progress: impl FnMut(u64),
) -> Result<u64> {
    use rdkafka::producer::{DefaultProducerContext, Producer};
    let mut pc = config.clone();
    // Devices are placed as Kafka's Java clients place them (the service's
    // default `kafka.input_partitioner = "murmur2"`).
    pc.set("queue.buffering.max.ms", "5")
        .set("partitioner", "murmur2_random")
        .set("queue.buffering.max.messages", "1000000");
    let producer: rdkafka::producer::ThreadedProducer<DefaultProducerContext> =
        pc.create().context("creating producer")?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut last_report = Instant::now();
    let tick = Duration::from_millis(10);
    loop {
        if *shutdown.borrow()
            || limit.is_some_and(|l| sent >= l)
            || duration.is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
        // Messages due by now at the requested rate.
        let due = if rate > 0.0 {
            ((started.elapsed().as_secs_f64() + tick.as_secs_f64()) * rate) as u64
        } else {
            sent + 10_000
        };
        let due = limit.map_or(due, |l| due.min(l));
        while sent < due {
            send_next(&producer, topic, fleet).await?;
            sent += 1;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            on_progress(sent);
            last_report = Instant::now();
        }
        if rate > 0.0 {
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.changed() => {}
            }
        } else {
            tokio::task::yield_now().await;
        }
    }
    let p = producer;
    tokio::task::spawn_blocking(move || p.flush(Duration::from_secs(60)))
        .await?
        .context("flushing the simulator's producer")?;
    on_progress(sent);
    Ok(sent)
}

/// Produce the fleet's next message to `topic` (waiting while the
/// producer's queue is full), after the registry rows it changed.
async fn send_next(
    producer: &rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: &str,
    fleet: &mut Fleet,
) -> Result<()> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::BaseRecord;
    let m = fleet.next_message();
    if let Some(registry) = fleet.spec.registry_topic.clone() {
        for (k, v) in fleet.take_registry_updates() {
            let r = BaseRecord::<String, Vec<u8>>::to(&registry)
                .key(&k)
                .payload(&v);
            if let Err((e, _)) = producer.send(r) {
                return Err(anyhow!("producing to {registry}: {e}"));
            }
        }
    }
    let headers = OwnedHeaders::new().insert(Header {
        key: crate::clients::kafka::CONTENT_TYPE,
        value: Some(m.content_type),
    });
    let mut record = BaseRecord::to(topic)
        .key(&m.key)
        .payload(&m.payload)
        .headers(headers);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((
                rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                r,
            )) => {
                record = r;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err((e, _)) => return Err(anyhow!("producing to {topic}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed_and_round_structured() {
        let spec = FleetSpec {
            devices: 10,
            bad_fraction: 0.1,
            ..FleetSpec::default()
        };
        let mut a = Fleet::new(spec.clone());
        let mut b = Fleet::new(spec);
        let ma: Vec<_> = (0..60).map(|_| a.next_message().payload).collect();
        let mb: Vec<_> = (0..60).map(|_| b.next_message().payload).collect();
        assert_eq!(ma, mb);
        assert_eq!(a.round_len(), 30);
        assert_eq!(
            a.round_start_ms(),
            FleetSpec::default().start_ms + 2 * 15 * 60 * 1000
        );
    }

    /// A duty cycle of 2 rounds in 24: every device reports in exactly
    /// two consecutive rounds of each cycle, so never more than twice a
    /// day per stream with hourly rounds (the demo's W = 2), and the rounds
    /// hold the fleet's messages evenly.
    #[test]
    fn a_duty_cycle_has_each_device_report_two_rounds_a_day() {
        let spec = FleetSpec {
            devices: 240,
            bad_fraction: 0.0,
            interval_ms: 3_600_000,
            duty: Some((2, 24)),
            ..FleetSpec::default()
        };
        let start = spec.start_ms;
        let mut f = Fleet::new(spec);
        assert_eq!(f.messages_per_round(), 60.0);
        let mut per: std::collections::BTreeMap<(String, i64), Vec<i64>> = Default::default();
        // Two days: 2 rounds × 240 devices × 3 signals each day.
        for _ in 0..2 * 2 * 240 * 3 {
            let m = f.next_message();
            let (signal, _) = m.reading.unwrap();
            if signal == Signal::CabinTemp {
                let r = proto::DeviceReading::decode(m.payload.as_slice()).unwrap();
                let round = (r.event_time_ms.unwrap() - start) / 3_600_000;
                per.entry((m.key, round / 24)).or_default().push(round);
            }
        }
        assert!(f.round <= 48, "past two days: round {}", f.round);
        for ((dev, day), rounds) in &per {
            assert!(rounds.len() <= 2, "{dev} day {day}: {rounds:?}");
        }
        let per_device: usize = per.values().map(Vec::len).sum();
        assert_eq!(per_device, 240 * 4, "every device twice a day");
        let mut rounds: std::collections::BTreeMap<i64, usize> = Default::default();
        for r in per.values().flatten() {
            *rounds.entry(*r).or_default() += 1;
        }
        assert!(
            rounds.values().all(|&n| (10..=30).contains(&n)),
            "{rounds:?}"
        );
    }

    /// Documents: one per device per round with every signal, bad ones
    /// mixed in; the mapping reads the good ones into three readings each.
    #[test]
    fn documents_carry_every_signal_and_read_through_the_mapping() {
        let mut f = Fleet::new(FleetSpec {
            devices: 20,
            bad_fraction: 0.2,
            documents: true,
            ..FleetSpec::default()
        });
        assert_eq!(f.round_len(), 20);
        let table: crate::config::InputConfig = toml::from_str(DOCUMENT_MAPPING).unwrap();
        let streams: Vec<String> = Signal::ALL.iter().map(|s| s.stream().to_string()).collect();
        let decoder =
            ingest::Decoder::new(streams.clone(), Format::Json, ingest::Limits::default())
                .with_mapping(table.mapping(&streams).unwrap());
        let (mut good, mut bad) = (0, std::collections::HashSet::new());
        for _ in 0..200 {
            let m = f.next_message();
            let got = decoder.decode(&m.payload, Some(m.content_type));
            match m.bad {
                None => {
                    assert_eq!(got.unwrap().len(), 3);
                    good += 1;
                }
                Some(k) => {
                    assert!(got.is_err(), "{k:?} accepted");
                    bad.insert(k as u8);
                }
            }
        }
        assert!(good > 100 && bad.len() == 3, "{good} good, kinds {bad:?}");
    }

    #[test]
    fn emits_every_bad_kind() {
        let mut f = Fleet::new(FleetSpec {
            devices: 50,
            bad_fraction: 0.2,
            ..FleetSpec::default()
        });
        let kinds: std::collections::HashSet<_> = (0..1000)
            .filter_map(|_| f.next_message().bad)
            .map(|k| k as u8)
            .collect();
        assert_eq!(kinds.len(), 4);
    }
}
