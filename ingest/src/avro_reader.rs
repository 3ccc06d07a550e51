//! The Avro binary decoding FleetDP runs per message: the writer's schema
//! (parsed and name-resolved by `apache-avro`, once) compiled into a small
//! tree of nodes, then each datum walked byte by byte, building JSON only
//! for the parts the mapping reads (the fields along its paths; everything
//! under a path's end) and checking the rest without building it.
//!
//! Why not `apache_avro::from_avro_datum` per message: it resolves the
//! schema's named types on every call and builds a generic value with a
//! `String` per field name, which a JSON value is then made from — 0.58×
//! the protobuf path in process (docs/performance.md). The acceptance rules
//! are apache-avro 0.17's, as FleetDP applies them (`crate::avro`): varints
//! of at most 10 bytes, ints within 32 bits, lengths and block counts at
//! most [`MAX_AVRO_ALLOCATION`], booleans 0 or 1, strings UTF-8, enum and
//! union indexes in range, nothing cut short, nothing after the record,
//! values nested at most `MAX_DEPTH` deep. Two rules are added: an array or
//! map block of items that take no bytes (nulls) is not walked item by item
//! (a 3-byte message could otherwise claim 10⁹ of them), and at most
//! [`MAX_AVRO_ITEMS`] array and map items are built per message. Schemas
//! with a `uuid` or `big-decimal` logical type are left to apache-avro
//! (their validity depends on the bytes' contents); before apache-avro
//! builds such a message, the same walk checks it with `uuid` read as a
//! string and `big-decimal` as bytes, counting every array and map item
//! against [`MAX_AVRO_ITEMS`] ([`Compiled::scanner`]): apache-avro builds
//! every item, so a few bytes claiming 10⁷ nulls would otherwise take
//! gigabytes. `ingest/tests/fuzz.rs` checks the two decoders agree message
//! by message.

use crate::mapped::Path;
use crate::project::{self, float, Want, MAX_DEPTH};
use crate::MAX_AVRO_ALLOCATION;
use apache_avro::schema::{Name, Namespace, ResolvedSchema};
use apache_avro::Schema;
use serde_json::{Map, Value};
use std::collections::HashMap;

mod direct;
pub(crate) use direct::Projection;

/// Most array and map items built as JSON for one message.
pub const MAX_AVRO_ITEMS: usize = 100_000;

/// A compiled schema: nodes by index, the record first.
#[derive(Debug)]
pub(crate) struct Compiled {
    nodes: Vec<Node>,
}

#[derive(Debug, Clone)]
enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    String,
    /// Bytes, decimals on bytes: a length and that many bytes, no value.
    Bytes,
    /// Fixed, decimals on fixed, durations: `n` bytes, no value.
    Fixed(usize),
    Enum(Vec<String>),
    Array(usize),
    Map(usize),
    Union(Vec<usize>),
    Record(Vec<(String, usize)>),
}

/// Whether a value of node `n` takes no bytes (nulls, empty fixed, records
/// of those).
fn zero_width(nodes: &[Node], n: usize, depth: usize) -> bool {
    depth <= MAX_DEPTH
        && match &nodes[n] {
            Node::Null | Node::Fixed(0) => true,
            Node::Record(fields) => fields.iter().all(|(_, f)| zero_width(nodes, *f, depth + 1)),
            _ => false,
        }
}

impl Compiled {
    /// Compile `schema`; `None` when it uses a type left to apache-avro.
    pub(crate) fn new(schema: &Schema) -> Option<Compiled> {
        Self::compile(schema, false)
    }

    /// For a schema [`Compiled::new`] leaves to apache-avro: the walk that
    /// checks a message's item count before apache-avro builds it (`uuid`
    /// read as the string it is written as, `big-decimal` as its bytes).
    pub(crate) fn scanner(schema: &Schema) -> Option<Compiled> {
        Self::compile(schema, true)
    }

    fn compile(schema: &Schema, lenient: bool) -> Option<Compiled> {
        let resolved = ResolvedSchema::try_from(schema).ok()?;
        let mut c = Compiler {
            names: resolved.get_names(),
            memo: HashMap::new(),
            nodes: Vec::new(),
            lenient,
        };
        c.node(schema, &None)?;
        Some(Compiled { nodes: c.nodes })
    }

    /// Walk one datum without building it, counting every array and map
    /// item against [`MAX_AVRO_ITEMS`] as if all were built.
    pub(crate) fn check_items(&self, body: &[u8]) -> Result<(), String> {
        let mut r = Reader {
            bytes: body,
            at: 0,
            items: 0,
            paths: &[],
            count_all: true,
        };
        r.value(&self.nodes, 0, 0, 0, Want::Nothing)?;
        Ok(())
    }

    /// Decode one datum, building the parts `paths` read (`None`: all of it).
    pub(crate) fn decode(&self, body: &[u8], paths: Option<&[Path]>) -> Result<Value, String> {
        let want = project::root(paths);
        let mut r = Reader {
            bytes: body,
            at: 0,
            items: 0,
            paths: paths.unwrap_or(&[]),
            count_all: false,
        };
        let v = r.value(&self.nodes, 0, 0, 0, want)?;
        if r.at < body.len() {
            return Err(format!("{} bytes after the record", body.len() - r.at));
        }
        Ok(v.unwrap_or(Value::Null))
    }
}

struct Compiler<'s> {
    names: &'s apache_avro::schema::NamesRef<'s>,
    memo: HashMap<Name, usize>,
    nodes: Vec<Node>,
    /// `uuid` as a string, `big-decimal` as bytes ([`Compiled::scanner`]).
    lenient: bool,
}

impl Compiler<'_> {
    fn push(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    fn node(&mut self, s: &Schema, ns: &Namespace) -> Option<usize> {
        Some(match s {
            Schema::Null => self.push(Node::Null),
            Schema::Boolean => self.push(Node::Boolean),
            Schema::Int | Schema::Date | Schema::TimeMillis => self.push(Node::Int),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.push(Node::Long),
            Schema::Float => self.push(Node::Float),
            Schema::Double => self.push(Node::Double),
            Schema::String => self.push(Node::String),
            Schema::Bytes => self.push(Node::Bytes),
            Schema::Fixed(f) => self.push(Node::Fixed(f.size)),
            Schema::Duration => self.push(Node::Fixed(12)),
            Schema::Decimal(d) => match &*d.inner {
                Schema::Fixed(f) => self.push(Node::Fixed(f.size)),
                Schema::Bytes => self.push(Node::Bytes),
                _ => return None,
            },
            Schema::Enum(e) => self.push(Node::Enum(e.symbols.clone())),
            Schema::Array(a) => {
                let at = self.push(Node::Null);
                self.nodes[at] = Node::Array(self.node(&a.items, ns)?);
                at
            }
            Schema::Map(m) => {
                let at = self.push(Node::Null);
                self.nodes[at] = Node::Map(self.node(&m.types, ns)?);
                at
            }
            Schema::Union(u) => {
                let at = self.push(Node::Null);
                let branches = u
                    .variants()
                    .iter()
                    .map(|b| self.node(b, ns))
                    .collect::<Option<_>>()?;
                self.nodes[at] = Node::Union(branches);
                at
            }
            Schema::Record(r) => {
                let name = r.name.fully_qualified_name(ns);
                let at = self.push(Node::Null);
                self.memo.insert(name.clone(), at);
                let mut fields = Vec::with_capacity(r.fields.len());
                for f in &r.fields {
                    fields.push((f.name.clone(), self.node(&f.schema, &name.namespace)?));
                }
                self.nodes[at] = Node::Record(fields);
                at
            }
            Schema::Ref { name } => {
                let name = name.fully_qualified_name(ns);
                if let Some(&at) = self.memo.get(&name) {
                    return Some(at);
                }
                let target = *self.names.get(&name)?;
                let at = self.node(target, &name.namespace)?;
                self.memo.insert(name, at);
                at
            }
            Schema::Uuid if self.lenient => self.push(Node::String),
            Schema::BigDecimal if self.lenient => self.push(Node::Bytes),
            // Uuid, BigDecimal: validity depends on contents.
            _ => return None,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    items: usize,
    paths: &'a [Path],
    /// Count every array and map item, built or not ([`Compiled::check_items`]).
    count_all: bool,
}

const SHORT: &str = "the message ends inside the record";

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let bytes = self.bytes;
        let end = self.at.checked_add(n).filter(|&e| e <= bytes.len());
        let end = end.ok_or(SHORT)?;
        let s = &bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn long(&mut self) -> Result<i64, String> {
        let mut z = 0u64;
        for j in 0..10 {
            let b = *self.bytes.get(self.at).ok_or(SHORT)?;
            self.at += 1;
            z |= u64::from(b & 0x7f) << (j * 7);
            if b & 0x80 == 0 {
                return Ok(if z & 1 == 0 {
                    (z >> 1) as i64
                } else {
                    !(z >> 1) as i64
                });
            }
        }
        Err("a variable-length integer is longer than 10 bytes".into())
    }

    fn int(&mut self) -> Result<i32, String> {
        let v = self.long()?;
        i32::try_from(v).map_err(|_| format!("int {v} out of range"))
    }

    /// A length, or a block's item count (`block`: a negative count is
    /// followed by the block's size in bytes).
    fn len(&mut self, block: bool) -> Result<usize, String> {
        let raw = self.long()?;
        let n = match raw {
            _ if raw >= 0 => raw,
            _ if block => {
                self.long()?;
                raw.checked_neg().ok_or("a block count overflows")?
            }
            _ => return Err(format!("negative length {raw}")),
        };
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= MAX_AVRO_ALLOCATION)
            .ok_or_else(|| format!("a length of {n} exceeds {MAX_AVRO_ALLOCATION}"))
    }

    fn string(&mut self) -> Result<&'a str, String> {
        let n = self.len(false)?;
        crate::wire::utf8(self.take(n)?).ok_or_else(|| "a string is not UTF-8".into())
    }

    /// `N` bytes, as an array (a float's or a double's).
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    /// An enum's symbol, by its index.
    fn symbol<'s>(&mut self, symbols: &'s [String]) -> Result<&'s String, String> {
        let i = self.int()?;
        let s = usize::try_from(i).ok().and_then(|i| symbols.get(i));
        s.ok_or_else(|| format!("enum index {i} of {}", symbols.len()))
    }

    /// A union's branch (its node), by its index.
    fn branch(&mut self, branches: &[usize]) -> Result<usize, String> {
        let i = self.long()?;
        let b = usize::try_from(i).ok().and_then(|i| branches.get(i));
        b.copied()
            .ok_or_else(|| format!("union index {i} of {}", branches.len()))
    }

    /// Count `n` built items against the message's bound.
    fn built(&mut self, n: usize) -> Result<(), String> {
        self.items += n;
        if self.items > MAX_AVRO_ITEMS {
            return Err(format!("more than {MAX_AVRO_ITEMS} array and map items"));
        }
        Ok(())
    }

    /// Read node `n`'s value at nesting `depth`, `tok` path tokens down.
    fn value(
        &mut self,
        nodes: &[Node],
        n: usize,
        depth: usize,
        tok: usize,
        want: Want,
    ) -> Result<Option<Value>, String> {
        if depth > MAX_DEPTH {
            return Err(format!("value nested deeper than {MAX_DEPTH}"));
        }
        let build = want != Want::Nothing;
        let v = match &nodes[n] {
            Node::Null => Value::Null,
            Node::Boolean => match self.take(1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("boolean byte {b}")),
            },
            Node::Int => Value::from(self.int()?),
            Node::Long => Value::from(self.long()?),
            Node::Float => float(f32::from_le_bytes(self.fixed()?) as f64),
            Node::Double => float(f64::from_le_bytes(self.fixed()?)),
            Node::String if build => Value::String(self.string()?.to_string()),
            Node::String => {
                self.string()?;
                Value::Null
            }
            Node::Bytes => {
                let len = self.len(false)?;
                self.take(len)?;
                Value::Null
            }
            Node::Fixed(size) => {
                self.take(*size)?;
                Value::Null
            }
            Node::Enum(symbols) => {
                let s = self.symbol(symbols)?;
                Value::String(if build { s.clone() } else { String::new() })
            }
            Node::Union(branches) => {
                let b = self.branch(branches)?;
                return self.value(nodes, b, depth + 1, tok, want);
            }
            Node::Record(fields) => {
                let mut m = Map::new();
                for (name, f) in fields {
                    let w = project::field(self.paths, want, tok, name);
                    if let Some(v) = self.value(nodes, *f, depth + 1, tok + 1, w)? {
                        m.insert(name.clone(), v);
                    }
                }
                Value::Object(m)
            }
            Node::Array(item) | Node::Map(item) => {
                let is_map = matches!(nodes[n], Node::Map(_));
                self.items(nodes, (*item, is_map), depth, tok, build)?
            }
        };
        Ok(build.then_some(v))
    }

    /// An array's or map's blocks of items (`item`: their node), each
    /// counted against the message's bound when it is built.
    fn items(
        &mut self,
        nodes: &[Node],
        (item, is_map): (usize, bool),
        depth: usize,
        tok: usize,
        build: bool,
    ) -> Result<Value, String> {
        let w = if build { Want::All } else { Want::Nothing };
        let (mut list, mut map) = (Vec::new(), Map::new());
        loop {
            let count = self.len(true)?;
            if count == 0 {
                break;
            }
            if build || self.count_all {
                self.built(count)?;
            }
            // Items of no bytes are all alike: check one.
            let count = if !is_map && !build && zero_width(nodes, item, depth + 1) {
                1
            } else {
                count
            };
            for _ in 0..count {
                if is_map {
                    let key = self.string()?.to_string();
                    if let Some(v) = self.value(nodes, item, depth + 1, tok + 1, w)? {
                        map.insert(key, v);
                    }
                } else if let Some(v) = self.value(nodes, item, depth + 1, tok + 1, w)? {
                    list.push(v);
                }
            }
        }
        Ok(if is_map {
            Value::Object(map)
        } else {
            Value::Array(list)
        })
    }
}
