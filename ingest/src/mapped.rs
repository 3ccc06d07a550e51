//! A fleet's own JSON documents: where the device id, the event time and
//! each stream's value live in a message ([`Mapping`], from the `[input]`
//! table), so a topic that already carries telemetry — one document per
//! device report, several metrics in it, `vin`/`ts` fields, RFC 3339 times —
//! is read without a translator in front.
//!
//! A document gives one reading per mapped stream whose value is present (a
//! flat map in the terms of Tumult's "Understanding sensitivity" (docs/DESIGN.md §10): one message contributes at most one reading
//! per stream, and the per-window cap `k` per device and stream still bounds
//! what a device adds, so no sensitivity changes). A missing or malformed
//! device id or event time, or a present value that is not a number, is a
//! dead letter naming the path; a document with none of the mapped values is
//! one too. Payloads are one document or an array of documents, bounded
//! while parsing like the native JSON.

use crate::leaf::Leaf;
#[cfg(test)]
use crate::RawReading as Raw;
use crate::{missing, Found, Reason, Rejection};
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

/// A path into a document: a JSON Pointer (`/cabin/temp`, RFC 6901) or a
/// dotted path (`cabin.temp`), kept as its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    text: String,
    tokens: Vec<String>,
}

/// Most tokens in a path (a document nested deeper is not telemetry).
pub const MAX_PATH_TOKENS: usize = 32;

impl Path {
    /// Parse a path; the error says why.
    pub fn parse(text: &str) -> Result<Path, String> {
        let tokens: Vec<String> = if let Some(rest) = text.strip_prefix('/') {
            // RFC 6901: `~` only as `~0` (a `~`) or `~1` (a `/`).
            let bad = rest
                .split('~')
                .skip(1)
                .find(|after| !after.starts_with('0') && !after.starts_with('1'));
            if let Some(after) = bad {
                let next: String = after.chars().take(1).collect();
                return Err(format!(
                    "{text:?} is not a JSON Pointer: \"~{next}\" is no escape (write ~0 for a ~ and ~1 for a /)"
                ));
            }
            rest.split('/')
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect()
        } else {
            text.split('.').map(str::to_string).collect()
        };
        if text.is_empty() || tokens.iter().any(String::is_empty) {
            return Err(format!(
                "{text:?} is not a path: use a JSON Pointer such as \"/cabin/temp\" or a dotted path such as \"cabin.temp\""
            ));
        }
        if tokens.len() > MAX_PATH_TOKENS {
            return Err(format!("{text:?} has more than {MAX_PATH_TOKENS} parts"));
        }
        Ok(Path {
            text: text.to_string(),
            tokens,
        })
    }

    /// The value at this path, if any (arrays by decimal index).
    pub fn find<'v>(&self, doc: &'v Value) -> Option<&'v Value> {
        self.tokens.iter().try_fold(doc, |v, t| match v {
            Value::Object(m) => m.get(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its tokens (object keys or array indexes), outermost first.
    pub(crate) fn tokens(&self) -> &[String] {
        &self.tokens
    }
}

/// How the event time is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Milliseconds,
    Seconds,
    Microseconds,
    Nanoseconds,
    /// An RFC 3339 string (`2026-11-24T18:30:00.250+01:00`).
    Rfc3339,
}

impl TimeUnit {
    /// `ms`, `s`, `us`, `ns` or `rfc3339`.
    pub fn parse(s: &str) -> Option<TimeUnit> {
        Some(match s {
            "ms" => TimeUnit::Milliseconds,
            "s" => TimeUnit::Seconds,
            "us" => TimeUnit::Microseconds,
            "ns" => TimeUnit::Nanoseconds,
            "rfc3339" => TimeUnit::Rfc3339,
            _ => return None,
        })
    }

    /// Milliseconds since the epoch, if `v` is a time in this unit that
    /// fits (seconds may have a fraction; the rest are integers).
    fn to_ms(self, v: Leaf<'_>) -> Option<i64> {
        const MS_RANGE: f64 = 9.2e18;
        match (self, v) {
            (TimeUnit::Rfc3339, Leaf::Str(s)) => {
                let t =
                    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                        .ok()?;
                i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
            }
            (TimeUnit::Rfc3339, _) => None,
            (TimeUnit::Seconds, v) => {
                let ms = v.as_f64()? * 1e3;
                (ms.is_finite() && ms.abs() < MS_RANGE).then(|| ms.floor() as i64)
            }
            (unit, v) => {
                let x = v.as_i64()?;
                Some(match unit {
                    TimeUnit::Milliseconds => x,
                    TimeUnit::Microseconds => x.div_euclid(1_000),
                    _ => x.div_euclid(1_000_000),
                })
            }
        }
    }
}

/// Where a fleet's document keeps each field.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub device_id: Path,
    pub event_time: Path,
    pub unit: TimeUnit,
    /// (stream name, path of its value), in declaration order.
    pub streams: Vec<(String, Path)>,
    /// (dimension, path of its value): labels of every reading of a document.
    pub labels: Vec<(String, Path)>,
}

impl Mapping {
    /// Every path the mapping reads.
    pub(crate) fn paths(&self) -> Vec<Path> {
        let named = self.streams.iter().chain(&self.labels).map(|(_, p)| p);
        [&self.device_id, &self.event_time]
            .into_iter()
            .chain(named)
            .cloned()
            .collect()
    }

    /// The readings of a payload of documents (at most `max_docs`), owned
    /// (the tests' view of [`Mapping::found_of`]).
    #[cfg(test)]
    pub(crate) fn readings(&self, payload: &[u8], max_docs: usize) -> Result<Vec<Raw>, Rejection> {
        let docs = parse_docs(payload, max_docs)?;
        Ok(self
            .found_of(&docs)?
            .into_iter()
            .map(|w| Raw {
                device_id: Some(w.device_id.into_owned()),
                stream: Some(w.stream.to_owned()),
                value: w.value,
                event_time_ms: w.event_time_ms,
                labels: w.labels,
            })
            .collect())
    }

    /// The readings of decoded documents, their device ids and stream names
    /// borrowed from the documents and the mapping (a document's readings
    /// share them: nothing is copied per reading but its labels).
    pub(crate) fn found_of<'d>(&'d self, docs: &'d [Value]) -> Result<Vec<Found<'d>>, Rejection> {
        self.found_by(docs.len(), |i, _, path| Leaf::of(path.find(&docs[i])))
    }

    /// The readings of one document read by a projection: `leaves` holds
    /// the leaf of each path, in the order of [`Mapping::paths`].
    pub(crate) fn found_in<'d>(&'d self, leaves: &[Leaf<'d>]) -> Result<Vec<Found<'d>>, Rejection> {
        self.found_by(1, |_, k, _| leaves[k])
    }

    /// The readings of `docs` documents; `at(i, k, path)` is document
    /// `i`'s leaf of the `k`-th path of [`Mapping::paths`].
    fn found_by<'d>(
        &'d self,
        docs: usize,
        at: impl Fn(usize, usize, &'d Path) -> Leaf<'d>,
    ) -> Result<Vec<Found<'d>>, Rejection> {
        let mut out = Vec::new();
        let labels_from = 2 + self.streams.len();
        for i in 0..docs {
            // At most one reading per stream: room for them, once per
            // document (no more than a document can fill, however many
            // documents a payload holds).
            out.reserve(self.streams.len());
            let device: Cow<'d, str> = match at(i, 0, &self.device_id) {
                Leaf::Str(s) if !s.is_empty() => Cow::Borrowed(s),
                Leaf::Null | Leaf::Str(_) => return Err(missing(self.device_id.as_str(), i)),
                // Numeric ids are common: their decimal text.
                other => Cow::Owned(
                    other
                        .integer_text()
                        .ok_or_else(|| bad(i, &self.device_id, "is not a string or an integer"))?,
                ),
            };
            let time = match at(i, 1, &self.event_time) {
                Leaf::Null => return Err(missing(self.event_time.as_str(), i)),
                v => self
                    .unit
                    .to_ms(v)
                    .ok_or_else(|| bad(i, &self.event_time, self.unit_hint()))?,
            };
            let mut labels = crate::Labels::new();
            for (k, (name, path)) in self.labels.iter().enumerate() {
                match at(i, labels_from + k, path) {
                    Leaf::Null => {}
                    Leaf::Str(s) => labels.insert(name, s),
                    other => labels.insert(
                        name,
                        &other
                            .integer_text()
                            .ok_or_else(|| bad(i, path, "is not a string or an integer"))?,
                    ),
                }
            }
            let before = out.len();
            for (k, (stream, path)) in self.streams.iter().enumerate() {
                let value = match at(i, 2 + k, path) {
                    Leaf::Null => continue,
                    Leaf::Str(s) if crate::spelled_not_finite(s) => Some(f64::NAN),
                    other => Some(
                        other
                            .as_f64()
                            .ok_or_else(|| bad(i, path, "is not a number"))?,
                    ),
                };
                out.push(Found {
                    device_id: device.clone(),
                    stream,
                    stream_index: 0,
                    value,
                    event_time_ms: Some(time),
                    labels: labels.clone(),
                });
            }
            if out.len() == before {
                let paths: Vec<&str> = self.streams.iter().map(|(_, p)| p.as_str()).collect();
                return Err(Rejection::new(
                    Reason::MissingField,
                    format!(
                        "reading {i}: none of the mapped values is present ({})",
                        paths.join(", ")
                    ),
                ));
            }
        }
        Ok(out)
    }

    fn unit_hint(&self) -> &'static str {
        match self.unit {
            TimeUnit::Rfc3339 => "is not an RFC 3339 time",
            TimeUnit::Seconds => "is not a number of seconds since the epoch",
            TimeUnit::Milliseconds => "is not an integer number of milliseconds since the epoch",
            TimeUnit::Microseconds => "is not an integer number of microseconds since the epoch",
            TimeUnit::Nanoseconds => "is not an integer number of nanoseconds since the epoch",
        }
    }
}

fn bad(i: usize, path: &Path, what: &str) -> Rejection {
    Rejection::new(
        Reason::Undecodable,
        format!("reading {i}: field '{}' {what}", path.as_str()),
    )
}

/// One document, or an array of at most `max` documents (refused at the
/// first one too many, before the rest is parsed).
pub(crate) fn parse_docs(payload: &[u8], max: usize) -> Result<Vec<Value>, Rejection> {
    let too_many = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(payload);
    let docs = Docs {
        max,
        too_many: &too_many,
    }
    .deserialize(&mut de)
    .and_then(|d| de.end().map(|()| d));
    docs.map_err(|e| {
        if too_many.get() {
            Rejection::new(
                Reason::BatchSize,
                format!("more than {max} documents; allowed 1 to {max}"),
            )
        } else {
            Rejection::new(
                Reason::Undecodable,
                format!("JSON: {}", crate::json_error(&e)),
            )
        }
    })
}

#[derive(Clone, Copy)]
struct Docs<'a> {
    max: usize,
    too_many: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Docs<'_> {
    type Value = Vec<Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Docs<'_> {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON document or an array of documents")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let docs: Vec<crate::strict_json::StrictValue> =
            crate::json::bounded_seq(seq, self.max, self.too_many)?;
        Ok(docs.into_iter().map(|d| d.0).collect())
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        // Keys named twice are refused (as native readings refuse them).
        let doc = crate::strict_json::Strict.visit_map(map)?;
        Ok(vec![doc])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(unit: TimeUnit) -> Mapping {
        Mapping {
            device_id: Path::parse("vin").unwrap(),
            event_time: Path::parse("/ts").unwrap(),
            unit,
            streams: vec![
                ("cabin_temp_c".into(), Path::parse("cabin.temp").unwrap()),
                ("battery_v".into(), Path::parse("/battery/v").unwrap()),
                ("tyre_fl".into(), Path::parse("tyres.0").unwrap()),
            ],
            labels: vec![],
        }
    }

    #[test]
    fn paths_parse_and_find() {
        let doc: Value = serde_json::from_str(r#"{"a":{"b/c":[1,{"d":2}]},"x.y":3}"#).unwrap();
        assert_eq!(
            Path::parse("/a/b~1c/1/d").unwrap().find(&doc),
            Some(&Value::from(2))
        );
        assert_eq!(
            Path::parse("/x.y").unwrap().find(&doc),
            Some(&Value::from(3))
        );
        assert_eq!(
            Path::parse("a.b/c.0").unwrap().find(&doc),
            Some(&Value::from(1))
        );
        assert_eq!(Path::parse("a.zz").unwrap().find(&doc), None);
        for bad in ["", "/", "a..b", "/a//b", "/a~2b", "/a~", "/~x"] {
            assert!(Path::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Path::parse("/a~2b").unwrap_err().contains("~2"));
        assert_eq!(Path::parse("/a~0~1b").unwrap().tokens(), ["a~/b"]);
    }

    #[test]
    fn a_multi_metric_document_gives_one_reading_per_present_value() {
        let m = mapping(TimeUnit::Rfc3339);
        let doc = br#"{"vin":"WVW1","ts":"2026-11-24T18:30:00.250+01:00",
                      "cabin":{"temp":21.5},"battery":{"v":12.6},"tyres":[2.4]}"#;
        let r = m.readings(doc, 10).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(
            (
                r[0].device_id.as_deref(),
                r[0].stream.as_deref(),
                r[0].value,
                r[0].event_time_ms
            ),
            (
                Some("WVW1"),
                Some("cabin_temp_c"),
                Some(21.5),
                Some(1_795_541_400_250)
            )
        );
        assert_eq!(r[2].value, Some(2.4));
        // A report without the battery: two readings.
        let doc = br#"[{"vin":7,"ts":"2026-11-24T17:30:00Z","cabin":{"temp":20}},
                       {"vin":"B","ts":"2026-11-24T17:30:01Z","tyres":[2.2]}]"#;
        let r = m.readings(doc, 10).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].device_id.as_deref(), Some("7"));
    }

    #[test]
    fn mapped_labels_are_read_from_their_paths() {
        let mut m = mapping(TimeUnit::Rfc3339);
        m.labels = vec![
            ("firmware".into(), Path::parse("meta.fw").unwrap()),
            ("model".into(), Path::parse("/meta/model").unwrap()),
        ];
        let doc = br#"{"vin":"A","ts":"2026-11-24T17:30:00Z","cabin":{"temp":20},"tyres":[2.2],
                      "meta":{"fw":"4.2","model":3}}"#;
        let r = m.readings(doc, 10).unwrap();
        assert_eq!(r.len(), 2);
        for x in &r {
            assert_eq!(
                x.labels,
                [("firmware", "4.2"), ("model", "3")]
                    .into_iter()
                    .collect::<crate::Labels>()
            );
        }
        let doc =
            br#"{"vin":"A","ts":"2026-11-24T17:30:00Z","cabin":{"temp":20},"meta":{"fw":[1]}}"#;
        let e = m.readings(doc, 10).unwrap_err();
        assert!(e.detail.contains("meta.fw"), "{e}");
        // Absent labels are fine: the device's group is then `other` or
        // the registry's.
        let doc = br#"{"vin":"A","ts":"2026-11-24T17:30:00Z","cabin":{"temp":20}}"#;
        assert!(m.readings(doc, 10).unwrap()[0].labels.is_empty());
    }

    #[test]
    fn time_units_convert_to_milliseconds() {
        // A leaf borrows its value: the test's few values live for the run.
        let v = |s: &str| -> Leaf<'static> {
            Leaf::of(Some(Box::leak(Box::new(
                serde_json::from_str::<Value>(s).unwrap(),
            ))))
        };
        assert_eq!(
            TimeUnit::Seconds.to_ms(v("1700000000.5")),
            Some(1_700_000_000_500)
        );
        assert_eq!(
            TimeUnit::Seconds.to_ms(v("1700000000")),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            TimeUnit::Microseconds.to_ms(v("1700000000123456")),
            Some(1_700_000_000_123)
        );
        assert_eq!(
            TimeUnit::Nanoseconds.to_ms(v("1700000000123456789")),
            Some(1_700_000_000_123)
        );
        assert_eq!(TimeUnit::Milliseconds.to_ms(v("1.5")), None);
        assert_eq!(TimeUnit::Seconds.to_ms(v("1e300")), None);
        assert_eq!(TimeUnit::Rfc3339.to_ms(v("\"yesterday\"")), None);
        assert_eq!(TimeUnit::Rfc3339.to_ms(v("1700000000")), None);
        assert_eq!(
            TimeUnit::Rfc3339.to_ms(v("\"1970-01-01T00:00:01Z\"")),
            Some(1000)
        );
    }

    /// Every bad document is refused naming the path, never a value.
    #[test]
    fn bad_documents_name_the_field() {
        let m = mapping(TimeUnit::Milliseconds);
        let cases: [(&[u8], Reason, &str); 7] = [
            (
                br#"{"ts":1,"cabin":{"temp":1}}"#,
                Reason::MissingField,
                "'vin'",
            ),
            (
                br#"{"vin":"a","cabin":{"temp":1}}"#,
                Reason::MissingField,
                "'/ts'",
            ),
            (
                br#"{"vin":"a","ts":"x","cabin":{"temp":1}}"#,
                Reason::Undecodable,
                "'/ts' is not an integer",
            ),
            (
                br#"{"vin":["a"],"ts":1,"cabin":{"temp":1}}"#,
                Reason::Undecodable,
                "'vin' is not a string",
            ),
            (
                br#"{"vin":"a","ts":1,"cabin":{"temp":"hot"}}"#,
                Reason::Undecodable,
                "'cabin.temp' is not a number",
            ),
            (
                br#"{"vin":"a","ts":1,"other":1}"#,
                Reason::MissingField,
                "none of the mapped values",
            ),
            (
                br#"{"vin":"a","ts":1,"cabin":{"temp":1}"#,
                Reason::Undecodable,
                "JSON:",
            ),
        ];
        for (doc, reason, detail) in cases {
            let e = m.readings(doc, 10).unwrap_err();
            assert_eq!(e.reason, reason, "{}", String::from_utf8_lossy(doc));
            assert!(
                e.detail.contains(detail),
                "{} for {}",
                e.detail,
                String::from_utf8_lossy(doc)
            );
            assert!(!e.detail.contains("hot"), "a value in {}", e.detail);
        }
        let many = br#"[{},{},{}]"#;
        assert_eq!(m.readings(many, 2).unwrap_err().reason, Reason::BatchSize);
    }
}
