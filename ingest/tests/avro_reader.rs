//! FleetDP's own Avro reader against apache-avro, message by message, over
//! a schema with every Avro type FleetDP compiles (nested and recursive
//! records, unions, arrays, maps, enums, fixed, bytes, decimals, durations,
//! logical timestamps, zero-width items): valid datums, then the same bytes
//! damaged (a byte changed, cut short, one appended). Both must accept the
//! same messages with the same JSON — the one allowed difference being
//! FleetDP's bound on built array and map items — and the mapping's view
//! (only what its paths read) must find exactly what the full value has
//! (what the reference has, where only that bound refused the full value).
//! Where the mapping's paths are read straight from the bytes (no JSON
//! built), the decoder's verdict on every message — readings or the
//! rejection's words — is the one the JSON route gives.
//! CI runs 2·10⁴ cases; `PROPTEST_CASES` for more.

use apache_avro::types::Value as Av;
use apache_avro::Schema;
use fleetdp_ingest::{AvroSchema, Format, Mapping, Path};
use proptest::prelude::*;

mod common;

const SCHEMA: &str = r#"{"type": "record", "name": "R", "namespace": "t", "fields": [
  {"name": "b", "type": "boolean"},
  {"name": "i", "type": "int"},
  {"name": "l", "type": "long"},
  {"name": "f", "type": "float"},
  {"name": "d", "type": "double"},
  {"name": "s", "type": "string"},
  {"name": "by", "type": "bytes"},
  {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 3}},
  {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
  {"name": "a", "type": {"type": "array", "items": ["null", "long"]}},
  {"name": "m", "type": {"type": "map", "values": "double"}},
  {"name": "n", "type": ["null", {"type": "record", "name": "N", "fields": [
    {"name": "x", "type": "int"}, {"name": "next", "type": ["null", "N"]}]}]},
  {"name": "z", "type": {"type": "array", "items": "null"}},
  {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
  {"name": "du", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "fe", "type": "F"}
]}"#;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn schema() -> &'static (Schema, AvroSchema) {
    static S: std::sync::OnceLock<(Schema, AvroSchema)> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        (
            Schema::parse_str(SCHEMA).unwrap(),
            AvroSchema::new(SCHEMA, None).unwrap(),
        )
    })
}

/// A chain of `N` records `depth` long.
fn chain(xs: &[i32]) -> Av {
    match xs {
        [] => Av::Union(0, Box::new(Av::Null)),
        [x, rest @ ..] => Av::Union(
            1,
            Box::new(Av::Record(vec![
                ("x".into(), Av::Int(*x)),
                ("next".into(), chain(rest)),
            ])),
        ),
    }
}

prop_compose! {
    fn datum()(
        b in any::<bool>(),
        i in any::<i32>(),
        l in any::<i64>(),
        f in prop_oneof![any::<f32>(), Just(f32::NAN)],
        d in prop_oneof![any::<f64>(), Just(f64::INFINITY)],
        s in ".{0,12}",
        by in prop::collection::vec(any::<u8>(), 0..6),
        fx in prop::array::uniform3(any::<u8>()),
        e in 0u32..3,
        a in prop::collection::vec(prop::option::of(any::<i64>()), 0..5),
        m in prop::collection::vec(("[a-c]{1,2}", any::<f64>()), 0..4),
        n in prop::collection::vec(any::<i32>(), 0..40),
        z in 0usize..4,
        ts in any::<i64>(),
    ) -> Av {
        Av::Record(vec![
            ("b".into(), Av::Boolean(b)),
            ("i".into(), Av::Int(i)),
            ("l".into(), Av::Long(l)),
            ("f".into(), Av::Float(f)),
            ("d".into(), Av::Double(d)),
            ("s".into(), Av::String(s)),
            ("by".into(), Av::Bytes(by.clone())),
            ("fx".into(), Av::Fixed(3, fx.to_vec())),
            ("e".into(), Av::Enum(e, ["A", "B", "C"][e as usize].into())),
            ("a".into(), Av::Array(a.into_iter().map(|x| match x {
                Some(x) => Av::Union(1, Box::new(Av::Long(x))),
                None => Av::Union(0, Box::new(Av::Null)),
            }).collect())),
            ("m".into(), Av::Map(m.into_iter().map(|(k, v)| (k, Av::Double(v))).collect())),
            ("n".into(), chain(&n)),
            ("z".into(), Av::Array(vec![Av::Null; z])),
            ("dec".into(), Av::Decimal(vec![by.len() as u8].into())),
            ("du".into(), Av::Duration([1u8; 12].into())),
            ("ts".into(), Av::TimestampMillis(ts)),
            ("fe".into(), Av::Fixed(3, fx.to_vec())),
        ])
    }
}

/// How a valid message is damaged.
#[derive(Debug, Clone)]
enum Damage {
    None,
    Set(prop::sample::Index, u8),
    Cut(prop::sample::Index),
    Append(u8),
}

impl Damage {
    /// `bytes` so damaged.
    fn done_to(self, mut bytes: Vec<u8>) -> Vec<u8> {
        match self {
            Damage::None => {}
            Damage::Set(i, b) => {
                let i = i.index(bytes.len());
                bytes[i] = b;
            }
            Damage::Cut(i) => bytes.truncate(i.index(bytes.len())),
            Damage::Append(b) => bytes.push(b),
        }
        bytes
    }
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::None),
        (any::<prop::sample::Index>(), byte()).prop_map(|(i, b)| Damage::Set(i, b)),
        any::<prop::sample::Index>().prop_map(Damage::Cut),
        any::<u8>().prop_map(Damage::Append),
    ]
}

/// A byte for damage: often a small value or a varint's edge.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![any::<u8>(), 0u8..4, Just(0x7f), Just(0x80), Just(0xff)]
}

/// The mapping's kind of paths into [`SCHEMA`]'s values, including ones
/// through unions, arrays, maps, scalars and absent fields.
fn paths() -> Vec<Path> {
    [
        "s",
        "/l",
        "n.x",
        "n.next.next.x",
        "a.1",
        "m.ab",
        "e",
        "f",
        "d",
        "s.x",
        "nope",
        "fx",
    ]
    .iter()
    .map(|p| Path::parse(p).unwrap())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fleetdp_reads_avro_as_apache_avro_does(v in datum(), damage in damage()) {
        let (raw, schema) = schema();
        let bytes = damage.done_to(apache_avro::to_avro_datum(raw, v).unwrap());
        let paths = paths();
        common::agree(
            &schema.to_json(&bytes),
            &schema.to_json_reference(&bytes),
            &schema.to_json_for(&bytes, Some(&paths)),
            &paths,
            Some("array and map items"),
        )?;
    }
}

/// Paths a mapping may read from [`SCHEMA`]'s values: every scalar kind,
/// through the recursive union, a record's end, absent ones, through a
/// scalar, and array items, map values and whole arrays and maps (which
/// count their items against the bound as the JSON route does).
const POOL: [&str; 28] = [
    "s",
    "/l",
    "i",
    "b",
    "f",
    "d",
    "e",
    "by",
    "fx",
    "ts",
    "dec",
    "du",
    "n",
    "n.x",
    "n.next.x",
    "n.next.next.x",
    "s.x",
    "nope",
    "fe",
    "a.1",
    "a.0",
    "/a/01",
    "a.x",
    "m.ab",
    "m.a",
    "z",
    "a",
    "m",
];

/// Of the pool, the paths read straight from the bytes: all of them.
const DIRECT: usize = POOL.len();

/// The decoder's verdict on `bytes` through `m`, and the JSON route's.
fn verdicts(schema: &AvroSchema, m: &Mapping, bytes: &[u8]) -> (String, String) {
    let d = common::mapped_decoder(Format::Avro, m).with_avro(schema.clone());
    let built = schema.to_json_for(bytes, Some(&common::paths_of(m)));
    (
        format!("{:?}", d.decode(bytes, None)),
        common::json_verdict(m, built),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 2, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn paths_read_straight_from_the_bytes_give_the_json_routes_verdict(
        v in datum(), damage in damage(), m in common::mapping(&POOL, DIRECT),
    ) {
        let (raw, schema) = schema();
        let bytes = damage.done_to(apache_avro::to_avro_datum(raw, v).unwrap());
        let (direct, json) = verdicts(schema, &m, &bytes);
        prop_assert_eq!(direct, json);
    }
}

/// Every mapping of a compiled schema is read straight from the bytes,
/// up to 63 paths.
#[test]
fn mappings_of_up_to_63_paths_are_read_straight_from_the_bytes() {
    let (_, schema) = schema();
    let all: Vec<Path> = POOL.iter().map(|p| Path::parse(p).unwrap()).collect();
    assert!(schema.reads_directly(&all));
    let many: Vec<Path> = (0..64).map(|i| all[i % all.len()].clone()).collect();
    assert!(schema.reads_directly(&many[..63]));
    assert!(!schema.reads_directly(&many));
}

/// A message whose arrays hold more items than the bound: the decoder
/// refuses it exactly when the JSON route would build them (a path reads
/// or passes through the array, or ends on the value holding it), with
/// the JSON route's words, and reads it otherwise.
#[test]
fn items_a_path_reaches_count_against_the_bound_as_the_json_route_counts_them() {
    let (_, schema) = schema();
    let bytes = example(fleetdp_ingest::MAX_AVRO_ITEMS + 1);
    let m = |streams: &[&str]| Mapping {
        device_id: Path::parse("s").unwrap(),
        event_time: Path::parse("ts").unwrap(),
        unit: fleetdp_ingest::TimeUnit::Milliseconds,
        streams: streams
            .iter()
            .enumerate()
            .map(|(k, p)| (format!("v{k}"), Path::parse(p).unwrap()))
            .collect(),
        labels: vec![],
    };
    for (streams, refused) in [
        (&["d"][..], false),
        (&["n.x", "d"][..], false),
        (&["z", "d"][..], true),
        (&["z.0", "d"][..], true),
        (&["z.x", "d"][..], true),
        (&["a.0", "d"][..], false),
    ] {
        let m = m(streams);
        let (direct, json) = verdicts(schema, &m, &bytes);
        assert_eq!(direct, json, "{streams:?}");
        assert_eq!(
            direct.contains("array and map items"),
            refused,
            "{streams:?}: {direct}"
        );
    }
}

/// A datum of [`SCHEMA`] whose array `z` holds `z` nulls.
fn example(z: usize) -> Vec<u8> {
    let (raw, _) = schema();
    let mut v = Av::Record(Vec::new());
    if let Av::Record(fields) = &mut v {
        fields.extend([
            ("b".into(), Av::Boolean(true)),
            ("i".into(), Av::Int(1)),
            ("l".into(), Av::Long(-7)),
            ("f".into(), Av::Float(1.5)),
            ("d".into(), Av::Double(2.5)),
            ("s".into(), Av::String("x".into())),
            ("by".into(), Av::Bytes(vec![])),
            ("fx".into(), Av::Fixed(3, vec![1, 2, 3])),
            ("e".into(), Av::Enum(1, "B".into())),
            ("a".into(), Av::Array(vec![])),
            ("m".into(), Av::Map(Default::default())),
            ("n".into(), chain(&[4, 5, 6])),
            ("z".into(), Av::Array(vec![Av::Null; z])),
            ("dec".into(), Av::Decimal(vec![0u8].into())),
            ("du".into(), Av::Duration([1u8; 12].into())),
            ("ts".into(), Av::TimestampMillis(9)),
            ("fe".into(), Av::Fixed(3, vec![1, 2, 3])),
        ]);
    }
    apache_avro::to_avro_datum(raw, v).unwrap()
}

/// A map whose key comes twice: the later value replaces the earlier
/// whole, as in the JSON route, even where it holds nothing a path reads
/// (a `null` after a record).
#[test]
fn a_map_key_met_again_replaces_what_its_earlier_value_gave() {
    let schema = AvroSchema::new(
        r#"{"type": "record", "name": "D", "fields": [
            {"name": "s", "type": "string"}, {"name": "ts", "type": "long"},
            {"name": "m", "type": {"type": "map", "values": ["null",
                {"type": "record", "name": "X", "fields": [{"name": "x", "type": "double"}]}]}}]}"#,
        None,
    )
    .unwrap();
    let m = Mapping {
        device_id: Path::parse("s").unwrap(),
        event_time: Path::parse("ts").unwrap(),
        unit: fleetdp_ingest::TimeUnit::Milliseconds,
        streams: vec![("v0".into(), Path::parse("m.a.x").unwrap())],
        labels: vec![],
    };
    let record = [&[2u8][..], &1.5f64.to_le_bytes()].concat();
    // s = "d", ts = 5, then one block of two entries "a", closed by 0.
    let message = |first: &[u8], second: &[u8]| {
        [
            &[2, b'd', 10, 4, 2, b'a'][..],
            first,
            &[2, b'a'],
            second,
            &[0],
        ]
        .concat()
    };
    for (bytes, read) in [
        (message(&record, &[0]), false),
        (message(&[0], &record), true),
    ] {
        let (direct, json) = verdicts(&schema, &m, &bytes);
        assert_eq!(direct, json);
        assert_eq!(direct.starts_with("Ok"), read, "{direct}");
    }
}

/// Messages that only claim a lot: nulls that take no bytes are not walked
/// one by one, and built items are bounded.
#[test]
fn claimed_counts_cost_nothing() {
    let schema = AvroSchema::new(
        r#"{"type": "record", "name": "Q", "fields": [
            {"name": "z", "type": {"type": "array", "items": {"type": "record", "name": "E", "fields": [{"name": "u", "type": "null"}]}}},
            {"name": "k", "type": "long"}]}"#,
        None,
    )
    .unwrap();
    assert!(schema.is_compiled());
    // 16·2²⁰ empty records a block, 1,000 blocks, then k = 1.
    let mut bytes = Vec::new();
    for _ in 0..1_000 {
        bytes.extend([0x80, 0x80, 0x80, 0x10]);
    }
    bytes.extend([0, 2]);
    // (Walked item by item this would be 1.6·10¹⁰ steps: the test would
    // not finish.)
    let k = Path::parse("k").unwrap();
    let v = schema
        .to_json_for(&bytes, Some(std::slice::from_ref(&k)))
        .unwrap();
    assert_eq!(v["k"], 1);
    // Built (a path reads the array), the items are bounded.
    let z = Path::parse("z").unwrap();
    let e = schema
        .to_json_for(&bytes, Some(std::slice::from_ref(&z)))
        .unwrap_err();
    assert!(e.detail.contains("array and map items"), "{}", e.detail);
}

/// The item bound is on what is built: a message whose unread array holds
/// more items than the bound is refused whole but read by a mapping that
/// does not read it, as apache-avro reads it (CI found such a message: a
/// damaged byte gave `z` 10⁵+ nulls, and the comparison wrongly required
/// the mapping's view to refuse it too).
#[test]
fn only_built_items_count_against_the_bound() {
    let (_, schema) = schema();
    let datum = example;
    let paths = paths();
    for z in [3, fleetdp_ingest::MAX_AVRO_ITEMS + 1] {
        let bytes = datum(z);
        let view = schema.to_json_for(&bytes, Some(&paths));
        assert_eq!(view.as_ref().unwrap()["n"]["next"]["next"]["x"], 6);
        let full = schema.to_json(&bytes);
        assert_eq!(full.is_ok(), z <= fleetdp_ingest::MAX_AVRO_ITEMS);
        common::agree(
            &full,
            &schema.to_json_reference(&bytes),
            &view,
            &paths,
            Some("array and map items"),
        )
        .unwrap();
    }
}

/// A schema with a `uuid` is left to apache-avro, and still decodes.
#[test]
fn uuid_schemas_use_apache_avro() {
    let text = r#"{"type": "record", "name": "U", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}}]}"#;
    let schema = AvroSchema::new(text, None).unwrap();
    assert!(!schema.is_compiled());
    let raw = Schema::parse_str(text).unwrap();
    let id = "6f1c3a1e-8d3e-4c59-9b47-2f4f1e7a0b11";
    let bytes = apache_avro::to_avro_datum(
        &raw,
        Av::Record(vec![("id".into(), Av::Uuid(id.parse().unwrap()))]),
    )
    .unwrap();
    assert_eq!(schema.to_json(&bytes).unwrap()["id"], id);
}

/// Zigzag varint of `v`, as Avro writes longs.
fn varint(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Peak resident memory of this process (kB), from /proc.
fn peak_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Issue: on the apache-avro path (schemas with `uuid` or `big-decimal`),
/// one 66-byte message claiming 16,777,216 null items in a block grew RSS by
/// 896 MB, and 20 such blocks to 4.3 GB: apache-avro builds every item. The
/// message is now walked first, every item counted against
/// `MAX_AVRO_ITEMS`, and refused before apache-avro sees it; peak memory
/// grows by less than 64 MiB.
#[test]
fn a_null_item_bomb_on_the_apache_avro_path_is_refused_in_bounded_memory() {
    let text = r#"{"type": "record", "name": "U", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "xs", "type": {"type": "array", "items": "null"}}]}"#;
    let schema = AvroSchema::new(text, None).unwrap();
    assert!(!schema.is_compiled());
    let mut bomb = Vec::new();
    let id = "6f1c3a1e-8d3e-4c59-9b47-2f4f1e7a0b11";
    varint(id.len() as i64, &mut bomb);
    bomb.extend_from_slice(id.as_bytes());
    for _ in 0..20 {
        varint(1 << 24, &mut bomb);
    }
    varint(0, &mut bomb);
    let before = peak_kb();
    let start = std::time::Instant::now();
    match schema.to_json(&bomb) {
        Err(e) => assert!(e.to_string().contains("array and map items"), "{e}"),
        Ok(v) => panic!(
            "accepted: {} items built",
            v["xs"].as_array().map_or(0, Vec::len)
        ),
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    let grown = peak_kb().saturating_sub(before);
    assert!(grown < 64 * 1024, "peak memory grew by {grown} kB");
    // Within the bound, the same shape still decodes through apache-avro.
    let mut ok = Vec::new();
    varint(id.len() as i64, &mut ok);
    ok.extend_from_slice(id.as_bytes());
    varint(3, &mut ok);
    varint(0, &mut ok);
    let v = schema.to_json(&ok).unwrap();
    assert_eq!(v["id"], id);
    assert_eq!(v["xs"].as_array().map(Vec::len), Some(3));
}
