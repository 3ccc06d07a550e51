//! Throughput of the service path, printed as readings/s with ratios against
//! baselines measured in the same run:
//!
//! 1. in process: pre-encoded readings through decode → validate → top-code →
//!    bound → window → release, beside the same path with noise switched
//!    off (exact aggregation): the DP overhead;
//! 2. end to end through a broker: the pipeline beside a null consumer
//!    (consume as the pipeline's loop does + decode with its own decoder
//!    and content-type setting, discard) on the same topic, both ways of
//!    reading the input.
//!    CPU per reading (this process, all threads; the broker excluded) is
//!    printed too: it is steadier than throughput on a shared machine. So
//!    is the whole machine's CPU per reading, and the readings/s it allows
//!    FleetDP on the machine's cores however its work were spread
//!    (`pipeline/machine.rs`): a ratio can be held by the machine, not by
//!    one busy thread.
//!
//! Run: `cargo bench -p fleetdp --bench pipeline` (FLEETDP_BENCH_E2E_ONLY=1
//! skips the in-process part, FLEETDP_BENCH_IN_PROCESS_ONLY=1 runs only
//! the DP overhead, FLEETDP_BENCH_SHAPES_ONLY=1 runs only the
//! input shapes (protobuf readings, mapped JSON, framed Avro), FLEETDP_BENCH_READ_CONTENT_TYPE=true|false
//! measures one way of reading the input only, FLEETDP_BENCH_E2E_PLAIN=1
//! leaves out the grouped and security runs, to profile the rest). The broker is
//! FLEETDP_BENCH_BROKERS or KAFKA_BROKERS (e.g. the tansu that tests/run.sh
//! installs), else the in-process mock cluster with a smaller data set.
//! Targets, each printed as a `TARGET` line with this run's verdict: ≥ 6 M
//! readings/s in process on one core; DP overhead ≤ 10%; end to end ≥ 0.9×
//! the null consumer's readings/s and ≤ 1.10× its CPU per reading, both
//! ways of reading the input; 48 registry groups ≥ 0.9× one group.
//!
//! After them, with a broker and FLEETDP_TANSU: the pipeline over TLS beside
//! plaintext and on zstd input beside uncompressed (`pipeline/security.rs`;
//! FLEETDP_BENCH_SECURITY_ONLY=1 runs only these).
//!
//! Each end-to-end round also runs the pipeline with the stream grouped by
//! the simulated registry's model × region × firmware (48 groups with
//! `other`, G = 2, the rows on a registry topic), beside the single-group
//! pipeline of the same round.

#[path = "pipeline/machine.rs"]
mod machine;
#[path = "pipeline/security.rs"]
mod security;
#[path = "pipeline/target.rs"]
mod target;

use fleetdp::config::{Config, Validated};
use fleetdp::dp::release::QuantileTrack;
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::pipeline::{Options, Pipeline};
use fleetdp::sim::{Fleet, FleetSpec, Signal};
use fleetdp::telemetry::Counters;
use fleetdp::{Processor, PREPARE_AHEAD};
use machine::{Measured, Span};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[kafka]
brokers = "BROKERS"
input_topic = "INPUT"
output_topic = "OUTPUT"
dead_letter_topic = "DLQ"
read_content_type = RCT
group_id = "GROUP"
[kafka.consumer_properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
[[stream]]
name = "cabin_temp_c"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 10000
max_readings_per_device = 1
max_windows_per_device = 1000000
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, -20, -10, 0, 10, 20, 30, 40, 50, 60, 85]
quantiles = [0.1, 0.5, 0.9, 0.99]
"#;

/// [`config`] with the stream grouped (or, for the baseline, not) by the
/// simulated registry's dimensions, read from `registry`. Windows of 200: a group's lane on a
/// partition sees only a few hundred devices (10⁵ devices over 48 groups
/// and 4–8 partitions), and with one reading per device per window a
/// window of 10,000 would never fill (the first version of this round
/// released nothing, so its figure measured readings that only waited).
fn grouped_config(
    brokers: &str,
    input: &str,
    output: &str,
    group: &str,
    registry: &str,
    grouped: bool,
) -> Validated {
    let base = CONFIG
        .replace("BROKERS", brokers)
        .replace("INPUT", input)
        .replace("OUTPUT", output)
        .replace("DLQ", &format!("{input}.dlq"))
        .replace("GROUP", group)
        .replace("RCT", "false");
    let text = if grouped {
        base.replace(
            "[[stream]]",
            &format!(
                "[dimensions]\nmodel = [\"m1\", \"m2\", \"m3\"]\nregion = [\"eu\", \"us\", \"apac\"]\nfirmware = [\"4.1\", \"4.2\"]\n\
                 [registry]\ntopic = \"{registry}\"\n[[stream]]"
            ),
        ) + "group_by = [\"model\", \"region\", \"firmware\"]\nmax_groups_per_device = 2\n"
    } else {
        base
    };
    let text = text.replace("window_size = 10000", "window_size = 200");
    Config::parse(&text).unwrap().validate().unwrap()
}

fn config(
    brokers: &str,
    input: &str,
    output: &str,
    group: &str,
    read_content_type: bool,
) -> Validated {
    let text = config_text(brokers, input, output, group, read_content_type);
    Config::parse(&text).unwrap().validate().unwrap()
}

/// [`CONFIG`] filled in.
fn config_text(brokers: &str, input: &str, output: &str, group: &str, rct: bool) -> String {
    CONFIG
        .replace("BROKERS", brokers)
        .replace("INPUT", input)
        .replace("OUTPUT", output)
        .replace("DLQ", &format!("{input}.dlq"))
        .replace("GROUP", group)
        .replace("RCT", &rct.to_string())
}

fn messages(n: usize) -> Vec<(String, Vec<u8>)> {
    let mut fleet = Fleet::new(FleetSpec {
        devices: 100_000,
        signals: vec![Signal::CabinTemp],
        bad_fraction: 0.0,
        ..FleetSpec::default()
    });
    (0..n)
        .map(|_| {
            let m = fleet.next_message();
            (m.key, m.payload)
        })
        .collect()
}

/// Readings/s through the in-process path; `noise` off = exact aggregation.
fn in_process(v: &Validated, msgs: &[(String, Vec<u8>)], noise: bool) -> (f64, u64) {
    in_process_shaped(v, msgs, noise, 1, None)
}

/// [`in_process`] for messages of `per_message` readings each, with a
/// content type (None: the configured format).
fn in_process_shaped(
    v: &Validated,
    msgs: &[(String, Vec<u8>)],
    noise: bool,
    per_message: usize,
    content_type: Option<&str>,
) -> (f64, u64) {
    let key = ReleaseKey::from_bytes([1; 32]);
    let mut p = Processor::new(v, Arc::new(Counters::default()));
    // Each lane's quantile track, stepped window after window as the
    // service steps it (adaptive quantiles are the default).
    let mut tracks: std::collections::HashMap<(usize, i32), QuantileTrack> = Default::default();
    let mut closed = Vec::new();
    let mut windows = 0u64;
    let mut sink = 0.0f64;
    let t = Instant::now();
    // As the service's loop steps (runtime/pipeline/consume/): each
    // message prepared up to PREPARE_AHEAD messages before it is applied,
    // so its devices' slots load meanwhile; counters flushed every 64
    // messages while busy, and once at the end.
    let mut pending = 0;
    for i in 0..=msgs.len() {
        if let Some((_, payload)) = msgs.get(i) {
            p.prepare(0, i as i64, payload, content_type, None)
                .expect("valid");
            pending += 1;
            if i % 64 == 63 {
                p.flush_counters_busy();
            }
        }
        while pending > PREPARE_AHEAD || (i == msgs.len() && pending > 0) {
            p.apply(&mut closed).expect("valid");
            pending -= 1;
        }
        for w in closed.drain(..) {
            let s = &v.plan.streams[w.stream];
            let r = if noise {
                let track = tracks.entry((w.stream, w.partition)).or_default();
                let before = track.clone();
                let chosen = s.track_step(&key, w.partition, w.seq, &w.values, track);
                let v = &w.values;
                (s.release_with_moments(&key, w.partition, w.seq, v, &before, chosen.as_ref())).0
            } else {
                s.truth(&w.values)
            };
            sink += r[0].values[0];
            windows += 1;
        }
    }
    p.flush_counters();
    let rate = (msgs.len() * per_message) as f64 / t.elapsed().as_secs_f64();
    std::hint::black_box(sink);
    (rate, windows)
}

/// Five streams, read either as FleetDP's protobuf readings or, through an
/// `[input]` mapping, as one JSON document per report carrying all five.
const SHAPES: &str = r#"
[kafka]
brokers = "unused"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = 5.0
horizon = "24h"
INPUT
[[stream]]
name = "temp"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 10000
max_windows_per_device = 1000000
budget_share = 0.19
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, 0, 20, 40, 85]
quantiles = [0.5, 0.9]
"#;

/// The reports as a fleet's own Avro record (Schema Registry framed, id 1).
const REPORT_AVSC: &str = r#"{"type": "record", "name": "Report", "namespace": "bench", "fields": [
  {"name": "vin", "type": "string"},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "cabin", "type": {"type": "record", "name": "Cabin", "fields": [{"name": "temp_c", "type": "double"}]}},
  {"name": "battery", "type": {"type": "record", "name": "Battery", "fields": [{"name": "volts", "type": "double"}]}},
  {"name": "speed_kmh", "type": "double"},
  {"name": "engine", "type": {"type": "record", "name": "Engine", "fields": [{"name": "rpm", "type": "double"}]}},
  {"name": "fuel", "type": {"type": "record", "name": "Fuel", "fields": [{"name": "level", "type": "double"}]}},
  {"name": "odo", "type": "long"}]}"#;

/// How the 5-metric reports reach the service.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Five FleetDP protobuf readings per report.
    Readings,
    /// One mapped JSON document per report (RFC 3339 times).
    Json,
    /// One framed Avro record per report, read against [`REPORT_AVSC`].
    Avro,
    /// One framed Protobuf message of the fleet's own type per report
    /// (the manual's `acme.v1.Telemetry`: cabin temperature and four tyre
    /// readings), read through its descriptor set.
    Protobuf,
    /// OpenTelemetry: four reports' resources per `otlp_proto` request,
    /// one gauge per metric (as an SDK encodes them).
    Otlp,
}

fn shapes_config(shape: Shape) -> Validated {
    const STREAMS: &str =
        "[input.streams]\ntemp = \"cabin.temp_c\"\nbattery = \"/battery/volts\"\n\
         speed = \"speed_kmh\"\nrpm = \"engine.rpm\"\nfuel = \"fuel.level\"\n";
    let input = match shape {
        Shape::Readings => String::new(),
        Shape::Json => format!(
            "[input]\ndevice_id = \"vin\"\nevent_time = \"/ts\"\nevent_time_unit = \"rfc3339\"\n{STREAMS}"
        ),
        Shape::Protobuf => {
            let path = std::env::temp_dir().join(format!("fleetdp-bench-{}.pb", std::process::id()));
            std::fs::write(&path, ingest::example_descriptor_set()).unwrap();
            format!(
                "[input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\nprotobuf_descriptor_set = {:?}\nprotobuf_message = \"acme.v1.Telemetry\"\n\
                 [input.streams]\ntemp = \"cabin.temp\"\nbattery = \"tyres.0\"\nspeed = \"tyres.1\"\nrpm = \"tyres.2\"\nfuel = \"tyres.3\"\n",
                path.display().to_string()
            )
        }
        Shape::Otlp => "[otlp]\ndevice_attribute = \"device.id\"\n[otlp.metrics]\ntemp = \"cabin.temperature\"\n\
             battery = \"battery.volts\"\nspeed = \"speed\"\nrpm = \"engine.rpm\"\nfuel = \"fuel.level\"\n"
            .to_string(),
        Shape::Avro => {
            let path = std::env::temp_dir().join(format!("fleetdp-bench-{}.avsc", std::process::id()));
            std::fs::write(&path, REPORT_AVSC).unwrap();
            format!(
                "[input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\navro_schema = {:?}\navro_schema_id = 1\n{STREAMS}",
                path.display().to_string()
            )
        }
    };
    let mut text = SHAPES.replace("INPUT", &input);
    let format = match shape {
        Shape::Avro => "avro",
        Shape::Protobuf => "protobuf",
        _ => "",
    };
    if shape == Shape::Otlp {
        text = text.replacen(
            "[kafka]\n",
            "[kafka]\ninput_format = \"otlp_proto\"\nread_content_type = false\n",
            1,
        );
    }
    if !format.is_empty() {
        text = text.replacen(
            "[kafka]\n",
            &format!("[kafka]\ninput_format = \"{format}\"\ninput_framing = \"confluent\"\nread_content_type = false\n"),
            1,
        );
    }
    for name in ["battery", "speed", "rpm", "fuel"] {
        text += &format!(
            "[[stream]]\nname = \"{name}\"\nlower = 0.0\nupper = 5000.0\nresolution = 0.01\n\
             window_size = 10000\nmax_windows_per_device = 1000000\nbudget_share = 0.19\n\
             statistics = [\"mean\", \"std\"]\n"
        );
    }
    Config::parse(&text).unwrap().validate().unwrap()
}

/// The same reports: (FleetDP protobuf readings, five per report; mapped
/// JSON documents, one per report).
/// (key, payload) per message.
type Messages = Vec<(String, Vec<u8>)>;

fn shaped_messages(reports: usize) -> [Messages; 5] {
    use prost::Message as _;
    let (mut proto, mut docs, mut avro, mut own) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut otlp, mut batch) = (Vec::new(), Vec::new());
    for i in 0..reports {
        let vin = format!("WVW{:08}", i % 100_000);
        let t = 1_795_541_400_000i64 + i as i64;
        let values = [
            ("temp", 20.0 + (i % 100) as f64 / 10.0),
            ("battery", 12.6),
            ("speed", (i % 130) as f64),
            ("rpm", 2100.0),
            ("fuel", 0.55),
        ];
        for (stream, value) in values {
            let r = proto::DeviceReading {
                device_id: vin.clone(),
                stream: stream.into(),
                value: Some(value),
                event_time_ms: Some(t),
                labels: Default::default(),
            };
            proto.push((vin.clone(), r.encode_to_vec()));
        }
        let ts = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + Duration::from_millis(t as u64),
        );
        let doc = format!(
            r#"{{"vin":"{vin}","ts":"{ts}","cabin":{{"temp_c":{}}},"battery":{{"volts":12.6}},"speed_kmh":{},"engine":{{"rpm":2100}},"fuel":{{"level":0.55}},"odo":81234}}"#,
            values[0].1, values[2].1
        );
        let record = serde_json::json!({
            "vin": vin, "ts": t, "cabin": {"temp_c": values[0].1}, "battery": {"volts": 12.6},
            "speed_kmh": values[2].1, "engine": {"rpm": 2100.0}, "fuel": {"level": 0.55}, "odo": 81234,
        });
        let body = ingest::encode_avro_json(REPORT_AVSC, &record).unwrap();
        avro.push((vin.clone(), ingest::frame(1, None, &body)));
        let tyres = [12.6, values[2].1, 2100.0, 0.55];
        let body = ingest::example_report(&vin, t, Some(values[0].1), &tyres, "4.2");
        own.push((vin.clone(), ingest::frame(1, Some(&[0]), &body)));
        let gauges = vec![
            ("cabin.temperature", values[0].1),
            ("battery.volts", 12.6),
            ("speed", values[2].1),
            ("engine.rpm", 2100.0),
            ("fuel.level", 0.55),
        ];
        batch.push((vin.clone(), gauges));
        if batch.len() == 4 {
            otlp.push((vin.clone(), ingest::example_otlp(&batch, t)));
            batch.clear();
        }
        docs.push((vin, doc.into_bytes()));
    }
    [proto, docs, avro, own, otlp]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a list
    }
    if std::env::var("FLEETDP_BENCH_SECURITY_ONLY").is_ok() {
        security::run(&runtime());
        return;
    }
    if std::env::var("FLEETDP_BENCH_E2E_ONLY").is_ok() {
        end_to_end();
        return;
    }
    let in_process_only = std::env::var("FLEETDP_BENCH_IN_PROCESS_ONLY").is_ok();
    let best = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    // FLEETDP_BENCH_SHAPES_ONLY=1: the real-world input shapes alone.
    if std::env::var("FLEETDP_BENCH_SHAPES_ONLY").is_err() {
        let n = 2_000_000;
        println!("FleetDP pipeline benchmark ({n} readings of one stream, n = 10,000 per window)");
        let msgs = messages(n);
        let v = config("unused", "in", "out", "g", true);
        // Warm up, then alternate to even out machine noise.
        let _ = in_process(&v, &msgs[..200_000], true);
        let mut exact = Vec::new();
        let mut dp = Vec::new();
        for _ in 0..9 {
            exact.push(in_process(&v, &msgs, false).0);
            dp.push(in_process(&v, &msgs, true).0);
        }
        let (e, d) = (best(&exact), best(&dp));
        println!(
            "in process, exact aggregation (noise off): {:>12.0} readings/s",
            e
        );
        println!(
            "in process, with DP release:               {:>12.0} readings/s",
            d
        );
        println!(
            "DP overhead: {:.1}% (ratio {:.3}; target ≤ 10%)",
            (e / d - 1.0) * 100.0,
            d / e
        );
        target::line(
            "in process, decode → release",
            &format!("{:.2} M readings/s", d / 1e6),
            "≥ 6 M readings/s",
            d >= 6e6,
        );
        let overhead = (e / d - 1.0) * 100.0;
        target::line(
            "DP overhead",
            &format!("{overhead:.1}%"),
            "≤ 10%",
            overhead <= 10.0,
        );
    }

    if in_process_only {
        return;
    }
    // Real-world shapes: the same 5-metric reports as FleetDP protobuf
    // readings and as mapped multi-metric JSON documents (the
    // target: ≥ 0.5× the protobuf path in readings/s).
    let [proto_msgs, doc_msgs, avro_msgs, own_msgs, otlp_msgs] = shaped_messages(200_000);
    let otv = shapes_config(Shape::Otlp);
    let mut otr = Vec::new();
    let (pv, mv, av, ov) = (
        shapes_config(Shape::Readings),
        shapes_config(Shape::Json),
        shapes_config(Shape::Avro),
        shapes_config(Shape::Protobuf),
    );
    let (mut pr, mut mr, mut ar, mut or) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        pr.push(in_process_shaped(&pv, &proto_msgs, true, 1, None).0);
        mr.push(in_process_shaped(&mv, &doc_msgs, true, 5, Some("application/json")).0);
        ar.push(in_process_shaped(&av, &avro_msgs, true, 5, None).0);
        or.push(in_process_shaped(&ov, &own_msgs, true, 5, None).0);
        otr.push(in_process_shaped(&otv, &otlp_msgs, true, 20, None).0);
    }
    let ot = best(&otr);
    let (p, m, a, o) = (best(&pr), best(&mr), best(&ar), best(&or));
    println!("in process, 5 streams, protobuf readings:   {p:>12.0} readings/s");
    println!(
        "in process, 5 streams, mapped JSON (5/doc): {m:>12.0} readings/s ({:.2}× protobuf; target ≥ 0.5×)",
        m / p
    );
    println!(
        "in process, 5 streams, framed Avro (5/rec): {a:>12.0} readings/s ({:.2}× protobuf; target ≥ 0.8×)",
        a / p
    );
    println!(
        "in process, 5 streams, framed own Protobuf (5/msg, descriptor set): {o:>12.0} readings/s ({:.2}× protobuf; target ≥ 0.8×)",
        o / p
    );
    println!(
        "in process, 5 streams, OTLP protobuf (4 devices × 5 gauges/request): {ot:>12.0} readings/s ({:.2}× protobuf; target ≥ 0.8×)",
        ot / p
    );
    for (what, ratio, floor) in [
        ("mapped JSON", m / p, 0.5),
        ("framed Avro", a / p, 0.8),
        ("framed own Protobuf", o / p, 0.8),
        ("OTLP", ot / p, 0.8),
    ] {
        target::line(
            &format!("in process, {what} against protobuf readings"),
            &format!("{ratio:.2}×"),
            &format!("≥ {floor}×"),
            ratio >= floor,
        );
    }

    if std::env::var("FLEETDP_BENCH_SHAPES_ONLY").is_err() {
        end_to_end();
    }
}

fn end_to_end() {
    let env = std::env::var("FLEETDP_BENCH_BROKERS")
        .or_else(|_| std::env::var("KAFKA_BROKERS"))
        .ok();
    let mock = if env.is_none() {
        Some(rdkafka::mocking::MockCluster::new(1).unwrap())
    } else {
        None
    };
    let brokers = env.unwrap_or_else(|| mock.as_ref().unwrap().bootstrap_servers());
    // The mock cluster keeps only ~5 MiB per partition.
    let (n, parts) = if mock.is_some() {
        (240_000usize, 8)
    } else {
        (2_000_000usize, 4)
    };
    let suffix = format!("{:08x}", rand::random::<u32>());
    let input = format!("bench-in-{suffix}");
    let rt = runtime();
    rt.block_on(async {
        let base = fleetdp::kafka::client_config(&brokers, &Default::default());
        let create = |topics: Vec<(String, i32)>| {
            let (base, mock) = (base.clone(), mock.as_ref());
            async move {
                match mock {
                    Some(m) => {
                        for (t, p) in &topics {
                            m.create_topic(t, *p, 1).unwrap();
                        }
                    }
                    None => {
                        let t: Vec<(&str, i32)> =
                            topics.iter().map(|(t, p)| (t.as_str(), *p)).collect();
                        fleetdp::kafka::ensure_topics(&base, &t, &[]).await.unwrap()
                    }
                }
            }
        };
        create(vec![(input.clone(), parts), (format!("{input}.dlq"), 1)]).await;
        let mut fleet = Fleet::new(FleetSpec {
            devices: 100_000,
            signals: vec![Signal::CabinTemp],
            bad_fraction: 0.0,
            ..FleetSpec::default()
        });
        let registry = format!("bench-registry-{suffix}");
        create(vec![(registry.clone(), 1)]).await;
        fleetdp::sim::produce_rows(&base, &registry, &fleet.registry_rows())
            .await
            .unwrap();
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let t = Instant::now();
        fleetdp::sim::produce_fleet(
            &base,
            &input,
            &mut fleet,
            0.0,
            Some(n as u64),
            None,
            rx,
            |_| {},
        )
        .await
        .unwrap();
        println!(
            "\nend to end through {} ({} readings, {parts} partitions; produced in {:.1}s)",
            if mock.is_some() {
                "the in-process mock cluster"
            } else {
                brokers.as_str()
            },
            n,
            t.elapsed().as_secs_f64()
        );
        // Alternate so that a broker (or a neighbour on this machine)
        // slowing down or speeding up over the run shows in every figure;
        // ratios compare the best of each. Each round measures both ways of
        // reading the input, each beside its own null consumer: as configured
        // by default (the content-type header says how to decode a message)
        // and with `read_content_type = false` (one declared format).
        let mut figures: [Figures; 2] = Default::default();
        // Readings/s with windows of 200, one per round: ungrouped, grouped.
        let mut grouped: [Vec<f64>; 2] = Default::default();
        // FLEETDP_BENCH_READ_CONTENT_TYPE=true|false measures one way only.
        let ways: Vec<bool> = match std::env::var("FLEETDP_BENCH_READ_CONTENT_TYPE").as_deref() {
            Ok("true") => vec![true],
            Ok("false") => vec![false],
            _ => vec![false, true],
        };
        for round in 0..ROUNDS {
            for &read_content_type in &ways {
                let v = |output: &str, group: &str| {
                    config(&brokers, &input, output, group, read_content_type)
                };
                let group = format!("null-{suffix}-{round}-{read_content_type}");
                let Some(m) = null_consumer(&base, &v("unused", &group), n, &group).await else {
                    return;
                };
                println!(
                    "null consumer (consume + decode), read_content_type = {:<5}: {:>9.0} readings/s, {:.2} µs CPU per reading, machine {:.2}",
                    read_content_type, m.rate, m.cpu, m.machine
                );
                let f = &mut figures[usize::from(read_content_type)];
                f.0.push(m);
                let output = format!("bench-out-{suffix}-{round}-{read_content_type}");
                create(vec![(output.clone(), parts), (format!("{output}.state"), parts)]).await;
                let group = format!("fleetdp-{suffix}-{round}-{read_content_type}");
                let Some((m, windows, _)) = pipeline(v(&output, &group), n).await else {
                    return;
                };
                println!(
                    "FleetDP pipeline,                 read_content_type = {:<5}: {:>9.0} readings/s, {:.2} µs CPU per reading, machine {:.2} ({windows} windows released)",
                    read_content_type, m.rate, m.cpu, m.machine
                );
                f.1.push(m);
                if read_content_type != ways[0] || plain_only() {
                    continue;
                }
                // The grouped stream beside the same stream ungrouped with
                // the same windows of 200 (a window's release costs the
                // same whatever its size, so the comparison keeps windows
                // per reading alike).
                for grouped_run in [false, true] {
                    let output = format!("bench-gout-{suffix}-{round}-{grouped_run}");
                    create(vec![(output.clone(), parts), (format!("{output}.state"), parts)]).await;
                    let group = format!("fleetdp-g-{suffix}-{round}-{grouped_run}");
                    let v = grouped_config(&brokers, &input, &output, &group, &registry, grouped_run);
                    let Some((m, windows, accepted)) = pipeline(v, n).await else {
                        return;
                    };
                    let (r, cpu) = (m.rate, m.cpu);
                    println!(
                        "FleetDP pipeline, {:<21} read_content_type = false: {r:>9.0} readings/s, {cpu:.2} µs CPU per reading ({windows} windows of 200 released, {accepted} of {n} readings accepted)",
                        if grouped_run { "48 groups (registry)," } else { "1 group, windows 200," }
                    );
                    grouped[usize::from(grouped_run)].push(r);
                }
            }
        }
        let best = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
        let least = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
        for &read_content_type in &ways {
            let f = &figures[usize::from(read_content_type)];
            let of = |v: &[Measured], x: fn(&Measured) -> f64| v.iter().map(x).collect::<Vec<_>>();
            let (null_rate, rate) = (best(&of(&f.0, |m| m.rate)), best(&of(&f.1, |m| m.rate)));
            let (speed, cpu) = (
                rate / null_rate,
                least(&of(&f.1, |m| m.cpu)) / least(&of(&f.0, |m| m.cpu)),
            );
            println!(
                "end to end / null consumer, read_content_type = {:<5}: {speed:.3} (best of {ROUNDS} each); \
                 CPU per reading in this process: pipeline / null consumer {cpu:.2} (least of each)",
                read_content_type,
            );
            let way = format!("read_content_type = {read_content_type}");
            target::line(
                &format!("end to end / null consumer, readings/s, {way}"),
                &format!("{speed:.3}×"),
                "≥ 0.9×",
                speed >= 0.9,
            );
            target::line(
                &format!("end to end / null consumer, CPU per reading, {way}"),
                &format!("{cpu:.2}×"),
                "≤ 1.10×",
                cpu <= 1.10,
            );
            // What the machine allows: FleetDP's least cost of the
            // machine's CPU per reading spread over all its cores.
            // (No line without /proc/stat.)
            let cheapest = f.1.iter().min_by(|a, b| a.machine.total_cmp(&b.machine));
            if let Some((m, most)) = cheapest.and_then(|m| Some((m, machine::ceiling(m)?))) {
                println!(
                    "machine, {way}: CPU per reading of every process on this machine (the broker's too when it runs here): \
                     null consumer {:.2} µs, FleetDP {:.2} µs (least of each); on {:.1} cores that cost allows FleetDP at most \
                     {most:.0} readings/s, {:.2}× the null consumer's best, however its work were spread over threads",
                    least(&of(&f.0, |m| m.machine)),
                    m.machine,
                    m.cores,
                    most / null_rate,
                );
            }
        }
        if plain_only() {
            return;
        }
        let ratio = best(&grouped[1]) / best(&grouped[0]);
        println!(
            "end to end, windows of 200, 48 groups / single group: {ratio:.3} (best of {ROUNDS} each)"
        );
        target::line(
            "end to end, 48 registry groups / one group",
            &format!("{ratio:.3}×"),
            "≥ 0.9×",
            ratio >= 0.9,
        );
    });
    if mock.is_none() && !plain_only() {
        security::run(&rt);
    }
    drop(mock);
}

/// FLEETDP_BENCH_E2E_PLAIN=1: the end-to-end rounds only the null
/// consumer and the ungrouped pipeline (to profile them: `perf record`).
fn plain_only() -> bool {
    std::env::var("FLEETDP_BENCH_E2E_PLAIN").is_ok()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Per way of reading the input: the null consumer's and the pipeline's
/// figures, one entry per round.
type Figures = (Vec<Measured>, Vec<Measured>);

/// Alternating rounds of null consumer and pipeline in the end-to-end run.
const ROUNDS: usize = 4;

/// Null consumer: consume and decode each message exactly as the pipeline
/// does (its decoder and content-type setting), then discard. Its figures,
/// or None if stalled.
async fn null_consumer(
    base: &rdkafka::ClientConfig,
    v: &Validated,
    n: usize,
    group: &str,
) -> Option<Measured> {
    let mut cc = base.clone();
    cc.set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        // The same assignment strategy and fetch backoff as the pipeline's consumer.
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("fetch.queue.backoff.ms", "20");
    let consumer: StreamConsumer = cc.create().unwrap();
    consumer.subscribe(&[&v.config.kafka.input_topic]).unwrap();
    let decoder = fleetdp::decoder(v);
    let read_content_type = v.config.kafka.read_content_type;
    let mut seen = 0usize;
    let mut first: Option<Span> = None;
    let mut sink = 0.0;
    while seen < n {
        // Received as the pipeline's loop receives: a message ready now is
        // taken with no timer set; only waiting for one is timed (a timer
        // per message cost this consumer ≈ 8% of its CPU, which flattered
        // the ratios).
        let m = match fleetdp::kafka::ready_now(&consumer) {
            Some(m) => m,
            None => {
                let Ok(m) = tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await
                else {
                    println!(
                        "null consumer: stalled after {seen} of {n} readings; no end-to-end figures"
                    );
                    return None;
                };
                m
            }
        };
        let m = m.unwrap();
        first.get_or_insert_with(Span::start);
        let ct = if read_content_type {
            fleetdp::kafka::header(&m, fleetdp::kafka::CONTENT_TYPE)
        } else {
            None
        };
        // As the pipeline decodes: each reading visited, a plain one read
        // in place.
        decoder
            .visit(m.payload().unwrap_or(&[]), ct, |_, r| {
                sink += r.value;
                Ok(())
            })
            .unwrap();
        seen += 1;
    }
    std::hint::black_box(sink);
    Some(first?.finish(n - 1))
}

/// The pipeline over the whole input: its figures, windows released and
/// readings accepted, or None if stalled.
async fn pipeline(v: Validated, n: usize) -> Option<(Measured, u64, u64)> {
    let p = Pipeline::new(v, ReleaseKey::from_bytes([2; 32]));
    let c = p.counters.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let h = tokio::spawn(async move { p.run(rx, Options::default()).await });
    let mut first: Option<Span> = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let m = c.messages.load(Ordering::Relaxed);
        if m > 0 {
            first.get_or_insert_with(Span::start);
        }
        if m as usize >= n {
            break;
        }
        if Instant::now() > deadline {
            println!("pipeline: stalled after {m} of {n} readings; no end-to-end figures");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let measured = first?.finish(n - 1);
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    Some((
        measured,
        c.windows_released.load(Ordering::Relaxed),
        c.readings_accepted.load(Ordering::Relaxed),
    ))
}
