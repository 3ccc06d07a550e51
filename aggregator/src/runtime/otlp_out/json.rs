//! OTLP/JSON of the requests `otlp_out` builds, as OTLP specifies it (the
//! protobuf JSON mapping with lowerCamelCase names): 64-bit integers as
//! decimal strings, doubles as numbers (and `"NaN"`, `"Infinity"`,
//! `"-Infinity"` where not finite), empty fields left out.

use proto::otlp::{any_value, metric, number_data_point, ExportMetricsServiceRequest, KeyValue};
use serde_json::{json, Map, Value};

fn double(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else if x.is_nan() {
        json!("NaN")
    } else if x > 0.0 {
        json!("Infinity")
    } else {
        json!("-Infinity")
    }
}

fn attributes(a: &[KeyValue]) -> Value {
    a.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => json!({ "stringValue": s }),
                Some(any_value::Value::BoolValue(b)) => json!({ "boolValue": b }),
                Some(any_value::Value::IntValue(i)) => json!({ "intValue": i.to_string() }),
                Some(any_value::Value::DoubleValue(d)) => json!({ "doubleValue": double(*d) }),
                None => json!({}),
            };
            json!({ "key": kv.key, "value": value })
        })
        .collect()
}

fn metric(m: &proto::otlp::Metric) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), json!(m.name));
    if !m.unit.is_empty() {
        o.insert("unit".into(), json!(m.unit));
    }
    if let Some(metric::Data::Gauge(g)) = &m.data {
        let points: Vec<Value> = g
            .data_points
            .iter()
            .map(|p| {
                let mut d = Map::new();
                d.insert("attributes".into(), attributes(&p.attributes));
                if p.start_time_unix_nano != 0 {
                    d.insert(
                        "startTimeUnixNano".into(),
                        json!(p.start_time_unix_nano.to_string()),
                    );
                }
                d.insert("timeUnixNano".into(), json!(p.time_unix_nano.to_string()));
                if let Some(number_data_point::Value::AsDouble(v)) = p.value {
                    d.insert("asDouble".into(), double(v));
                }
                Value::Object(d)
            })
            .collect();
        o.insert("gauge".into(), json!({ "dataPoints": points }));
    }
    Value::Object(o)
}

/// The request as OTLP/JSON bytes.
pub(super) fn to_vec(req: &ExportMetricsServiceRequest) -> Vec<u8> {
    let resource_metrics: Vec<Value> = req
        .resource_metrics
        .iter()
        .map(|rm| {
            let resource = rm
                .resource
                .as_ref()
                .map(|r| json!({ "attributes": attributes(&r.attributes) }));
            let scopes: Vec<Value> = rm
                .scope_metrics
                .iter()
                .map(|sm| {
                    let scope = sm.scope.as_ref().map(|s| json!({ "name": s.name }));
                    let metrics: Vec<Value> = sm.metrics.iter().map(metric).collect();
                    json!({ "scope": scope, "metrics": metrics })
                })
                .collect();
            json!({ "resource": resource, "scopeMetrics": scopes })
        })
        .collect();
    serde_json::to_vec(&json!({ "resourceMetrics": resource_metrics }))
        .expect("JSON values serialise")
}
