//! The walk against the full decoder (prost's decoding, then
//! `OtlpMapping::readings`), request by request: requests built at random
//! from OTLP's parts — several resources, scopes and metrics; gauges, delta
//! and cumulative sums, histograms and metrics without data; points with
//! and without times and values, double and int; attributes of every
//! scalar kind, missing, repeated, not UTF-8, on the point or its resource
//! — encoded as an SDK encodes them, then sometimes damaged (a byte set, a
//! field spliced in or repeated, cut short). Whenever the walk answers, its
//! readings are the full decoder's; on every undamaged request the full
//! decoder accepts, the walk answers. CI runs 5,000 cases; `PROPTEST_CASES`
//! for more.

use super::readings;
use crate::otlp::*;
use crate::{RawReading, Rejection};
use proptest::prelude::*;
use prost::bytes::Bytes;
use prost::Message as _;

fn mapping() -> OtlpMapping {
    OtlpMapping {
        device_attribute: "device.id".into(),
        metrics: vec![
            ("temp".into(), "cabin".into()),
            ("rpm".into(), "engine".into()),
        ],
        labels: vec![
            ("zone".into(), "zone".into()),
            ("fw".into(), "firmware".into()),
        ],
    }
}

fn full(payload: &[u8]) -> Result<Vec<RawReading>, Option<Rejection>> {
    let req = ExportRequest::decode(Bytes::copy_from_slice(payload)).map_err(|_| None)?;
    mapping().readings(&req).map_err(Some)
}

fn scalar() -> impl Strategy<Value = Option<Scalar>> {
    let text = prop_oneof![
        Just(b"d1".to_vec()),
        Just(b"d2".to_vec()),
        Just(b"rear".to_vec()),
        Just(vec![0xff, 0xfe]),
    ];
    prop_oneof![
        3 => text.prop_map(|t| Some(Scalar::String(t.into()))),
        1 => any::<bool>().prop_map(|b| Some(Scalar::Bool(b))),
        1 => (-5i64..5).prop_map(|i| Some(Scalar::Int(i))),
        1 => prop_oneof![Just(1.5), Just(-0.0), Just(f64::NAN)].prop_map(|d| Some(Scalar::Double(d))),
        1 => Just(None),
    ]
}

fn attrs() -> impl Strategy<Value = Vec<KeyValue>> {
    let key = prop_oneof![
        Just("device.id"),
        Just("zone"),
        Just("firmware"),
        Just("other"),
    ];
    let kv = (key, scalar(), any::<bool>()).prop_map(|(k, v, has)| KeyValue {
        key: Bytes::copy_from_slice(k.as_bytes()),
        value: has.then_some(AnyValue { value: v }),
    });
    prop::collection::vec(kv, 0..4)
}

fn point() -> impl Strategy<Value = NumberDataPoint> {
    let value = prop_oneof![
        (-100.0f64..100.0).prop_map(|d| Some(Number::AsDouble(d))),
        (-100i64..100).prop_map(|i| Some(Number::AsInt(i))),
        Just(None),
    ];
    let time = prop_oneof![Just(0u64), 1u64..u64::MAX];
    (attrs(), time, value).prop_map(|(attributes, time_unix_nano, value)| NumberDataPoint {
        attributes,
        time_unix_nano,
        value,
    })
}

fn metric() -> impl Strategy<Value = Metric> {
    let name = prop_oneof![Just("temp"), Just("rpm"), Just("other")];
    let points = || prop::collection::vec(point(), 0..3);
    let data = prop_oneof![
        4 => points().prop_map(|data_points| Some(Data::Gauge(Points { data_points }))),
        2 => (points(), 0i32..3).prop_map(|(data_points, t)| Some(Data::Sum(Sum {
            data_points,
            aggregation_temporality: t,
        }))),
        1 => Just(Some(Data::Histogram(Unread {}))),
        1 => Just(None),
    ];
    (name, data).prop_map(|(n, data)| Metric {
        name: Bytes::copy_from_slice(n.as_bytes()),
        data,
    })
}

fn request() -> impl Strategy<Value = ExportRequest> {
    let scope = prop::collection::vec(metric(), 0..3).prop_map(|metrics| ScopeMetrics { metrics });
    let rm = (attrs(), any::<bool>(), prop::collection::vec(scope, 0..2)).prop_map(
        |(attributes, has, scope_metrics)| ResourceMetrics {
            resource: has.then_some(Resource { attributes }),
            scope_metrics,
        },
    );
    prop::collection::vec(rm, 0..4).prop_map(|resource_metrics| ExportRequest { resource_metrics })
}

/// A damage: a byte set, a slice of the request repeated in place, or
/// the request cut short.
#[derive(Debug, Clone)]
enum Damage {
    None,
    Set(usize, u8),
    Repeat(usize, usize),
    Cut(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => Just(Damage::None),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Set(i, b)),
        1 => (any::<usize>(), 1usize..40).prop_map(|(i, n)| Damage::Repeat(i, n)),
        1 => any::<usize>().prop_map(Damage::Cut),
    ]
}

fn apply(mut b: Vec<u8>, d: &Damage) -> Vec<u8> {
    if b.is_empty() {
        return b;
    }
    match *d {
        Damage::None => {}
        Damage::Set(i, v) => {
            let i = i % b.len();
            b[i] = v;
        }
        Damage::Repeat(i, n) => {
            let i = i % b.len();
            let piece = b[i..(i + n).min(b.len())].to_vec();
            b.splice(i..i, piece);
        }
        Damage::Cut(i) => b.truncate(i % b.len()),
    }
    b
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn the_walk_reads_what_the_full_decoder_reads(req in request(), d in damage()) {
        let bytes = apply(req.encode_to_vec(), &d);
        let walked = readings(&bytes, &mapping());
        let decoded = full(&bytes);
        if let Some(w) = &walked {
            // Debug form: a NaN value is equal to itself there.
            let expected = decoded.as_ref().map_err(|e| format!("{e:?}"));
            prop_assert_eq!(format!("{:?}", Ok::<_, String>(w)), format!("{expected:?}"));
        }
        if matches!(d, Damage::None) && decoded.is_ok() {
            prop_assert!(walked.is_some(), "an SDK-shaped request the full decoder reads");
        }
    }

    /// The decoder hands the same readings to a visitor (each borrowed
    /// from the walk, or from the full decoder's) as it decodes, or the
    /// same refusal.
    #[test]
    fn visiting_a_request_gives_what_decoding_gives(req in request(), d in damage()) {
        let bytes = apply(req.encode_to_vec(), &d);
        let streams = ["cabin".to_string(), "engine".to_string()];
        let decoder = crate::Decoder::new(streams, crate::Format::OtlpProto, crate::Limits::default())
            .with_otlp(mapping());
        let decoded = decoder.decode(&bytes, None);
        let mut seen = Vec::new();
        let n = decoder.visit(&bytes, None, |_, r| {
            seen.push(r.into_owned());
            Ok(())
        });
        match decoded {
            Ok(rs) => {
                prop_assert_eq!(n, Ok(rs.len()));
                prop_assert_eq!(format!("{seen:?}"), format!("{rs:?}"));
            }
            Err(e) => {
                prop_assert_eq!(n, Err(e));
                prop_assert!(seen.is_empty());
            }
        }
    }
}

/// Fields in an order encoders do not use, and fields the full decoder
/// skips, are read alike.
#[test]
fn field_order_and_skipped_fields_do_not_change_the_readings() {
    let key = |n: u32, w: u32, out: &mut Vec<u8>| {
        prost::encoding::encode_varint(u64::from(n << 3 | w), out)
    };
    let delimited = |n: u32, body: &[u8], out: &mut Vec<u8>| {
        key(n, 2, out);
        prost::encoding::encode_varint(body.len() as u64, out);
        out.extend_from_slice(body);
    };
    let kv = |k: &str, v: &str| {
        let (mut any, mut out) = (Vec::new(), Vec::new());
        delimited(1, v.as_bytes(), &mut any);
        delimited(2, &any, &mut out); // value before key
        delimited(1, k.as_bytes(), &mut out);
        out
    };
    let mut p = Vec::new();
    key(4, 1, &mut p);
    p.extend_from_slice(&21.5f64.to_le_bytes());
    key(8, 0, &mut p); // flags, skipped
    p.push(1);
    delimited(7, &kv("zone", "rear"), &mut p);
    key(3, 1, &mut p);
    p.extend_from_slice(&(5_000_000_123u64).to_le_bytes());
    let (mut gauge, mut m) = (Vec::new(), Vec::new());
    delimited(1, &p, &mut gauge);
    delimited(5, &gauge, &mut m);
    delimited(3, b"Cel", &mut m); // unit, skipped
    delimited(1, b"temp", &mut m); // the name last
    let (mut sm, mut res, mut rm, mut req) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    delimited(2, &m, &mut sm);
    delimited(1, &kv("device.id", "d9"), &mut res);
    delimited(2, &sm, &mut rm);
    delimited(1, &res, &mut rm); // the resource after its scopes
    delimited(1, &rm, &mut req);
    let walked = readings(&req, &mapping()).expect("the walk answers");
    assert_eq!(format!("{walked:?}"), format!("{:?}", full(&req).unwrap()));
    assert_eq!(walked.len(), 1);
    let r = &walked[0];
    assert_eq!(r.device_id.as_deref(), Some("d9"));
    assert_eq!((r.value, r.event_time_ms), (Some(21.5), Some(5_000)));
    assert_eq!(r.labels.get("zone"), Some("rear"));
}

/// A request the full decoder refuses is never read by the walk: a mapped
/// cumulative sum, a mapped histogram, no device, a device id not UTF-8.
#[test]
fn refusals_are_left_to_the_full_decoder() {
    let point = |attributes| NumberDataPoint {
        attributes,
        time_unix_nano: 1,
        value: Some(Number::AsDouble(1.0)),
    };
    let device = |v: &[u8]| KeyValue {
        key: Bytes::from_static(b"device.id"),
        value: Some(AnyValue {
            value: Some(Scalar::String(Bytes::copy_from_slice(v))),
        }),
    };
    let req = |data| {
        ExportRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: None,
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: Bytes::from_static(b"temp"),
                        data: Some(data),
                    }],
                }],
            }],
        }
        .encode_to_vec()
    };
    let cumulative = Data::Sum(Sum {
        data_points: vec![point(vec![device(b"d1")])],
        aggregation_temporality: 2,
    });
    let gauge = |attributes| {
        Data::Gauge(Points {
            data_points: vec![point(attributes)],
        })
    };
    for bytes in [
        req(cumulative),
        req(Data::Histogram(Unread {})),
        req(gauge(vec![])),
        req(gauge(vec![device(&[0xff])])),
    ] {
        assert!(full(&bytes).is_err());
        assert!(readings(&bytes, &mapping()).is_none());
    }
    assert!(readings(&req(gauge(vec![device(b"d1")])), &mapping()).is_some());
}

/// Past a bound, or with more dimensions than a configuration allows, the
/// walk leaves the request to the full decoder (which bounds it first).
#[test]
fn bounds_and_wide_mappings_are_left_to_the_full_decoder() {
    use crate::otlp_scan::MAX_OTLP_ATTRIBUTES;
    let kv = |k: String| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Scalar::String(Bytes::from_static(b"d1"))),
        }),
    };
    let req = |attributes: Vec<KeyValue>| {
        ExportRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource { attributes }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: Bytes::from_static(b"temp"),
                        data: Some(Data::Gauge(Points {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![],
                                time_unix_nano: 1,
                                value: Some(Number::AsInt(3)),
                            }],
                        })),
                    }],
                }],
            }],
        }
        .encode_to_vec()
    };
    let at_bound: Vec<_> = (0..MAX_OTLP_ATTRIBUTES)
        .map(|i| {
            kv(if i == 0 {
                "device.id".into()
            } else {
                format!("a{i}")
            })
        })
        .collect();
    assert_eq!(
        readings(&req(at_bound.clone()), &mapping()).map(|r| r.len()),
        Some(1)
    );
    let mut over = at_bound;
    over.push(kv("one.more".into()));
    assert!(readings(&req(over), &mapping()).is_none());
    let mut wide = mapping();
    wide.labels = (0..=crate::MAX_LABELS)
        .map(|i| (format!("l{i}"), format!("a{i}")))
        .collect();
    let bytes = req(vec![kv("device.id".into())]);
    assert!(readings(&bytes, &wide).is_none());
    assert!(wide
        .readings(&ExportRequest::decode(&bytes[..]).unwrap())
        .is_ok());
}
