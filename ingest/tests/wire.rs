//! FleetDP's own decoding of `DeviceReading` / `ReadingBatch` (labels into
//! one buffer) against prost's generated types, message by message: wire
//! bytes built at random — fields in any order and repeated, label entries
//! with keys and values missing, repeated, swapped or of a wrong wire type,
//! duplicate label names, unknown fields inside and around them, bad UTF-8,
//! a label field of a wrong wire type — then sometimes damaged (a byte set,
//! cut short, a byte appended). Whenever prost refuses a message the
//! decoder refuses it as undecodable; whenever prost accepts it, the
//! decoder's verdict and readings are those of prost's message: device,
//! stream, value, event time and the labels map. CI runs 2·10⁴ cases;
//! `PROPTEST_CASES` for more.

use fleetdp_ingest::{Decoder, Format, Labels, Limits, Reason};
use proptest::prelude::*;
use prost::Message;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn key(tag: u32, wire: u8, out: &mut Vec<u8>) {
    prost::encoding::encode_varint(u64::from(tag << 3 | u32::from(wire)), out);
}

fn delimited(tag: u32, body: &[u8], out: &mut Vec<u8>) {
    key(tag, 2, out);
    prost::encoding::encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A short text: mostly names that collide, sometimes empty, non-ASCII or
/// not UTF-8 at all.
fn text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => prop::sample::select(vec!["model", "region", "firmware", "4.2", "eu"])
            .prop_map(|s| s.as_bytes().to_vec()),
        1 => Just(Vec::new()),
        1 => Just("réglage".as_bytes().to_vec()),
        1 => Just(vec![0xff, b'a']),
        1 => prop::collection::vec(any::<u8>(), 0..6),
    ]
}

/// An unknown field of any wire type (groups included).
fn unknown(tag: u32) -> impl Strategy<Value = Vec<u8>> {
    (0u8..6, any::<u64>()).prop_map(move |(w, v)| {
        let mut out = Vec::new();
        match w {
            0 => {
                key(tag, 0, &mut out);
                prost::encoding::encode_varint(v, &mut out);
            }
            1 => {
                key(tag, 1, &mut out);
                out.extend_from_slice(&v.to_le_bytes());
            }
            2 => delimited(tag, &v.to_le_bytes()[..(v % 9) as usize], &mut out),
            3 => {
                key(tag, 3, &mut out);
                key(tag, 4, &mut out);
            }
            4 => {
                key(tag, 5, &mut out);
                out.extend_from_slice(&v.to_le_bytes()[..4]);
            }
            _ => key(tag, 4, &mut out), // a stray end of group
        }
        out
    })
}

/// One field of a label entry: a key, a value (either possibly with the
/// wrong wire type), or an unknown field.
fn entry_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (1u32..=2, text()).prop_map(|(tag, t)| {
            let mut out = Vec::new();
            delimited(tag, &t, &mut out);
            out
        }),
        1 => (1u32..=2, any::<u8>()).prop_map(|(tag, v)| {
            let mut out = Vec::new();
            key(tag, 0, &mut out);
            out.push(v & 0x7f);
            out
        }),
        1 => unknown(3),
    ]
}

/// One field of a reading.
fn reading_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => prop::sample::select(vec!["dev-1", "dev-2", ""]).prop_map(|d| {
            let mut out = Vec::new();
            delimited(1, d.as_bytes(), &mut out);
            out
        }),
        2 => prop::sample::select(vec!["temp", "speed", "other"]).prop_map(|s| {
            let mut out = Vec::new();
            delimited(2, s.as_bytes(), &mut out);
            out
        }),
        2 => prop_oneof![Just(21.5f64), Just(f64::NAN), any::<f64>()].prop_map(|v| {
            let mut out = Vec::new();
            key(3, 1, &mut out);
            out.extend_from_slice(&v.to_le_bytes());
            out
        }),
        2 => any::<i64>().prop_map(|t| {
            let mut out = Vec::new();
            key(4, 0, &mut out);
            prost::encoding::encode_varint(t as u64, &mut out);
            out
        }),
        // A well-formed label of one of two names: names repeat.
        4 => (
            prop::sample::select(vec!["model", "region"]),
            prop::sample::select(vec!["a", "b", "c"]),
        )
            .prop_map(|(k, v)| {
                let mut body = Vec::new();
                delimited(1, k.as_bytes(), &mut body);
                delimited(2, v.as_bytes(), &mut body);
                let mut out = Vec::new();
                delimited(5, &body, &mut out);
                out
            }),
        5 => prop::collection::vec(entry_field(), 0..4).prop_map(|fs| {
            let mut out = Vec::new();
            delimited(5, &fs.concat(), &mut out);
            out
        }),
        // A label field whose key claims another wire type: prost reads a
        // map entry whatever the wire type says.
        1 => prop::collection::vec(entry_field(), 0..3).prop_map(|fs| {
            let body = fs.concat();
            let mut out = Vec::new();
            key(5, 0, &mut out);
            prost::encoding::encode_varint(body.len() as u64, &mut out);
            out.extend_from_slice(&body);
            out
        }),
        1 => (1u32..=4).prop_flat_map(unknown),
        1 => (6u32..40).prop_flat_map(unknown),
    ]
}

fn reading_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(reading_field(), 0..10).prop_map(|fs| fs.concat())
}

/// Damage: none (mostly), a byte set, cut short, a byte appended.
fn damage(mut bytes: Vec<u8>, how: u8, at: usize, byte: u8) -> Vec<u8> {
    let n = bytes.len();
    match how {
        0 if n > 0 => bytes[at % n] = byte,
        1 if n > 0 => bytes.truncate(at % n),
        2 => bytes.push(byte),
        _ => {}
    }
    bytes
}

fn decoder() -> Decoder {
    Decoder::new(
        ["temp".to_string(), "speed".to_string()],
        Format::Protobuf,
        Limits::default(),
    )
}

/// The decoder's readings as (device, stream, value bits, time, labels).
type Seen = Vec<(String, String, u64, i64, Labels)>;

fn expected(r: &proto::DeviceReading) -> (String, String, Option<f64>, Option<i64>, Labels) {
    (
        r.device_id.clone(),
        r.stream.clone(),
        r.value,
        r.event_time_ms,
        r.labels.iter().collect(),
    )
}

/// Compare with prost: refused alike; accepted, the same readings.
fn agree(payload: &[u8], batch: bool) -> Result<(), TestCaseError> {
    let ct = if batch {
        "application/vnd.fleetdp.batch+protobuf"
    } else {
        "application/vnd.fleetdp.reading+protobuf"
    };
    let got = decoder().decode(payload, Some(ct));
    // Visiting gives decode's verdict and readings, whichever way a
    // reading is read (in place or decoded).
    let mut visited = Vec::new();
    let count = decoder().visit(payload, Some(ct), |i, r| {
        assert_eq!(i, visited.len());
        visited.push(r.into_owned());
        Ok(())
    });
    match &got {
        Ok(rs) => {
            prop_assert_eq!(count, Ok(rs.len()));
            prop_assert_eq!(&visited, rs);
        }
        Err(e) => {
            prop_assert_eq!(count.map_err(|e| e.reason), Err(e.reason));
            prop_assert!(visited.is_empty());
        }
    }
    let prost: Result<Vec<proto::DeviceReading>, _> = if batch {
        proto::ReadingBatch::decode(payload).map(|b| b.readings)
    } else {
        proto::DeviceReading::decode(payload).map(|r| vec![r])
    };
    let Ok(want) = prost else {
        // A batch's readings are counted from its framing first: one that
        // claims none, or too many, is refused for that before decoding.
        let reason = got.map_err(|e| e.reason).err();
        prop_assert!(
            reason == Some(Reason::Undecodable) || (batch && reason == Some(Reason::BatchSize)),
            "{:?}",
            reason
        );
        return Ok(());
    };
    // What prost decoded, re-encoded canonically, must get the same
    // verdict: a refusal for the readings' contents, not their bytes.
    let canonical = if batch {
        proto::ReadingBatch {
            readings: want.clone(),
        }
        .encode_to_vec()
    } else {
        want[0].encode_to_vec()
    };
    let again = decoder().decode(&canonical, Some(ct));
    let seen = |r: Result<Vec<fleetdp_ingest::Reading>, fleetdp_ingest::Rejection>| {
        r.map(|rs| {
            rs.into_iter()
                .map(|r| {
                    (
                        r.device_id,
                        r.stream,
                        r.value.to_bits(),
                        r.event_time_ms,
                        r.labels,
                    )
                })
                .collect::<Seen>()
        })
        .map_err(|e| e.reason)
    };
    let (got, again) = (seen(got), seen(again));
    prop_assert_eq!(&got, &again);
    if let Ok(rs) = got {
        prop_assert_eq!(rs.len(), want.len());
        for (r, w) in rs.iter().zip(&want) {
            let (d, s, v, t, l) = expected(w);
            prop_assert_eq!(&r.0, &d);
            prop_assert_eq!(&r.1, &s);
            prop_assert_eq!(Some(r.2), v.map(f64::to_bits));
            prop_assert_eq!(Some(r.3), t);
            prop_assert_eq!(&r.4, &l);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn readings_decode_as_prost_decodes_them(
        r in reading_bytes(), how in 0u8..6, at in any::<usize>(), byte in any::<u8>(),
    ) {
        agree(&damage(r, how, at, byte), false)?;
    }

    #[test]
    fn batches_decode_as_prost_decodes_them(
        rs in prop::collection::vec(reading_bytes(), 0..4),
        junk in prop::option::of((6u32..9).prop_flat_map(unknown)),
        how in 0u8..6, at in any::<usize>(), byte in any::<u8>(),
    ) {
        let mut payload = Vec::new();
        for r in &rs {
            delimited(1, r, &mut payload);
        }
        payload.extend(junk.unwrap_or_default());
        agree(&damage(payload, how, at, byte), true)?;
    }
}

/// A reading as encoders write it, with or without labels, is read in
/// place (its device id and stream are slices of the payload); one with a
/// label entry in another form (its value before its key) is decoded.
/// Each visits as it decodes.
#[test]
fn a_reading_as_encoders_write_it_is_read_in_place() {
    let r = proto::DeviceReading {
        device_id: "dev-1".into(),
        stream: "speed".into(),
        value: Some(1.5),
        event_time_ms: Some(7),
        labels: [("model".into(), "a".into()), ("region".into(), "eu".into())].into(),
    };
    let plain = proto::DeviceReading {
        labels: Default::default(),
        ..r.clone()
    };
    // The same labels, one entry written value first.
    let mut swapped = plain.encode_to_vec();
    let mut body = Vec::new();
    delimited(2, b"a", &mut body);
    delimited(1, b"model", &mut body);
    delimited(5, &body, &mut swapped);
    let mut entry = Vec::new();
    delimited(1, b"region", &mut entry);
    delimited(2, b"eu", &mut entry);
    delimited(5, &entry, &mut swapped);
    let cases = [
        (plain.encode_to_vec(), true),
        (r.encode_to_vec(), true),
        (swapped, false),
    ];
    for (payload, in_place) in cases {
        let within = payload.as_ptr_range();
        let n = decoder()
            .visit(&payload, None, |i, got| {
                assert_eq!(i, 0);
                assert_eq!(within.contains(&got.device_id.as_ptr()), in_place);
                assert_eq!(within.contains(&got.stream.as_ptr()), in_place);
                assert_eq!(
                    got.into_owned(),
                    decoder().decode(&payload, None).unwrap()[0]
                );
                assert_eq!((got.device_id, got.stream_index), ("dev-1", 1));
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 1);
    }
    let labelled = decoder().decode(&r.encode_to_vec(), None).unwrap();
    let labels: Vec<_> = labelled[0].labels.iter().collect();
    assert_eq!(labels, [("model", "a"), ("region", "eu")]);
}

/// The visitor's own refusal stops the visit and is the verdict.
#[test]
fn a_visitor_refusal_is_returned() {
    let batch = proto::ReadingBatch {
        readings: (0..3)
            .map(|i| proto::DeviceReading {
                device_id: format!("d{i}"),
                stream: "temp".into(),
                value: Some(1.0),
                event_time_ms: Some(1),
                labels: Default::default(),
            })
            .collect(),
    }
    .encode_to_vec();
    let mut seen = 0;
    let r = decoder().visit(
        &batch,
        Some("application/vnd.fleetdp.batch+protobuf"),
        |i, _| {
            seen += 1;
            if i == 1 {
                return Err(fleetdp_ingest::Rejection::new(Reason::Future, "reading 1"));
            }
            Ok(())
        },
    );
    assert_eq!(r.map_err(|e| e.reason), Err(Reason::Future));
    assert_eq!(seen, 2);
}

/// The generator reaches what it is for: accepted messages with several
/// labels and duplicate names, and refusals of each kind.
#[test]
fn the_cases_cover_labels_and_refusals() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut labelled, mut duplicated, mut refused) = (0, 0, 0);
    for _ in 0..5_000 {
        let bytes = reading_bytes().new_tree(&mut runner).unwrap().current();
        let Ok(r) = proto::DeviceReading::decode(bytes.as_slice()) else {
            refused += 1;
            continue;
        };
        labelled += usize::from(r.labels.len() >= 2);
        // A name given twice, with another value the second time.
        let model = |v: &str| [&b"\x0a\x05model\x12\x01"[..], v.as_bytes()].concat();
        let has = |v: &str| bytes.windows(10).any(|w| w == model(v).as_slice());
        duplicated += usize::from(["a", "b", "c"].iter().filter(|v| has(v)).count() >= 2);
    }
    assert!(
        labelled > 300 && duplicated > 50 && refused > 500,
        "{labelled} {duplicated} {refused}"
    );
}
