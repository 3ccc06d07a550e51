//! Group-by over the broker with a device registry topic: every declared
//! group releases every window (empty ones too), readings count in the
//! group their registry row or their own label gives, a device is capped at
//! `G` groups per horizon, a registry update mid-stream moves the device's
//! later readings, and releases carry the group in key, name and `group`.

use crate::harness;

use harness::*;
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);
const GROUPS: [&str; 3] = [
    "temp[firmware=4.1]",
    "temp[firmware=4.2]",
    "temp[firmware=other]",
];

fn reading(device: &str, value: f64, at: i64, firmware: Option<&str>) -> Out {
    let labels = firmware.map_or(String::new(), |f| {
        format!(r#","labels":{{"firmware":"{f}"}}"#)
    });
    Out {
        partition: Some(0),
        key: device.to_string(),
        payload: format!(
            r#"{{"device_id":"{device}","stream":"temp","value":{value},"event_time_ms":{at}{labels}}}"#
        )
        .into_bytes(),
        content_type: Some("application/json".into()),
    }
}

fn row(device: &str, firmware: &str) -> Out {
    Out {
        partition: Some(0),
        key: device.to_string(),
        payload: format!(r#"{{"firmware":"{firmware}","model":"m1"}}"#).into_bytes(),
        content_type: None,
    }
}

/// The noisy count of `stream`'s window `seq`, and its half-width.
fn count_of(rs: &[proto::WindowRelease], stream: &str, seq: u64) -> Option<(f64, f64)> {
    let r = rs
        .iter()
        .find(|r| r.stream == stream && r.window_seq == seq)?;
    let c = r.statistics.iter().find(|s| s.name == "count")?;
    Some((c.values[0], c.half_width.unwrap()))
}

#[test]
fn groups_from_the_registry_and_labels_over_the_broker() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "groups", 1).await;
        let registry = unique("groups-registry");
        broker.create_topics(&[(&registry, 1)]).await;
        let mut rows: Vec<Out> = (0..10)
            .map(|i| row(&format!("r{i}"), if i < 5 { "4.1" } else { "4.2" }))
            .collect();
        // A row without a usable key is refused and counted, not fatal.
        rows.push(Out {
            partition: Some(0),
            key: String::new(),
            payload: b"{}".to_vec(),
            content_type: None,
        });
        produce(&broker, &registry, &rows).await;
        let v = config(
            &broker,
            &t,
            "relation = \"add-remove\"\nepsilon_per_device = 1000.0\nhorizon = \"1h\"",
            &format!(
                "[limits]\nmax_lateness = \"1s\"\nmax_clock_skew = \"1m\"\n\
                 [dimensions]\nfirmware = [\"4.1\", \"4.2\"]\n\
                 [registry]\ntopic = \"{registry}\""
            ),
            r#"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window = "2s"
max_windows_per_device = 10
statistics = ["count", "mean"]
group_by = ["firmware"]
max_groups_per_device = 2
"#,
        );
        let (stop, c, h) = spawn_pipeline(v, [4; 32]);
        // Every group releases windows before any input: 3 per window.
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= 6).await,
            "no empty windows released"
        );

        let at = now_ms();
        let seq = (at / 2000) as u64;
        let mut msgs: Vec<Out> = (0..10)
            .map(|i| reading(&format!("r{i}"), 20.0, at, None))
            .collect();
        // A label without a registry row, and a label over the row.
        msgs.push(reading("lab", 20.0, at, Some("4.2")));
        msgs.push(reading("r0", 20.0, at + 1, Some("4.2")));
        // A device in three groups within one horizon: G = 2 keeps two.
        msgs.push(reading("z", 20.0, at, Some("4.1")));
        msgs.push(reading("z", 20.0, at, Some("4.2")));
        msgs.push(reading("z", 20.0, at, None));
        produce(&broker, &t.input, &msgs).await;
        assert!(
            wait_until(WAIT, || count(&c.readings_accepted) >= 14).await,
            "accepted {}",
            count(&c.readings_accepted)
        );
        // Counted as the group cap, not as W's (/api/status and
        // the page showed it as per_horizon_cap).
        assert_eq!(count(&c.dropped_group_cap), 1, "z's third group");
        assert_eq!(count(&c.dropped_horizon_cap), 0, "not W's cap");

        // Mid-stream: r1 moves to 4.2; its later readings follow.
        produce(&broker, &registry, &[row("r1", "4.2")]).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let later = now_ms();
        let seq2 = (later / 2000) as u64;
        produce(&broker, &t.input, &[reading("r1", 20.0, later, None)]).await;
        let released = |s: u64| {
            let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
            GROUPS.iter().all(|g| count_of(&rs, g, s).is_some())
        };
        assert!(
            wait_until(WAIT, || released(seq2)).await,
            "window {seq2} not released by every group"
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(count(&c.readings_accepted), 15);

        let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
        // 4.1: r0–r4 and z; 4.2: r5–r9, lab, r0 (labelled) and z; other: none.
        let want: HashMap<&str, [f64; 2]> = HashMap::from([
            (GROUPS[0], [6.0, 0.0]),
            (GROUPS[1], [8.0, 1.0]),
            (GROUPS[2], [0.0, 0.0]),
        ]);
        for (g, truth) in &want {
            for (s, t) in [seq, seq2].iter().zip(truth) {
                let (v, hw) = count_of(&rs, g, *s).unwrap_or_else(|| panic!("{g} #{s}"));
                // ε = 25 per count: the noise is 0 but with probability ≈ 10⁻¹⁰.
                assert!((v - t).abs() < 0.5, "{g} #{s}: count {v} ± {hw}, true {t}");
            }
        }
        // Every group released the same seqs; each release names its group.
        let seqs = |g: &str| {
            let mut s: Vec<u64> = rs
                .iter()
                .filter(|r| r.stream == g)
                .map(|r| r.window_seq)
                .collect();
            s.sort();
            s
        };
        assert_eq!(seqs(GROUPS[0]), seqs(GROUPS[1]));
        assert_eq!(seqs(GROUPS[0]), seqs(GROUPS[2]));
        for r in rs.iter().filter(|r| r.stream == GROUPS[1]) {
            assert_eq!(
                r.group,
                HashMap::from([("firmware".to_string(), "4.2".to_string())])
            );
            assert_eq!(r.guarantee.as_ref().unwrap().max_groups_per_device, 2);
        }
        let keys: Vec<String> = tokio::task::block_in_place(|| read_all(&broker, &t.output))
            .into_iter()
            .filter(|m| !m.is_fleet())
            .map(|m| String::from_utf8(m.key).unwrap())
            .collect();
        assert!(
            keys.contains(&format!("temp[firmware=other]/0/{seq}")),
            "{keys:?}"
        );
    });
}

/// Private keys over the broker, values from the registry: a value 40
/// devices hold is selected once its horizon is due and gets slot `#1`
/// from two horizons later (releases name it in `group`); a value one
/// device holds stays in `other`; the unbound slot releases nothing; the
/// binding is in the state topic before the slot's first release, and a
/// restart that replays the whole input keeps it.
#[test]
fn private_keys_selected_only_above_threshold_over_the_broker() {
    const H: i64 = 6_000;
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "private-keys", 1).await;
        let registry = unique("private-registry");
        broker.create_topics(&[(&registry, 1)]).await;
        let mut rows: Vec<Out> = (0..40).map(|i| row(&format!("p{i}"), "9.9")).collect();
        rows.push(row("solo", "0.1"));
        produce(&broker, &registry, &rows).await;
        let text = |t: &Topics| {
            config(
                &broker,
                t,
                "relation = \"add-remove\"\nepsilon_per_device = 1000.0\nhorizon = \"6s\"",
                &format!(
                    "[limits]\nmax_lateness = \"1s\"\nmax_clock_skew = \"2s\"\n\
                     [dimensions]\nfirmware = {{ private = true, max_keys = 2 }}\n\
                     [registry]\ntopic = \"{registry}\""
                ),
                r#"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window = "2s"
max_windows_per_device = 3
statistics = ["count"]
group_by = ["firmware"]
"#,
            )
        };
        let (stop, c, h) = spawn_pipeline(text(&t), [6; 32]);
        // Start at a fresh horizon with room for a message in it.
        let wait_for = |at: i64| async move {
            let d = at - now_ms();
            if d > 0 {
                tokio::time::sleep(Duration::from_millis(d as u64)).await;
            }
        };
        let h0 = now_ms().div_euclid(H) + 1;
        wait_for(h0 * H + 200).await;
        let all = |at: i64| -> Vec<Out> {
            (0..40)
                .map(|i| reading(&format!("p{i}"), 20.0, at, None))
                .chain([reading("solo", 20.0, at, None)])
                .collect()
        };
        produce(&broker, &t.input, &all(now_ms())).await;
        // Horizon h0 + 1, after h0's due moment: selects h0's keys.
        wait_for((h0 + 1) * H + 1_300).await;
        produce(&broker, &t.input, &all(now_ms())).await;
        // Horizon h0 + 2: routed by them.
        wait_for((h0 + 2) * H + 200).await;
        let at2 = now_ms();
        produce(&broker, &t.input, &all(at2)).await;
        let seq2 = (at2 / 2000) as u64;
        let slot = "temp[firmware=#1]";
        let released = || {
            let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
            rs.iter().any(|r| r.stream == slot && r.window_seq == seq2)
                && rs
                    .iter()
                    .any(|r| r.stream == "temp[firmware=other]" && r.window_seq == seq2)
        };
        assert!(
            wait_until(WAIT, released).await,
            "window {seq2} of {slot} not released; accepted {}",
            count(&c.readings_accepted)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();

        let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let (v, _) = count_of(&rs, slot, seq2).unwrap();
        assert!((v - 40.0).abs() < 0.5, "slot #1 count {v}");
        let (v, _) = count_of(&rs, "temp[firmware=other]", seq2).unwrap();
        assert!((v - 1.0).abs() < 0.5, "other count {v} (solo only)");
        // Earlier horizons: everyone in other, the slot not yet released.
        let first_slot = rs
            .iter()
            .filter(|r| r.stream == slot)
            .map(|r| r.window_seq)
            .min()
            .unwrap();
        assert_eq!(first_slot as i64 * 2000, (h0 + 2) * H);
        for r in rs.iter().filter(|r| r.stream == slot) {
            assert_eq!(
                r.group,
                HashMap::from([("firmware".to_string(), "9.9".to_string())])
            );
            assert!(r.guarantee.as_ref().unwrap().delta > 0.0);
        }
        assert!(rs.iter().all(|r| r.stream != "temp[firmware=#2]"));
        // The binding is in the state topic.
        let bindings = |t: &Topics| -> Vec<serde_json::Value> {
            tokio::task::block_in_place(|| read_all(&broker, &t.state))
                .into_iter()
                .filter(|m| m.headers.get("fleetdp-record").map(String::as_str) == Some("keys"))
                .map(|m| {
                    assert_eq!(m.key, b"temp/0/keys");
                    serde_json::from_slice(&m.payload).unwrap()
                })
                .collect()
        };
        let before = bindings(&t);
        assert!(!before.is_empty());
        for b in &before {
            assert_eq!(b["slots"][0]["value"], "9.9", "{b}");
            assert_eq!(b["slots"][0]["from_horizon"], h0 + 2, "{b}");
            assert!(b["slots"][1].is_null(), "{b}");
        }

        // A restart under a fresh group replays every message: the
        // restored binding routes alike and no selection is made again.
        let t2 = t.regroup();
        let (stop, c, h) = spawn_pipeline(text(&t2), [6; 32]);
        // Every message handled again (readings of released windows count
        // as already released, of lanes that restart at "now" as late).
        assert!(
            wait_until(WAIT, || count(&c.messages) >= 123).await,
            "replayed {} messages",
            count(&c.messages)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        for b in bindings(&t) {
            assert_eq!(b["slots"][0]["value"], "9.9", "{b}");
            assert_eq!(b["slots"][0]["from_horizon"], h0 + 2, "{b}");
            assert!(b["slots"][1].is_null(), "{b}");
        }
        let again = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let slot_windows = |rs: &[proto::WindowRelease]| {
            rs.iter()
                .filter(|r| r.stream == slot && r.window_seq == seq2)
                .count()
        };
        // A replayed release is a bit-identical copy, never a new one.
        assert!(slot_windows(&again) >= 1);
        for r in again
            .iter()
            .filter(|r| r.stream == slot && r.window_seq == seq2)
        {
            assert_eq!(
                count_of(std::slice::from_ref(r), slot, seq2).unwrap().0,
                v_of(&rs, slot, seq2)
            );
        }
    });
}

fn v_of(rs: &[proto::WindowRelease], stream: &str, seq: u64) -> f64 {
    count_of(rs, stream, seq).unwrap().0
}
