//! A fleet's own Protobuf messages, read through the fleet's descriptor set
//! (`protoc --descriptor_set_out=set.pb --include_imports telemetry.proto`):
//! decoded as that message, turned into a JSON value (proto field names,
//! 64-bit integers and enums as numbers, bytes fields absent) and read by
//! the same [`crate::Mapping`] as JSON documents, so paths, units and
//! errors are the same for both.

use crate::described_reader::{Compiled, Projection};
use crate::leaf::Leaf;
use crate::mapped::Path;
use crate::project::{self, float, MAX_DEPTH};
use crate::{Reason, Rejection};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, Value as Pv};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The declared message type of an input topic.
#[derive(Debug, Clone)]
pub struct Described {
    message: MessageDescriptor,
    /// The message compiled for FleetDP's own reader (`None`: it has
    /// groups or extensions, left to prost-reflect).
    compiled: Option<Arc<Compiled>>,
    /// Its message-index path in its file (Schema Registry framing).
    indexes: Vec<i64>,
    /// The mapping's paths, read straight into leaves when `compiled`
    /// allows ([`Described::prepare`]).
    projection: Option<Arc<Projection>>,
}

/// `message`'s path of indexes from its file: its place among the file's
/// top-level messages, then among each enclosing message's nested ones.
fn index_path(message: &MessageDescriptor) -> Vec<i64> {
    let mut path = Vec::new();
    let mut m = message.clone();
    loop {
        let parent = m.parent_message();
        let place = match &parent {
            Some(p) => p.child_messages().position(|c| c == m),
            None => m.parent_file().messages().position(|c| c == m),
        };
        path.push(place.expect("a message is among its parent's") as i64);
        match parent {
            Some(p) => m = p,
            None => break,
        }
    }
    path.reverse();
    path
}

/// The first 20 of `names`, for an error that says what there is.
fn some_names(names: impl Iterator<Item = String>) -> String {
    names.take(20).collect::<Vec<_>>().join(", ")
}

impl Described {
    /// The message `name` (fully qualified, e.g. `acme.v1.Telemetry`) of a
    /// serialized `FileDescriptorSet`.
    pub fn new(descriptor_set: &[u8], name: &str) -> Result<Described, String> {
        let set = prost_types::FileDescriptorSet::decode(descriptor_set)
            .map_err(|e| format!("not a FileDescriptorSet: {e}"))?;
        let pool = DescriptorPool::from_file_descriptor_set(set)
            .map_err(|e| format!("the descriptor set does not resolve: {e}"))?;
        let message = pool.get_message_by_name(name).ok_or_else(|| {
            let known = some_names(pool.all_messages().map(|m| m.full_name().to_string()));
            format!("no message {name:?} in the descriptor set (it has: {known})")
        })?;
        let compiled = Compiled::new(&message).map(Arc::new);
        let indexes = index_path(&message);
        Ok(Described {
            message,
            compiled,
            indexes,
            projection: None,
        })
    }

    /// The message's full name.
    pub fn name(&self) -> &str {
        self.message.full_name()
    }

    /// Check that `path` can find a value in this message: each part names a
    /// field (by its proto name) of the message it is in, a list index or a
    /// map key, and it does not end on or pass through a `bytes` field
    /// (bytes are never read). A mapping whose path names no field would
    /// dead-letter every message as missing that value.
    pub fn check_path(&self, path: &Path) -> Result<(), String> {
        use prost_reflect::Kind;
        let mut message = self.message.clone();
        let mut tokens = path.tokens().iter().peekable();
        while let Some(t) = tokens.next() {
            let field = message.get_field_by_name(t).ok_or_else(|| {
                let known = some_names(message.fields().map(|f| f.name().to_string()));
                format!(
                    "{:?}: no field {t:?} in {} (it has: {known})",
                    path.as_str(),
                    message.full_name()
                )
            })?;
            let mut kind = field.kind();
            if field.is_list() || field.is_map() {
                let Some(index) = tokens.next() else {
                    // A whole list or map: a value only as a whole.
                    return Ok(());
                };
                if field.is_list() && index.parse::<usize>().is_err() {
                    return Err(format!(
                        "{:?}: {t:?} is a repeated field: the next part must be an index, not {index:?}",
                        path.as_str()
                    ));
                }
                if let (true, Kind::Message(entry)) = (field.is_map(), &kind) {
                    kind = entry.map_entry_value_field().kind();
                }
            }
            match kind {
                Kind::Bytes => {
                    return Err(format!(
                        "{:?}: {t:?} is a bytes field, which FleetDP never reads",
                        path.as_str()
                    ))
                }
                Kind::Message(m) => message = m,
                _ if tokens.peek().is_some() => {
                    return Err(format!(
                        "{:?}: {t:?} is a scalar field; nothing lies below it",
                        path.as_str()
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Check a Schema Registry message-index path against the declared
    /// message: the indexes name a message of the declared message's file
    /// (`[0]`: its first top-level message; nested ones by further indexes).
    pub fn check_indexes(&self, indexes: &[i64]) -> Result<(), Rejection> {
        // A message's path from its file is unique: the indexes name it
        // exactly when they are its path.
        if indexes == self.indexes.as_slice() {
            return Ok(());
        }
        Err(Rejection::new(
            Reason::Undecodable,
            format!(
                "Schema Registry framing: message index {indexes:?} is not {} of the declared descriptor set",
                self.message.full_name()
            ),
        ))
    }

    /// Decode one message into a JSON value.
    pub fn to_json(&self, body: &[u8]) -> Result<Value, Rejection> {
        self.to_json_for(body, None)
    }

    /// [`Described::to_json`], building only what `paths` read (the rest
    /// is checked, not built): what a mapping needs.
    pub fn to_json_for(&self, body: &[u8], paths: Option<&[Path]>) -> Result<Value, Rejection> {
        match &self.compiled {
            Some(c) => c.decode(body, paths).map_err(|e| {
                Rejection::new(
                    Reason::Undecodable,
                    format!("{}: {e}", self.message.full_name()),
                )
            }),
            None => self.to_json_reference(body),
        }
    }

    /// Read the mapping's `paths` (`Mapping::paths`) straight from each
    /// message when the message type allows ([`Described::leaves`]).
    pub(crate) fn prepare(&mut self, paths: &[Path]) {
        self.projection = project::plan(self.compiled.as_ref(), paths);
    }

    /// Whether [`Self::prepare`] found a plan for the mapping's paths.
    #[cfg(test)]
    pub(crate) fn is_prepared(&self) -> bool {
        self.projection.is_some()
    }

    /// Whether FleetDP reads `paths` straight from this type's messages,
    /// building no JSON value (else it builds the parts they read).
    pub fn reads_directly(&self, paths: &[Path]) -> bool {
        project::plan::<_, Projection>(self.compiled.as_ref(), paths).is_some()
    }

    /// The leaves of the paths given to [`Described::prepare`] in one
    /// message, or `None` when they are read as JSON
    /// ([`Described::to_json_for`]); the verdict is the same either way.
    pub(crate) fn leaves<'a>(&'a self, body: &'a [u8]) -> Option<Result<Vec<Leaf<'a>>, Rejection>> {
        let read = project::read(self.projection.as_ref(), self.compiled.as_ref(), body)?;
        Some(read.map_err(|e| {
            Rejection::new(
                Reason::Undecodable,
                format!("{}: {e}", self.message.full_name()),
            )
        }))
    }

    /// Whether FleetDP's own reader decodes this message (else prost-reflect).
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }

    /// The same message decoded by prost-reflect (the reader for messages
    /// with groups or extensions; the reference the tests compare with).
    pub fn to_json_reference(&self, body: &[u8]) -> Result<Value, Rejection> {
        let m = DynamicMessage::decode(self.message.clone(), body).map_err(|e| {
            Rejection::new(
                Reason::Undecodable,
                format!("{}: {e}", self.message.full_name()),
            )
        })?;
        message(&m, 0).ok_or_else(|| {
            Rejection::new(
                Reason::Undecodable,
                format!(
                    "{}: nested deeper than {MAX_DEPTH}",
                    self.message.full_name()
                ),
            )
        })
    }
}

fn message(m: &DynamicMessage, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut out = Map::new();
    for (field, v) in m.fields() {
        out.insert(field.name().to_string(), value(v, depth)?);
    }
    Some(Value::Object(out))
}

fn value(v: &Pv, depth: usize) -> Option<Value> {
    Some(match v {
        Pv::Bool(b) => Value::Bool(*b),
        Pv::I32(x) | Pv::EnumNumber(x) => Value::from(*x),
        Pv::I64(x) => Value::from(*x),
        Pv::U32(x) => Value::from(*x),
        Pv::U64(x) => Value::from(*x),
        // Non-finite floats become the strings the mapping rejects as such.
        Pv::F32(x) => float(*x as f64),
        Pv::F64(x) => float(*x),
        Pv::String(s) => Value::String(s.clone()),
        // Bytes fields cannot be mapped: absent to the mapping.
        Pv::Bytes(_) => Value::Null,
        Pv::Message(m) => message(m, depth + 1)?,
        Pv::List(l) => Value::Array(
            l.iter()
                .map(|x| value(x, depth + 1))
                .collect::<Option<_>>()?,
        ),
        Pv::Map(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                let key = match k {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(x) => x.to_string(),
                    MapKey::I64(x) => x.to_string(),
                    MapKey::U32(x) => x.to_string(),
                    MapKey::U64(x) => x.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                out.insert(key, value(x, depth + 1)?);
            }
            Value::Object(out)
        }
    })
}

/// The descriptor set of the manual's worked example (docs/input.md), `acme.v1.Telemetry`
/// (`examples/telemetry.proto`): `string vin = 1; int64 ts = 2;
/// Cabin cabin = 3 { double temp = 1; } repeated double tyres = 4;
/// string firmware = 5;` and a second message `acme.v1.Ping`. Tests and
/// benches build their payloads against it.
pub fn example_descriptor_set() -> Vec<u8> {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    };
    let field = |name: &str, number: i32, ty: Type, label: Label, type_name: Option<&str>| {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            r#type: Some(ty as i32),
            label: Some(label as i32),
            type_name: type_name.map(str::to_string),
            ..Default::default()
        }
    };
    let one = Label::Optional;
    let cabin = DescriptorProto {
        name: Some("Cabin".into()),
        field: vec![field("temp", 1, Type::Double, one, None)],
        ..Default::default()
    };
    let telemetry = DescriptorProto {
        name: Some("Telemetry".into()),
        field: vec![
            field("vin", 1, Type::String, one, None),
            field("ts", 2, Type::Int64, one, None),
            field(
                "cabin",
                3,
                Type::Message,
                one,
                Some(".acme.v1.Telemetry.Cabin"),
            ),
            field("tyres", 4, Type::Double, Label::Repeated, None),
            field("firmware", 5, Type::String, one, None),
        ],
        nested_type: vec![cabin],
        ..Default::default()
    };
    let ping = DescriptorProto {
        name: Some("Ping".into()),
        field: vec![field("x", 1, Type::String, one, None)],
        ..Default::default()
    };
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("telemetry.proto".into()),
            package: Some("acme.v1".into()),
            message_type: vec![telemetry, ping],
            syntax: Some("proto3".into()),
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// A payload of the example: `acme.v1.Telemetry` with these fields (two
/// tyres).
pub fn example_message(vin: &str, ts_ms: i64, temp: Option<f64>, firmware: &str) -> Vec<u8> {
    example_report(vin, ts_ms, temp, &[2.1, 2.2], firmware)
}

/// A payload of the example with these tyre readings.
pub fn example_report(
    vin: &str,
    ts_ms: i64,
    temp: Option<f64>,
    tyres: &[f64],
    firmware: &str,
) -> Vec<u8> {
    static D: std::sync::OnceLock<Described> = std::sync::OnceLock::new();
    let d = D.get_or_init(|| {
        Described::new(&example_descriptor_set(), "acme.v1.Telemetry").expect("example")
    });
    let mut m = DynamicMessage::new(d.message.clone());
    m.set_field_by_name("vin", Pv::String(vin.into()));
    m.set_field_by_name("ts", Pv::I64(ts_ms));
    if let Some(t) = temp {
        let cabin = d.message.get_field_by_name("cabin").expect("cabin");
        let prost_reflect::Kind::Message(cd) = cabin.kind() else {
            unreachable!("cabin is a message")
        };
        let mut c = DynamicMessage::new(cd);
        c.set_field_by_name("temp", Pv::F64(t));
        m.set_field_by_name("cabin", Pv::Message(c));
    }
    let tyres = tyres.iter().map(|&t| Pv::F64(t)).collect();
    m.set_field_by_name("tyres", Pv::List(tyres));
    m.set_field_by_name("firmware", Pv::String(firmware.into()));
    m.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decoder, Format, Limits, Mapping, Path, TimeUnit};

    /// A framing's message indexes name the declared message exactly when
    /// following them from its file (top-level messages, then nested ones)
    /// reaches it: every message of a file with nested messages, against
    /// every index path of up to 3 indexes in -1..4.
    #[test]
    fn message_indexes_name_the_declared_message_exactly() {
        use prost_types::{DescriptorProto as M, FileDescriptorProto, FileDescriptorSet};
        let msg = |name: &str, nested: Vec<M>| M {
            name: Some(name.into()),
            nested_type: nested,
            ..M::default()
        };
        let file = FileDescriptorProto {
            name: Some("n.proto".into()),
            package: Some("n".into()),
            message_type: vec![
                msg(
                    "A",
                    vec![msg("B", vec![msg("C", vec![])]), msg("E", vec![])],
                ),
                msg("D", vec![msg("F", vec![])]),
            ],
            ..FileDescriptorProto::default()
        };
        let set = FileDescriptorSet { file: vec![file] }.encode_to_vec();
        let mut paths: Vec<Vec<i64>> = vec![vec![]];
        for len in 1..=3u32 {
            for k in 0..5i64.pow(len) {
                paths.push((0..len).map(|d| (k / 5i64.pow(d)) % 5 - 1).collect());
            }
        }
        for name in ["n.A", "n.A.B", "n.A.B.C", "n.A.E", "n.D", "n.D.F"] {
            let d = Described::new(&set, name).unwrap();
            let mut named = 0;
            for p in &paths {
                // The reference: walk the indexes through the descriptors.
                let file = d.message.parent_file();
                let mut found: Option<MessageDescriptor> = None;
                for (depth, &i) in p.iter().enumerate() {
                    let Ok(i) = usize::try_from(i) else {
                        found = None;
                        break;
                    };
                    found = match depth {
                        0 => file.messages().nth(i),
                        _ => found.and_then(|m| m.child_messages().nth(i)),
                    };
                }
                let expected = found.as_ref() == Some(&d.message);
                named += usize::from(expected);
                assert_eq!(d.check_indexes(p).is_ok(), expected, "{name} {p:?}");
            }
            assert_eq!(named, 1, "{name}");
        }
    }

    /// Issue: `plan` accepted paths to missing fields (every message then
    /// dead-lettered as missing the value) and to bytes fields (never read).
    #[test]
    fn paths_must_name_readable_fields() {
        let d = Described::new(&example_descriptor_set(), "acme.v1.Telemetry").unwrap();
        let check = |p: &str| d.check_path(&Path::parse(p).unwrap());
        for ok in ["vin", "/ts", "cabin.temp", "tyres.0", "tyres", "cabin"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("cabin.humidity", "no field \"humidity\""),
            ("speed", "it has: vin, ts, cabin"),
            ("tyres.front", "must be an index"),
            ("vin.x", "scalar"),
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // A bytes field.
        let mut set = prost_types::FileDescriptorSet::decode(&*example_descriptor_set()).unwrap();
        let telemetry = &mut set.file[0].message_type[0];
        let mut raw = telemetry.field[0].clone();
        raw.name = Some("raw".into());
        raw.number = Some(9);
        raw.r#type = Some(prost_types::field_descriptor_proto::Type::Bytes as i32);
        telemetry.field.push(raw);
        let d = Described::new(&set.encode_to_vec(), "acme.v1.Telemetry").unwrap();
        let e = d.check_path(&Path::parse("raw").unwrap()).unwrap_err();
        assert!(e.contains("bytes field"), "{e}");
    }

    fn decoder(framing: crate::Framing) -> Decoder {
        let d = Described::new(&example_descriptor_set(), "acme.v1.Telemetry").unwrap();
        Decoder::new(
            ["cabin_temp_c".to_string(), "tyre_fl".to_string()],
            Format::Protobuf,
            Limits::default(),
        )
        .with_mapping(Mapping {
            device_id: Path::parse("vin").unwrap(),
            event_time: Path::parse("ts").unwrap(),
            unit: TimeUnit::Milliseconds,
            streams: vec![
                ("cabin_temp_c".into(), Path::parse("cabin.temp").unwrap()),
                ("tyre_fl".into(), Path::parse("tyres.0").unwrap()),
            ],
            labels: vec![("firmware".into(), Path::parse("firmware").unwrap())],
        })
        .with_described(d)
        .with_framing(framing)
    }

    #[test]
    fn the_fleets_own_messages_are_read_through_the_mapping() {
        let d = decoder(crate::Framing::None);
        let r = d
            .decode(
                &example_message("VIN1", 1_700_000_000_123, Some(21.5), "4.2"),
                None,
            )
            .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].device_id.as_str(), r[0].value, r[0].event_time_ms),
            ("VIN1", 21.5, 1_700_000_000_123)
        );
        assert_eq!((r[1].stream_index, r[1].value), (1, 2.1));
        assert_eq!(
            r[0].labels,
            [("firmware", "4.2")].into_iter().collect::<crate::Labels>()
        );
        // Without the cabin: the tyre alone.
        let r = d
            .decode(&example_message("VIN1", 5, None, "4.2"), None)
            .unwrap();
        assert_eq!(r.len(), 1);
        // Not the message: undecodable, naming it; a missing id names the path.
        let e = d.decode(&[0xff, 0xff, 0xff], None).unwrap_err();
        assert!(e.detail.contains("acme.v1.Telemetry"), "{}", e.detail);
        let e = d
            .decode(&example_message("", 5, Some(1.0), "x"), None)
            .unwrap_err();
        assert_eq!(e.reason, Reason::MissingField);
        assert!(e.detail.contains("vin"), "{}", e.detail);
    }

    #[test]
    fn schema_registry_indexes_must_name_the_declared_message() {
        let d = decoder(crate::Framing::Confluent);
        let body = example_message("VIN1", 5, Some(20.0), "4.1");
        let ok = crate::frame(7, Some(&[0]), &body);
        assert_eq!(d.decode(&ok, None).unwrap().len(), 2);
        for bad in [&[1][..], &[0, 0], &[5]] {
            let e = d
                .decode(&crate::frame(7, Some(bad), &body), None)
                .unwrap_err();
            assert!(
                e.detail.contains("acme.v1.Telemetry"),
                "{bad:?}: {}",
                e.detail
            );
        }
    }

    #[test]
    fn unknown_messages_and_bad_sets_are_refused_naming_what() {
        let e = Described::new(&example_descriptor_set(), "acme.v1.Nope").unwrap_err();
        assert!(e.contains("acme.v1.Telemetry") && e.contains("Nope"), "{e}");
        assert!(Described::new(b"\xff\xff", "x").is_err());
    }
}
