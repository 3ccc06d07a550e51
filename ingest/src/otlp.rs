//! OpenTelemetry metrics in: an `ExportMetricsServiceRequest`, as the
//! Collector's Kafka exporter writes it (`otlp_proto`; `otlp_json` is read
//! into the same types by `otlp_json.rs`), into readings through an
//! [`OtlpMapping`]: which attribute names the device, which metric feeds
//! which stream, which attributes feed dimensions, the event time from
//! `time_unix_nano`.
//!
//! Only the fields FleetDP reads are declared (OTLP's field numbers, from
//! `opentelemetry/proto/metrics/v1/metrics.proto`); prost skips the rest.
//! Gauges and delta sums with int or double points become readings; a
//! mapped metric of another kind (a cumulative sum, a histogram, an
//! exponential histogram, a summary) rejects the message naming the kind
//! and the metric. Metrics the mapping does not name are passed over.
//! Requests in encoders' form are read without these types, in one walk
//! (`otlp_walk.rs`); the rest are bounded on their wire form
//! (`otlp_scan.rs`), then decoded here. The decoding only decides where
//! fields are: no sensitivity depends on it.

use crate::labels::Labels;
#[cfg(test)]
use crate::otlp_scan::{MAX_OTLP_ATTRIBUTES, MAX_OTLP_RESOURCES};
use crate::{RawReading, Reason, Rejection};
use prost::bytes::Bytes;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScopeMetrics {
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Metric {
    #[prost(bytes = "bytes", tag = "1")]
    pub name: Bytes,
    #[prost(oneof = "Data", tags = "5, 7, 9, 10, 11")]
    pub data: Option<Data>,
}

/// A metric's kind; the kinds FleetDP does not read keep no fields.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Data {
    #[prost(message, tag = "5")]
    Gauge(Points),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "9")]
    Histogram(Unread),
    #[prost(message, tag = "10")]
    ExponentialHistogram(Unread),
    #[prost(message, tag = "11")]
    Summary(Unread),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Points {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    /// 1 delta, 2 cumulative, 0 unspecified.
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

/// A kind FleetDP does not read: its fields are skipped.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Unread {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(oneof = "Number", tags = "4, 6")]
    pub value: Option<Number>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Number {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    /// Bytes, not a `String`: read zero-copy from the request's buffer
    /// (UTF-8 is checked where a key or value is used).
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// An attribute's value; arrays, maps and bytes are skipped (read as no
/// value: they name no device, dimension or time).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AnyValue {
    #[prost(oneof = "Scalar", tags = "1, 2, 3, 4")]
    pub value: Option<Scalar>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Scalar {
    #[prost(bytes = "bytes", tag = "1")]
    String(Bytes),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

/// `aggregation_temporality` of a delta sum.
pub(crate) const DELTA: i32 = 1;

/// Where the readings are in an OTLP metrics request.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpMapping {
    /// The attribute naming the device: the data point's, else its
    /// resource's (`device.id`, `service.instance.id`, `host.id`).
    pub device_attribute: String,
    /// Metric name → the declared stream its points feed.
    pub metrics: Vec<(String, String)>,
    /// Dimension name → the attribute holding its value (the point's,
    /// else the resource's).
    pub labels: Vec<(String, String)>,
}

/// An attribute's scalar value, borrowed from the request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ScalarRef<'a> {
    Str(&'a [u8]),
    Bool(bool),
    Int(i64),
    Double(f64),
}

impl ScalarRef<'_> {
    /// The value as text; `None` for a string that is not UTF-8.
    pub(crate) fn text(self) -> Option<String> {
        self.text_ref().map(std::borrow::Cow::into_owned)
    }
}

impl<'a> ScalarRef<'a> {
    /// [`ScalarRef::text`], a string borrowed.
    pub(crate) fn text_ref(self) -> Option<std::borrow::Cow<'a, str>> {
        Some(match self {
            ScalarRef::Str(s) => crate::wire::utf8(s)?.into(),
            ScalarRef::Bool(b) => b.to_string().into(),
            ScalarRef::Int(i) => i.to_string().into(),
            ScalarRef::Double(d) => d.to_string().into(),
        })
    }
}

impl Scalar {
    /// The value as text; `None` for a string that is not UTF-8.
    fn text(&self) -> Option<String> {
        match self {
            Scalar::String(s) => ScalarRef::Str(s),
            Scalar::Bool(b) => ScalarRef::Bool(*b),
            Scalar::Int(i) => ScalarRef::Int(*i),
            Scalar::Double(d) => ScalarRef::Double(*d),
        }
        .text()
    }
}

/// A scalar attribute by key (the last one of a key given twice).
fn attribute<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Scalar> {
    attrs
        .iter()
        .rev()
        .find(|kv| kv.key == key.as_bytes())
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

impl OtlpMapping {
    /// The readings of a decoded request, in order: resources, scopes,
    /// metrics, points.
    pub(crate) fn readings(&self, req: &ExportRequest) -> Result<Vec<RawReading>, Rejection> {
        // A mapping names a few metrics: looked up in place.
        let stream_of = |name: &[u8]| {
            self.metrics
                .iter()
                .find(|(m, _)| m.as_bytes() == name)
                .map(|(_, s)| s.as_str())
        };
        let mut out = Vec::new();
        for (r, rm) in req.resource_metrics.iter().enumerate() {
            let resource = rm.resource.as_ref().map_or(&[][..], |x| &x.attributes[..]);
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let Some(stream) = stream_of(&m.name) else {
                        continue;
                    };
                    for p in points_of(m)? {
                        out.push(self.reading(r, resource, stream, p)?);
                    }
                }
            }
        }
        Ok(out)
    }

    fn reading(
        &self,
        r: usize,
        resource: &[KeyValue],
        stream: &str,
        p: &NumberDataPoint,
    ) -> Result<RawReading, Rejection> {
        let find = |key: &str| attribute(&p.attributes, key).or_else(|| attribute(resource, key));
        let attr = &self.device_attribute;
        let device = find(attr).ok_or_else(|| {
            Rejection::new(
                Reason::MissingField,
                format!(
                    "resource {r}: a point of metric for stream '{stream}' has no attribute '{attr}' (the device id), on the point or its resource"
                ),
            )
        })?;
        let device = device.text().ok_or_else(|| {
            Rejection::new(
                Reason::Undecodable,
                format!("resource {r}: attribute '{attr}' (the device id) is not UTF-8"),
            )
        })?;
        let mut labels = Labels::default();
        for (name, key) in &self.labels {
            if let Some(v) = find(key).and_then(Scalar::text) {
                let (n, v) = (labels.append(name), labels.append(&v));
                labels.push_spans(n, v);
            }
        }
        labels.sort();
        Ok(RawReading {
            device_id: Some(device),
            stream: Some(stream.to_string()),
            value: p.value.as_ref().map(|v| match v {
                Number::AsDouble(d) => *d,
                Number::AsInt(i) => *i as f64,
            }),
            // Nanoseconds to milliseconds; 0 is "not set" in OTLP.
            event_time_ms: (p.time_unix_nano > 0).then_some((p.time_unix_nano / 1_000_000) as i64),
            labels,
        })
    }
}

/// A mapped metric's points, or why its kind is not read.
fn points_of(m: &Metric) -> Result<&[NumberDataPoint], Rejection> {
    let refuse = |kind: &str| {
        Err(Rejection::new(
            Reason::UnsupportedMetric,
            format!(
                "metric '{}' is {kind}; FleetDP reads gauges and delta sums",
                crate::truncate(&String::from_utf8_lossy(&m.name), 64)
            ),
        ))
    };
    match &m.data {
        Some(Data::Gauge(g)) => Ok(&g.data_points),
        Some(Data::Sum(s)) if s.aggregation_temporality == DELTA => Ok(&s.data_points),
        Some(Data::Sum(_)) => refuse("a cumulative (or unspecified) sum"),
        Some(Data::Histogram(_)) => refuse("a histogram"),
        Some(Data::ExponentialHistogram(_)) => refuse("an exponential histogram"),
        Some(Data::Summary(_)) => refuse("a summary"),
        None => refuse("without data"),
    }
}

/// An OTLP metrics request in Protobuf as an SDK writes it, for benches
/// and examples: per device one resource (the SDK's own attributes,
/// `service.name` and `device.id`) whose gauges `(metric, value)` each hold
/// one point at `t_ms` carrying one attribute.
pub fn example_otlp(devices: &[(String, Vec<(&str, f64)>)], t_ms: i64) -> Vec<u8> {
    use prost::Message as _;
    let text = |k: &str, v: &str| KeyValue {
        key: Bytes::copy_from_slice(k.as_bytes()),
        value: Some(AnyValue {
            value: Some(Scalar::String(Bytes::copy_from_slice(v.as_bytes()))),
        }),
    };
    let gauge = |(name, value): &(&str, f64)| Metric {
        name: Bytes::copy_from_slice(name.as_bytes()),
        data: Some(Data::Gauge(Points {
            data_points: vec![NumberDataPoint {
                attributes: vec![text("zone", "front")],
                time_unix_nano: t_ms as u64 * 1_000_000,
                value: Some(Number::AsDouble(*value)),
            }],
        })),
    };
    let resource = |(device, gauges): &(String, Vec<(&str, f64)>)| ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                text("telemetry.sdk.language", "python"),
                text("telemetry.sdk.name", "opentelemetry"),
                text("telemetry.sdk.version", "1.45.2"),
                text("service.name", "fleet-agent"),
                text("device.id", device),
            ],
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: gauges.iter().map(gauge).collect(),
        }],
    };
    ExportRequest {
        resource_metrics: devices.iter().map(resource).collect(),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests;
