//! Decoding throughput by input shape, readings/s, with ratios against the
//! protobuf single-reading path measured in the same run: FleetDP's JSON,
//! and a fleet's own multi-metric JSON documents read through an `[input]`
//! mapping (5 metrics per document, RFC 3339 and epoch-ms times). Decoding
//! is the only per-reading step that differs between shapes (validation,
//! top-coding, windows and releases are the same after it).
//!
//! The fleet's own Protobuf message through its descriptor set (the manual's
//! `acme.v1.Telemetry`, two mapped readings per message), framed by Schema
//! Registry, is measured too.
//!
//! OpenTelemetry requests (`otlp_proto`) as an SDK encodes them, one and
//! four devices' resources a request, are measured too.
//!
//! Run: `cargo bench -p fleetdp-ingest --bench decode`. Targets:
//! mapped multi-metric JSON ≥ 0.5× the protobuf path in readings/s, binary
//! formats (OTLP among them) ≥ 0.8×.

use fleetdp_ingest::{Decoder, Format, Limits, Mapping, Path, TimeUnit};
use prost::Message;
use std::hint::black_box;
use std::time::Instant;

const MESSAGES: usize = 100_000;
const ROUNDS: usize = 5;
const STREAMS: [&str; 5] = ["temp", "battery", "speed", "rpm", "fuel"];

fn decoder() -> Decoder {
    Decoder::new(
        STREAMS.map(String::from),
        Format::Protobuf,
        Limits::default(),
    )
}

fn mapped(unit: TimeUnit) -> Decoder {
    decoder().with_mapping(Mapping {
        device_id: Path::parse("vin").unwrap(),
        event_time: Path::parse("/ts").unwrap(),
        unit,
        streams: vec![
            ("temp".into(), Path::parse("cabin.temp_c").unwrap()),
            ("battery".into(), Path::parse("/battery/volts").unwrap()),
            ("speed".into(), Path::parse("speed_kmh").unwrap()),
            ("rpm".into(), Path::parse("engine.rpm").unwrap()),
            ("fuel".into(), Path::parse("fuel.level").unwrap()),
        ],
        labels: vec![],
    })
}

/// Readings per second decoding `msgs` (best of [`ROUNDS`]).
fn rate(d: &Decoder, msgs: &[Vec<u8>], ct: &str) -> f64 {
    let mut best = f64::MAX;
    let mut readings = 0;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        readings = 0;
        for m in msgs {
            // As the service decodes: each reading visited (borrowed).
            readings += d
                .visit(m, Some(ct), |_, r| {
                    black_box(r);
                    Ok(())
                })
                .expect("valid");
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    readings as f64 / best
}

fn main() {
    let proto: Vec<Vec<u8>> = (0..MESSAGES)
        .map(|i| {
            proto::DeviceReading {
                device_id: format!("WVW{i:08}"),
                stream: STREAMS[i % 5].into(),
                value: Some(20.0 + (i % 100) as f64 / 10.0),
                event_time_ms: Some(1_795_541_400_000 + i as i64),
                labels: Default::default(),
            }
            .encode_to_vec()
        })
        .collect();
    let framed: Vec<Vec<u8>> = proto
        .iter()
        .map(|m| fleetdp_ingest::frame(1, Some(&[0]), m))
        .collect();
    let json: Vec<Vec<u8>> = (0..MESSAGES)
        .map(|i| {
            format!(
                r#"{{"device_id":"WVW{i:08}","stream":"{}","value":{},"event_time_ms":{}}}"#,
                STREAMS[i % 5],
                20.0 + (i % 100) as f64 / 10.0,
                1_795_541_400_000i64 + i as i64
            )
            .into_bytes()
        })
        .collect();
    let doc = |i: usize, ts: String| {
        format!(
            r#"{{"vin":"WVW{i:08}","ts":{ts},"cabin":{{"temp_c":{}}},"battery":{{"volts":12.6}},"speed_kmh":{},"engine":{{"rpm":2100}},"fuel":{{"level":0.55}},"odo":81234}}"#,
            20.0 + (i % 100) as f64 / 10.0,
            (i % 130) as f64
        )
        .into_bytes()
    };
    // A fifth as many documents: each carries five readings.
    let docs_ms: Vec<Vec<u8>> = (0..MESSAGES / 5)
        .map(|i| doc(i, (1_795_541_400_000i64 + i as i64).to_string()))
        .collect();
    let docs_rfc: Vec<Vec<u8>> = (0..MESSAGES / 5)
        .map(|i| {
            doc(
                i,
                format!("\"2026-11-24T18:30:{:02}.{:03}+01:00\"", i % 60, i % 1000),
            )
        })
        .collect();
    // Two mapped readings per message: half as many messages.
    let described: Vec<Vec<u8>> = (0..MESSAGES / 2)
        .map(|i| {
            let body = fleetdp_ingest::example_message(
                &format!("WVW{i:08}"),
                1_795_541_400_000 + i as i64,
                Some(20.0 + (i % 100) as f64 / 10.0),
                "4.2",
            );
            fleetdp_ingest::frame(1, Some(&[0]), &body)
        })
        .collect();
    let described_decoder = decoder()
        .with_mapping(Mapping {
            device_id: Path::parse("vin").unwrap(),
            event_time: Path::parse("ts").unwrap(),
            unit: TimeUnit::Milliseconds,
            streams: vec![
                ("temp".into(), Path::parse("cabin.temp").unwrap()),
                ("battery".into(), Path::parse("tyres.0").unwrap()),
            ],
            labels: vec![],
        })
        .with_described(
            fleetdp_ingest::Described::new(
                &fleetdp_ingest::example_descriptor_set(),
                "acme.v1.Telemetry",
            )
            .unwrap(),
        )
        .with_framing(fleetdp_ingest::Framing::Confluent);
    // The manual's Avro record, framed: two mapped readings per message.
    let avro: Vec<Vec<u8>> = (0..MESSAGES / 2)
        .map(|i| {
            let body = fleetdp_ingest::example_avro(
                &format!("WVW{i:08}"),
                1_795_541_400_000 + i as i64,
                Some(20.0 + (i % 100) as f64 / 10.0),
                12.5,
            );
            fleetdp_ingest::frame(1, None, &body)
        })
        .collect();
    let avro_decoder = decoder()
        .with_mapping(Mapping {
            device_id: Path::parse("vin").unwrap(),
            event_time: Path::parse("ts").unwrap(),
            unit: TimeUnit::Milliseconds,
            streams: vec![
                ("temp".into(), Path::parse("cabin.temp_c").unwrap()),
                ("battery".into(), Path::parse("battery_v").unwrap()),
            ],
            labels: vec![],
        })
        .with_avro(
            fleetdp_ingest::AvroSchema::new(fleetdp_ingest::EXAMPLE_AVRO_SCHEMA, Some(1)).unwrap(),
        )
        .with_framing(fleetdp_ingest::Framing::Confluent);
    // OpenTelemetry: requests as an SDK encodes them, one device's gauge
    // point per resource; one device a request, and four (a Collector's
    // batch).
    let otlp = |per: usize| -> Vec<Vec<u8>> {
        (0..MESSAGES / per)
            .map(|i| {
                let devices: Vec<(String, Vec<(&str, f64)>)> = (0..per)
                    .map(|j| {
                        let v = 20.0 + (j % 100) as f64 / 10.0;
                        (
                            format!("WVW{:08}", i * per + j),
                            vec![("cabin.temperature", v)],
                        )
                    })
                    .collect();
                fleetdp_ingest::example_otlp(&devices, 1_795_541_400_000 + i as i64)
            })
            .collect()
    };
    let (otlp_one, otlp_four) = (otlp(1), otlp(4));
    let otlp_decoder = Decoder::new(
        STREAMS.map(String::from),
        Format::OtlpProto,
        Limits::default(),
    )
    .with_otlp(fleetdp_ingest::OtlpMapping {
        device_attribute: "device.id".into(),
        metrics: vec![("cabin.temperature".into(), "temp".into())],
        labels: vec![],
    });
    let base = rate(
        &decoder(),
        &proto,
        "application/vnd.fleetdp.reading+protobuf",
    );
    let rows = [
        ("protobuf DeviceReading (baseline)", base),
        (
            "Schema Registry framed protobuf",
            rate(
                &decoder().with_framing(fleetdp_ingest::Framing::Confluent),
                &framed,
                "application/vnd.fleetdp.reading+protobuf",
            ),
        ),
        (
            "own Protobuf message, descriptor, framed",
            rate(&described_decoder, &described, "application/x-protobuf"),
        ),
        (
            "own Avro record, schema file, framed",
            rate(&avro_decoder, &avro, "application/avro"),
        ),
        (
            "OTLP protobuf, 1 device/request",
            rate(&otlp_decoder, &otlp_one, "application/x-protobuf"),
        ),
        (
            "OTLP protobuf, 4 devices/request",
            rate(&otlp_decoder, &otlp_four, "application/x-protobuf"),
        ),
        (
            "FleetDP JSON reading",
            rate(&decoder(), &json, "application/json"),
        ),
        (
            "mapped JSON, 5 metrics/doc, epoch ms",
            rate(
                &mapped(TimeUnit::Milliseconds),
                &docs_ms,
                "application/json",
            ),
        ),
        (
            "mapped JSON, 5 metrics/doc, RFC 3339",
            rate(&mapped(TimeUnit::Rfc3339), &docs_rfc, "application/json"),
        ),
    ];
    println!("decode throughput, one core, best of {ROUNDS} rounds of {MESSAGES} readings");
    for (name, r) in rows {
        println!(
            "  {name:<40} {:>12.0} readings/s  {:>5.2}× baseline",
            r,
            r / base
        );
    }
}
