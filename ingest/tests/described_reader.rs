//! FleetDP's own Protobuf reader against prost-reflect, message by message,
//! over a proto3 message with every field kind, nested and repeated
//! messages, packed and unpacked lists, maps, a oneof, a proto3 `optional`
//! and unknown fields: wire bytes built at random (mostly well formed,
//! sometimes with a wrong wire type, a wrong length or a stray group), then
//! damaged. Both must accept the same messages with the same JSON, and the
//! mapping's view (only what its paths read) must find exactly what the
//! full value has. Where the mapping's paths are read straight from the
//! bytes (no JSON built), the decoder's verdict on every message — readings
//! or the rejection's words — is the one the JSON route gives. CI runs
//! 2·10⁴ cases; `PROPTEST_CASES` for more.

use fleetdp_ingest::{Described, Format, Mapping, Path};
use proptest::prelude::*;

mod common;
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, EnumValueDescriptorProto, FieldDescriptorProto,
    FileDescriptorProto, FileDescriptorSet, MessageOptions, OneofDescriptorProto,
};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// (name, number, type, label, type name, oneof index, proto3 optional)
type F = (
    &'static str,
    i32,
    Type,
    Label,
    Option<&'static str>,
    Option<i32>,
);

const ONE: Label = Label::Optional;
const MANY: Label = Label::Repeated;

/// Fields of `t.M`; numbers 27 and up are unknown to it.
const FIELDS: &[F] = &[
    ("b", 1, Type::Bool, ONE, None, None),
    ("i32", 2, Type::Int32, ONE, None, None),
    ("i64", 3, Type::Int64, ONE, None, None),
    ("u32", 4, Type::Uint32, ONE, None, None),
    ("u64", 5, Type::Uint64, ONE, None, None),
    ("s32", 6, Type::Sint32, ONE, None, None),
    ("s64", 7, Type::Sint64, ONE, None, None),
    ("f32", 8, Type::Fixed32, ONE, None, None),
    ("f64", 9, Type::Fixed64, ONE, None, None),
    ("sf32", 10, Type::Sfixed32, ONE, None, None),
    ("sf64", 11, Type::Sfixed64, ONE, None, None),
    ("fl", 12, Type::Float, ONE, None, None),
    ("d", 13, Type::Double, ONE, None, None),
    ("s", 14, Type::String, ONE, None, None),
    ("by", 15, Type::Bytes, ONE, None, None),
    ("e", 16, Type::Enum, ONE, Some(".t.E"), None),
    ("child", 17, Type::Message, ONE, Some(".t.M"), None),
    ("rd", 18, Type::Double, MANY, None, None),
    ("rs", 19, Type::String, MANY, None, None),
    ("rm", 20, Type::Message, MANY, Some(".t.M"), None),
    ("md", 21, Type::Message, MANY, Some(".t.M.MdEntry"), None),
    ("mm", 22, Type::Message, MANY, Some(".t.M.MmEntry"), None),
    ("os", 23, Type::String, ONE, None, Some(0)),
    ("om", 24, Type::Message, ONE, Some(".t.M"), Some(0)),
    ("oi", 25, Type::Int64, ONE, None, Some(0)),
    ("opt", 26, Type::Int32, ONE, None, Some(1)),
];

fn field(f: &F) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(f.0.into()),
        number: Some(f.1),
        r#type: Some(f.2 as i32),
        label: Some(f.3 as i32),
        type_name: f.4.map(str::to_string),
        oneof_index: f.5,
        proto3_optional: (f.0 == "opt").then_some(true),
        ..Default::default()
    }
}

fn entry(name: &str, key: Type, value: Type, value_type: Option<&str>) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.into()),
        field: vec![
            field(&("key", 1, key, ONE, None, None)),
            FieldDescriptorProto {
                type_name: value_type.map(str::to_string),
                ..field(&("value", 2, value, ONE, None, None))
            },
        ],
        options: Some(MessageOptions {
            map_entry: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn described() -> &'static Described {
    static D: std::sync::OnceLock<Described> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        let m = DescriptorProto {
            name: Some("M".into()),
            field: FIELDS.iter().map(field).collect(),
            nested_type: vec![
                entry("MdEntry", Type::String, Type::Double, None),
                entry("MmEntry", Type::Int32, Type::Message, Some(".t.M")),
            ],
            oneof_decl: vec![
                OneofDescriptorProto {
                    name: Some("o".into()),
                    ..Default::default()
                },
                OneofDescriptorProto {
                    name: Some("_opt".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let e = EnumDescriptorProto {
            name: Some("E".into()),
            value: ["Z", "A"]
                .iter()
                .enumerate()
                .map(|(i, n)| EnumValueDescriptorProto {
                    name: Some(n.to_string()),
                    number: Some(i as i32),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let file = FileDescriptorProto {
            name: Some("t.proto".into()),
            package: Some("t".into()),
            message_type: vec![m],
            enum_type: vec![e],
            syntax: Some("proto3".into()),
            ..Default::default()
        };
        let set = FileDescriptorSet { file: vec![file] }.encode_to_vec();
        let d = Described::new(&set, "t.M").unwrap();
        assert!(d.is_compiled());
        d
    })
}

/// A small deterministic generator (xorshift), seeded by proptest.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn varint(&mut self, out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    /// A value for a varint field: small, negative, zero or any.
    fn number(&mut self) -> u64 {
        match self.below(5) {
            0 => 0,
            1 => self.below(300),
            2 => (-(self.below(300) as i64)) as u64,
            3 => u64::MAX,
            _ => self.next(),
        }
    }
    /// The wire type field `number` expects.
    fn wire_type(number: i32) -> u64 {
        match FIELDS.iter().find(|f| f.1 == number) {
            None => 0,
            Some(f) if f.3 == MANY && !matches!(f.2, Type::String | Type::Message) => 2,
            Some(f) => match f.2 {
                Type::Fixed64 | Type::Sfixed64 | Type::Double => 1,
                Type::Fixed32 | Type::Sfixed32 | Type::Float => 5,
                Type::String | Type::Bytes | Type::Message => 2,
                _ => 0,
            },
        }
    }
    /// A message's bytes: up to `n` fields, nested `depth` more at most.
    fn message(&mut self, n: u64, depth: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..self.below(n + 1) {
            let number = match self.below(10) {
                0 => 27 + self.below(3) as i32,
                _ => 1 + self.below(26) as i32,
            };
            let wt = if self.below(12) == 0 {
                self.below(6)
            } else {
                Self::wire_type(number)
            };
            self.varint(&mut out, (number as u64) << 3 | wt);
            match wt {
                0 => {
                    let v = self.number();
                    self.varint(&mut out, v);
                }
                1 => out.extend(self.next().to_le_bytes()),
                5 => out.extend((self.next() as u32).to_le_bytes()),
                2 => {
                    let body = self.body(number, depth);
                    self.varint(&mut out, body.len() as u64);
                    out.extend(body);
                }
                3 => {
                    // A group, ended (or not) by its number.
                    let end = if self.below(4) == 0 {
                        number + 1
                    } else {
                        number
                    };
                    self.varint(&mut out, (end as u64) << 3 | 4);
                }
                _ => {}
            }
        }
        out
    }
    /// A length-delimited field's contents.
    fn body(&mut self, number: i32, depth: u32) -> Vec<u8> {
        let f = FIELDS.iter().find(|f| f.1 == number);
        match f.map(|f| (f.2, f.3)) {
            Some((Type::Message, _)) if depth > 0 => match number {
                21 => self.entry(false, depth),
                22 => self.entry(true, depth),
                _ => self.message(4, depth - 1),
            },
            Some((Type::String, _)) => {
                let mut s = "héllo wörld".as_bytes()[..self.below(14) as usize].to_vec();
                if self.below(8) == 0 {
                    s.push(0xff);
                }
                s
            }
            Some((_, Label::Repeated)) => {
                let mut out = Vec::new();
                let wt = match f.map(|f| f.2) {
                    Some(Type::Double) => 1,
                    _ => 0,
                };
                for _ in 0..self.below(4) {
                    if wt == 1 {
                        out.extend(self.next().to_le_bytes());
                    } else {
                        let v = self.number();
                        self.varint(&mut out, v);
                    }
                }
                out
            }
            _ => (0..self.below(6)).map(|_| self.next() as u8).collect(),
        }
    }
    /// A map entry: key 1 and value 2, either missing or repeated at times.
    fn entry(&mut self, int_key: bool, depth: u32) -> Vec<u8> {
        let mut out = Vec::new();
        if self.below(5) != 0 {
            if int_key {
                out.push(1 << 3);
                let v = self.number();
                self.varint(&mut out, v);
            } else {
                out.push(1 << 3 | 2);
                let k = ["a", "b", "", "ab"][self.below(4) as usize];
                out.push(k.len() as u8);
                out.extend(k.as_bytes());
            }
        }
        for _ in 0..self.below(3) {
            if int_key {
                let v = self.message(3, depth.saturating_sub(1));
                out.push(2 << 3 | 2);
                self.varint(&mut out, v.len() as u64);
                out.extend(v);
            } else {
                out.push(2 << 3 | 1);
                out.extend(self.next().to_le_bytes());
            }
        }
        out
    }
}

/// A random message of seed `seed`, cut short (`damage` 0) or with a byte
/// changed (1) at `cut`, or whole.
fn damaged(seed: u64, cut: prop::sample::Index, damage: u8) -> Vec<u8> {
    let mut g = Gen(seed);
    let mut bytes = g.message(12, 3);
    match damage {
        0 if !bytes.is_empty() => bytes.truncate(cut.index(bytes.len())),
        1 if !bytes.is_empty() => {
            let i = cut.index(bytes.len());
            bytes[i] = g.next() as u8;
        }
        _ => {}
    }
    bytes
}

fn paths() -> Vec<Path> {
    [
        "s",
        "i64",
        "child.d",
        "child.child.s",
        "rd.1",
        "rm.0.i32",
        "md.a",
        "mm.0.s",
        "os",
        "om.b",
        "opt",
        "e",
        "by",
        "fl",
        "u64",
        "nope",
        "s.x",
    ]
    .iter()
    .map(|p| Path::parse(p).unwrap())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fleetdp_reads_protobuf_as_prost_reflect_does(seed in 1u64.., cut in any::<prop::sample::Index>(), damage in 0u8..4) {
        let bytes = damaged(seed, cut, damage);
        let d = described();
        let paths = paths();
        common::agree(
            &d.to_json(&bytes),
            &d.to_json_reference(&bytes),
            &d.to_json_for(&bytes, Some(&paths)),
            &paths,
            None,
        )?;
    }
}

/// Paths a mapping may read from `t.M`: every scalar kind, a nested
/// message and through it, list items (packed or not, strings too), a
/// proto3 `optional`, absent ones and through a scalar; the last ones are
/// read as JSON (a oneof's members, a list of messages, maps, a whole list).
const POOL: [&str; 36] = [
    "s",
    "i64",
    "i32",
    "u32",
    "u64",
    "s32",
    "s64",
    "f32",
    "f64",
    "sf32",
    "sf64",
    "fl",
    "d",
    "e",
    "by",
    "b",
    "child",
    "child.d",
    "child.child.s",
    "child.child",
    "child.rd.0",
    "rd.1",
    "rd.0",
    "rs.0",
    "rs.2",
    "rd.x",
    "nope",
    "s.x",
    "opt",
    "/rd/01",
    "os",
    "om.b",
    "oi",
    "rm.0.i32",
    "md.a",
    "rd",
];

/// Of the pool, the paths read straight from the bytes.
const DIRECT: usize = 30;

/// The decoder's verdict on `bytes` through `m`, and the JSON route's.
fn verdicts(m: &Mapping, bytes: &[u8]) -> (String, String) {
    let d = described();
    let decoder = common::mapped_decoder(Format::Protobuf, m).with_described(d.clone());
    let built = d.to_json_for(bytes, Some(&common::paths_of(m)));
    (
        format!("{:?}", decoder.decode(bytes, None)),
        common::json_verdict(m, built),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 2, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn paths_read_straight_from_the_bytes_give_the_json_routes_verdict(
        seed in 1u64.., cut in any::<prop::sample::Index>(), damage in 0u8..4,
        m in common::mapping(&POOL, DIRECT),
    ) {
        let bytes = damaged(seed, cut, damage);
        let (direct, json) = verdicts(&m, &bytes);
        prop_assert_eq!(direct, json);
    }
}

/// Which mappings are read straight from the bytes: paths through single
/// message fields to scalars, messages and scalar list items; not a oneof's
/// member, a list of messages, a map or a whole list.
#[test]
fn paths_into_oneofs_maps_and_message_lists_are_read_as_json() {
    let d = described();
    let parse = |p: &&str| Path::parse(p).unwrap();
    let direct: Vec<Path> = POOL[..DIRECT].iter().map(parse).collect();
    assert!(d.reads_directly(&direct));
    for p in &POOL[DIRECT..] {
        let mut paths = direct.clone();
        paths.push(parse(p));
        assert!(!d.reads_directly(&paths), "{p}");
    }
}

/// The generator makes accepted messages as well as refused ones.
#[test]
fn the_generator_covers_both() {
    let d = described();
    let (mut ok, mut bad) = (0, 0);
    for seed in 1..2_000u64 {
        match d.to_json_reference(&Gen(seed).message(12, 3)) {
            Ok(_) => ok += 1,
            Err(_) => bad += 1,
        }
    }
    assert!(ok > 200 && bad > 200, "{ok} accepted, {bad} refused");
}
