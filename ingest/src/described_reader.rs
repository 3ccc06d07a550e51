//! The Protobuf decoding FleetDP runs per message of a fleet's own type:
//! the descriptor compiled once into a table of fields per message, then
//! each message walked with prost's own wire-format primitives, building
//! JSON only for the parts the mapping reads (`crate::project`) and
//! checking the rest without building it.
//!
//! Why not `prost_reflect::DynamicMessage`: it stores every field of every
//! message as a dynamic value, which a JSON value is then made from — 0.18×
//! the `DeviceReading` path decoding alone (docs/performance.md). The
//! result is the same as decoding the message with prost-reflect and
//! converting it as `crate::described` does: the same wire-format checks
//! (prost's `merge` per kind, packed and unpacked lists, map entries,
//! unknown fields skipped), the last value of a field wins, a message field
//! seen twice merges, setting one member of a oneof clears the others, a
//! field without presence (proto3) is absent when it holds its default,
//! and messages nest at most `MAX_DEPTH` deep as converted (a list or map
//! counts a level). Messages with groups, or with extensions declared in
//! the descriptor set, are left to prost-reflect. `ingest/tests/fuzz.rs`
//! compares the two message by message.

use crate::mapped::Path;
use crate::project::{self, float, Want, MAX_DEPTH};
use prost::bytes::Buf;
use prost::encoding::{self as enc, DecodeContext, WireType};
use prost::DecodeError;
use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value};
use std::collections::HashMap;

mod direct;
pub(crate) use direct::Projection;

/// A compiled descriptor: messages by index, the declared one first.
#[derive(Debug)]
pub(crate) struct Compiled {
    messages: Vec<Vec<Field>>,
}

#[derive(Debug)]
struct Field {
    number: u32,
    name: String,
    kind: K,
    shape: Shape,
    /// The other members of its oneof.
    siblings: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    /// A single value; `presence`: kept even when it is the default.
    Single { presence: bool },
    /// Repeated; `packable`: scalars that may come packed.
    List { packable: bool },
    /// A map with this key kind (the value is the field's kind).
    Map { key: K },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum K {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
    /// An enum, with its default number (its first value's).
    Enum(i32),
    Message(usize),
}

impl Compiled {
    /// Field `number` of message `msg` and its index there (`None`: a
    /// field the message does not declare, skipped).
    fn field(&self, msg: usize, number: u32) -> Option<(usize, &Field)> {
        let fields = &self.messages[msg];
        let i = fields.binary_search_by_key(&number, |f| f.number).ok()?;
        Some((i, &fields[i]))
    }

    /// Compile `message`; `None` when it uses what is left to prost-reflect.
    pub(crate) fn new(message: &MessageDescriptor) -> Option<Compiled> {
        let mut c = Compiled {
            messages: Vec::new(),
        };
        let mut memo = HashMap::new();
        c.message(message, &mut memo)?;
        Some(c)
    }

    fn message(
        &mut self,
        m: &MessageDescriptor,
        memo: &mut HashMap<String, usize>,
    ) -> Option<usize> {
        if let Some(&at) = memo.get(m.full_name()) {
            return Some(at);
        }
        if m.extensions().len() > 0 {
            return None;
        }
        let at = self.messages.len();
        self.messages.push(Vec::new());
        memo.insert(m.full_name().to_string(), at);
        let mut fields = Vec::new();
        for f in m.fields() {
            if f.is_group() {
                return None;
            }
            let (kind, shape) = if f.is_map() {
                let Kind::Message(entry) = f.kind() else {
                    return None;
                };
                let key = self.kind(&entry.map_entry_key_field().kind(), memo)?;
                let value = self.kind(&entry.map_entry_value_field().kind(), memo)?;
                (value, Shape::Map { key })
            } else if f.is_list() {
                let kind = self.kind(&f.kind(), memo)?;
                let packable = !matches!(kind, K::String | K::Bytes | K::Message(_));
                (kind, Shape::List { packable })
            } else {
                let presence = f.supports_presence();
                (self.kind(&f.kind(), memo)?, Shape::Single { presence })
            };
            let siblings = f
                .containing_oneof()
                .map(|o| {
                    o.fields()
                        .filter(|s| s.number() != f.number())
                        .map(|s| s.name().to_string())
                        .collect()
                })
                .unwrap_or_default();
            fields.push(Field {
                number: f.number(),
                name: f.name().to_string(),
                kind,
                shape,
                siblings,
            });
        }
        fields.sort_by_key(|f| f.number);
        self.messages[at] = fields;
        Some(at)
    }

    fn kind(&mut self, k: &Kind, memo: &mut HashMap<String, usize>) -> Option<K> {
        Some(match k {
            Kind::Double => K::Double,
            Kind::Float => K::Float,
            Kind::Int32 => K::Int32,
            Kind::Int64 => K::Int64,
            Kind::Uint32 => K::Uint32,
            Kind::Uint64 => K::Uint64,
            Kind::Sint32 => K::Sint32,
            Kind::Sint64 => K::Sint64,
            Kind::Fixed32 => K::Fixed32,
            Kind::Fixed64 => K::Fixed64,
            Kind::Sfixed32 => K::Sfixed32,
            Kind::Sfixed64 => K::Sfixed64,
            Kind::Bool => K::Bool,
            Kind::String => K::String,
            Kind::Bytes => K::Bytes,
            Kind::Enum(e) => K::Enum(e.default_value().number()),
            Kind::Message(m) => K::Message(self.message(m, memo)?),
        })
    }

    /// Decode one message, building the parts `paths` read (`None`: all).
    pub(crate) fn decode(&self, body: &[u8], paths: Option<&[Path]>) -> Result<Value, String> {
        let mut w = Walk {
            c: self,
            msg: 0,
            want: project::root(paths),
            tok: 0,
            depth: 0,
            paths: paths.unwrap_or(&[]),
            out: Map::new(),
            too_deep: false,
        };
        let r = prost::Message::merge(&mut w, body);
        if w.too_deep {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        r.map_err(|e| e.to_string())?;
        Ok(Value::Object(w.out))
    }
}

/// One message being read (a prost `Message`, so that prost frames it).
#[derive(Debug)]
struct Walk<'a> {
    c: &'a Compiled,
    msg: usize,
    want: Want,
    tok: usize,
    depth: usize,
    paths: &'a [Path],
    out: Map<String, Value>,
    /// A message nested deeper than converted was met (refused).
    too_deep: bool,
}

impl Walk<'_> {
    /// A walker of message `msg` nested `levels` below this one, building
    /// into `out`.
    fn child(&self, msg: usize, levels: usize, want: Want, out: Map<String, Value>) -> Self {
        Walk {
            c: self.c,
            msg,
            want,
            tok: self.tok + 1,
            depth: self.depth + levels,
            paths: self.paths,
            out,
            too_deep: false,
        }
    }

    /// Read a message value of `msg`, `levels` below, merging into `into`.
    fn message(
        &mut self,
        msg: usize,
        (levels, want): (usize, Want),
        into: Map<String, Value>,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<Map<String, Value>, DecodeError> {
        let mut w = self.child(msg, levels, want, into);
        if w.depth > MAX_DEPTH {
            self.too_deep = true;
        }
        let r = enc::message::merge(wire_type, &mut w, buf, ctx);
        self.too_deep |= w.too_deep;
        r.map(|()| w.out)
    }

    /// Read one value of kind `k`, `levels` below, built as `want` (a
    /// message merges into `prev`).
    fn value(
        &mut self,
        k: K,
        (levels, want): (usize, Want),
        prev: Option<Value>,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(Value, bool), DecodeError> {
        Ok(match k {
            K::String if want == Want::Nothing => {
                // Checked (UTF-8), not kept.
                let mut s = String::new();
                enc::string::merge(wire_type, &mut s, buf, ctx)?;
                let default = s.is_empty();
                (Value::Null, default)
            }
            K::String => {
                let mut s = String::new();
                enc::string::merge(wire_type, &mut s, buf, ctx)?;
                let default = s.is_empty();
                (Value::String(s), default)
            }
            K::Message(m) => {
                let into = match prev {
                    Some(Value::Object(o)) => o,
                    _ => Map::new(),
                };
                let out = self.message(m, (levels, want), into, wire_type, buf, ctx)?;
                (Value::Object(out), false)
            }
            k => scalar::<Value>(k, wire_type, buf, ctx)?,
        })
    }
}

/// What a scalar value becomes: a JSON value (this module's route) or a
/// leaf (`direct.rs`).
trait Scalar: Sized {
    fn float(f: f64) -> Self;
    fn int(i: i64) -> Self;
    fn uint(u: u64) -> Self;
    fn boolean(b: bool) -> Self;
    /// Bytes, which are never read: absent.
    fn bytes() -> Self;
}

impl Scalar for Value {
    fn float(f: f64) -> Self {
        float(f)
    }
    fn int(i: i64) -> Self {
        Value::from(i)
    }
    fn uint(u: u64) -> Self {
        Value::from(u)
    }
    fn boolean(b: bool) -> Self {
        Value::Bool(b)
    }
    fn bytes() -> Self {
        Value::Null
    }
}

/// One value of scalar kind `k` (neither a string nor a message) with
/// prost's checks, and whether it is the kind's default.
fn scalar<S: Scalar>(
    k: K,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<(S, bool), DecodeError> {
    macro_rules! read {
        ($m:ident, $t:ty, $to:expr) => {{
            let mut v: $t = Default::default();
            enc::$m::merge(wire_type, &mut v, buf, ctx)?;
            let default = v == <$t>::default();
            #[allow(clippy::redundant_closure_call)]
            (($to)(v), default)
        }};
    }
    Ok(match k {
        K::Double => read!(double, f64, S::float),
        K::Float => read!(float, f32, |x: f32| S::float(x as f64)),
        K::Int32 | K::Enum(_) => read!(int32, i32, |x: i32| S::int(x.into())),
        K::Sint32 => read!(sint32, i32, |x: i32| S::int(x.into())),
        K::Sfixed32 => read!(sfixed32, i32, |x: i32| S::int(x.into())),
        K::Int64 => read!(int64, i64, S::int),
        K::Sint64 => read!(sint64, i64, S::int),
        K::Sfixed64 => read!(sfixed64, i64, S::int),
        K::Uint32 => read!(uint32, u32, |x: u32| S::uint(x.into())),
        K::Fixed32 => read!(fixed32, u32, |x: u32| S::uint(x.into())),
        K::Uint64 => read!(uint64, u64, S::uint),
        K::Fixed64 => read!(fixed64, u64, S::uint),
        K::Bool => read!(bool, bool, S::boolean),
        K::Bytes => read!(bytes, Vec<u8>, |_| S::bytes()),
        K::String | K::Message(_) => unreachable!("strings and messages are read by the caller"),
    })
}

/// A map key's text, as `crate::described` spells it.
fn key_text(k: K, v: &Value) -> String {
    match (k, v) {
        (_, Value::String(s)) => s.clone(),
        (_, v) => v.to_string(),
    }
}

impl Walk<'_> {
    /// A repeated field's items (packed or one at a time) appended to
    /// what earlier occurrences gave.
    fn merge_list(
        &mut self,
        (kind, packable): (K, bool),
        (name, build): (&str, bool),
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let mut items = match self.out.remove(name) {
            Some(Value::Array(a)) if build => a,
            _ => Vec::new(),
        };
        let item_want = if build { Want::All } else { Want::Nothing };
        if wire_type == WireType::LengthDelimited && packable {
            let item_type = match kind {
                K::Double | K::Fixed64 | K::Sfixed64 => WireType::SixtyFourBit,
                K::Float | K::Fixed32 | K::Sfixed32 => WireType::ThirtyTwoBit,
                _ => WireType::Varint,
            };
            enc::merge_loop(&mut items, buf, ctx, |items, buf, ctx| {
                let (v, _) = self.value(kind, (2, item_want), None, item_type, buf, ctx)?;
                if build {
                    items.push(v);
                }
                Ok(())
            })?;
        } else {
            let (v, _) = self.value(kind, (2, item_want), None, wire_type, buf, ctx)?;
            if build {
                items.push(v);
            }
        }
        if build && !items.is_empty() {
            self.out.insert(name.to_string(), Value::Array(items));
        }
        Ok(())
    }

    /// One map entry added to what earlier entries gave (a missing key or
    /// value takes its type's default).
    fn merge_map(
        &mut self,
        (key, kind): (K, K),
        (name, build): (&str, bool),
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let mut entries = match self.out.remove(name) {
            Some(Value::Object(o)) if build => o,
            _ => Map::new(),
        };
        let item_want = if build { Want::All } else { Want::Nothing };
        let mut entry: (Option<Value>, Option<Value>) = (None, None);
        // As prost-reflect: the entry is read whatever the wire
        // type says.
        enc::merge_loop(&mut entry, buf, ctx, |entry, buf, ctx| {
            let (n, wt) = enc::decode_key(buf)?;
            match n {
                1 => entry.0 = Some(self.value(key, (2, item_want), None, wt, buf, ctx)?.0),
                2 => {
                    let prev = entry.1.take();
                    entry.1 = Some(self.value(kind, (2, item_want), prev, wt, buf, ctx)?.0);
                }
                _ => enc::skip_field(wt, n, buf, ctx)?,
            }
            Ok(())
        })?;
        if build {
            let k = match entry.0 {
                Some(v) => key_text(key, &v),
                None => default_text(key),
            };
            let v = match entry.1 {
                Some(v) => v,
                None => default_json(kind),
            };
            entries.insert(k, v);
        }
        if build && !entries.is_empty() {
            self.out.insert(name.to_string(), Value::Object(entries));
        }
        Ok(())
    }
}

impl prost::Message for Walk<'_> {
    fn merge_field(
        &mut self,
        number: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let c: &Compiled = self.c;
        let Some((_, f)) = c.field(self.msg, number) else {
            return enc::skip_field(wire_type, number, buf, ctx);
        };
        let (kind, shape, name) = (f.kind, f.shape, f.name.as_str());
        let want = project::field(self.paths, self.want, self.tok, name);
        let build = want != Want::Nothing;
        if !f.siblings.is_empty() && self.want != Want::Nothing {
            for s in &f.siblings {
                self.out.remove(s);
            }
        }
        match shape {
            Shape::Single { presence } => {
                let prev = if build { self.out.remove(name) } else { None };
                let (v, default) = self.value(kind, (1, want), prev, wire_type, buf, ctx)?;
                if build && (presence || !default) {
                    self.out.insert(name.to_string(), v);
                }
            }
            Shape::List { packable } => {
                self.merge_list((kind, packable), (name, build), wire_type, buf, ctx)?
            }
            Shape::Map { key } => self.merge_map((key, kind), (name, build), buf, ctx)?,
        }
        Ok(())
    }

    fn encode_raw(&self, _: &mut impl prost::bytes::BufMut) {
        unreachable!("only decoded")
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        self.out.clear();
    }
}

/// A map key's default (an entry without its key).
fn default_text(k: K) -> String {
    match k {
        K::String => String::new(),
        K::Bool => "false".into(),
        _ => "0".into(),
    }
}

/// A map value's default as JSON (an entry without its value).
fn default_json(k: K) -> Value {
    match k {
        K::Double | K::Float => float(0.0),
        K::Bool => Value::Bool(false),
        K::String => Value::String(String::new()),
        K::Bytes => Value::Null,
        K::Message(_) => Value::Object(Map::new()),
        K::Enum(n) => Value::from(n),
        _ => Value::from(0),
    }
}
