use super::*;
use proto::v1::{RunningTotal, Statistic};

fn release() -> proto::WindowRelease {
    proto::WindowRelease {
        stream: "temp[firmware=4.2]".into(),
        partition: 3,
        window_seq: 7,
        first_event_time_ms: 1_700_000_000_000,
        last_event_time_ms: 1_700_000_060_000,
        n: 20,
        released_at_ms: 1_700_000_070_000,
        group: [("firmware".to_string(), "4.2".to_string())].into(),
        statistics: vec![
            Statistic {
                name: "mean".into(),
                values: vec![21.5],
                half_width: Some(0.25),
                ..Default::default()
            },
            Statistic {
                name: "histogram".into(),
                values: vec![3.0, 9.0, 8.0],
                half_width: Some(2.0),
                bin_edges: vec![0.0, 10.0, 20.0, 50.0],
                ..Default::default()
            },
            Statistic {
                name: "quantile".into(),
                values: vec![22.0],
                level: Some(0.5),
                rank_half_width: Some(4.0),
                ..Default::default()
            },
            Statistic {
                name: "variance".into(),
                values: vec![f64::NAN],
                ..Default::default()
            },
        ],
        running: vec![RunningTotal {
            name: "sum".into(),
            windows: 8,
            values: vec![3440.0],
            std: 12.5,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn metrics(req: &ExportMetricsServiceRequest) -> &[Metric] {
    &req.resource_metrics[0].scope_metrics[0].metrics
}

fn points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(metric::Data::Gauge(g)) => &g.data_points,
        None => &[],
    }
}

fn attr<'a>(p: &'a NumberDataPoint, key: &str) -> Option<&'a any_value::Value> {
    let kv = p.attributes.iter().find(|kv| kv.key == key)?;
    kv.value.as_ref()?.value.as_ref()
}

fn value(p: &NumberDataPoint) -> f64 {
    match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        None => f64::NAN,
    }
}

/// Every figure is a gauge point of its statistic's metric, with its
/// bounds where it has a half-width, the release's attributes on each
/// point, the stream's unit in UCUM; and nothing else.
#[test]
fn a_window_release_is_one_request_of_its_figures() {
    let r = release();
    let req = window_request(&r, ucum(Some("°C")));
    let names: Vec<(&str, &str, usize)> = metrics(&req)
        .iter()
        .map(|m| (m.name.as_str(), m.unit.as_str(), points(m).len()))
        .collect();
    assert_eq!(
        names,
        [
            ("fleetdp.mean", "Cel", 1),
            ("fleetdp.mean.lower", "Cel", 1),
            ("fleetdp.mean.upper", "Cel", 1),
            ("fleetdp.histogram", "{reading}", 3),
            ("fleetdp.histogram.lower", "{reading}", 3),
            ("fleetdp.histogram.upper", "{reading}", 3),
            ("fleetdp.quantile", "Cel", 1),
            ("fleetdp.quantile.rank_half_width", "{reading}", 1),
            ("fleetdp.variance", "Cel2", 1),
            ("fleetdp.running.sum", "Cel", 1),
            ("fleetdp.running.sum.std", "Cel", 1),
        ]
    );
    let m = metrics(&req);
    assert_eq!(value(&points(&m[1])[0]), 21.25);
    assert_eq!(value(&points(&m[2])[0]), 21.75);
    let bin = &points(&m[3])[2];
    assert_eq!(value(bin), 8.0);
    assert_eq!(
        attr(bin, "fleetdp.bin"),
        Some(&any_value::Value::IntValue(2))
    );
    assert_eq!(
        attr(bin, "fleetdp.bin.lower"),
        Some(&any_value::Value::DoubleValue(20.0))
    );
    assert_eq!(
        attr(bin, "fleetdp.bin.upper"),
        Some(&any_value::Value::DoubleValue(50.0))
    );
    let q = &points(&m[6])[0];
    assert_eq!(
        attr(q, "fleetdp.quantile.level"),
        Some(&any_value::Value::DoubleValue(0.5))
    );
    let rank = &points(&m[7])[0];
    assert_eq!(value(rank), 4.0);
    assert_eq!(
        attr(rank, "fleetdp.quantile.level"),
        Some(&any_value::Value::DoubleValue(0.5))
    );
    for m in metrics(&req) {
        for p in points(m) {
            let s = |k| attr(p, k).cloned();
            assert_eq!(
                s("fleetdp.stream"),
                Some(any_value::Value::StringValue("temp[firmware=4.2]".into()))
            );
            assert_eq!(
                s("fleetdp.group.firmware"),
                Some(any_value::Value::StringValue("4.2".into()))
            );
            assert_eq!(s("fleetdp.partition"), Some(any_value::Value::IntValue(3)));
            assert_eq!(s("fleetdp.window.seq"), Some(any_value::Value::IntValue(7)));
            assert_eq!(
                s("fleetdp.scope"),
                Some(any_value::Value::StringValue("partition".into()))
            );
            assert_eq!(p.time_unix_nano, 1_700_000_070_000_000_000);
            assert_eq!(p.start_time_unix_nano, 1_700_000_000_000_000_000);
        }
    }
    let resource = req.resource_metrics[0].resource.as_ref().unwrap();
    assert_eq!(resource.attributes, vec![text("service.name", "fleetdp")]);
}

/// The request holds no number the release does not: each point's value
/// is one of the release's values or a value ± its half-width, and each
/// numeric attribute one of its public fields.
#[test]
fn a_request_carries_only_the_release_numbers() {
    let r = release();
    let mut allowed: Vec<f64> = vec![];
    for s in &r.statistics {
        for v in &s.values {
            allowed.push(*v);
            if let Some(h) = s.half_width {
                allowed.extend([v - h, v + h]);
            }
        }
        allowed.extend(s.rank_half_width);
        allowed.extend(&s.bin_edges);
        allowed.extend(s.level);
    }
    for t in &r.running {
        allowed.extend(&t.values);
        allowed.push(t.std);
    }
    let ints = [
        r.partition as i64,
        r.window_seq as i64,
        r.first_event_time_ms,
        r.last_event_time_ms,
        r.n as i64,
        8,
        0,
        1,
        2,
    ];
    let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
    for m in metrics(&window_request(&r, String::new())) {
        for p in points(m) {
            assert!(
                allowed.iter().any(|&a| same(a, value(p))),
                "{} {}",
                m.name,
                value(p)
            );
            for kv in &p.attributes {
                match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::IntValue(i)) => assert!(ints.contains(i), "{}", kv.key),
                    Some(any_value::Value::DoubleValue(d)) => {
                        assert!(allowed.contains(d), "{}", kv.key)
                    }
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn a_fleet_release_names_the_fleet_and_its_completeness() {
    let f = proto::FleetRelease {
        stream: "temp".into(),
        window_seq: 2,
        partitions: vec![0, 1],
        input_partitions: 3,
        complete: false,
        released_at_ms: 5,
        statistics: vec![proto::FleetStatistic {
            name: "count".into(),
            values: vec![40.0],
            half_width: Some(0.0),
            ..Default::default()
        }],
        ..Default::default()
    };
    let req = fleet_request(&f, String::new());
    let m = metrics(&req);
    assert_eq!(m[0].name, "fleetdp.count");
    assert_eq!(m[0].unit, "{reading}");
    let p = &points(&m[0])[0];
    assert_eq!(
        attr(p, "fleetdp.scope"),
        Some(&any_value::Value::StringValue("fleet".into()))
    );
    assert_eq!(
        attr(p, "fleetdp.fleet.complete"),
        Some(&any_value::Value::BoolValue(false))
    );
    assert_eq!(
        attr(p, "fleetdp.fleet.partitions"),
        Some(&any_value::Value::IntValue(2))
    );
    assert_eq!(attr(p, "fleetdp.partition"), None);
    // No event times: no start time.
    assert_eq!(p.start_time_unix_nano, 0);
}

#[test]
fn units_are_written_in_ucum() {
    assert_eq!(ucum(Some("°C")), "Cel");
    assert_eq!(ucum(Some("°F")), "[degF]");
    assert_eq!(ucum(Some("km/h")), "km/h");
    assert_eq!(ucum(Some("V")), "V");
    assert_eq!(ucum(Some("m s")), "", "not UCUM: left out");
    assert_eq!(ucum(Some("µm")), "", "not UCUM: left out");
    assert_eq!(ucum(None), "");
    assert_eq!(unit_of("variance", "V"), "V2");
    assert_eq!(unit_of("variance", "km/h"), "(km/h).(km/h)");
    assert_eq!(unit_of("clamped", "V"), "1");
    assert_eq!(unit_of("count", "V"), "{reading}");
}

/// OTLP/JSON: lowerCamelCase, 64-bit integers as strings, values that are
/// not finite as their names; the same points as the binary form.
#[test]
fn the_json_form_follows_the_otlp_json_mapping() {
    let req = window_request(&release(), ucum(Some("°C")));
    let (bytes, ct) = encode(&req, OtlpEncoding::OtlpJson);
    assert_eq!(ct, "application/json");
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let rm = &v["resourceMetrics"][0];
    assert_eq!(
        rm["resource"]["attributes"][0]["value"]["stringValue"],
        "fleetdp"
    );
    let written = rm["scopeMetrics"][0]["metrics"].as_array().unwrap();
    assert_eq!(written.len(), metrics(&req).len());
    let p = &written[0]["gauge"]["dataPoints"][0];
    assert_eq!(p["asDouble"], 21.5);
    assert_eq!(p["timeUnixNano"], "1700000070000000000");
    assert_eq!(p["startTimeUnixNano"], "1700000000000000000");
    let seq = p["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kv| kv["key"] == "fleetdp.window.seq")
        .unwrap();
    assert_eq!(seq["value"]["intValue"], "7");
    let variance = written
        .iter()
        .find(|m| m["name"] == "fleetdp.variance")
        .unwrap();
    assert_eq!(variance["gauge"]["dataPoints"][0]["asDouble"], "NaN");
    let (proto_bytes, ct) = encode(&req, OtlpEncoding::OtlpProto);
    assert_eq!(ct, "application/x-protobuf");
    let back = ExportMetricsServiceRequest::decode(&*proto_bytes).unwrap();
    assert_eq!(
        back.encode_to_vec(),
        proto_bytes,
        "decodes to the same request"
    );
}
