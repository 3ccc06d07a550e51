//! OTLP requests (encoded by these types, which carry OTLP's field
//! numbers) through the decoder: gauges and delta sums become readings,
//! mapped metrics of other kinds and hostile requests are rejected with
//! their reason, and OTLP/JSON reads as the Protobuf form does.

use super::*;
use crate::{Decoder, Format, Limits};
use prost::Message as _;

fn attr(key: &str, v: Scalar) -> KeyValue {
    KeyValue {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn text(key: &str, v: &str) -> KeyValue {
    attr(key, Scalar::String(Bytes::copy_from_slice(v.as_bytes())))
}

fn point(t_ms: u64, v: Number, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: t_ms * 1_000_000 + 123,
        value: Some(v),
    }
}

fn metric(name: &str, data: Data) -> Metric {
    Metric {
        name: Bytes::copy_from_slice(name.as_bytes()),
        data: Some(data),
    }
}

fn resource(device: &str, metrics: Vec<Metric>) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![text("device.id", device), text("firmware", "4.1")],
        }),
        scope_metrics: vec![ScopeMetrics { metrics }],
    }
}

fn decoder(format: Format) -> Decoder {
    Decoder::new(
        ["temp".to_string(), "trips".to_string()],
        format,
        Limits::default(),
    )
    .with_otlp(OtlpMapping {
        device_attribute: "device.id".into(),
        metrics: vec![
            ("cabin.temperature".into(), "temp".into()),
            ("trips".into(), "trips".into()),
        ],
        labels: vec![("firmware".into(), "firmware".into())],
    })
}

/// Two resources; a gauge with a double and an int point (one point names
/// its own device and firmware), a delta sum, and an unmapped cumulative
/// sum that is passed over.
fn request() -> ExportRequest {
    ExportRequest {
        resource_metrics: vec![
            resource(
                "car-1",
                vec![
                    metric(
                        "cabin.temperature",
                        Data::Gauge(Points {
                            data_points: vec![
                                point(1000, Number::AsDouble(21.5), vec![]),
                                point(
                                    2000,
                                    Number::AsInt(22),
                                    vec![text("device.id", "car-9"), text("firmware", "4.2")],
                                ),
                            ],
                        }),
                    ),
                    metric(
                        "odometer",
                        Data::Sum(Sum {
                            data_points: vec![point(1000, Number::AsInt(5), vec![])],
                            aggregation_temporality: 2,
                        }),
                    ),
                ],
            ),
            resource(
                "car-2",
                vec![metric(
                    "trips",
                    Data::Sum(Sum {
                        data_points: vec![point(3000, Number::AsInt(3), vec![])],
                        aggregation_temporality: DELTA,
                    }),
                )],
            ),
        ],
    }
}

fn summary(r: &[crate::Reading]) -> Vec<(String, String, f64, i64, Option<String>)> {
    r.iter()
        .map(|r| {
            (
                r.device_id.clone(),
                r.stream.clone(),
                r.value,
                r.event_time_ms,
                r.labels.get("firmware").map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn gauges_and_delta_sums_become_readings() {
    let got = decoder(Format::OtlpProto)
        .decode(&request().encode_to_vec(), None)
        .unwrap();
    let s = |d: &str, st: &str, v: f64, t: i64, f: &str| {
        (d.to_string(), st.to_string(), v, t, Some(f.to_string()))
    };
    assert_eq!(
        summary(&got),
        vec![
            s("car-1", "temp", 21.5, 1000, "4.1"),
            s("car-9", "temp", 22.0, 2000, "4.2"),
            s("car-2", "trips", 3.0, 3000, "4.1"),
        ]
    );
    assert_eq!(got[2].stream_index, 1);
}

#[test]
fn otlp_json_reads_as_the_protobuf_form() {
    let json = r#"{"resourceMetrics":[
      {"resource":{"attributes":[{"key":"device.id","value":{"stringValue":"car-1"}},
                                 {"key":"firmware","value":{"stringValue":"4.1"}}]},
       "scopeMetrics":[{"scope":{"name":"fleet"},"metrics":[
         {"name":"cabin.temperature","unit":"Cel","gauge":{"dataPoints":[
            {"timeUnixNano":"1000000123","asDouble":21.5},
            {"timeUnixNano":"2000000123","asInt":"22","attributes":[
               {"key":"device.id","value":{"stringValue":"car-9"}},
               {"key":"firmware","value":{"stringValue":"4.2"}}]}]}},
         {"name":"odometer","sum":{"dataPoints":[{"timeUnixNano":"1000000123","asInt":"5"}],
            "aggregationTemporality":2,"isMonotonic":true}}]}]},
      {"resource":{"attributes":[{"key":"device.id","value":{"stringValue":"car-2"}},
                                 {"key":"firmware","value":{"stringValue":"4.1"}}]},
       "scope_metrics":[{"metrics":[{"name":"trips","sum":{"data_points":[
         {"time_unix_nano":3000000123,"as_int":3}],
         "aggregationTemporality":"AGGREGATION_TEMPORALITY_DELTA"}}]}]}]}"#;
    let proto = decoder(Format::OtlpProto)
        .decode(&request().encode_to_vec(), None)
        .unwrap();
    let from_json = decoder(Format::OtlpJson)
        .decode(json.as_bytes(), None)
        .unwrap();
    assert_eq!(summary(&from_json), summary(&proto));
    // OTLP/HTTP's content types name the declared OTLP format.
    let d = decoder(Format::OtlpJson);
    assert_eq!(
        d.decode(json.as_bytes(), Some("application/json"))
            .unwrap()
            .len(),
        3
    );
    let d = decoder(Format::OtlpProto);
    let bytes = request().encode_to_vec();
    assert_eq!(
        d.decode(&bytes, Some("application/x-protobuf"))
            .unwrap()
            .len(),
        3
    );
}

/// Each kind FleetDP does not read, mapped, rejects the message naming it.
#[test]
fn other_kinds_are_rejected_by_name() {
    let kinds = [
        (
            Data::Sum(Sum {
                data_points: vec![],
                aggregation_temporality: 2,
            }),
            "cumulative",
        ),
        (
            Data::Sum(Sum {
                data_points: vec![],
                aggregation_temporality: 0,
            }),
            "cumulative",
        ),
        (Data::Histogram(Unread {}), "a histogram"),
        (
            Data::ExponentialHistogram(Unread {}),
            "an exponential histogram",
        ),
        (Data::Summary(Unread {}), "a summary"),
    ];
    for (data, named) in kinds {
        let mut req = request();
        req.resource_metrics[1].scope_metrics[0].metrics[0].data = Some(data);
        let e = decoder(Format::OtlpProto)
            .decode(&req.encode_to_vec(), None)
            .unwrap_err();
        assert_eq!(e.reason, Reason::UnsupportedMetric, "{e}");
        assert!(
            e.detail.contains(named) && e.detail.contains("'trips'"),
            "{e}"
        );
    }
}

/// A hostile or broken corpus: each message is rejected whole, with its
/// reason, and nothing of its values in the detail.
#[test]
fn a_hostile_corpus_is_rejected_with_reasons() {
    let d = decoder(Format::OtlpProto);
    let reject = |bytes: Vec<u8>| d.decode(&bytes, None).unwrap_err();
    // No device attribute anywhere.
    let mut req = request();
    req.resource_metrics[1].resource = None;
    let e = reject(req.encode_to_vec());
    assert_eq!(e.reason, Reason::MissingField);
    assert!(e.detail.contains("device.id"), "{e}");
    // A device id that is not UTF-8.
    let mut req = request();
    req.resource_metrics[1]
        .resource
        .as_mut()
        .unwrap()
        .attributes[0] = attr("device.id", Scalar::String(Bytes::from_static(b"car-\xff")));
    let e = reject(req.encode_to_vec());
    assert_eq!(e.reason, Reason::Undecodable);
    assert!(e.detail.contains("not UTF-8"), "{e}");
    // A point without a time, or without a value.
    let mut req = request();
    req.resource_metrics[1].scope_metrics[0].metrics[0].data = Some(Data::Gauge(Points {
        data_points: vec![NumberDataPoint {
            attributes: vec![],
            time_unix_nano: 0,
            value: Some(Number::AsInt(1)),
        }],
    }));
    assert_eq!(reject(req.encode_to_vec()).reason, Reason::MissingField);
    let mut req = request();
    req.resource_metrics[0].scope_metrics[0].metrics[0].data = Some(Data::Gauge(Points {
        data_points: vec![NumberDataPoint {
            attributes: vec![],
            time_unix_nano: 5,
            value: None,
        }],
    }));
    assert_eq!(reject(req.encode_to_vec()).reason, Reason::MissingField);
    // NaN.
    let mut req = request();
    req.resource_metrics[0].scope_metrics[0].metrics[0].data = Some(Data::Gauge(Points {
        data_points: vec![point(9, Number::AsDouble(f64::NAN), vec![])],
    }));
    assert_eq!(reject(req.encode_to_vec()).reason, Reason::NotFinite);
    // Nothing mapped: no readings.
    let mut req = request();
    req.resource_metrics.truncate(0);
    assert_eq!(reject(req.encode_to_vec()).reason, Reason::BatchSize);
    // Over the bounds, counted on the wire before decoding.
    let mut req = request();
    req.resource_metrics[0]
        .resource
        .as_mut()
        .unwrap()
        .attributes = (0..=MAX_OTLP_ATTRIBUTES)
        .map(|i| text(&format!("k{i}"), "v"))
        .collect();
    let e = reject(req.encode_to_vec());
    assert_eq!(e.reason, Reason::BatchSize);
    assert!(e.detail.contains("attributes on one resource"), "{e}");
    let many = ExportRequest {
        resource_metrics: vec![ResourceMetrics::default(); MAX_OTLP_RESOURCES + 1],
    };
    let e = reject(many.encode_to_vec());
    assert!(e.detail.contains("resources"), "{e}");
    // Broken framing and wrong wire types.
    for bad in [
        vec![0x0a, 0x05, 0x00],
        vec![0x0b],
        vec![0x0a, 0x02, 0x12, 0x7f],
        b"{}".to_vec(),
    ] {
        let e = reject(bad);
        assert!(
            matches!(e.reason, Reason::Undecodable | Reason::BatchSize),
            "{e}"
        );
    }
    // OTLP/JSON: not JSON, wrong types, and the same bounds.
    let j = decoder(Format::OtlpJson);
    for bad in [
        &b"not json"[..],
        br#"{"resourceMetrics":{}}"#,
        br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":7}]}]}]}"#,
    ] {
        assert_eq!(j.decode(bad, None).unwrap_err().reason, Reason::Undecodable);
    }
    let attrs: Vec<String> = (0..=MAX_OTLP_ATTRIBUTES)
        .map(|i| format!(r#"{{"key":"k{i}","value":{{"stringValue":"v"}}}}"#))
        .collect();
    let json = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{}]}},"scopeMetrics":[]}}]}}"#,
        attrs.join(",")
    );
    assert_eq!(
        j.decode(json.as_bytes(), None).unwrap_err().reason,
        Reason::BatchSize
    );
}

/// Without an `[otlp]` mapping, OTLP is refused by name.
#[test]
fn otlp_needs_its_mapping() {
    let d = Decoder::new(["temp".to_string()], Format::OtlpProto, Limits::default());
    let e = d.decode(&request().encode_to_vec(), None).unwrap_err();
    assert!(e.detail.contains("[otlp]"), "{e}");
}
