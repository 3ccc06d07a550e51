//! A fleet's own Avro records: each message is one Avro datum in binary
//! encoding (as Schema Registry serializers write them after their frame;
//! no container-file header), decoded with `apache-avro` against the
//! writer's schema from a `.avsc` file, turned into a JSON value (records
//! and maps as objects, unions as their branch, enums as their symbol,
//! timestamps and dates as their numbers, bytes and fixed absent) and read
//! by the same [`crate::Mapping`] as JSON documents, so paths, units and
//! errors are the same for every format. FleetDP's own reader reads the
//! mapping's paths straight from the bytes instead, with the same verdicts
//! and no JSON built (`avro_reader/direct.rs`).
//!
//! With Schema Registry framing the frame's schema id can be pinned: a
//! message written with another schema would be misread against this one,
//! so it is dead-lettered naming both ids.

use crate::avro_reader::{Compiled, Projection};
use crate::leaf::Leaf;
use crate::mapped::Path;
use crate::project::{self, float, MAX_DEPTH};
use crate::{Reason, Rejection};
use apache_avro::types::Value as Av;
use apache_avro::Schema;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The writer's schema of an input topic.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    schema: Schema,
    /// The schema compiled for FleetDP's own reader (`None`: a type it
    /// leaves to apache-avro).
    compiled: Option<Arc<Compiled>>,
    /// Without `compiled`: the walk that bounds a message's items before
    /// apache-avro builds it (`None` only for a schema neither can walk).
    scanner: Option<Arc<Compiled>>,
    /// The Schema Registry id every framed message must carry, if pinned.
    id: Option<u32>,
    /// The mapping's paths, read straight into leaves when `compiled`
    /// allows ([`AvroSchema::prepare`]).
    projection: Option<Arc<Projection>>,
}

/// Largest allocation one message's decoding may ask for (a hostile length
/// prefix must not reserve gigabytes); a message holds at most this much.
pub const MAX_AVRO_ALLOCATION: usize = 16 << 20;

fn undecodable(what: String) -> Rejection {
    Rejection::new(Reason::Undecodable, what)
}

impl AvroSchema {
    /// Parse a writer's schema (`.avsc` JSON); `id` pins the Schema
    /// Registry id of framed messages.
    pub fn new(text: &str, id: Option<u32>) -> Result<AvroSchema, String> {
        // Bounded once per process; the limit is global to the crate.
        let _ = apache_avro::max_allocation_bytes(MAX_AVRO_ALLOCATION);
        let schema = Schema::parse_str(text).map_err(|e| format!("not an Avro schema: {e}"))?;
        if !matches!(schema, Schema::Record(_)) {
            return Err("the schema must be a record (the fleet's message)".into());
        }
        let compiled = Compiled::new(&schema).map(Arc::new);
        let scanner = match compiled {
            Some(_) => None,
            None => Some(Arc::new(Compiled::scanner(&schema).ok_or(
                "the schema uses a type FleetDP cannot bound (its messages could not be checked before decoding)",
            )?)),
        };
        Ok(AvroSchema {
            schema,
            compiled,
            scanner,
            id,
            projection: None,
        })
    }

    /// The record's full name.
    pub fn name(&self) -> String {
        match &self.schema {
            Schema::Record(r) => r.name.fullname(None),
            _ => String::new(),
        }
    }

    /// Check a framed message's schema id against the pinned one.
    pub fn check_id(&self, id: u32) -> Result<(), Rejection> {
        match self.id {
            Some(pinned) if pinned != id => Err(undecodable(format!(
                "Schema Registry framing: schema id {id}, but input.avro_schema_id pins {pinned}"
            ))),
            _ => Ok(()),
        }
    }

    /// Decode one datum into a JSON value; every byte must belong to it.
    pub fn to_json(&self, body: &[u8]) -> Result<Value, Rejection> {
        self.to_json_for(body, None)
    }

    /// [`AvroSchema::to_json`], building only what `paths` read (the
    /// rest is checked, not built): what a mapping needs.
    pub fn to_json_for(&self, body: &[u8], paths: Option<&[Path]>) -> Result<Value, Rejection> {
        match &self.compiled {
            Some(c) => c
                .decode(body, paths)
                .map_err(|e| undecodable(format!("Avro {}: {e}", self.name()))),
            None => {
                if let Some(scan) = &self.scanner {
                    scan.check_items(body)
                        .map_err(|e| undecodable(format!("Avro {}: {e}", self.name())))?;
                }
                self.to_json_reference(body)
            }
        }
    }

    /// Read the mapping's `paths` (`Mapping::paths`) straight from each
    /// message when the schema allows ([`AvroSchema::leaves`]).
    pub(crate) fn prepare(&mut self, paths: &[Path]) {
        self.projection = project::plan(self.compiled.as_ref(), paths);
    }

    /// Whether [`Self::prepare`] found a plan for the mapping's paths.
    #[cfg(test)]
    pub(crate) fn is_prepared(&self) -> bool {
        self.projection.is_some()
    }

    /// Whether FleetDP reads `paths` straight from this schema's messages,
    /// building no JSON value (else it builds the parts they read).
    pub fn reads_directly(&self, paths: &[Path]) -> bool {
        project::plan::<_, Projection>(self.compiled.as_ref(), paths).is_some()
    }

    /// The leaves of the paths given to [`AvroSchema::prepare`] in one
    /// message, or `None` when they are read as JSON
    /// ([`AvroSchema::to_json_for`]); the verdict is the same either way.
    pub(crate) fn leaves<'a>(&'a self, body: &'a [u8]) -> Option<Result<Vec<Leaf<'a>>, Rejection>> {
        let read = project::read(self.projection.as_ref(), self.compiled.as_ref(), body)?;
        Some(read.map_err(|e| undecodable(format!("Avro {}: {e}", self.name()))))
    }

    /// Whether FleetDP's own reader decodes this schema (else apache-avro).
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }

    /// The same datum decoded by apache-avro (the reader for schemas with
    /// `uuid` or `big-decimal`; the reference the tests compare with).
    pub fn to_json_reference(&self, body: &[u8]) -> Result<Value, Rejection> {
        let mut r = Tracked {
            rest: body,
            short: false,
        };
        let v = apache_avro::from_avro_datum(&self.schema, &mut r, None)
            .map_err(|e| undecodable(format!("Avro {}: {e}", self.name())))?;
        // apache-avro reads a string or bytes cut short by the end of the
        // message as `null` instead of failing: any read the message could
        // not fill means it ends inside the record.
        if r.short {
            return Err(undecodable(format!(
                "Avro {}: the message ends inside the record",
                self.name()
            )));
        }
        if !r.rest.is_empty() {
            return Err(undecodable(format!(
                "Avro {}: {} bytes after the record",
                self.name(),
                r.rest.len()
            )));
        }
        convert(v, 0)
    }
}

/// The message's bytes, noting a read it could not fill.
struct Tracked<'a> {
    rest: &'a [u8],
    short: bool,
}

impl std::io::Read for Tracked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.len() > self.rest.len() {
            self.short = true;
        }
        self.rest.read(buf)
    }
}

fn convert(v: Av, depth: usize) -> Result<Value, Rejection> {
    if depth > MAX_DEPTH {
        return Err(undecodable(format!(
            "Avro value nested deeper than {MAX_DEPTH}"
        )));
    }
    Ok(match v {
        Av::Null => Value::Null,
        Av::Boolean(b) => Value::Bool(b),
        Av::Int(i) | Av::Date(i) | Av::TimeMillis(i) => Value::from(i),
        Av::Long(i)
        | Av::TimeMicros(i)
        | Av::TimestampMillis(i)
        | Av::TimestampMicros(i)
        | Av::TimestampNanos(i)
        | Av::LocalTimestampMillis(i)
        | Av::LocalTimestampMicros(i)
        | Av::LocalTimestampNanos(i) => Value::from(i),
        Av::Float(f) => float(f as f64),
        Av::Double(f) => float(f),
        Av::String(s) | Av::Enum(_, s) => Value::String(s),
        Av::Uuid(u) => Value::String(u.to_string()),
        Av::Union(_, b) => convert(*b, depth + 1)?,
        Av::Record(fields) => {
            let mut m = Map::new();
            for (k, v) in fields {
                m.insert(k, convert(v, depth + 1)?);
            }
            Value::Object(m)
        }
        Av::Map(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(k, convert(v, depth + 1)?);
            }
            Value::Object(m)
        }
        Av::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| convert(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        // Bytes, fixed, decimals and durations carry no reading.
        _ => Value::Null,
    })
}

/// The worked example's schema (docs/input.md, "Bring your own topic"): what a
/// fleet's telematics unit might publish, for tests and benches.
pub const EXAMPLE_AVRO_SCHEMA: &str = r#"{
  "type": "record", "name": "Telemetry", "namespace": "acme.v1",
  "fields": [
    {"name": "vin", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "cabin", "type": {"type": "record", "name": "Cabin",
      "fields": [{"name": "temp_c", "type": ["null", "double"], "default": null}]}},
    {"name": "battery_v", "type": "float"},
    {"name": "firmware", "type": "string"}
  ]
}"#;

/// One message of [`EXAMPLE_AVRO_SCHEMA`], encoded (no frame).
pub fn example_avro(vin: &str, ts_ms: i64, temp_c: Option<f64>, battery_v: f32) -> Vec<u8> {
    let schema = Schema::parse_str(EXAMPLE_AVRO_SCHEMA).expect("the example parses");
    let cabin = Av::Record(vec![(
        "temp_c".into(),
        match temp_c {
            Some(t) => Av::Union(1, Box::new(Av::Double(t))),
            None => Av::Union(0, Box::new(Av::Null)),
        },
    )]);
    let record = Av::Record(vec![
        ("vin".into(), Av::String(vin.into())),
        ("ts".into(), Av::TimestampMillis(ts_ms)),
        ("cabin".into(), cabin),
        ("battery_v".into(), Av::Float(battery_v)),
        ("firmware".into(), Av::String("4.2".into())),
    ]);
    apache_avro::to_avro_datum(&schema, record).expect("the example encodes")
}

/// Encode a JSON value as one datum of the record `schema` (`.avsc` text):
/// for tests, benches and tools that write a fleet's Avro topic.
pub fn encode_avro_json(schema: &str, value: &Value) -> Result<Vec<u8>, String> {
    let schema = Schema::parse_str(schema).map_err(|e| format!("not an Avro schema: {e}"))?;
    let v = Av::from(value.clone())
        .resolve(&schema)
        .map_err(|e| format!("the value does not fit the schema: {e}"))?;
    apache_avro::to_avro_datum(&schema, v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> AvroSchema {
        AvroSchema::new(EXAMPLE_AVRO_SCHEMA, Some(7)).unwrap()
    }

    #[test]
    fn a_record_becomes_its_json() {
        let v = schema()
            .to_json(&example_avro("VIN1", 1_795_541_400_000, Some(21.5), 12.5))
            .unwrap();
        assert_eq!(v["vin"], "VIN1");
        assert_eq!(v["ts"], 1_795_541_400_000i64);
        assert_eq!(v["cabin"]["temp_c"], 21.5);
        assert_eq!(v["battery_v"], 12.5);
        let v = schema()
            .to_json(&example_avro("VIN1", 1, None, 12.5))
            .unwrap();
        assert!(v["cabin"]["temp_c"].is_null());
    }

    #[test]
    fn bad_bytes_are_undecodable_and_name_the_record() {
        let good = example_avro("VIN1", 5, Some(1.0), 1.0);
        for bad in [&good[..good.len() - 1], &[0xff; 3][..], &[][..]] {
            let e = schema().to_json(bad).unwrap_err();
            assert_eq!(e.reason, Reason::Undecodable);
            assert!(e.detail.contains("acme.v1.Telemetry"), "{}", e.detail);
        }
        let mut trailing = good.clone();
        trailing.push(0);
        let e = schema().to_json(&trailing).unwrap_err();
        assert!(
            e.detail.contains("1 bytes after the record"),
            "{}",
            e.detail
        );
    }

    #[test]
    fn a_huge_length_prefix_is_refused_without_allocating_it() {
        // vin's length as a zig-zag varint of ~2^40.
        let bytes = [0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
        assert!(schema().to_json(&bytes).is_err());
    }

    #[test]
    fn ids_and_schemas_are_checked() {
        assert!(schema().check_id(7).is_ok());
        let e = schema().check_id(8).unwrap_err();
        assert!(e.detail.contains("schema id 8") && e.detail.contains("pins 7"));
        assert!(AvroSchema::new("{", None)
            .unwrap_err()
            .contains("not an Avro schema"));
        assert!(AvroSchema::new("\"long\"", None)
            .unwrap_err()
            .contains("record"));
        assert!(AvroSchema::new(EXAMPLE_AVRO_SCHEMA, None)
            .unwrap()
            .check_id(99)
            .is_ok());
    }

    #[test]
    fn json_values_encode_as_the_record() {
        let doc = serde_json::json!({"vin": "V", "ts": 5, "cabin": {"temp_c": 1.5}, "battery_v": 12.5, "firmware": "4.2"});
        let bytes = encode_avro_json(EXAMPLE_AVRO_SCHEMA, &doc).unwrap();
        assert_eq!(bytes, example_avro("V", 5, Some(1.5), 12.5));
        assert!(encode_avro_json(EXAMPLE_AVRO_SCHEMA, &serde_json::json!({"vin": 1})).is_err());
    }

    #[test]
    fn non_finite_floats_are_spelled() {
        assert_eq!(float(f64::NAN), "nan");
        assert_eq!(float(f64::NEG_INFINITY), "-inf");
        assert_eq!(float(2.5), 2.5);
    }
}
