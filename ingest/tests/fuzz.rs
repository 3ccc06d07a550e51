//! Bad input at volume: the decoder never panics, whatever the bytes and the
//! content type, and every message is either accepted with valid readings or
//! rejected with a reason. CI runs 10⁵ cases per property; for a long run:
//! `PROPTEST_CASES=10000000 cargo test --release -p fleetdp-ingest --test fuzz`.

use fleetdp_ingest::{
    example_avro, example_descriptor_set, example_message, frame, AvroSchema, Decoder, Described,
    Format, Framing, Limits, Mapping, Path, TimeUnit, EXAMPLE_AVRO_SCHEMA,
};
use proptest::prelude::*;
use prost::Message;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn decoder(format: Format) -> Decoder {
    Decoder::new(
        ["temp".to_string(), "speed".to_string()],
        format,
        Limits {
            max_message_bytes: 4096,
            max_readings_per_message: 50,
            ..Limits::default()
        },
    )
}

/// `[input]` for documents `{"vin", "ts" (ms), "m": {"temp"}, "speed"}`.
fn mapped() -> Decoder {
    decoder(Format::Json).with_mapping(Mapping {
        device_id: Path::parse("vin").unwrap(),
        event_time: Path::parse("/ts").unwrap(),
        unit: TimeUnit::Milliseconds,
        streams: vec![
            ("temp".into(), Path::parse("m.temp").unwrap()),
            ("speed".into(), Path::parse("/speed").unwrap()),
        ],
        labels: vec![],
    })
}

/// The fleet's own Protobuf message (`acme.v1.Telemetry`) through its
/// descriptor set: temp = `cabin.temp`, speed = `tyres.0`.
fn described() -> Decoder {
    static D: std::sync::OnceLock<Decoder> = std::sync::OnceLock::new();
    D.get_or_init(described_decoder).clone()
}

fn described_decoder() -> Decoder {
    decoder(Format::Protobuf)
        .with_mapping(Mapping {
            device_id: Path::parse("vin").unwrap(),
            event_time: Path::parse("ts").unwrap(),
            unit: TimeUnit::Milliseconds,
            streams: vec![
                ("temp".into(), Path::parse("cabin.temp").unwrap()),
                ("speed".into(), Path::parse("tyres.0").unwrap()),
            ],
            labels: vec![],
        })
        .with_described(Described::new(&example_descriptor_set(), "acme.v1.Telemetry").unwrap())
}

/// The fleet's own Avro record (`acme.v1.Telemetry`, the README's): temp =
/// `cabin.temp_c`, speed = `battery_v`.
fn avro() -> Decoder {
    static D: std::sync::OnceLock<Decoder> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        decoder(Format::Avro)
            .with_mapping(Mapping {
                device_id: Path::parse("vin").unwrap(),
                event_time: Path::parse("ts").unwrap(),
                unit: TimeUnit::Milliseconds,
                streams: vec![
                    ("temp".into(), Path::parse("cabin.temp_c").unwrap()),
                    ("speed".into(), Path::parse("battery_v").unwrap()),
                ],
                labels: vec![],
            })
            .with_avro(AvroSchema::new(EXAMPLE_AVRO_SCHEMA, Some(7)).unwrap())
    })
    .clone()
}

/// A field of a document: absent, or one of several kinds of value.
#[derive(Debug, Clone)]
enum Field {
    Absent,
    Null,
    Int(i64),
    Num(f64),
    Text(String),
    List,
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::Absent),
        Just(Field::Null),
        any::<i64>().prop_map(Field::Int),
        (-1e6f64..1e6).prop_map(Field::Num),
        prop_oneof![
            Just("NaN".to_string()),
            Just(String::new()),
            "[a-z0-9]{1,8}",
            ".{250,300}"
        ]
        .prop_map(Field::Text),
        Just(Field::List),
    ]
}

impl Field {
    fn json(&self) -> Option<serde_json::Value> {
        Some(match self {
            Field::Absent => return None,
            Field::Null => serde_json::Value::Null,
            Field::Int(i) => serde_json::json!(i),
            Field::Num(x) => serde_json::json!(x),
            Field::Text(t) => serde_json::json!(t),
            Field::List => serde_json::json!([1]),
        })
    }
    fn present(&self) -> bool {
        !matches!(self, Field::Absent | Field::Null)
    }
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("application/json".to_string())),
        Just(Some("application/vnd.fleetdp.reading+protobuf".to_string())),
        Just(Some("application/vnd.fleetdp.batch+protobuf".to_string())),
        "[ -~]{0,40}".prop_map(Some),
    ]
}

fn check(d: &Decoder, payload: &[u8], ct: Option<&str>) {
    match d.decode(payload, ct) {
        Ok(readings) => {
            assert!(!readings.is_empty() && readings.len() <= 50);
            for r in readings {
                assert!(r.value.is_finite());
                assert!(!r.device_id.is_empty());
                assert!(r.stream == "temp" || r.stream == "speed");
            }
        }
        Err(e) => assert!(!e.detail.is_empty()),
    }
}

/// A reading with each field possibly missing, odd or hostile.
fn reading() -> impl Strategy<Value = proto::DeviceReading> {
    (
        prop_oneof![Just(String::new()), "[a-z0-9-]{1,12}", ".{0,300}"],
        prop_oneof![
            Just("temp".to_string()),
            Just("speed".to_string()),
            ".{0,10}"
        ],
        prop_oneof![
            Just(None),
            Just(Some(f64::NAN)),
            Just(Some(f64::INFINITY)),
            Just(Some(f64::NEG_INFINITY)),
            any::<f64>().prop_map(Some)
        ],
        prop::option::of(any::<i64>()),
    )
        .prop_map(
            |(device_id, stream, value, event_time_ms)| proto::DeviceReading {
                device_id,
                stream,
                value,
                event_time_ms,
                labels: Default::default(),
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(payload in prop::collection::vec(any::<u8>(), 0..600), ct in content_type()) {
        for f in [Format::Protobuf, Format::ProtobufBatch, Format::Json] {
            check(&decoder(f), &payload, ct.as_deref());
        }
        check(&mapped(), &payload, ct.as_deref());
        check(&described(), &payload, None);
        check(&described().with_framing(Framing::Confluent), &payload, None);
        check(&avro(), &payload, None);
        check(&avro().with_framing(Framing::Confluent), &payload, None);
    }

    /// The fleet's own Avro records: accepted exactly when the device id is
    /// non-empty and at most 256 bytes and the temperature, when present,
    /// is finite; then a battery reading and the temperature when present.
    /// Every strict prefix of a message is refused (apache-avro reads a
    /// string cut short as null: the schema check catches it), and framed,
    /// only the pinned id is read.
    #[test]
    fn avro_records_are_accepted_exactly_when_valid(
        vin in prop_oneof![Just(String::new()), "[a-z0-9-]{1,12}", ".{257,300}"],
        ts in 1i64..4_000_000_000_000,
        temp in prop_oneof![Just(None), Just(Some(f64::NAN)), Just(Some(f64::INFINITY)), (-100.0f64..100.0).prop_map(Some)],
        battery in -1e6f32..1e6,
        cut in any::<prop::sample::Index>(),
        id in prop_oneof![Just(7u32), any::<u32>()],
    ) {
        let payload = example_avro(&vin, ts, temp, battery);
        let valid = !vin.is_empty() && vin.len() <= 256 && temp.is_none_or(f64::is_finite);
        let got = avro().decode(&payload, None);
        prop_assert_eq!(got.is_ok(), valid, "{:?}", got.as_ref().err());
        if let Ok(rs) = got {
            prop_assert_eq!(rs.len(), 1 + usize::from(temp.is_some()));
        }
        let cut = cut.index(payload.len());
        prop_assert!(avro().decode(&payload[..cut], None).is_err(), "a prefix of {} bytes", cut);
        let framed = frame(id, None, &payload);
        let got = avro().with_framing(Framing::Confluent).decode(&framed, None);
        prop_assert_eq!(got.is_ok(), valid && id == 7, "{:?}", got.as_ref().err());
    }

    /// The fleet's own Protobuf messages: accepted exactly when the device
    /// id is present (proto3: non-empty) and at most 256 bytes, the time is
    /// present (non-zero) and every mapped value present is finite; then
    /// the temperature (when set and non-zero) and the tyre. Damaged bytes
    /// never panic.
    #[test]
    fn described_messages_are_accepted_exactly_when_valid(
        vin in prop_oneof![Just(String::new()), "[a-z0-9-]{1,12}", ".{257,300}"],
        ts in prop_oneof![Just(0i64), 1i64..4_000_000_000_000],
        temp in prop_oneof![Just(None), Just(Some(f64::NAN)), Just(Some(f64::INFINITY)), (-100.0f64..100.0).prop_map(Some)],
        cut in any::<prop::sample::Index>(),
    ) {
        let payload = example_message(&vin, ts, temp, "4.2");
        let valid = !vin.is_empty() && vin.len() <= 256 && ts != 0 && temp.is_none_or(f64::is_finite);
        let got = described().decode(&payload, None);
        prop_assert_eq!(got.is_ok(), valid, "{:?}", got.as_ref().err());
        if let Ok(rs) = got {
            let with_temp = temp.is_some_and(|t| t != 0.0);
            prop_assert_eq!(rs.len(), 1 + usize::from(with_temp));
        }
        check(&described(), &payload[..cut.index(payload.len() + 1)], None);
    }

    /// Mapped documents: accepted exactly when every document has a device
    /// id (a non-empty string of ≤ 256 bytes, or an integer), an integer
    /// time, at least one mapped metric, and every metric present is a
    /// finite number; then one reading per metric present.
    #[test]
    fn mapped_documents_are_accepted_exactly_when_valid(
        docs in prop::collection::vec((field(), field(), field(), field()), 0..30)
    ) {
        let list: Vec<serde_json::Value> = docs
            .iter()
            .map(|(vin, ts, temp, speed)| {
                let mut d = serde_json::Map::new();
                if let Some(v) = vin.json() { d.insert("vin".into(), v); }
                if let Some(v) = ts.json() { d.insert("ts".into(), v); }
                if let Some(v) = temp.json() { d.insert("m".into(), serde_json::json!({ "temp": v })); }
                if let Some(v) = speed.json() { d.insert("speed".into(), v); }
                d.insert("other".into(), serde_json::json!({"x": [1, 2]}));
                serde_json::Value::Object(d)
            })
            .collect();
        let payload = serde_json::to_vec(&list).unwrap();
        let metric_ok = |f: &Field| matches!(f, Field::Absent | Field::Null | Field::Int(_) | Field::Num(_));
        let readings: usize = docs.iter().map(|(_, _, t, s)| usize::from(t.present()) + usize::from(s.present())).sum();
        let valid = !docs.is_empty()
            && payload.len() <= 4096
            && readings <= 50
            && docs.iter().all(|(vin, ts, temp, speed)| {
                let vin_ok = match vin {
                    Field::Text(t) => !t.is_empty() && t.len() <= 256,
                    Field::Int(_) => true,
                    _ => false,
                };
                vin_ok
                    && matches!(ts, Field::Int(_))
                    && (temp.present() || speed.present())
                    && metric_ok(temp)
                    && metric_ok(speed)
            });
        let got = mapped().decode(&payload, Some("application/json"));
        prop_assert_eq!(got.is_ok(), valid, "{:?}", got.err());
        if let Ok(rs) = got {
            prop_assert_eq!(rs.len(), readings);
        }
    }

    #[test]
    fn structured_messages_are_accepted_exactly_when_valid(batch in prop::collection::vec(reading(), 0..60), as_json in any::<bool>()) {
        let (payload, ct) = if as_json {
            let list: Vec<serde_json::Value> = batch
                .iter()
                .map(|r| serde_json::json!({
                    "device_id": r.device_id,
                    "stream": r.stream,
                    "value": r.value.map(|v| if v.is_finite() { serde_json::json!(v) } else { serde_json::json!("NaN") }),
                    "event_time_ms": r.event_time_ms,
                }))
                .collect();
            (serde_json::to_vec(&serde_json::json!({ "readings": list })).unwrap(), "application/json")
        } else {
            (proto::ReadingBatch { readings: batch.clone() }.encode_to_vec(), "application/vnd.fleetdp.batch+protobuf")
        };
        let valid = !batch.is_empty()
            && batch.len() <= 50
            && payload.len() <= 4096
            && batch.iter().all(|r| {
                !r.device_id.is_empty()
                    && r.device_id.len() <= 256
                    && (r.stream == "temp" || r.stream == "speed")
                    && r.value.is_some_and(f64::is_finite)
                    && r.event_time_ms.is_some()
            });
        let got = decoder(Format::Protobuf).decode(&payload, Some(ct));
        prop_assert_eq!(got.is_ok(), valid, "{:?}", got.err());
        if let Ok(rs) = got {
            prop_assert_eq!(rs.len(), batch.len());
        }
    }

    /// Schema Registry framing: a framed message is accepted exactly when
    /// its frame is right (magic byte 0; protobuf: the batch's index [1])
    /// and its payload is, with the same readings; a damaged, missing or
    /// mis-indexed frame is refused; arbitrary bytes after a frame never
    /// panic.
    #[test]
    fn framed_messages_are_accepted_exactly_when_frame_and_payload_are_valid(
        batch in prop::collection::vec(reading(), 1..20),
        as_json in any::<bool>(),
        id in any::<u32>(),
        damage in 0u8..4,
        noise in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let (payload, ct, index): (Vec<u8>, &str, Option<&[i64]>) = if as_json {
            let list: Vec<serde_json::Value> = batch
                .iter()
                .map(|r| serde_json::json!({
                    "device_id": r.device_id,
                    "stream": r.stream,
                    "value": r.value.filter(|v| v.is_finite()),
                    "event_time_ms": r.event_time_ms,
                }))
                .collect();
            (serde_json::to_vec(&list).unwrap(), "application/json", None)
        } else {
            (proto::ReadingBatch { readings: batch.clone() }.encode_to_vec(), "application/vnd.fleetdp.batch+protobuf", Some(&[1][..]))
        };
        let plain = decoder(Format::Protobuf).decode(&payload, Some(ct));
        let framed = match damage {
            0 => frame(id, index, &payload),
            1 => {
                let mut f = frame(id, index, &payload);
                f[0] = 1 + (id % 255) as u8;
                f
            }
            2 => payload.clone(),
            _ => frame(id, Some(&[3]), &payload),
        };
        let d = decoder(Format::Protobuf).with_framing(Framing::Confluent);
        let got = d.decode(&framed, Some(ct));
        // A JSON frame has no index: "mis-indexed" leaves bytes the JSON
        // parser refuses (a leading varint), so every damage is refused.
        let valid = plain.is_ok() && damage == 0 && framed.len() <= 4096;
        prop_assert_eq!(got.is_ok(), valid, "{:?}", got.err());
        if let (Ok(a), Ok(b)) = (&plain, &got) {
            prop_assert_eq!(a, b);
        }
        check(&d, &frame(id, None, &noise), Some(ct));
        check(&d, &frame(id, Some(&[0]), &noise), None);
    }
}
