//! OTLP/JSON metrics (`otlp_json`, the Collector's Kafka exporter's JSON
//! encoding: lowerCamelCase names, 64-bit integers as strings, enums as
//! numbers) read into the types `otlp.rs` decodes Protobuf into, so one
//! walk maps both. Snake-case names, integers as numbers and enum names
//! are accepted too, as protobuf's JSON readers accept them. Fields FleetDP
//! does not read are skipped without being built. The bounds of
//! `otlp_scan.rs` are counted while the request is parsed
//! (`otlp_json/bounded.rs`): a request over one stops at the first part
//! past it.

use crate::otlp::{
    AnyValue, Data, ExportRequest, KeyValue, Metric, Number, NumberDataPoint, Points, Resource,
    ResourceMetrics, Scalar, ScopeMetrics, Sum, Unread, DELTA,
};
use crate::Rejection;
use bounded::{
    Counted, JsonScalar, METRICS, POINTS, POINT_ATTRIBUTES, RESOURCES, RESOURCE_ATTRIBUTES, SCOPES,
};
use serde::de::IgnoredAny;
use serde::Deserialize;

mod bounded;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default, alias = "resource_metrics")]
    resource_metrics: Counted<JsonResourceMetrics, RESOURCES>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonResourceMetrics {
    #[serde(default)]
    resource: Option<JsonResource>,
    #[serde(default, alias = "scope_metrics")]
    scope_metrics: Counted<JsonScopeMetrics, SCOPES>,
}

#[derive(Deserialize)]
struct JsonResource {
    #[serde(default)]
    attributes: Counted<JsonKeyValue, RESOURCE_ATTRIBUTES>,
}

#[derive(Deserialize)]
struct JsonScopeMetrics {
    #[serde(default)]
    metrics: Counted<JsonMetric, METRICS>,
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
    histogram: Option<IgnoredAny>,
    #[serde(default, alias = "exponential_histogram")]
    exponential_histogram: Option<IgnoredAny>,
    #[serde(default)]
    summary: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonPoints {
    #[serde(default, alias = "data_points")]
    data_points: Counted<JsonPoint, POINTS>,
    #[serde(default, alias = "aggregation_temporality")]
    aggregation_temporality: Option<JsonScalar>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonPoint {
    #[serde(default)]
    attributes: Counted<JsonKeyValue, POINT_ATTRIBUTES>,
    #[serde(default, alias = "time_unix_nano")]
    time_unix_nano: Option<JsonScalar>,
    #[serde(default, alias = "as_double")]
    as_double: Option<JsonScalar>,
    #[serde(default, alias = "as_int")]
    as_int: Option<JsonScalar>,
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
    int_value: Option<JsonScalar>,
    #[serde(default, alias = "double_value")]
    double_value: Option<JsonScalar>,
}

/// A 64-bit integer written as a string or a number.
fn int(v: &JsonScalar) -> Option<i64> {
    match v {
        JsonScalar::Number(n) => n.as_i64(),
        JsonScalar::String(s) => s.parse().ok(),
    }
}

/// A double as a number or, for NaN and the infinities, a string.
fn double(v: &JsonScalar) -> Option<f64> {
    match v {
        JsonScalar::Number(n) => n.as_f64(),
        JsonScalar::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.parse().ok(),
        },
    }
}

fn attributes<const K: usize>(a: Counted<JsonKeyValue, K>) -> Vec<KeyValue> {
    a.0.into_iter()
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

fn points(p: Counted<JsonPoint, POINTS>) -> Vec<NumberDataPoint> {
    p.0.into_iter()
        .map(|p| NumberDataPoint {
            attributes: attributes(p.attributes),
            time_unix_nano: p
                .time_unix_nano
                .as_ref()
                .and_then(|v| match v {
                    JsonScalar::Number(n) => n.as_u64(),
                    JsonScalar::String(s) => s.parse().ok(),
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
fn temporality(v: Option<&JsonScalar>) -> i32 {
    match v {
        Some(JsonScalar::Number(n)) => n.as_i64().unwrap_or(0) as i32,
        Some(JsonScalar::String(s)) if s == "AGGREGATION_TEMPORALITY_DELTA" => DELTA,
        Some(JsonScalar::String(s)) if s == "AGGREGATION_TEMPORALITY_CUMULATIVE" => 2,
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

/// Why an OTLP/JSON request was not read.
pub(crate) enum Failure {
    Json(serde_json::Error),
    /// Over one of the bounds, named.
    Over(Rejection),
}

/// Parse an OTLP/JSON `ExportMetricsServiceRequest`, its parts counted.
pub(crate) fn parse(payload: &[u8]) -> Result<ExportRequest, Failure> {
    bounded::start();
    let r: Request = serde_json::from_slice(payload)
        .map_err(|e| bounded::stopped().map_or(Failure::Json(e), Failure::Over))?;
    Ok(ExportRequest {
        resource_metrics: r
            .resource_metrics
            .0
            .into_iter()
            .map(|rm| ResourceMetrics {
                resource: rm.resource.map(|r| Resource {
                    attributes: attributes(r.attributes),
                }),
                scope_metrics: rm
                    .scope_metrics
                    .0
                    .into_iter()
                    .map(|sm| ScopeMetrics {
                        metrics: sm.metrics.0.into_iter().map(metric).collect(),
                    })
                    .collect(),
            })
            .collect(),
    })
}
