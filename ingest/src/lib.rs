//! Ingest: decode and validate input messages into [`Reading`]s, or say
//! precisely why a message must go to the dead-letter topic.
//!
//! A message is accepted whole or rejected whole: if any reading in a batch is
//! invalid, the message is dead-lettered with the reason of the first bad
//! reading, so nothing is lost and nothing is half-applied. Rejections carry a
//! machine-readable [`Reason`] and a human message naming the field; neither
//! ever contains a reading's value.
//!
//! This file holds the shared types (formats, readings, rejections, limits)
//! and the helpers the formats share; [`Decoder`] (`decoder.rs`) calls the
//! formats, which never call it back.

mod avro;
mod avro_reader;
mod decoder;
mod described;
mod described_reader;
mod framing;
mod json;
mod labels;
mod leaf;
mod mapped;
mod names;
mod otlp;
mod otlp_json;
mod otlp_scan;
mod otlp_walk;
mod project;
mod scan;
mod strict_json;
mod wire;

pub use avro::{
    encode_avro_json, example_avro, AvroSchema, EXAMPLE_AVRO_SCHEMA, MAX_AVRO_ALLOCATION,
};
pub use avro_reader::MAX_AVRO_ITEMS;
pub use decoder::Decoder;
pub use described::{example_descriptor_set, example_message, example_report, Described};
pub use framing::{frame, Framing};
pub use labels::Labels;
pub use mapped::{Mapping, Path, TimeUnit, MAX_PATH_TOKENS};
pub use otlp::{example_otlp, OtlpMapping};
pub use otlp_scan::{
    MAX_OTLP_ATTRIBUTES, MAX_OTLP_METRICS, MAX_OTLP_POINTS, MAX_OTLP_RESOURCES, MAX_OTLP_SCOPES,
};

use prost::Message;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;

/// How a payload is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One `DeviceReading`.
    Protobuf,
    /// One `ReadingBatch`.
    ProtobufBatch,
    /// A JSON object with the reading's fields, `{"readings": [...]}` or an array.
    Json,
    /// One Avro datum of the fleet's own record (`[input] avro_schema`),
    /// read through the `[input]` mapping.
    Avro,
    /// An OTLP `ExportMetricsServiceRequest` in Protobuf, read through the
    /// `[otlp]` mapping.
    #[serde(rename = "otlp_proto", alias = "otlp-proto")]
    OtlpProto,
    /// The same in OTLP/JSON.
    #[serde(rename = "otlp_json", alias = "otlp-json")]
    OtlpJson,
}

impl Format {
    /// Content types: `application/json`,
    /// `application/vnd.fleetdp.reading+protobuf` (or `application/x-protobuf`),
    /// `application/vnd.fleetdp.batch+protobuf`, `application/avro` (or
    /// `avro/binary`).
    pub fn from_content_type(ct: &str) -> Option<Format> {
        let base = ct.split(';').next().unwrap_or("").trim();
        let is = |s: &str| base.eq_ignore_ascii_case(s);
        if is("application/json") {
            Some(Format::Json)
        } else if is("application/vnd.fleetdp.reading+protobuf")
            || is("application/x-protobuf")
            || is("application/protobuf")
        {
            Some(Format::Protobuf)
        } else if is("application/vnd.fleetdp.batch+protobuf") {
            Some(Format::ProtobufBatch)
        } else if is("application/avro") || is("avro/binary") {
            Some(Format::Avro)
        } else {
            None
        }
    }

    pub fn content_type(&self) -> &'static str {
        match self {
            Format::Protobuf => "application/vnd.fleetdp.reading+protobuf",
            Format::ProtobufBatch => "application/vnd.fleetdp.batch+protobuf",
            Format::Json => "application/json",
            Format::Avro => "application/avro",
            Format::OtlpProto => "application/x-protobuf",
            Format::OtlpJson => "application/json",
        }
    }

    /// OpenTelemetry's formats: their content types (OTLP/HTTP's) name
    /// them when the declared format is one of them.
    pub fn is_otlp(&self) -> bool {
        matches!(self, Format::OtlpProto | Format::OtlpJson)
    }
}

/// Why a message was dead-lettered (also the `fleetdp-reason` header and the
/// metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Not valid protobuf/JSON, or an unknown content type.
    Undecodable,
    /// A required field is missing or empty.
    MissingField,
    /// The value is NaN or ±∞.
    NotFinite,
    /// The stream is not declared in the config.
    UnknownStream,
    /// The payload is larger than allowed.
    Oversize,
    /// A batch holds more readings than allowed, or none.
    BatchSize,
    /// The event time is older than the stream's allowed lateness.
    TooOld,
    /// A reading's device id does not belong on the message's partition
    /// under the declared partitioner (a device must stay on one partition).
    WrongPartition,
    /// A reading's event time is before 1970, or later than its message's
    /// Kafka timestamp plus the allowed clock skew (a wrong device clock,
    /// or microseconds sent as milliseconds).
    Future,
    /// A record batch the consumer could not decompress, skipped under
    /// `kafka.undecodable = "skip"` (the dead letter names its offsets;
    /// the service, not the decoder, gives this reason).
    UndecodableBatch,
    /// An OTLP metric the mapping names is of a kind FleetDP does not read
    /// (a cumulative sum, a histogram, an exponential histogram, a
    /// summary).
    UnsupportedMetric,
}

impl Reason {
    pub const ALL: [Reason; 11] = [
        Reason::Undecodable,
        Reason::MissingField,
        Reason::NotFinite,
        Reason::UnknownStream,
        Reason::Oversize,
        Reason::BatchSize,
        Reason::TooOld,
        Reason::WrongPartition,
        Reason::Future,
        Reason::UndecodableBatch,
        Reason::UnsupportedMetric,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Undecodable => "undecodable",
            Reason::MissingField => "missing_field",
            Reason::NotFinite => "not_finite",
            Reason::UnknownStream => "unknown_stream",
            Reason::Oversize => "oversize",
            Reason::BatchSize => "batch_size",
            Reason::TooOld => "too_old",
            Reason::WrongPartition => "wrong_partition",
            Reason::Future => "future",
            Reason::UndecodableBatch => "undecodable_batch",
            Reason::UnsupportedMetric => "unsupported_metric",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected message: the reason and a detail naming the field at fault
/// (never a value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    pub detail: String,
}

impl Rejection {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail)
    }
}

/// A decoded, validated reading (value not yet top-coded).
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub device_id: String,
    pub stream: String,
    /// Position of `stream` in the list the decoder was built with.
    pub stream_index: usize,
    pub value: f64,
    pub event_time_ms: i64,
    /// Dimension values sent with the reading (name, value), sorted by name.
    pub labels: Labels,
}

impl Reading {
    /// The reading, borrowed.
    pub fn borrowed(&self) -> ReadingRef<'_> {
        ReadingRef {
            device_id: &self.device_id,
            stream: &self.stream,
            stream_index: self.stream_index,
            value: self.value,
            event_time_ms: self.event_time_ms,
            labels: &self.labels,
        }
    }
}

/// A decoded, validated reading borrowed from its message, or from a
/// [`Reading`] ([`Decoder::visit`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadingRef<'a> {
    pub device_id: &'a str,
    pub stream: &'a str,
    /// Position of `stream` in the list the decoder was built with.
    pub stream_index: usize,
    pub value: f64,
    pub event_time_ms: i64,
    /// Dimension values sent with the reading (name, value), sorted by name.
    pub labels: &'a Labels,
}

impl ReadingRef<'_> {
    /// The reading, owned.
    pub fn into_owned(self) -> Reading {
        Reading {
            device_id: self.device_id.to_owned(),
            stream: self.stream.to_owned(),
            stream_index: self.stream_index,
            value: self.value,
            event_time_ms: self.event_time_ms,
            labels: self.labels.clone(),
        }
    }
}

/// A reading as a walk over its message found it (`wire.rs`,
/// `otlp_walk.rs`): its strings borrowed from the message where they can
/// be, its labels in one buffer; `stream_index` is set when the decoder
/// validates it.
#[derive(Debug, Default)]
pub(crate) struct Found<'a> {
    pub(crate) device_id: std::borrow::Cow<'a, str>,
    pub(crate) stream: &'a str,
    pub(crate) stream_index: usize,
    pub(crate) value: Option<f64>,
    pub(crate) event_time_ms: Option<i64>,
    pub(crate) labels: Labels,
}

impl Found<'_> {
    /// The reading, borrowed; only once validated (its value and event
    /// time present, its stream's index set).
    #[inline]
    pub(crate) fn borrowed(&self) -> ReadingRef<'_> {
        ReadingRef {
            device_id: &self.device_id,
            stream: self.stream,
            stream_index: self.stream_index,
            value: self.value.expect("validated"),
            event_time_ms: self.event_time_ms.expect("validated"),
            labels: &self.labels,
        }
    }
}

/// Most labels one reading may carry.
pub const MAX_LABELS: usize = 16;
/// Longest label name or value (bytes).
pub const MAX_LABEL_BYTES: usize = 64;

/// Decoding limits.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_message_bytes: usize,
    pub max_readings_per_message: usize,
    pub max_device_id_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1 << 20,
            max_readings_per_message: 10_000,
            max_device_id_bytes: 256,
        }
    }
}

/// A reading as decoded, before validation.
#[derive(Debug, Default)]
pub(crate) struct RawReading {
    pub device_id: Option<String>,
    pub stream: Option<String>,
    pub value: Option<f64>,
    pub event_time_ms: Option<i64>,
    pub labels: Labels,
}

/// `"nan"`, `"inf"` and the like: JSON has no NaN/∞ literals; they are
/// accepted spelled as strings only to be rejected with the right reason.
pub(crate) fn spelled_not_finite(s: &str) -> bool {
    matches!(
        s.to_ascii_lowercase().as_str(),
        "nan" | "inf" | "-inf" | "infinity" | "-infinity"
    )
}

fn missing(field: &str, index: usize) -> Rejection {
    Rejection::new(
        Reason::MissingField,
        format!("reading {index}: field '{field}' is missing or empty"),
    )
}

/// serde_json errors quote input; keep only the category and position.
/// A JSON parse error without the input's text (a hostile message must not
/// put its bytes in logs): what kind, and where. Nesting past serde_json's
/// limit and keys named twice say so.
fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let what = if text.starts_with("recursion limit exceeded") {
        format!("nested deeper than {MAX_JSON_DEPTH} levels (the JSON nesting limit)")
    } else if text.starts_with("duplicate key") {
        // Our own message: the key (at most 64 characters) and no more.
        text.split(" at line ")
            .next()
            .unwrap_or("duplicate key")
            .to_string()
    } else {
        format!("{:?} error", e.classify())
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

/// Deepest nesting of arrays and objects a JSON message may have
/// (serde_json's recursion limit).
pub const MAX_JSON_DEPTH: usize = 128;

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::{DeviceReading, ReadingBatch};

    fn decoder() -> Decoder {
        Decoder::new(["temp".to_string()], Format::Protobuf, Limits::default())
    }

    fn reading(value: Option<f64>) -> DeviceReading {
        DeviceReading {
            device_id: "dev-1".into(),
            stream: "temp".into(),
            value,
            event_time_ms: Some(1000),
            labels: Default::default(),
        }
    }

    #[test]
    fn good_messages_in_every_format() {
        let d = decoder();
        let one = reading(Some(21.5)).encode_to_vec();
        assert_eq!(d.decode(&one, None).unwrap()[0].value, 21.5);
        let batch = ReadingBatch {
            readings: vec![reading(Some(1.0)), reading(Some(2.0))],
        }
        .encode_to_vec();
        assert_eq!(
            d.decode(&batch, Some(Format::ProtobufBatch.content_type()))
                .unwrap()
                .len(),
            2
        );
        let json = br#"{"device_id":"a","stream":"temp","value":3,"event_time_ms":5}"#;
        assert_eq!(
            d.decode(json, Some("application/json")).unwrap()[0].value,
            3.0
        );
        let list = br#"{"readings":[{"device_id":"a","stream":"temp","value":3,"event_time_ms":5},
                                   {"device_id":"b","stream":"temp","value":-1.5,"event_time_ms":6}]}"#;
        assert_eq!(
            d.decode(list, Some("application/json; charset=utf-8"))
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn every_bad_class_has_its_reason() {
        let d = decoder();
        let json = Some("application/json");
        let cases: Vec<(Vec<u8>, Option<&str>, Reason)> = vec![
            (vec![0xff, 0xff, 0xff], None, Reason::Undecodable),
            (b"not json".to_vec(), json, Reason::Undecodable),
            (b"{}".to_vec(), Some("text/plain"), Reason::Undecodable),
            (
                br#"{"stream":"temp","value":1,"event_time_ms":1}"#.to_vec(),
                json,
                Reason::MissingField,
            ),
            (
                br#"{"device_id":"a","stream":"temp","event_time_ms":1}"#.to_vec(),
                json,
                Reason::MissingField,
            ),
            (
                br#"{"device_id":"a","stream":"temp","value":1}"#.to_vec(),
                json,
                Reason::MissingField,
            ),
            (reading(None).encode_to_vec(), None, Reason::MissingField),
            (
                reading(Some(f64::NAN)).encode_to_vec(),
                None,
                Reason::NotFinite,
            ),
            (
                reading(Some(f64::INFINITY)).encode_to_vec(),
                None,
                Reason::NotFinite,
            ),
            (
                br#"{"device_id":"a","stream":"temp","value":"NaN","event_time_ms":1}"#.to_vec(),
                json,
                Reason::NotFinite,
            ),
            (
                br#"{"device_id":"a","stream":"nope","value":1,"event_time_ms":1}"#.to_vec(),
                json,
                Reason::UnknownStream,
            ),
            (vec![b' '; (1 << 20) + 1], json, Reason::Oversize),
            (br#"{"readings":[]}"#.to_vec(), json, Reason::BatchSize),
        ];
        for (payload, ct, reason) in cases {
            let got = d.decode(&payload, ct).unwrap_err();
            assert_eq!(got.reason, reason, "{got}");
        }
    }

    /// Schema Registry framing: JSON after the 5-byte header, protobuf
    /// after it and the message index ([0] a reading, [1] a batch);
    /// unframed or mis-indexed messages are refused as undecodable.
    #[test]
    fn schema_registry_frames_are_stripped() {
        let d = decoder().with_framing(Framing::Confluent);
        let json = br#"{"device_id":"a","stream":"temp","value":3,"event_time_ms":5}"#;
        let got = d
            .decode(&frame(7, None, json), Some("application/json"))
            .unwrap();
        assert_eq!(got[0].value, 3.0);
        let one = reading(Some(1.5)).encode_to_vec();
        assert_eq!(
            d.decode(&frame(7, Some(&[0]), &one), None).unwrap()[0].value,
            1.5
        );
        let batch = ReadingBatch {
            readings: vec![reading(Some(1.0)), reading(Some(2.0))],
        }
        .encode_to_vec();
        assert_eq!(
            d.decode(&frame(8, Some(&[1]), &batch), None).unwrap().len(),
            2
        );
        for (payload, ct) in [
            (json.to_vec(), Some("application/json")),
            (one.clone(), None),
            (frame(7, Some(&[2]), &one), None),
            (frame(7, Some(&[0, 1]), &one), None),
        ] {
            assert_eq!(
                d.decode(&payload, ct).unwrap_err().reason,
                Reason::Undecodable
            );
        }
    }

    /// Labels arrive in every format, sorted by name; too many or too long
    /// ones are refused naming the label, never quoting its value.
    #[test]
    fn labels_in_every_format_and_their_bounds() {
        let d = decoder();
        let mut r = reading(Some(1.0));
        r.labels = [("region", "eu"), ("firmware", "4.2")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let want: Labels = [("firmware", "4.2"), ("region", "eu")]
            .into_iter()
            .collect();
        assert_eq!(d.decode(&r.encode_to_vec(), None).unwrap()[0].labels, want);
        let json = br#"{"device_id":"a","stream":"temp","value":3,"event_time_ms":5,"labels":{"region":"eu","firmware":"4.2"}}"#;
        let got = d.decode(json, Some("application/json")).unwrap();
        assert_eq!(got[0].labels, want);
        let json = br#"{"device_id":"a","stream":"temp","value":3,"event_time_ms":5,"labels":{"region":7}}"#;
        assert_eq!(
            d.decode(json, Some("application/json")).unwrap_err().reason,
            Reason::Undecodable
        );
        let mut long = reading(Some(1.0));
        long.labels.insert("region".into(), "secret-".repeat(20));
        let e = d.decode(&long.encode_to_vec(), None).unwrap_err();
        assert_eq!(e.reason, Reason::Oversize);
        assert!(
            e.detail.contains("region") && !e.detail.contains("secret"),
            "{e}"
        );
        let mut many = reading(Some(1.0));
        for i in 0..=MAX_LABELS {
            many.labels.insert(format!("l{i}"), "x".into());
        }
        let e = d.decode(&many.encode_to_vec(), None).unwrap_err();
        assert!(e.detail.contains("labels"), "{e}");
    }

    #[test]
    fn rejections_never_quote_values() {
        let d = decoder();
        let e = d
            .decode(
                br#"{"device_id":"a","stream":"temp","value":"secret-123.456","event_time_ms":1}"#,
                Some("application/json"),
            )
            .unwrap_err();
        assert!(!e.detail.contains("123.456"), "{e}");
        let e = d
            .decode(
                br#"{"device_id":"a","stream":"temp","value":98765.4321,"event_time_ms":"x"}"#,
                Some("application/json"),
            )
            .unwrap_err();
        assert!(!e.detail.contains("98765"), "{e}");
    }
}
