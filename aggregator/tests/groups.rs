//! Group-by in the service, below Kafka: readings find their group from
//! their labels or the device registry, every declared group is released
//! (empty ones too), a device counts in at most `G` groups per horizon, and
//! adding one device changes only the windows of its own groups.

use fleetdp::config::Config;
use fleetdp::registry::Registry;
use fleetdp::telemetry::Counters;
use fleetdp::{ClosedWindow, Processor};
use std::collections::BTreeMap;
use std::sync::Arc;

const HOUR: i64 = 3_600_000;
/// An event time well inside one horizon and window.
const T0: i64 = 1_700_000_000_000 / (24 * HOUR) * (24 * HOUR) + HOUR;

fn config(relation: &str, g: u32) -> String {
    let windows = match relation {
        "add-remove" => "window = \"1h\"",
        _ => "window_size = 3\nwindow_timeout = \"1h\"",
    };
    format!(
        r#"
[kafka]
brokers = "127.0.0.1:9092"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
relation = "{relation}"
epsilon_per_device = 1.0
horizon = "24h"
[dimensions]
firmware = ["4.1", "4.2"]
region = ["eu"]
[[stream]]
name = "temp"
lower = 0.0
upper = 100.0
resolution = 1.0
{windows}
max_windows_per_device = 24
statistics = ["sum"]
budget_share = 0.5
group_by = ["firmware"]
max_groups_per_device = {g}
[[stream]]
name = "speed"
lower = 0.0
upper = 100.0
resolution = 1.0
{windows}
max_windows_per_device = 24
statistics = ["sum"]
budget_share = 0.5
"#
    )
}

fn reading(device: &str, value: f64, t: i64, firmware: Option<&str>) -> Vec<u8> {
    let labels = firmware.map_or(String::new(), |f| {
        format!(r#","labels":{{"firmware":"{f}"}}"#)
    });
    format!(
        r#"{{"device_id":"{device}","stream":"temp","value":{value},"event_time_ms":{t}{labels}}}"#
    )
    .into_bytes()
}

/// Run messages through a processor; add-remove: then close every window
/// due by the next day. Windows by planned stream name.
fn run(
    relation: &str,
    g: u32,
    registry: Option<Arc<Registry>>,
    msgs: &[Vec<u8>],
) -> BTreeMap<String, Vec<ClosedWindow>> {
    run_with(&config(relation, g), relation, registry, msgs, true)
}

/// [`run`] for a configuration text; `strict`: every message must be
/// accepted (else a refused one is skipped, as a dead letter would be).
fn run_with(
    text: &str,
    relation: &str,
    registry: Option<Arc<Registry>>,
    msgs: &[Vec<u8>],
    strict: bool,
) -> BTreeMap<String, Vec<ClosedWindow>> {
    run_as(text, relation, registry, msgs, strict, "application/json")
}

/// [`run_with`] for messages of content type `ct`.
fn run_as(
    text: &str,
    relation: &str,
    registry: Option<Arc<Registry>>,
    msgs: &[Vec<u8>],
    strict: bool,
    ct: &str,
) -> BTreeMap<String, Vec<ClosedWindow>> {
    let v = Config::parse(text).unwrap().validate().unwrap();
    let mut p = Processor::new(&v, Arc::new(Counters::default()));
    if let Some(r) = registry {
        p = p.with_registry(r);
    }
    if relation == "add-remove" {
        p.windower_mut().start_time_lanes(0, T0 - HOUR);
    }
    let mut closed = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let r = p.process(0, i as i64, m, Some(ct), None, &mut closed);
        assert!(r.is_ok() || !strict, "{r:?}");
    }
    if relation == "add-remove" {
        let next_day = T0 + 100 * HOUR;
        p.windower_mut()
            .close_due(next_day, |_| next_day, |_| 0, usize::MAX, &mut closed);
    }
    let mut out: BTreeMap<String, Vec<ClosedWindow>> = BTreeMap::new();
    for w in closed {
        out.entry(v.plan.streams[w.stream].spec.name.clone())
            .or_default()
            .push(w);
    }
    out
}

fn values(ws: &BTreeMap<String, Vec<ClosedWindow>>, stream: &str) -> Vec<i64> {
    ws.get(stream)
        .map(|w| w.iter().flat_map(|w| w.values.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn every_declared_group_is_released_and_readings_land_in_theirs() {
    let msgs = [
        reading("a", 10.0, T0, Some("4.1")),
        reading("b", 20.0, T0, Some("4.1")),
        reading("c", 30.0, T0, Some("9.9")), // undeclared: other
        reading("d", 40.0, T0, None),        // none: other
    ];
    let ws = run("add-remove", 1, None, &msgs);
    let names: Vec<&String> = ws.keys().collect();
    assert_eq!(
        names,
        [
            "speed",
            "temp[firmware=4.1]",
            "temp[firmware=4.2]",
            "temp[firmware=other]"
        ]
    );
    // Every group released the same windows (the same seqs), 4.2 empty.
    let seqs = |s: &str| ws[s].iter().map(|w| w.seq).collect::<Vec<_>>();
    assert_eq!(seqs("temp[firmware=4.1]"), seqs("temp[firmware=4.2]"));
    assert_eq!(seqs("temp[firmware=4.1]"), seqs("temp[firmware=other]"));
    assert_eq!(values(&ws, "temp[firmware=4.1]"), [10, 20]);
    assert!(values(&ws, "temp[firmware=4.2]").is_empty());
    assert_eq!(values(&ws, "temp[firmware=other]"), [30, 40]);
}

/// Labels sent in protobuf readings (decoded straight into one buffer)
/// group exactly as the same labels in JSON: random readings of 40 devices
/// whose firmware label is declared, undeclared or absent, sometimes with
/// a second label, in both encodings, give the same windows.
#[test]
fn protobuf_labels_group_as_json_labels_do() {
    use prost::Message;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(18);
    let (mut json, mut proto) = (Vec::new(), Vec::new());
    for i in 0..600i64 {
        let device = format!("d{}", rng.gen_range(0..40));
        let value = rng.gen_range(0..100) as f64;
        let t = T0 + i * 60_000;
        let firmware = ["4.1", "4.2", "9.9", ""][rng.gen_range(0..4)];
        let region = rng.gen_bool(0.5).then_some("eu");
        let mut labels = BTreeMap::new();
        if !firmware.is_empty() {
            labels.insert("firmware".to_string(), firmware.to_string());
        }
        if let Some(r) = region {
            labels.insert("region".to_string(), r.to_string());
        }
        json.push(
            serde_json::json!({
                "device_id": device, "stream": "temp", "value": value,
                "event_time_ms": t, "labels": labels,
            })
            .to_string()
            .into_bytes(),
        );
        proto.push(
            proto::DeviceReading {
                device_id: device,
                stream: "temp".into(),
                value: Some(value),
                event_time_ms: Some(t),
                labels,
            }
            .encode_to_vec(),
        );
    }
    for (relation, g) in [("add-remove", 1), ("change-one", 2)] {
        let text = config(relation, g);
        let a = run_with(&text, relation, None, &json, true);
        let b = run_as(
            &text,
            relation,
            None,
            &proto,
            true,
            "application/vnd.fleetdp.reading+protobuf",
        );
        assert_eq!(a, b, "{relation}");
        let filled = |s: &str| values(&a, s).len();
        assert!(filled("temp[firmware=4.1]") > 10 && filled("temp[firmware=other]") > 10);
    }
}

#[test]
fn a_device_counts_in_at_most_g_groups_per_horizon() {
    // One device moves firmware twice within a horizon, in other windows.
    let msgs = [
        reading("a", 10.0, T0, Some("4.1")),
        reading("a", 20.0, T0 + HOUR, Some("4.2")),
        reading("a", 30.0, T0 + 2 * HOUR, None),
        // The next horizon starts afresh.
        reading("a", 40.0, T0 + 24 * HOUR, None),
    ];
    for (g, want) in [
        (1, [vec![10], vec![], vec![40]]),
        (2, [vec![10], vec![20], vec![40]]),
        (3, [vec![10], vec![20], vec![30, 40]]),
    ] {
        let ws = run("add-remove", g, None, &msgs);
        let got = ["4.1", "4.2", "other"].map(|f| values(&ws, &format!("temp[firmware={f}]")));
        assert_eq!(got, want, "G = {g}");
    }
}

#[test]
fn the_registry_supplies_groups_and_labels_take_precedence() {
    let reg = Arc::new(Registry::new(
        vec![("firmware".into(), Some(vec!["4.1".into(), "4.2".into()]))],
        100,
    ));
    reg.apply(Some(b"a"), Some(br#"{"firmware":"4.2"}"#))
        .unwrap();
    reg.apply(Some(b"b"), Some(br#"{"firmware":"4.2"}"#))
        .unwrap();
    let msgs = [
        reading("a", 10.0, T0, None),
        reading("b", 20.0, T0, Some("4.1")),
        reading("c", 30.0, T0, None),
    ];
    let ws = run("add-remove", 1, Some(reg), &msgs);
    assert_eq!(values(&ws, "temp[firmware=4.2]"), [10]);
    assert_eq!(values(&ws, "temp[firmware=4.1]"), [20]);
    assert_eq!(values(&ws, "temp[firmware=other]"), [30]);
}

#[test]
fn count_windows_fill_per_group() {
    let mut msgs = Vec::new();
    for i in 0..6 {
        msgs.push(reading(&format!("d{i}"), i as f64, T0, Some("4.1")));
    }
    msgs.push(reading("x", 50.0, T0, Some("4.2")));
    let ws = run("change-one", 1, None, &msgs);
    let w = &ws["temp[firmware=4.1]"];
    assert_eq!(w.len(), 2);
    assert!(w.iter().all(|w| w.values.len() == 3 && w.padded == 0));
    // 4.2 holds one reading: its window waits (n is per group).
    assert!(!ws.contains_key("temp[firmware=4.2]"));
}

/// Add-remove over the service's windows: adding one device (in two
/// groups, G = 2) changes only the windows of those two groups; every other
/// group's windows are identical, and so are the windows of other streams.
#[test]
fn adding_a_device_changes_only_its_own_groups() {
    let mut base = Vec::new();
    for i in 0..40 {
        let fw = ["4.1", "4.2"][i % 2];
        base.push(reading(
            &format!("d{i}"),
            i as f64,
            T0 + (i as i64 % 3) * HOUR,
            Some(fw),
        ));
    }
    for g in [1, 2] {
        let mut with = base.clone();
        with.insert(7, reading("new", 77.0, T0, Some("4.1")));
        with.insert(20, reading("new", 78.0, T0 + HOUR, None));
        with.insert(30, reading("new", 79.0, T0 + 2 * HOUR, Some("4.2")));
        let (a, b) = (
            run("add-remove", g, None, &base),
            run("add-remove", g, None, &with),
        );
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        let mut differ = Vec::new();
        for (name, wa) in &a {
            let strip = |w: &[ClosedWindow]| {
                w.iter()
                    .map(|w| (w.seq, w.values.clone()))
                    .collect::<Vec<_>>()
            };
            if strip(wa) != strip(&b[name]) {
                differ.push(name.as_str());
            }
        }
        let want: &[&str] = match g {
            1 => &["temp[firmware=4.1]"],
            _ => &["temp[firmware=4.1]", "temp[firmware=other]"],
        };
        assert_eq!(differ, want, "G = {g}");
    }
}

/// Neighbouring streams through the service's grouped windows, sampled: a
/// few devices with random groups (labels, some absent), values and event
/// times over three horizons, plus device `x` moving between groups; half
/// the samples with a registry, whose replica slots then keep the devices'
/// window state.
/// Add-remove (with and without `x`): every window of a group `x` never
/// reached is identical, and so is every window not holding `x`'s
/// readings. Change-one (`x`'s values changed): every window is identical
/// but for its values, and only windows holding `x`'s readings differ in
/// them. Both: `x` is charged in at most `G` groups per horizon, `W`
/// windows per group and horizon, `k` readings per window.
#[test]
fn sampled_neighbouring_streams_stay_within_the_devices_groups_and_caps() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;
    let fws = [Some("4.1"), Some("4.2"), Some("9.9"), None];
    let x = fleetdp::device_key("x");
    for relation in ["add-remove", "change-one"] {
        for g in [1u32, 2] {
            let text = config(relation, g).replace(
                "max_windows_per_device = 24\nstatistics = [\"sum\"]\nbudget_share = 0.5\ngroup_by",
                "max_windows_per_device = 2\nstatistics = [\"sum\"]\nbudget_share = 0.5\ngroup_by",
            );
            assert!(text.contains("max_windows_per_device = 2\n"), "{text}");
            for seed in 0..150u64 {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
                let mut base = Vec::new();
                let mut mine = Vec::new();
                for i in 0..rng.gen_range(8..30) {
                    let t = T0 + rng.gen_range(0..60) * HOUR;
                    let fw = fws[rng.gen_range(0..4)];
                    let v = rng.gen_range(0..100) as f64;
                    if rng.gen_bool(0.3) {
                        mine.push((base.len(), t, fw, v, i));
                    } else {
                        base.push(reading(
                            &format!("d{}", rng.gen_range(0..4)),
                            v,
                            t,
                            Some(fw.unwrap_or("4.1")),
                        ));
                    }
                }
                let with = |values: bool| {
                    let mut m = base.clone();
                    for (at, t, fw, v, _) in mine.iter().rev() {
                        let v = if values { *v } else { 100.0 - *v };
                        m.insert(*at, reading("x", v, *t, *fw));
                    }
                    m
                };
                // Odd seeds: a registry gives every device a row (x's
                // unlabelled readings then go to 4.2, not `other`), so the
                // devices' window state is kept in the loop's replica
                // slots, moving between lanes as x changes group.
                let registry = || {
                    (seed % 2 == 1).then(|| {
                        let r = Registry::new(
                            vec![("firmware".into(), Some(vec!["4.1".into(), "4.2".into()]))],
                            100,
                        );
                        for (d, fw) in [("x", "4.2"), ("d0", "4.1"), ("d1", "4.2"), ("d2", "9")] {
                            let row = format!(r#"{{"firmware":"{fw}"}}"#);
                            r.apply(Some(d.as_bytes()), Some(row.as_bytes())).unwrap();
                        }
                        Arc::new(r)
                    })
                };
                let (a, b) = match relation {
                    "add-remove" => (
                        run_with(&text, relation, registry(), &base, false),
                        run_with(&text, relation, registry(), &with(true), false),
                    ),
                    _ => (
                        run_with(&text, relation, registry(), &with(true), false),
                        run_with(&text, relation, registry(), &with(false), false),
                    ),
                };
                // x's charges: groups per horizon, windows per (group, horizon).
                let mut groups: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
                let mut windows: BTreeMap<(String, i64), u32> = BTreeMap::new();
                for (name, ws) in &b {
                    for w in ws {
                        for &(d, h) in &w.charges {
                            if d == x {
                                groups.entry(h).or_default().insert(name.clone());
                                *windows.entry((name.clone(), h)).or_default() += 1;
                            }
                        }
                    }
                }
                let ctx = format!("{relation} G={g} seed {seed}");
                assert!(
                    groups.values().all(|s| s.len() <= g as usize),
                    "{ctx}: {groups:?}"
                );
                assert!(windows.values().all(|&n| n <= 2), "{ctx}: {windows:?}");
                let holds_x = |w: &ClosedWindow| w.charges.iter().any(|c| c.0 == x);
                for name in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
                    let (wa, wb) = (
                        &a.get(name).cloned().unwrap_or_default(),
                        &b.get(name).cloned().unwrap_or_default(),
                    );
                    let touched = groups.values().any(|s| s.contains(name));
                    if relation == "add-remove" {
                        // Offsets are not published under add-remove (and
                        // x's messages shift them); the rest must agree.
                        let published = |ws: &[ClosedWindow]| {
                            ws.iter()
                                .map(|w| {
                                    (
                                        w.seq,
                                        w.values.clone(),
                                        w.charges.clone(),
                                        w.first_event_ms,
                                        w.last_event_ms,
                                    )
                                })
                                .collect::<Vec<_>>()
                        };
                        if !touched {
                            assert_eq!(
                                published(wa),
                                published(wb),
                                "{ctx}: {name} changed without x"
                            );
                        }
                        let by_seq = |ws: &[ClosedWindow]| {
                            ws.iter()
                                .map(|w| (w.seq, w.clone()))
                                .collect::<BTreeMap<_, _>>()
                        };
                        let (sa, sb) = (by_seq(wa), by_seq(wb));
                        for (seq, w) in &sb {
                            if !holds_x(w) {
                                assert_eq!(
                                    sa.get(seq).map(|w| &w.values),
                                    Some(&w.values),
                                    "{ctx}: {name}#{seq}"
                                );
                            }
                        }
                    } else {
                        assert_eq!(wa.len(), wb.len(), "{ctx}: {name}");
                        for (p, q) in wa.iter().zip(wb) {
                            let public = |w: &ClosedWindow| {
                                (
                                    w.seq,
                                    w.first_offset,
                                    w.last_offset,
                                    w.first_event_ms,
                                    w.last_event_ms,
                                    w.padded,
                                    w.values.len(),
                                    w.charges.clone(),
                                )
                            };
                            assert_eq!(public(p), public(q), "{ctx}: {name}");
                            if !holds_x(q) {
                                assert_eq!(p.values, q.values, "{ctx}: {name}#{}", q.seq);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The registry changes between messages. Whether each message is prepared
/// before the previous one is applied (the consuming loop, where a reading
/// waits for its registry row to arrive), two messages ahead, or processed
/// alone, every reading is routed by the rows as they were when its message
/// was prepared: the same windows with the same values. Routing a prepared reading by rows
/// read later (at its apply) would put the readings right after an update
/// in the other group.
#[test]
fn registry_updates_route_alike_when_preparing_ahead() {
    let v = Config::parse(&config("add-remove", 2))
        .unwrap()
        .validate()
        .unwrap();
    let devices = ["a", "b", "c", "d", "e"];
    let msgs: Vec<Vec<u8>> = (0..60)
        .map(|i| reading(devices[i % 5], i as f64, T0 + i as i64 * 20 * 60_000, None))
        .collect();
    // Before message i: device `devices[i / 7 % 5]` moves firmware.
    let update = |i: usize| {
        let firmware = if (i / 7).is_multiple_of(2) {
            "4.2"
        } else {
            "4.1"
        };
        (i % 7 == 3).then(|| (devices[(i / 7) % 5], firmware))
    };
    // `ahead`: messages prepared and not yet applied (0: one by one).
    let run = |ahead: usize| {
        let reg = Arc::new(Registry::new(
            vec![("firmware".into(), Some(vec!["4.1".into(), "4.2".into()]))],
            100,
        ));
        for d in devices {
            reg.apply(Some(d.as_bytes()), Some(br#"{"firmware":"4.1"}"#))
                .unwrap();
        }
        let mut p = Processor::new(&v, Arc::new(Counters::default())).with_registry(reg.clone());
        p.windower_mut().start_time_lanes(0, T0 - HOUR);
        let mut closed = Vec::new();
        let json = Some("application/json");
        for (i, m) in msgs.iter().enumerate() {
            if let Some((d, f)) = update(i) {
                let row = format!(r#"{{"firmware":"{f}"}}"#);
                reg.apply(Some(d.as_bytes()), Some(row.as_bytes())).unwrap();
            }
            if ahead > 0 {
                p.prepare(0, i as i64, m, json, None).unwrap();
                if i >= ahead {
                    p.apply(&mut closed).unwrap();
                }
            } else {
                p.process(0, i as i64, m, json, None, &mut closed).unwrap();
            }
        }
        for _ in 0..ahead {
            p.apply(&mut closed).unwrap();
        }
        let next_day = T0 + 100 * HOUR;
        p.windower_mut()
            .close_due(next_day, |_| next_day, |_| 0, usize::MAX, &mut closed);
        let mut out: Vec<(String, u64, Vec<i64>)> = closed
            .into_iter()
            .filter(|w| !w.values.is_empty())
            .map(|w| (v.plan.streams[w.stream].spec.name.clone(), w.seq, w.values))
            .collect();
        out.sort();
        out
    };
    let one_by_one = run(0);
    assert_eq!(one_by_one, run(1), "one message ahead");
    assert_eq!(one_by_one, run(2), "two messages ahead");
    // The updates moved readings: both groups hold some.
    for g in ["temp[firmware=4.1]", "temp[firmware=4.2]"] {
        let n: usize = one_by_one
            .iter()
            .filter(|(s, _, _)| s == g)
            .map(|(_, _, v)| v.len())
            .sum();
        assert!(n > 5, "{g}: {n} readings");
    }
}
