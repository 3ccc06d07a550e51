//! Bad input at volume: the decoder never panics, whatever the bytes and the
//! content type, and every message is either accepted with valid readings or
//! rejected with a reason. CI runs 10⁵ cases per property; for a long run:
//! `PROPTEST_CASES=10000000 cargo test --release -p fleetdp-ingest --test fuzz`.

use fleetdp_ingest::{Decoder, Format, Limits};
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
}
