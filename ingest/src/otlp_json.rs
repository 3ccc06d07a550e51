//! OTLP/JSON metrics (`otlp_json`, the Collector's Kafka exporter's JSON
//! encoding: lowerCamelCase names, 64-bit integers as strings, enums as
//! numbers) read into the types `otlp.rs` decodes Protobuf into, so one
//! walk maps both. Snake-case names, integers as numbers and enum names
//! are accepted too, as protobuf's JSON readers accept them. Fields FleetDP
//! does not read are ignored.

use crate::otlp::{
    AnyValue, Data, ExportRequest, KeyValue, Metric, Number, NumberDataPoint, Points, Resource,
    ResourceMetrics, Scalar, ScopeMetrics, Sum, Unread, DELTA,
};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default, alias = "resource_metrics")]
    resource_metrics: Vec<JsonResourceMetrics>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonResourceMetrics {
    #[serde(default)]
    resource: Option<JsonResource>,
    #[serde(default, alias = "scope_metrics")]
    scope_metrics: Vec<JsonScopeMetrics>,
}

#[derive(Deserialize)]
struct JsonResource {
    #[serde(default)]
    attributes: Vec<JsonKeyValue>,
}

#[derive(Deserialize)]
struct JsonScopeMetrics {
    #[serde(default)]
    metrics: Vec<JsonMetric>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonMetric {
    #[serde(default)]
    name: String,
    #[serde(default)]
    gauge: Option<JsonPoints>,
    #[serde(default)]
    sum: Option<JsonPoints>,
    #[serde(default)]
    histogram: Option<Value>,
    #[serde(default, alias = "exponential_histogram")]
    exponential_histogram: Option<Value>,
    #[serde(default)]
    summary: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonPoints {
    #[serde(default, alias = "data_points")]
    data_points: Vec<JsonPoint>,
    #[serde(default, alias = "aggregation_temporality")]
    aggregation_temporality: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonPoint {
    #[serde(default)]
    attributes: Vec<JsonKeyValue>,
    #[serde(default, alias = "time_unix_nano")]
    time_unix_nano: Option<Value>,
    #[serde(default, alias = "as_double")]
    as_double: Option<Value>,
    #[serde(default, alias = "as_int")]
    as_int: Option<Value>,
}

#[derive(Deserialize)]
struct JsonKeyValue {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Option<JsonAnyValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonAnyValue {
    #[serde(default, alias = "string_value")]
    string_value: Option<String>,
    #[serde(default, alias = "bool_value")]
    bool_value: Option<bool>,
    #[serde(default, alias = "int_value")]
    int_value: Option<Value>,
    #[serde(default, alias = "double_value")]
    double_value: Option<Value>,
}

/// A 64-bit integer written as a string or a number.
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A double as a number or, for NaN and the infinities, a string.
fn double(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.parse().ok(),
        },
        _ => None,
    }
}

fn attributes(a: Vec<JsonKeyValue>) -> Vec<KeyValue> {
    a.into_iter()
        .map(|kv| KeyValue {
            key: kv.key.into(),
            value: kv.value.map(|v| AnyValue {
                value: v
                    .string_value
                    .map(|s| Scalar::String(s.into()))
                    .or(v.bool_value.map(Scalar::Bool))
                    .or(v.int_value.as_ref().and_then(int).map(Scalar::Int))
                    .or(v.double_value.as_ref().and_then(double).map(Scalar::Double)),
            }),
        })
        .collect()
}

fn points(p: Vec<JsonPoint>) -> Vec<NumberDataPoint> {
    p.into_iter()
        .map(|p| NumberDataPoint {
            attributes: attributes(p.attributes),
            time_unix_nano: p
                .time_unix_nano
                .as_ref()
                .and_then(|v| match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                })
                .unwrap_or(0),
            value: match (
                p.as_double.as_ref().and_then(double),
                p.as_int.as_ref().and_then(int),
            ) {
                (Some(d), _) => Some(Number::AsDouble(d)),
                (None, Some(i)) => Some(Number::AsInt(i)),
                (None, None) => None,
            },
        })
        .collect()
}

/// `aggregationTemporality` as a number or an enum name.
fn temporality(v: Option<&Value>) -> i32 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0) as i32,
        Some(Value::String(s)) if s == "AGGREGATION_TEMPORALITY_DELTA" => DELTA,
        Some(Value::String(s)) if s == "AGGREGATION_TEMPORALITY_CUMULATIVE" => 2,
        _ => 0,
    }
}

fn metric(m: JsonMetric) -> Metric {
    let data = if let Some(g) = m.gauge {
        Some(Data::Gauge(Points {
            data_points: points(g.data_points),
        }))
    } else if let Some(s) = m.sum {
        Some(Data::Sum(Sum {
            aggregation_temporality: temporality(s.aggregation_temporality.as_ref()),
            data_points: points(s.data_points),
        }))
    } else if m.histogram.is_some() {
        Some(Data::Histogram(Unread {}))
    } else if m.exponential_histogram.is_some() {
        Some(Data::ExponentialHistogram(Unread {}))
    } else {
        m.summary.map(|_| Data::Summary(Unread {}))
    };
    Metric {
        name: m.name.into(),
        data,
    }
}

/// Parse an OTLP/JSON `ExportMetricsServiceRequest`.
pub(crate) fn parse(payload: &[u8]) -> Result<ExportRequest, serde_json::Error> {
    let r: Request = serde_json::from_slice(payload)?;
    Ok(ExportRequest {
        resource_metrics: r
            .resource_metrics
            .into_iter()
            .map(|rm| ResourceMetrics {
                resource: rm.resource.map(|r| Resource {
                    attributes: attributes(r.attributes),
                }),
                scope_metrics: rm
                    .scope_metrics
                    .into_iter()
                    .map(|sm| ScopeMetrics {
                        metrics: sm.metrics.into_iter().map(metric).collect(),
                    })
                    .collect(),
            })
            .collect(),
    })
}
