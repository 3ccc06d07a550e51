//! Private keys in the service, below Kafka: a value of a private
//! dimension is released (bound to a slot) only once the DP key selection
//! over its horizon's distinct devices picks it, from two horizons later;
//! a value held by one device stays in `other`; unbound slots release
//! nothing; a selection is made once per horizon, persisted, and a restart
//! from the persisted bindings routes alike; change-one neighbours differ
//! only in the changed reading's window.

use fleetdp::config::Config;
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::keys::Bindings;
use fleetdp::telemetry::Counters;
use fleetdp::{ClosedWindow, Processor};
use std::collections::BTreeMap;
use std::sync::Arc;

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// The start of a horizon.
const D0: i64 = 1_700_000_000_000 / DAY * DAY;

const CONFIG: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
relation = "add-remove"
epsilon_per_device = 1.0
horizon = "24h"
[dimensions]
firmware = { private = true, max_keys = 2 }
[[stream]]
name = "temp"
lower = 0.0
upper = 100.0
resolution = 1.0
window = "1h"
max_windows_per_device = 24
statistics = ["sum"]
group_by = ["firmware"]
key_selection_share = 0.5
"#;

fn reading(device: &str, t: i64, firmware: &str) -> Vec<u8> {
    format!(
        r#"{{"device_id":"{device}","stream":"temp","value":20,"event_time_ms":{t},"labels":{{"firmware":"{firmware}"}}}}"#
    )
    .into_bytes()
}

/// Day `day`: `n` devices on `firmware` and one device alone on `rare`,
/// each one reading an hour into the day (stamped as it happened).
fn day(day: i64, n: usize, firmware: &str, rare: &str) -> Vec<(Vec<u8>, i64)> {
    let t = D0 + day * DAY + HOUR;
    let mut m: Vec<(Vec<u8>, i64)> = (0..n)
        .map(|i| (reading(&format!("car-{i}"), t, firmware), t))
        .collect();
    m.push((reading("lonely", t, rare), t));
    m
}

struct Run {
    windows: BTreeMap<String, Vec<ClosedWindow>>,
    bound: Vec<(String, String)>,
    /// What would be persisted, in order.
    records: Vec<(String, i32, Bindings)>,
    processor: Processor,
}

fn run(key: [u8; 32], msgs: &[(Vec<u8>, i64)]) -> Run {
    let v = Config::parse(CONFIG).unwrap().validate().unwrap();
    let mut p = Processor::new(&v, Arc::new(Counters::default()))
        .with_release_key(ReleaseKey::from_bytes(key));
    p.windower_mut().start_time_lanes(0, D0);
    let mut closed = Vec::new();
    let mut records = Vec::new();
    for (i, (m, stamp)) in msgs.iter().enumerate() {
        p.process(
            0,
            i as i64,
            m,
            Some("application/json"),
            Some(*stamp),
            &mut closed,
        )
        .unwrap();
        records.extend(p.take_key_updates());
    }
    let end = msgs.last().map_or(D0, |m| m.1) + 2 * HOUR;
    p.windower_mut()
        .close_due(end, |_| end, |_| 0, usize::MAX, &mut closed);
    let mut windows: BTreeMap<String, Vec<ClosedWindow>> = BTreeMap::new();
    let mut bound = Vec::new();
    for w in closed {
        if let Some(b) = p.bound_value(w.stream, w.partition) {
            bound.push(b);
        }
        windows
            .entry(v.plan.streams[w.stream].spec.name.clone())
            .or_default()
            .push(w);
    }
    bound.sort();
    bound.dedup();
    Run {
        windows,
        bound,
        records,
        processor: p,
    }
}

fn values_in(r: &Run, stream: &str, from: i64, to: i64) -> usize {
    r.windows.get(stream).map_or(0, |ws| {
        ws.iter()
            .filter(|w| {
                let t = w.seq as i64 * HOUR;
                (from..to).contains(&t)
            })
            .map(|w| w.values.len())
            .sum()
    })
}

/// 400 devices on 4.3 and one on `rare` on day 0; the same on days 1 and 2.
/// 4.3 is selected at day 0's due moment and routes from day 2; `rare`
/// never leaves `other`; slot #2 stays unbound and silent.
#[test]
fn private_keys_are_selected_only_above_threshold_and_route_two_horizons_later() {
    let msgs: Vec<_> = (0..3).flat_map(|d| day(d, 400, "4.3", "rare")).collect();
    let r = run([9; 32], &msgs);
    let slot = "temp[firmware=#1]";
    let other = "temp[firmware=other]";
    // Days 0 and 1 in other, day 2 in the slot (the lonely device too).
    assert_eq!(values_in(&r, other, D0, D0 + DAY), 401);
    assert_eq!(values_in(&r, other, D0 + DAY, D0 + 2 * DAY), 401);
    assert_eq!(values_in(&r, slot, D0 + 2 * DAY, D0 + 3 * DAY), 400);
    assert_eq!(values_in(&r, other, D0 + 2 * DAY, D0 + 3 * DAY), 1);
    // The slot's lane starts with day 2 (no releases before it is bound);
    // the unbound slot releases nothing.
    let first = r.windows[slot].iter().map(|w| w.seq).min().unwrap() as i64;
    assert_eq!(first * HOUR, D0 + 2 * DAY);
    assert!(!r.windows.contains_key("temp[firmware=#2]"));
    assert_eq!(r.bound, vec![("firmware".to_string(), "4.3".to_string())]);
    // Selections ran for days 0 and 1 (day 2's is not due yet): two writes.
    assert_eq!(r.records.len(), 2);
}

/// The selection is keyed: the same input and key persist the same
/// bindings; a processor restored from what was persisted routes the next
/// day as the one that kept running.
#[test]
fn bindings_replay_and_restore_alike() {
    let first: Vec<_> = (0..2).flat_map(|d| day(d, 400, "4.3", "rare")).collect();
    let a = run([5; 32], &first);
    let b = run([5; 32], &first);
    assert_eq!(a.records, b.records);
    let (stream, partition, last) = a.records.last().cloned().expect("day 0 was selected");
    assert_eq!((stream.as_str(), partition), ("temp", 0));
    assert_eq!(last.selected_through, (D0 / DAY));
    let bound = last.slots[0].as_ref().expect("4.3 bound");
    assert_eq!(
        (bound.value.as_str(), bound.from_horizon),
        ("4.3", D0 / DAY + 2)
    );
    assert!(last.slots[1].is_none());

    let v = Config::parse(CONFIG).unwrap().validate().unwrap();
    let mut restored = Processor::new(&v, Arc::new(Counters::default()))
        .with_release_key(ReleaseKey::from_bytes([5; 32]));
    restored.restore_keys("temp", 0, last);
    restored.windower_mut().start_time_lanes(0, D0 + 2 * DAY);
    let slot = v
        .plan
        .streams
        .iter()
        .position(|s| s.spec.name == "temp[firmware=#1]")
        .unwrap();
    let mut kept = a.processor;
    assert_eq!(restored.bound_value(slot, 0), kept.bound_value(slot, 0));
    let later = day(2, 400, "4.3", "rare");
    let end = D0 + 3 * DAY + 3 * HOUR;
    let mut in_slot = Vec::new();
    for (p, selections) in [(&mut kept, 1), (&mut restored, 0)] {
        let mut closed = Vec::new();
        for (i, (m, t)) in later.iter().enumerate() {
            p.process(
                0,
                10_000 + i as i64,
                m,
                Some("application/json"),
                Some(*t),
                &mut closed,
            )
            .unwrap();
        }
        p.windower_mut()
            .close_due(end, |_| end, |_| 0, usize::MAX, &mut closed);
        in_slot.push(
            closed
                .iter()
                .filter(|w| w.stream == slot)
                .map(|w| w.values.len())
                .sum::<usize>(),
        );
        // Day 1's selection (due with day 2's first message; the restored
        // one counted nothing of day 1, so it has none) binds nothing new.
        let u = p.take_key_updates();
        assert_eq!(u.len(), selections);
        for (_, _, b) in u {
            assert_eq!(b.slots[0].as_ref().unwrap().value, "4.3");
            assert!(b.slots[1].is_none());
        }
    }
    assert_eq!(in_slot, vec![400, 400]);
}

/// Neighbouring inputs: adding one device with a value nobody else has
/// leaves every binding and every other device's routing unchanged.
#[test]
fn a_lonely_value_changes_no_binding() {
    let with: Vec<_> = (0..3).flat_map(|d| day(d, 400, "4.3", "only-me")).collect();
    let without: Vec<_> = with
        .iter()
        .filter(|(m, _)| !String::from_utf8_lossy(m).contains("lonely"))
        .cloned()
        .collect();
    for key in [[1u8; 32], [2; 32], [3; 32]] {
        let a = run(key, &with);
        let b = run(key, &without);
        assert_eq!(a.bound, b.bound);
        for s in ["temp[firmware=#1]", "temp[firmware=#2]"] {
            assert_eq!(
                a.windows.get(s).map(|w| w.len()),
                b.windows.get(s).map(|w| w.len()),
                "{s}"
            );
        }
        assert_eq!(
            values_in(&a, "temp[firmware=other]", D0, D0 + 3 * DAY),
            values_in(&b, "temp[firmware=other]", D0, D0 + 3 * DAY) + 3
        );
    }
}

/// Change-one neighbours (one reading's value differs), count windows: the
/// bindings, which windows exist and who is in each are identical, and only
/// the window holding the changed reading has different values — a
/// reading's slot never depends on any value.
#[test]
fn change_one_neighbours_differ_only_in_the_changed_readings_window() {
    let text = CONFIG
        .replace("relation = \"add-remove\"", "relation = \"change-one\"")
        .replace(
            "window = \"1h\"",
            "window_size = 50\nwindow_timeout = \"2h\"",
        );
    let v = Config::parse(&text).unwrap().validate().unwrap();
    let msgs = |changed: Option<usize>| -> Vec<(Vec<u8>, i64)> {
        (0..3)
            .flat_map(|d| day(d, 400, "4.3", "rare"))
            .enumerate()
            .map(|(i, (m, t))| {
                if Some(i) == changed {
                    let text = String::from_utf8(m)
                        .unwrap()
                        .replace("\"value\":20", "\"value\":95");
                    (text.into_bytes(), t)
                } else {
                    (m, t)
                }
            })
            .collect()
    };
    let run = |msgs: &[(Vec<u8>, i64)]| {
        let mut p = Processor::new(&v, Arc::new(Counters::default()))
            .with_release_key(ReleaseKey::from_bytes([4; 32]));
        let (mut closed, mut records) = (Vec::new(), Vec::new());
        for (i, (m, t)) in msgs.iter().enumerate() {
            p.process(
                0,
                i as i64,
                m,
                Some("application/json"),
                Some(*t),
                &mut closed,
            )
            .unwrap();
            records.extend(p.take_key_updates());
        }
        (closed, records)
    };
    // Change a reading of day 0 (counted for the selection) and of day 2
    // (routed to the bound slot).
    for changed in [10, 2 * 401 + 10] {
        let (a, ra) = run(&msgs(None));
        let (b, rb) = run(&msgs(Some(changed)));
        assert_eq!(ra, rb, "bindings differ");
        assert!(
            ra.last().is_some_and(|r| r.2.slots[0].is_some()),
            "4.3 was bound"
        );
        assert_eq!(a.len(), b.len());
        let mut differing = 0;
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.stream, x.seq, &x.charges), (y.stream, y.seq, &y.charges));
            if x.values != y.values {
                differing += 1;
            }
        }
        assert_eq!(differing, 1, "reading {changed}");
    }
}
