//! OpenTelemetry metrics out, through the broker: with `kafka.otlp_topic`
//! every window and fleet release is written a second time as an OTLP
//! `ExportMetricsServiceRequest`, and a consumer decoding it with the
//! official protobuf definitions (`otlp_out.py`: PyPI opentelemetry-proto,
//! the JSON form through its strict parser) finds, for every native
//! record, one request under the same key whose gauges are exactly the
//! record's figures: each value, each interval's bounds, each running
//! total, with their attributes and the stream's unit in UCUM, and nothing
//! else. In `otlp_proto` and `otlp_json`.

use crate::harness;

use harness::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const STREAM: &str = r#"
[[stream]]
name = "temp"
lower = 0.0
upper = 50.0
resolution = 0.1
unit = "°C"
window_size = 20
max_windows_per_device = 10
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [0, 10, 20, 30, 50]
quantiles = [0.5, 0.9]
running_share = 0.2
running_lifetime = 1024
"#;

/// One expected gauge point: metric, unit, the attributes that tell it
/// apart, its value.
type Point = (String, String, BTreeMap<String, String>, f64);

fn attrs(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// A native statistic's points: values, bounds where it has a
/// half-width, and its rank interval where it has one.
fn figure_points(
    name: &str,
    values: &[f64],
    level: Option<f64>,
    (half_width, rank_half_width): (Option<f64>, Option<f64>),
    out: &mut Vec<Point>,
) {
    let unit = match name {
        "histogram" => "{reading}",
        _ => "Cel",
    };
    for (i, v) in values.iter().enumerate() {
        let mut a = vec![("fleetdp.statistic", name.to_string())];
        if let Some(q) = level {
            a.push(("fleetdp.quantile.level", format!("{q}")));
        }
        if name == "histogram" {
            a.push(("fleetdp.bin", i.to_string()));
        }
        let a = attrs(&a);
        out.push((format!("fleetdp.{name}"), unit.into(), a.clone(), *v));
        if let Some(h) = half_width {
            out.push((
                format!("fleetdp.{name}.lower"),
                unit.into(),
                a.clone(),
                v - h,
            ));
            out.push((
                format!("fleetdp.{name}.upper"),
                unit.into(),
                a.clone(),
                v + h,
            ));
        }
        if let Some(r) = rank_half_width {
            out.push((
                format!("fleetdp.{name}.rank_half_width"),
                "{reading}".into(),
                a.clone(),
                r,
            ));
        }
    }
}

fn running_points(running: &[proto::v1::RunningTotal], out: &mut Vec<Point>) {
    for t in running {
        let unit = if t.name == "sum" { "Cel" } else { "{reading}" };
        for (i, v) in t.values.iter().enumerate() {
            let mut a = vec![("fleetdp.statistic", t.name.clone())];
            if t.name == "histogram" {
                a.push(("fleetdp.bin", i.to_string()));
            }
            out.push((
                format!("fleetdp.running.{}", t.name),
                unit.into(),
                attrs(&a),
                *v,
            ));
        }
        let a = attrs(&[("fleetdp.statistic", t.name.clone())]);
        out.push((
            format!("fleetdp.running.{}.std", t.name),
            unit.into(),
            a,
            t.std,
        ));
    }
}

/// The consumer's points of one request, keyed as [`Point`]s are, after
/// checking the attributes every point carries against the record's.
fn decoded_points(line: &Value, common: &BTreeMap<String, String>, time_ns: i64) -> Vec<Point> {
    let distinct = ["fleetdp.statistic", "fleetdp.quantile.level", "fleetdp.bin"];
    let mut out = vec![];
    for p in line["points"].as_array().unwrap() {
        let a: BTreeMap<String, String> = p[2]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), String::from)))
            .collect();
        for (k, v) in common {
            assert_eq!(a.get(k), Some(v), "{k} on {p}");
        }
        assert_eq!(p[5].as_i64(), Some(time_ns), "the release time: {p}");
        let own = a
            .iter()
            .filter(|(k, _)| distinct.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let unit = p[1].as_str().unwrap().to_string();
        out.push((
            p[0].as_str().unwrap().to_string(),
            unit,
            own,
            p[3].as_f64().unwrap(),
        ));
    }
    out
}

fn sorted(mut v: Vec<Point>) -> Vec<Point> {
    v.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
    v
}

fn every_release_is_its_otlp_request(encoding: &str) {
    let Some(py) = front::python_with("opentelemetry.proto.collector.metrics.v1") else {
        return;
    };
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, &format!("otlpout-{encoding}"), 2).await;
        let otlp_topic = unique("otlpout-metrics");
        broker.create_topics(&[(&otlp_topic, 1)]).await;
        let text = config_text(
            &broker,
            &t,
            "epsilon_per_device = 50.0\nhorizon = \"24h\"",
            "",
            STREAM,
        )
        .replace(
            "[kafka]\n",
            &format!("[kafka]\notlp_topic = \"{otlp_topic}\"\notlp_encoding = \"{encoding}\"\n"),
        );
        let v = fleetdp::config::Config::parse(&text)
            .unwrap()
            .validate()
            .unwrap();
        let start = now_ms() - 60_000;
        let msgs: Vec<Out> = (0..300)
            .map(|i| {
                let value = 5.0 + ((i * 37) % 400) as f64 / 10.0;
                temp_reading(None, &format!("car-{}", i % 100), value, start + i as i64)
            })
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let (stop, _, h) = spawn_pipeline(v, [5; 32]);
        let settled = |n: &mut usize| {
            let now = read_all(&broker, &t.output).len();
            let same = now == *n;
            *n = now;
            same
        };
        let mut seen = 0;
        let done = wait_until(Duration::from_secs(90), || {
            releases(&broker, &t.output).len() >= 10
                && fleet_releases(&broker, &t.output).len() >= 5
                && settled(&mut seen)
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(
            done,
            "{encoding}: the windows and fleet records were not released"
        );
        let native = read_all(&broker, &t.output);
        let out = Command::new(&py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp_out.py"))
            .args([
                &broker.brokers,
                &otlp_topic,
                &native.len().to_string(),
                encoding,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{encoding}: the consumer: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: BTreeMap<String, Value> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["key"].as_str().unwrap().to_string(), v)
            })
            .collect();
        assert_eq!(
            lines.len(),
            native.len(),
            "{encoding}: one request per record"
        );
        let content_type = if encoding == "otlp_json" {
            "application/json"
        } else {
            "application/x-protobuf"
        };
        let (mut windows, mut fleets) = (0, 0);
        for r in &native {
            let key = String::from_utf8(r.key.clone()).unwrap();
            let line = &lines[&key];
            assert_eq!(line["content_type"], content_type);
            assert_eq!(line["resource"]["service.name"], "fleetdp");
            assert_eq!(line["scope"], "fleetdp");
            let mut expected = vec![];
            let (common, time_ms) = if r.is_fleet() {
                fleets += 1;
                let f = fleetdp::fleet::decode_fleet(&r.payload, None).unwrap();
                for s in &f.statistics {
                    let intervals = (s.half_width, None);
                    figure_points(&s.name, &s.values, s.level, intervals, &mut expected);
                }
                running_points(&f.running, &mut expected);
                let common = attrs(&[
                    ("fleetdp.stream", f.stream.clone()),
                    ("fleetdp.window.seq", f.window_seq.to_string()),
                    ("fleetdp.window.n", f.n.to_string()),
                    ("fleetdp.scope", "fleet".into()),
                    ("fleetdp.fleet.complete", f.complete.to_string()),
                ]);
                (common, f.released_at_ms)
            } else {
                windows += 1;
                let ct = r.headers.get("content-type").map(String::as_str);
                let w = fleetdp::kafka::decode_release(&r.payload, ct).unwrap();
                for s in &w.statistics {
                    let intervals = (s.half_width, s.rank_half_width);
                    figure_points(&s.name, &s.values, s.level, intervals, &mut expected);
                }
                running_points(&w.running, &mut expected);
                let common = attrs(&[
                    ("fleetdp.stream", w.stream.clone()),
                    ("fleetdp.window.seq", w.window_seq.to_string()),
                    ("fleetdp.window.n", w.n.to_string()),
                    (
                        "fleetdp.window.first_event_time_ms",
                        w.first_event_time_ms.to_string(),
                    ),
                    (
                        "fleetdp.window.last_event_time_ms",
                        w.last_event_time_ms.to_string(),
                    ),
                    ("fleetdp.scope", "partition".into()),
                    ("fleetdp.partition", w.partition.to_string()),
                ]);
                (common, w.released_at_ms)
            };
            let got = decoded_points(line, &common, time_ms * 1_000_000);
            assert_eq!(
                sorted(got),
                sorted(expected),
                "{encoding} {key}: the request's gauges are not the record's figures"
            );
        }
        assert!(
            windows >= 10 && fleets >= 5,
            "{windows} windows, {fleets} fleet records"
        );
    });
}

#[test]
fn every_release_is_its_otlp_request_in_otlp_proto() {
    every_release_is_its_otlp_request("otlp_proto");
}

#[test]
fn every_release_is_its_otlp_request_in_otlp_json() {
    every_release_is_its_otlp_request("otlp_json");
}
