//! Releases as OpenTelemetry metrics (docs/output.md#opentelemetry): each
//! window and fleet release, once written natively, is also written to
//! `kafka.otlp_topic` as one OTLP `ExportMetricsServiceRequest`, in the
//! encodings the Collector's Kafka receiver reads (`otlp_proto`,
//! `otlp_json`). Every released figure is a gauge point whose attributes
//! name the stream, statistic, partition or fleet, group, seq and window;
//! a figure with an interval has its bounds as the gauges
//! `<metric>.lower` and `<metric>.upper`, a quantile's rank interval
//! (readings either side) as `<metric>.rank_half_width`.
//!
//! Privacy: the request is a function of the native record alone (its
//! released values, half-widths, public fields and release time) and of
//! the stream's declared unit: post-processing of what is already
//! published, so it costs nothing and carries nothing more.

mod json;

use crate::clients::kafka::{self, Producer, Record, CONTENT_TYPE};
use crate::config::{OtlpEncoding, Validated};
use anyhow::Result;
use prost::Message as _;
use proto::otlp::{
    any_value, metric, number_data_point, AnyValue, ExportMetricsServiceRequest, Gauge,
    InstrumentationScope, KeyValue, Metric, NumberDataPoint, Resource, ResourceMetrics,
    ScopeMetrics,
};
use rdkafka::message::{Header, OwnedHeaders};

/// The resource's `service.name` and the instrumentation scope's name.
pub const SERVICE_NAME: &str = "fleetdp";

/// Encode a request for the OTLP topic; returns (payload, content type).
pub fn encode(
    req: &ExportMetricsServiceRequest,
    encoding: OtlpEncoding,
) -> (Vec<u8>, &'static str) {
    match encoding {
        OtlpEncoding::OtlpProto => (req.encode_to_vec(), "application/x-protobuf"),
        OtlpEncoding::OtlpJson => (json::to_vec(req), "application/json"),
    }
}

/// The declared unit of `stream` (a group's stream is named
/// `<stream>[…]`).
fn declared_unit<'a>(v: &'a Validated, stream: &str) -> Option<&'a str> {
    let of = |name: &str| {
        stream == name
            || stream
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('['))
    };
    let s = v.config.streams.iter().find(|s| of(&s.name))?;
    s.unit.as_deref()
}

/// A release's OTLP record (payload, content type), where
/// `kafka.otlp_topic` asks for one; `request` maps it in the stream's unit.
fn record(
    v: &Validated,
    stream: &str,
    request: impl FnOnce(String) -> ExportMetricsServiceRequest,
) -> Option<(Vec<u8>, &'static str)> {
    v.config.kafka.otlp_topic.as_ref()?;
    let req = request(ucum(declared_unit(v, stream)));
    Some(encode(
        &req,
        v.config.kafka.otlp_encoding.unwrap_or_default(),
    ))
}

/// A window release's OTLP record, where one is asked for.
pub fn window_record(v: &Validated, r: &proto::WindowRelease) -> Option<(Vec<u8>, &'static str)> {
    record(v, &r.stream, |unit| window_request(r, unit))
}

/// A fleet release's OTLP record, where one is asked for.
pub fn fleet_record(v: &Validated, f: &proto::FleetRelease) -> Option<(Vec<u8>, &'static str)> {
    record(v, &f.stream, |unit| fleet_request(f, unit))
}

/// Write an OTLP record under its release's key, stamped as the release
/// is, and wait for its acknowledgement. Written before the native
/// record: a crash between the two leaves the release unwritten, and its
/// replay (the same figures) writes the OTLP record again, so none is
/// lost and a copy may repeat.
pub(crate) async fn write(
    producer: &Producer,
    v: &Validated,
    key: &str,
    (payload, content_type): &(Vec<u8>, &'static str),
    timestamp_ms: Option<i64>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let Some(topic) = &v.config.kafka.otlp_topic else {
        return Ok(());
    };
    let headers = OwnedHeaders::new().insert(Header {
        key: CONTENT_TYPE,
        value: Some(*content_type),
    });
    let record = Record {
        topic,
        key: key.as_bytes(),
        payload: Some(payload),
        partition: None,
        headers,
        timestamp_ms,
    };
    kafka::produce_acked(producer, record, stop).await?;
    Ok(())
}

/// The stream's unit as UCUM (c/s), as OTLP wants it: the units people
/// write that UCUM spells otherwise are translated, printable ASCII
/// without spaces is taken as written, anything else is left out.
pub fn ucum(unit: Option<&str>) -> String {
    let Some(u) = unit.map(str::trim) else {
        return String::new();
    };
    let known = [
        ("°C", "Cel"),
        ("℃", "Cel"),
        ("°F", "[degF]"),
        ("℉", "[degF]"),
        ("µs", "us"),
        ("μs", "us"),
        ("Ω", "Ohm"),
        ("rpm", "{rpm}"),
    ];
    if let Some((_, to)) = known.iter().find(|(from, _)| *from == u) {
        return (*to).to_string();
    }
    let plain = !u.is_empty() && u.chars().all(|c| c.is_ascii_graphic());
    if plain {
        u.to_string()
    } else {
        String::new()
    }
}

/// The unit of a statistic's values, from the readings' UCUM unit `u`.
fn unit_of(statistic: &str, u: &str) -> String {
    match statistic {
        "count" | "histogram" => "{reading}".into(),
        "clamped" => "1".into(),
        "variance" if u.is_empty() => String::new(),
        "variance" if u.chars().all(|c| c.is_ascii_alphabetic()) => format!("{u}2"),
        "variance" => format!("({u}).({u})"),
        _ => u.into(),
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn text(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn int(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

fn nanos(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000)
}

/// What every point of one release carries, and how its metrics are
/// gathered.
struct Builder {
    common: Vec<KeyValue>,
    start: u64,
    time: u64,
    unit: String,
    metrics: Vec<Metric>,
}

/// One released figure: its statistic, values, per-value attributes (a
/// quantile's level, a histogram's bins), half-width and a quantile's
/// rank interval (window releases only).
struct Figure<'a> {
    name: &'a str,
    values: &'a [f64],
    level: Option<f64>,
    bin_edges: &'a [f64],
    half_width: Option<f64>,
    rank_half_width: Option<f64>,
}

impl<'a> Figure<'a> {
    fn of(
        name: &'a str,
        values: &'a [f64],
        level: Option<f64>,
        bin_edges: &'a [f64],
        half_width: Option<f64>,
    ) -> Self {
        Figure {
            name,
            values,
            level,
            bin_edges,
            half_width,
            rank_half_width: None,
        }
    }
}

impl Builder {
    fn new(common: Vec<KeyValue>, first_ms: i64, released_ms: i64, unit: String) -> Self {
        Builder {
            common,
            start: nanos(first_ms),
            time: nanos(released_ms),
            unit,
            metrics: vec![],
        }
    }

    /// The metric `name` (made on first use) gets one point per value.
    fn gauge(&mut self, name: String, unit: &str, points: Vec<(f64, Vec<KeyValue>)>) {
        let data_points = points.into_iter().map(|(v, extra)| NumberDataPoint {
            attributes: self.common.iter().cloned().chain(extra).collect(),
            start_time_unix_nano: self.start,
            time_unix_nano: self.time,
            value: Some(number_data_point::Value::AsDouble(v)),
        });
        let at = match self.metrics.iter().position(|m| m.name == name) {
            Some(at) => at,
            None => {
                self.metrics.push(Metric {
                    name,
                    unit: unit.into(),
                    data: Some(metric::Data::Gauge(Gauge::default())),
                    ..Default::default()
                });
                self.metrics.len() - 1
            }
        };
        if let Some(metric::Data::Gauge(g)) = &mut self.metrics[at].data {
            g.data_points.extend(data_points);
        }
    }

    /// Per value: its attributes (statistic, level, bin) beside the
    /// release's.
    fn per_value(f: &Figure<'_>, i: usize) -> Vec<KeyValue> {
        let mut a = vec![text("fleetdp.statistic", f.name)];
        if let Some(q) = f.level {
            a.push(kv(
                "fleetdp.quantile.level",
                any_value::Value::DoubleValue(q),
            ));
        }
        if f.name == "histogram" || !f.bin_edges.is_empty() {
            a.push(int("fleetdp.bin", i as i64));
            if let (Some(&lo), Some(&hi)) = (f.bin_edges.get(i), f.bin_edges.get(i + 1)) {
                a.push(kv("fleetdp.bin.lower", any_value::Value::DoubleValue(lo)));
                a.push(kv("fleetdp.bin.upper", any_value::Value::DoubleValue(hi)));
            }
        }
        a
    }

    fn figure(&mut self, f: Figure<'_>) {
        let unit = unit_of(f.name, &self.unit);
        let metric = format!("fleetdp.{}", f.name);
        let points = |shift: f64| -> Vec<(f64, Vec<KeyValue>)> {
            f.values
                .iter()
                .enumerate()
                .map(|(i, v)| (v + shift, Self::per_value(&f, i)))
                .collect()
        };
        self.gauge(metric.clone(), &unit, points(0.0));
        if let Some(h) = f.half_width.filter(|h| h.is_finite()) {
            self.gauge(format!("{metric}.lower"), &unit, points(-h));
            self.gauge(format!("{metric}.upper"), &unit, points(h));
        }
        if let Some(r) = f.rank_half_width.filter(|r| r.is_finite()) {
            let ranks = (0..f.values.len())
                .map(|i| (r, Self::per_value(&f, i)))
                .collect();
            self.gauge(format!("{metric}.rank_half_width"), "{reading}", ranks);
        }
    }

    fn running(&mut self, totals: &[proto::v1::RunningTotal]) {
        for t in totals {
            let unit = unit_of(&t.name, &self.unit);
            let f = Figure::of(&t.name, &t.values, None, &t.bin_edges, None);
            let with_windows = |mut a: Vec<KeyValue>| {
                a.push(int("fleetdp.running.windows", t.windows as i64));
                a
            };
            let points = (0..t.values.len())
                .map(|i| (t.values[i], with_windows(Self::per_value(&f, i))))
                .collect();
            self.gauge(format!("fleetdp.running.{}", t.name), &unit, points);
            let std = vec![(
                t.std,
                with_windows(vec![text("fleetdp.statistic", &t.name)]),
            )];
            self.gauge(format!("fleetdp.running.{}.std", t.name), &unit, std);
        }
    }

    fn request(self) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![text("service.name", SERVICE_NAME)],
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SERVICE_NAME.into(),
                        version: String::new(),
                    }),
                    metrics: self.metrics,
                }],
            }],
        }
    }
}

/// The attributes every point of a release carries: stream, seq, window
/// span and size, group.
fn window_attributes(
    stream: &str,
    seq: u64,
    span: (i64, i64),
    n: u64,
    group: &std::collections::HashMap<String, String>,
) -> Vec<KeyValue> {
    let mut a = vec![
        text("fleetdp.stream", stream),
        int("fleetdp.window.seq", seq as i64),
        int("fleetdp.window.first_event_time_ms", span.0),
        int("fleetdp.window.last_event_time_ms", span.1),
        int("fleetdp.window.n", n as i64),
    ];
    let mut dims: Vec<_> = group.iter().collect();
    dims.sort();
    a.extend(
        dims.into_iter()
            .map(|(d, v)| text(&format!("fleetdp.group.{d}"), v)),
    );
    a
}

/// A partition's window release as OTLP metrics (`unit`: the stream's,
/// as [`ucum`] gives it).
pub fn window_request(r: &proto::WindowRelease, unit: String) -> ExportMetricsServiceRequest {
    let span = (r.first_event_time_ms, r.last_event_time_ms);
    let mut common = window_attributes(&r.stream, r.window_seq, span, r.n, &r.group);
    common.push(text("fleetdp.scope", "partition"));
    common.push(int("fleetdp.partition", i64::from(r.partition)));
    let mut b = Builder::new(common, r.first_event_time_ms, r.released_at_ms, unit);
    for s in &r.statistics {
        b.figure(Figure {
            rank_half_width: s.rank_half_width,
            ..Figure::of(&s.name, &s.values, s.level, &s.bin_edges, s.half_width)
        });
    }
    b.running(&r.running);
    b.request()
}

/// A fleet release as OTLP metrics.
pub fn fleet_request(f: &proto::FleetRelease, unit: String) -> ExportMetricsServiceRequest {
    let span = (f.first_event_time_ms, f.last_event_time_ms);
    let mut common = window_attributes(&f.stream, f.window_seq, span, f.n, &f.group);
    common.push(text("fleetdp.scope", "fleet"));
    common.push(int("fleetdp.fleet.partitions", f.partitions.len() as i64));
    common.push(kv(
        "fleetdp.fleet.complete",
        any_value::Value::BoolValue(f.complete),
    ));
    let mut b = Builder::new(common, f.first_event_time_ms, f.released_at_ms, unit);
    for s in &f.statistics {
        b.figure(Figure::of(
            &s.name,
            &s.values,
            s.level,
            &s.bin_edges,
            s.half_width,
        ));
    }
    b.running(&f.running);
    b.request()
}

#[cfg(test)]
mod tests;
