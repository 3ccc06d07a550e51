//! End-to-end tests of the service over a real broker process (tansu from
//! tests/run.sh, or KAFKA_BROKERS), falling back to the in-process mock
//! cluster when neither is set.

use crate::harness;

use fleetdp::dp::universe::{TopCoder, Universe};
use fleetdp::sim::{FleetSpec, Signal};
use fleetdp::telemetry::Counters;
use harness::*;
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const KEY: [u8; 32] = [3; 32];
const WAIT: Duration = Duration::from_secs(120);

fn temp_stream(n: u64, k: u32, w: u32, stats: &str) -> String {
    format!(
        r#"
[[stream]]
name = "cabin_temp_c"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = {n}
max_readings_per_device = {k}
max_windows_per_device = {w}
statistics = [{stats}]
{}{}"#,
        if stats.contains("histogram") {
            "histogram_edges = [-20, 0, 10, 20, 30, 40, 60]\n"
        } else {
            ""
        },
        if stats.contains("quantiles") {
            "quantiles = [0.5]\n"
        } else {
            ""
        },
    )
}

/// `rounds` readings of `cabin_temp_c` from each of `devices` devices.
fn temp_messages(devices: usize, rounds: usize) -> Vec<Out> {
    fleet_messages(
        FleetSpec {
            devices,
            signals: vec![Signal::CabinTemp],
            bad_fraction: 0.0,
            ..FleetSpec::default()
        },
        devices * rounds,
    )
}

/// Run a pipeline in the background; returns its stop switch and handle.
fn spawn(
    v: fleetdp::config::Validated,
) -> (
    watch::Sender<bool>,
    Arc<Counters>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    spawn_pipeline(v, KEY)
}

fn get(c: &std::sync::atomic::AtomicU64) -> u64 {
    Counters::get(c)
}

#[test]
fn releases_tile_the_input_and_cover_the_truth() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("tile");
        broker
            .create_topics(&[(&t.input, 3), (&t.output, 3), (&t.dlq, 1), (&t.state, 2)])
            .await;
        let n = 50u64;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 20.0\nhorizon = \"24h\"",
            "",
            &temp_stream(n, 1, 1000, "\"mean\", \"sum\", \"histogram\""),
        );
        // 180 devices over 3 partitions, 25 rounds of one reading each.
        let msgs = temp_messages(180, 25);
        produce(&broker, &t.input, &msgs).await;
        // Count what each partition holds to know how many windows must come.
        let input = tokio::task::block_in_place(|| read_all(&broker, &t.input));
        let mut per_partition: HashMap<i32, u64> = HashMap::new();
        for m in &input {
            *per_partition.entry(m.partition).or_default() += 1;
        }
        let expected: u64 = per_partition.values().map(|c| c / n).sum();
        let (stop, c, h) = spawn(v);
        assert!(
            wait_until(WAIT, || get(&c.windows_released) >= expected).await,
            "released {} of {expected}",
            get(&c.windows_released)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(get(&c.readings_accepted), msgs.len() as u64);
        assert_eq!(get(&c.dropped_window_cap) + get(&c.dropped_horizon_cap), 0);

        let releases = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert_eq!(releases.len() as u64, expected);
        let by = assert_contiguous_and_tiling(&releases, n);
        assert_eq!(by.len(), per_partition.len());

        // Independent truth: read the window's offsets back and top-code.
        let coder = TopCoder::new(Universe::new(-20.0, 60.0, 0.1).unwrap());
        let mut values: HashMap<(i32, i64), f64> = HashMap::new();
        for m in &input {
            let r = proto::DeviceReading::decode(&*m.payload).unwrap();
            values.insert(
                (m.partition, m.offset),
                coder.top_code(r.value.unwrap()).unwrap().units as f64 * 0.1,
            );
        }
        let (mut covered, mut total) = (0, 0);
        for r in &releases {
            let truth: f64 = (r.first_offset..=r.last_offset)
                .map(|o| values[&(r.partition, o)])
                .sum::<f64>()
                / n as f64;
            let mean = r.statistics.iter().find(|s| s.name == "mean").unwrap();
            total += 1;
            covered += ((mean.values[0] - truth).abs() <= mean.half_width.unwrap() + 1e-9) as u32;
            let hist = r.statistics.iter().find(|s| s.name == "histogram").unwrap();
            assert!((hist.values.iter().sum::<f64>() - n as f64).abs() < 1e-6);
            assert_eq!(hist.bin_edges.len(), 7);
            let g = r.guarantee.as_ref().unwrap();
            assert_eq!(
                (
                    g.relation.as_str(),
                    g.unit.as_str(),
                    g.max_readings_per_device
                ),
                ("change-one", "device", 1)
            );
        }
        let rate = covered as f64 / total as f64;
        // 95% intervals: with ~90 windows, below 85% would be a 4σ event.
        assert!(rate >= 0.85, "mean covered in {covered}/{total} windows");
    });
}

#[test]
fn bad_input_goes_to_the_dead_letter_topic_with_its_reason() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("dlq");
        broker.create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 2)]).await;
        let n = 10u64;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "[limits]\nmax_message_bytes = 2048\nmax_lateness = \"1h\"",
            &temp_stream(n, 1, 1000, "\"mean\""),
        );
        let good = |i: usize, t_ms: i64| Out {
            partition: Some(0),
            key: format!("d{i}"),
            payload: proto::DeviceReading {
                device_id: format!("d{i}"),
                stream: "cabin_temp_c".into(),
                value: Some(20.0 + i as f64 % 7.0),
                event_time_ms: Some(t_ms),
                labels: Default::default(),
            }
            .encode_to_vec(),
            content_type: None,
        };
        let json = |body: &str| Out {
            partition: Some(0),
            key: "bad".into(),
            payload: body.as_bytes().to_vec(),
            content_type: Some("application/json".into()),
        };
        let base = 1_767_225_600_000i64;
        let mut msgs: Vec<Out> = (0..10).map(|i| good(i, base)).collect(); // one full window
        let bad: Vec<(Out, &str)> = vec![
            (Out { partition: Some(0), key: "bad".into(), payload: vec![0xff, 0x01, 0x02], content_type: None }, "undecodable"),
            (json(r#"{"device_id":"x","stream":"cabin_temp_c","event_time_ms":1}"#), "missing_field"),
            (json(r#"{"device_id":"x","stream":"cabin_temp_c","value":"NaN","event_time_ms":1}"#), "not_finite"),
            (json(r#"{"device_id":"x","stream":"engine_rpm","value":1,"event_time_ms":1}"#), "unknown_stream"),
            (json(&format!(r#"{{"device_id":"x","stream":"cabin_temp_c","value":1,"event_time_ms":1,"pad":"{}"}}"#, "x".repeat(4000))), "oversize"),
            (json(&format!(r#"{{"device_id":"x","stream":"cabin_temp_c","value":1,"event_time_ms":{}}}"#, base - 2 * 3_600_000)), "too_old"),
            (json("[]"), "batch_size"),
            (Out { partition: Some(0), key: "bad".into(), payload: b"{}".to_vec(), content_type: Some("text/csv".into()) }, "undecodable"),
        ];
        let mut expected_reasons = Vec::new();
        let mut originals = Vec::new();
        for (i, (m, reason)) in bad.into_iter().enumerate() {
            msgs.push(good(100 + i, base + 1000));
            expected_reasons.push(reason);
            originals.push(m.payload.clone());
            msgs.push(m);
        }
        msgs.extend((200..212).map(|i| good(i, base + 2000)));
        let good_count = 10 + 8 + 12;
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn(v);
        assert!(wait_until(WAIT, || get(&c.messages) >= msgs.len() as u64).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(get(&c.readings_accepted), good_count, "every good reading around the bad ones is counted");
        assert_eq!(c.dead_letters_total(), expected_reasons.len() as u64);
        assert_eq!(get(&c.windows_released), good_count / n);
        let dlq = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        let got: Vec<&str> = dlq.iter().map(|m| m.headers["fleetdp-reason"].as_str()).collect();
        assert_eq!(got, expected_reasons);
        for (m, orig) in dlq.iter().zip(&originals) {
            assert_eq!(&m.payload, orig, "dead letters keep the original bytes");
            assert_eq!(m.headers["fleetdp-source-partition"], "0");
            assert!(m.headers.contains_key("fleetdp-detail"));
            assert!(!m.headers["fleetdp-detail"].contains("20."), "no values in the detail");
            // Kafka Connect's dead-letter context, for Connect-style tooling.
            let connect = |k: &str| m.headers[&format!("__connect.errors.{k}")].clone();
            assert_eq!(connect("topic"), t.input);
            assert_eq!(connect("partition"), "0");
            assert_eq!(connect("offset"), m.headers["fleetdp-source-offset"]);
            assert_eq!(connect("exception.class.name"), m.headers["fleetdp-reason"]);
            assert_eq!(connect("exception.message"), m.headers["fleetdp-detail"]);
            assert_eq!(connect("connector.name"), "fleetdp");
        }
    });
}

#[test]
fn excess_readings_are_dropped_and_counted() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("excess");
        broker.create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 2)]).await;
        // k = 2 readings per window, W = 2 windows per 1h horizon, n = 4.
        let v = config(&broker, &t, "epsilon_per_device = 1.0\nhorizon = \"1h\"", "", &temp_stream(4, 2, 2, "\"mean\""));
        let base = 1_767_225_600_000i64;
        let seq = [
            ("a", base), ("a", base), ("a", base), // third a: over k
            ("b", base), ("c", base),             // window 0 = a a b c
            ("a", base), ("d", base), ("e", base), ("f", base), // window 1: a's 2nd window
            ("a", base), // a's 3rd window this horizon: over W
            ("g", base), ("h", base), ("i", base), ("j", base), // window 2
            ("a", base + 3_600_000), ("k", base + 3_600_000), ("l", base + 3_600_000), ("m", base + 3_600_000), // next horizon: a again
        ];
        let msgs: Vec<Out> = seq
            .iter()
            .map(|(d, t_ms)| Out {
                partition: Some(0),
                key: d.to_string(),
                payload: format!(r#"{{"device_id":"{d}","stream":"cabin_temp_c","value":21.5,"event_time_ms":{t_ms}}}"#).into_bytes(),
                content_type: Some("application/json".into()),
            })
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn(v);
        assert!(wait_until(WAIT, || get(&c.messages) >= msgs.len() as u64).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(get(&c.dropped_window_cap), 1);
        assert_eq!(get(&c.dropped_horizon_cap), 1);
        assert_eq!(get(&c.readings_accepted), 16);
        assert_eq!(get(&c.windows_released), 4);
    });
}

#[test]
fn stop_and_restart_release_every_window_exactly_once() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("restart");
        broker
            .create_topics(&[(&t.input, 2), (&t.output, 2), (&t.dlq, 1), (&t.state, 2)])
            .await;
        let n = 20u64;
        let streams = format!(
            "{}\n{}",
            temp_stream(n, 1, 10_000, "\"mean\", \"quantiles\"")
                .replace("statistics", "budget_share = 0.5\nstatistics"),
            r#"
[[stream]]
name = "battery_v"
lower = 10.0
upper = 15.0
resolution = 0.01
window_size = 30
max_windows_per_device = 10000
budget_share = 0.5
statistics = ["mean"]
"#
        );
        let v = || {
            config(
                &broker,
                &t,
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                "",
                &streams,
            )
        };
        let msgs = fleet_messages(
            FleetSpec {
                devices: 120,
                signals: vec![Signal::CabinTemp, Signal::BatteryVolts],
                bad_fraction: 0.0,
                ..FleetSpec::default()
            },
            240 * 20,
        );
        let sizes: HashMap<&str, u64> = [("cabin_temp_c", 20), ("battery_v", 30)].into();
        // Windows the input holds so far, per (stream, partition).
        let windows_in_input = || {
            let input = tokio::task::block_in_place(|| read_all(&broker, &t.input));
            let mut per: HashMap<(String, i32), u64> = HashMap::new();
            for m in &input {
                let r = proto::DeviceReading::decode(&*m.payload).unwrap();
                *per.entry((r.stream, m.partition)).or_default() += 1;
            }
            per.iter()
                .map(|((s, _), c)| c / sizes[s.as_str()])
                .sum::<u64>()
        };
        // First run over the first half of the data, then a clean stop.
        let half = msgs.len() / 2;
        produce(&broker, &t.input, &msgs[..half]).await;
        let first_expected = windows_in_input();
        let (stop, c1, h) = spawn(v());
        assert!(
            wait_until(WAIT, || get(&c1.messages) >= half as u64
                && get(&c1.windows_released) >= first_expected)
            .await
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        let first = get(&c1.windows_released);
        assert_eq!(first, first_expected);

        // The rest arrives while it is down; the second run (same group)
        // resumes from the committed offsets, mid-window.
        produce(&broker, &t.input, &msgs[half..]).await;
        let expected = windows_in_input();
        assert!(expected > first);
        let (stop, c2, h) = spawn(v());
        assert!(
            wait_until(WAIT, || first + get(&c2.windows_released) >= expected).await,
            "{first} + {} of {expected}",
            get(&c2.windows_released)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(first + get(&c2.windows_released), expected);

        // Third run from offset 0 (a new group): the ledger must stop it from
        // releasing anything again.
        let mut v3 = v();
        v3.config.kafka.group_id = unique("restart-fresh");
        let (stop, c3, h) = spawn(v3);
        assert!(wait_until(WAIT, || get(&c3.messages) >= msgs.len() as u64).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(
            get(&c3.windows_released),
            0,
            "a replay from the start released windows again"
        );
        assert!(get(&c3.already_released) > 0);

        let releases = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert_eq!(releases.len() as u64, expected, "every window exactly once");
        let mut by: BTreeMap<(String, i32), Vec<proto::WindowRelease>> = BTreeMap::new();
        for r in &releases {
            by.entry((r.stream.clone(), r.partition))
                .or_default()
                .push(r.clone());
        }
        for ((s, p), rs) in by.iter_mut() {
            rs.sort_by_key(|r| r.window_seq);
            for (i, r) in rs.iter().enumerate() {
                assert_eq!(r.window_seq, i as u64, "{s}/{p}");
                assert_eq!(r.n, sizes[s.as_str()]);
                if i > 0 {
                    assert!(
                        r.first_offset > rs[i - 1].last_offset,
                        "{s}/{p}: windows overlap"
                    );
                }
            }
        }
    });
}

/// A plan computed by hand: ε = 1 per device per day, windows of 1,000
/// cabin temperatures in [−40, 85] °C at 0.1 °C, W = 24, k = 1.
const HAND_PLAN: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"
input_topic = "readings"
output_topic = "releases"
dead_letter_topic = "readings.dlq"
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
[[stream]]
name = "cabin_temp_c"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 1000
max_readings_per_device = 1
max_windows_per_device = 24
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, 0, 10, 20, 30, 40, 85]
quantiles = [0.5, 0.9]
adaptive_quantiles = true
"#;

#[test]
fn plan_numbers_equal_the_hand_computed_ones() {
    let dir = std::env::temp_dir().join(harness::unique("plan"));
    std::fs::create_dir_all(&dir).unwrap();
    let hand = dir.join("hand.toml");
    std::fs::write(&hand, HAND_PLAN).unwrap();
    let out = harness::stdout_of(
        std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["plan", "--format", "json", "--config"])
            .arg(&hand),
    );
    let r: serde_json::Value = serde_json::from_slice(&out).unwrap();
    // ε = 1 per day, W = 24, 5 measurements (centred sum, sum of squares,
    // histogram, 2 quantiles): ε per measurement = 1/24/5 = 1/120.
    let s = &r["streams"][0];
    let close =
        |a: &serde_json::Value, b: f64| (a.as_f64().unwrap() - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(&s["spent_per_window"], 1.0 / 24.0));
    assert!(close(&r["spent_per_horizon"], 1.0));
    let stat = |name: &str| {
        s["statistics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap()
            .clone()
    };
    // mean: Δ = 1250 units of 0.1 °C, n = 1000, k = 1 → 0.125 °C; scale = 0.125·120 = 15 °C.
    let mean = stat("mean");
    assert!(close(&mean["sensitivity"], 0.125));
    assert!(close(&mean["scale"], 15.0));
    assert!(close(&mean["spent_per_window"], 1.0 / 120.0));
    assert!(close(&mean["spent_per_horizon"], 0.2));
    // 95% half-width of a Laplace of scale t ≈ t·ln 20 (discrete: within a grid step).
    let hw = mean["half_width_95"].as_f64().unwrap();
    assert!((hw - 15.0 * 20f64.ln()).abs() < 0.01, "{hw}");
    // histogram: L1 = 2k = 2; scale 2·120 = 240 counts.
    let hist = stat("histogram");
    assert!(close(&hist["sensitivity"], 2.0));
    assert!(close(&hist["scale"], 240.0));
    // quantiles: utility sensitivity k = 1, permute-and-flip.
    let q = stat("quantile");
    assert_eq!(q["mechanism"], "permute_and_flip");
    assert!(close(&q["sensitivity"], 1.0));
    // This plan's mean (±44.9 °C) is mostly noise: warned about, and
    // `--strict` fails on it.
    assert!(r["warnings"].as_array().is_some_and(|w| !w.is_empty()));
    let strict = std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["plan", "--strict", "--config"])
        .arg(&hand)
        .output()
        .unwrap();
    assert!(!strict.status.success(), "--strict passed a plan of noise");
    assert!(String::from_utf8_lossy(&strict.stderr).contains("--strict"));

    // An over-budget plan exits non-zero and names the numbers.
    let bad = format!("{HAND_PLAN}\n[[stream]]\nname = \"b\"\nlower = 0.0\nupper = 1.0\nresolution = 1.0\nwindow_size = 10\nbudget_share = 0.5\nstatistics = [\"sum\"]\n");
    let path = dir.join("over.toml");
    std::fs::write(&path, bad).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["plan", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1.5") && err.contains("cabin_temp_c 1") && err.contains("b 0.5"),
        "{err}"
    );
}

#[test]
fn two_instances_share_the_work_and_hand_over_without_renumbering() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("scale");
        broker
            .create_topics(&[(&t.input, 4), (&t.output, 2), (&t.dlq, 1), (&t.state, 2)])
            .await;
        let n = 20u64;
        let v = || {
            config(
                &broker,
                &t,
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                "",
                &temp_stream(n, 1, 100_000, "\"mean\""),
            )
        };
        let msgs = temp_messages(160, 30);
        let third = msgs.len() / 3;
        let windows_in_input = || {
            let input = tokio::task::block_in_place(|| read_all(&broker, &t.input));
            let mut per: HashMap<i32, u64> = HashMap::new();
            for m in &input {
                *per.entry(m.partition).or_default() += 1;
            }
            per.values().map(|c| c / n).sum::<u64>()
        };
        let distinct = || {
            let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
            rs.iter()
                .map(|r| (r.partition, r.window_seq))
                .collect::<std::collections::HashSet<_>>()
                .len() as u64
        };
        let wait_distinct = |target: u64| {
            let deadline = std::time::Instant::now() + WAIT;
            async move {
                while std::time::Instant::now() < deadline {
                    if distinct() >= target {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                false
            }
        };

        // A alone.
        produce(&broker, &t.input, &msgs[..third]).await;
        let (stop_a, _ca, ha) = spawn(v());
        let e1 = windows_in_input();
        assert!(wait_distinct(e1).await, "A released {} of {e1}", distinct());
        // B joins: the group splits the partitions.
        let (stop_b, cb, hb) = spawn(v());
        produce(&broker, &t.input, &msgs[third..2 * third]).await;
        let e2 = windows_in_input();
        assert!(
            wait_distinct(e2).await,
            "A+B released {} of {e2}",
            distinct()
        );
        // A leaves: B takes over its partitions.
        stop_a.send(true).unwrap();
        ha.await.unwrap().unwrap();
        produce(&broker, &t.input, &msgs[2 * third..]).await;
        let e3 = windows_in_input();
        assert!(wait_distinct(e3).await, "B released {} of {e3}", distinct());
        stop_b.send(true).unwrap();
        hb.await.unwrap().unwrap();
        assert!(get(&cb.windows_released) > 0, "B never got partitions");

        // Every window exactly once, or as bit-identical duplicates only.
        let releases = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let mut by: BTreeMap<(i32, u64), Vec<proto::WindowRelease>> = BTreeMap::new();
        for r in releases {
            by.entry((r.partition, r.window_seq)).or_default().push(r);
        }
        assert_eq!(by.len() as u64, e3);
        let mut last: HashMap<i32, (u64, i64)> = HashMap::new();
        for ((p, seq), copies) in &by {
            let first = &copies[0];
            for c in copies {
                assert_eq!(
                    (c.first_offset, c.last_offset),
                    (first.first_offset, first.last_offset),
                    "{p}#{seq}"
                );
                assert_eq!(
                    c.statistics, first.statistics,
                    "{p}#{seq}: a duplicate with different noise"
                );
            }
            let expected_first = last.get(p).map_or(0, |&(_, o)| o + 1);
            assert_eq!(
                last.get(p).map_or(0, |&(s, _)| s + 1),
                *seq,
                "partition {p}: seqs not contiguous"
            );
            assert_eq!(
                first.first_offset, expected_first,
                "partition {p}#{seq}: offsets do not tile"
            );
            last.insert(*p, (*seq, first.last_offset));
        }
    });
}

#[test]
fn per_device_window_caps_survive_a_restart() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("caps");
        broker.create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 2)]).await;
        // n = 2, k = 1, W = 2 per 1h horizon.
        let v = || config(&broker, &t, "epsilon_per_device = 1.0\nhorizon = \"1h\"", "", &temp_stream(2, 1, 2, "\"mean\""));
        let base = 1_767_225_600_000i64;
        let reading = |d: &str| Out {
            partition: Some(0),
            key: d.to_string(),
            payload: format!(r#"{{"device_id":"{d}","stream":"cabin_temp_c","value":21.5,"event_time_ms":{base}}}"#).into_bytes(),
            content_type: Some("application/json".into()),
        };
        // Run 1: a touches its two windows.
        produce(&broker, &t.input, &["a", "b", "a", "c"].map(reading)).await;
        let (stop, c1, h) = spawn(v());
        assert!(wait_until(WAIT, || get(&c1.windows_released) >= 2).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        // Run 2, a new process: a's third window in the horizon is refused.
        produce(&broker, &t.input, &["a", "d", "e"].map(reading)).await;
        let (stop, c2, h) = spawn(v());
        assert!(wait_until(WAIT, || get(&c2.windows_released) >= 1).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(get(&c2.dropped_horizon_cap), 1, "the cap was forgotten across the restart");
        let releases = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let last = releases.iter().find(|r| r.window_seq == 2).expect("window 2");
        assert_eq!((last.first_offset, last.last_offset), (5, 6), "window 2 must hold d and e only");
    });
}

#[test]
fn charges_of_another_device_key_scheme_are_refused_on_restore() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("scheme");
        broker.create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)]).await;
        let v = || config(&broker, &t, "epsilon_per_device = 1.0\nhorizon = \"1h\"", "", &temp_stream(2, 1, 2, "\"mean\""));
        let reading = |d: &str| Out {
            partition: Some(0),
            key: d.to_string(),
            payload: format!(r#"{{"device_id":"{d}","stream":"cabin_temp_c","value":21.5,"event_time_ms":1767225600000}}"#).into_bytes(),
            content_type: Some("application/json".into()),
        };
        produce(&broker, &t.input, &["a", "b"].map(reading)).await;
        let (stop, c1, h) = spawn(v());
        assert!(wait_until(WAIT, || get(&c1.windows_released) >= 1).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        // What this build wrote names its scheme.
        let state = tokio::task::block_in_place(|| read_all(&broker, &t.state));
        let written: Vec<_> = state
            .iter()
            .filter(|m| m.headers.get(fleetdp::state::RECORD_KIND).map(String::as_str) == Some(fleetdp::state::CHARGES))
            .map(|m| proto::v1::WindowCharges::decode(m.payload.as_slice()).unwrap())
            .collect();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].device_key_scheme, fleetdp::DEVICE_KEY_SCHEME);
        assert_eq!(written[0].device_keys, [fleetdp::device_key("a"), fleetdp::device_key("b")]);
        // The same window's charges as an older build would have keyed them.
        let foreign = proto::v1::WindowCharges { device_key_scheme: String::new(), ..written[0].clone() };
        produce(&broker, &t.state, &[Out {
            partition: Some(0),
            key: proto::window_record_key("cabin_temp_c", 0, 0),
            payload: foreign.encode_to_vec(),
            content_type: None,
        }]).await;
        // A restart that gets input restores the charges: it must refuse them.
        produce(&broker, &t.input, &["c"].map(reading)).await;
        let (_stop, _c2, h) = spawn(v());
        let err = tokio::time::timeout(WAIT, h).await.expect("the restart fails").unwrap().unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("device-key scheme") && text.contains("rapidhash-v3"), "{text}");
    });
}

#[test]
fn our_partitioners_place_keys_as_librdkafka_does() {
    use fleetdp::Partitioner;
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        for part in [Partitioner::Murmur2, Partitioner::Crc32] {
            let topic = unique("placement");
            broker.create_topics(&[(&topic, 7)]).await;
            let producer: rdkafka::producer::FutureProducer = broker
                .client()
                .set("partitioner", part.librdkafka_name().unwrap())
                .create()
                .unwrap();
            for i in 0..300 {
                let key = format!("vehicle-{i:05}");
                producer
                    .send(
                        rdkafka::producer::FutureRecord::to(&topic)
                            .key(&key)
                            .payload("x"),
                        Duration::from_secs(30),
                    )
                    .await
                    .unwrap();
            }
            let got = tokio::task::block_in_place(|| read_all(&broker, &topic));
            assert_eq!(got.len(), 300);
            for m in got {
                assert_eq!(
                    part.partition(&m.key, 7),
                    Some(m.partition),
                    "{part:?}: {}",
                    String::from_utf8_lossy(&m.key)
                );
            }
        }
    });
}

#[test]
fn readings_on_the_wrong_partition_are_dead_lettered() {
    use fleetdp::Partitioner;
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("wrongp");
        broker.create_topics(&[(&t.input, 2), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)]).await;
        let v = config(&broker, &t, "epsilon_per_device = 1.0\nhorizon = \"24h\"", "", &temp_stream(4, 1, 1000, "\"mean\""));
        let base = 1_767_225_600_000i64;
        let reading = |d: &str, p: i32| Out {
            partition: Some(p),
            key: d.to_string(),
            payload: format!(r#"{{"device_id":"{d}","stream":"cabin_temp_c","value":21.5,"event_time_ms":{base}}}"#).into_bytes(),
            content_type: Some("application/json".into()),
        };
        let home = |d: &str| Partitioner::Murmur2.partition(d.as_bytes(), 2).unwrap();
        let devices: Vec<String> = (0..12).map(|i| format!("dev-{i}")).collect();
        let mut msgs = Vec::new();
        let mut wrong = 0;
        for d in &devices {
            msgs.push(reading(d, home(d)));
            // The same device again on the other partition: refused, or its
            // caps would be counted twice.
            msgs.push(reading(d, 1 - home(d)));
            wrong += 1;
        }
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn(v);
        assert!(wait_until(WAIT, || get(&c.messages) >= msgs.len() as u64).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(get(&c.readings_accepted), devices.len() as u64);
        assert_eq!(c.dead_letters(ingest::Reason::WrongPartition), wrong);
        let dlq = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        assert_eq!(dlq.len() as u64, wrong);
        for m in &dlq {
            assert_eq!(m.headers["fleetdp-reason"], "wrong_partition");
            let d = String::from_utf8_lossy(&m.key).into_owned();
            assert_eq!(m.headers["fleetdp-source-partition"], (1 - home(&d)).to_string());
        }
    });
}

#[test]
fn running_totals_and_quantile_tracks_continue_across_a_restart_with_the_same_noise() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let n = 10u64;
        // Adaptive quantile candidates chain windows too: their track must
        // be restored for the statistics to match.
        let stream = temp_stream(n, 1, 100_000, "\"mean\", \"histogram\", \"quantiles\"").replace(
            "statistics",
            "running_share = 0.5\nrunning_lifetime = 1024\nadaptive_quantiles = true\nstatistics",
        );
        let privacy = "measure = \"zcdp\"\nrho_per_device = 1.0\ndelta = 1e-6\nhorizon = \"24h\"";
        let msgs = temp_messages(40, 30);
        let half = msgs.len() / 2;
        // A: one uninterrupted run. B: the same input, stopped half-way
        // and restarted by a new pipeline.
        let (ta, tb) = (Topics::new("runa"), Topics::new("runb"));
        for t in [&ta, &tb] {
            broker
                .create_topics(&[(&t.input, 2), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
                .await;
        }
        let full_windows = |t: &Topics| {
            let input = tokio::task::block_in_place(|| read_all(&broker, &t.input));
            let mut per: HashMap<i32, u64> = HashMap::new();
            for m in &input {
                *per.entry(m.partition).or_default() += 1;
            }
            per.values().map(|c| c / n).sum::<u64>()
        };
        produce(&broker, &ta.input, &msgs).await;
        let expected = full_windows(&ta);
        let (stop, c, h) = spawn(config(&broker, &ta, privacy, "", &stream));
        assert!(wait_until(WAIT, || get(&c.windows_released) >= expected).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();

        produce(&broker, &tb.input, &msgs[..half]).await;
        let first = full_windows(&tb);
        let (stop, c, h) = spawn(config(&broker, &tb, privacy, "", &stream));
        assert!(wait_until(WAIT, || get(&c.windows_released) >= first).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        produce(&broker, &tb.input, &msgs[half..]).await;
        let (stop, c, h) = spawn(config(&broker, &tb, privacy, "", &stream));
        assert!(wait_until(WAIT, || get(&c.windows_released) >= expected - first).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();

        let by_key = |t: &Topics| -> BTreeMap<(i32, u64), proto::WindowRelease> {
            tokio::task::block_in_place(|| releases(&broker, &t.output))
                .into_iter()
                .map(|r| ((r.partition, r.window_seq), r))
                .collect()
        };
        let (a, b) = (by_key(&ta), by_key(&tb));
        assert_eq!(a.len() as u64, expected);
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        let u = Universe::new(-20.0, 60.0, 0.1).unwrap();
        let coder = TopCoder::new(u);
        let mut truth: HashMap<i32, f64> = HashMap::new();
        let input = tokio::task::block_in_place(|| read_all(&broker, &ta.input));
        for ((p, seq), ra) in &a {
            let rb = &b[&(*p, *seq)];
            assert_eq!(
                ra.running, rb.running,
                "{p}#{seq}: the restart changed the running totals"
            );
            assert_eq!(
                ra.statistics, rb.statistics,
                "{p}#{seq}: the restart changed the statistics"
            );
            assert_eq!(ra.running.len(), 2, "sum and histogram");
            let sum = &ra.running[0];
            assert_eq!(
                (sum.name.as_str(), sum.windows, sum.count),
                ("sum", seq + 1, (seq + 1) * n)
            );
            // The exact running sum of the window's readings, from the input.
            let window_sum: f64 = input
                .iter()
                .filter(|m| {
                    m.partition == *p && m.offset >= ra.first_offset && m.offset <= ra.last_offset
                })
                .map(|m| {
                    let r = proto::DeviceReading::decode(&*m.payload).unwrap();
                    coder.top_code(r.value.unwrap()).unwrap().units as f64 * 0.1
                })
                .sum();
            let t = truth.entry(*p).or_default();
            *t += window_sum;
            assert!(
                (sum.values[0] - *t).abs() <= 6.0 * sum.std + 1e-6,
                "{p}#{seq}: running sum {} vs truth {t} (std {})",
                sum.values[0],
                sum.std
            );
            let hist = &ra.running[1];
            assert_eq!(hist.values.len(), 6);
            assert_eq!(hist.bin_edges.len(), 7);
        }
    });
}

#[test]
fn read_content_type_false_decodes_every_message_as_the_declared_format() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let base = 1_767_225_600_000i64;
        // JSON readings whose header wrongly says protobuf.
        let msgs: Vec<Out> = (0..8)
            .map(|i| Out {
                partition: Some(0),
                key: format!("dev-{i}"),
                payload: format!(r#"{{"device_id":"dev-{i}","stream":"cabin_temp_c","value":21.5,"event_time_ms":{base}}}"#).into_bytes(),
                content_type: Some("application/x-protobuf".into()),
            })
            .collect();
        // (read_content_type, readings accepted, dead letters)
        for (read, accepted, dead) in [(true, 0u64, 8u64), (false, 8, 0)] {
            let t = Topics::new("ctype");
            broker
                .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
                .await;
            let text = config_text(
                &broker,
                &t,
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                "",
                &temp_stream(4, 1, 1000, "\"mean\""),
            )
            .replace(
                "[kafka.consumer_properties]",
                &format!("input_format = \"json\"\nread_content_type = {read}\n\n[kafka.consumer_properties]"),
            );
            let v = fleetdp::config::Config::parse(&text).unwrap().validate().unwrap();
            produce(&broker, &t.input, &msgs).await;
            let (stop, c, h) = spawn(v);
            assert!(wait_until(WAIT, || get(&c.messages) >= msgs.len() as u64).await);
            stop.send(true).unwrap();
            h.await.unwrap().unwrap();
            assert_eq!(get(&c.readings_accepted), accepted, "read_content_type = {read}");
            assert_eq!(c.dead_letters(ingest::Reason::Undecodable), dead, "read_content_type = {read}");
        }
    });
}

/// The README's `simulate --config deploy/fleetdp.toml` sends only the
/// streams the configuration declares, to its input topic. Issue: it sent
/// the three demo streams to "readings" whatever the configuration said,
/// and the shipped one-stream configuration dead-lettered 67% of them as
/// `unknown_stream`.
#[test]
fn simulate_with_a_config_sends_its_streams_to_its_input_topic() {
    let broker = Broker::start();
    if !broker.is_external() {
        // A child process cannot reach the in-process mock cluster.
        return;
    }
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "simulate-config", 1).await;
        let text = shipped_config(&broker, &t);
        let dir = std::env::temp_dir().join(unique("fleetdp-simulate-config"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fleetdp.toml");
        std::fs::write(&file, text).unwrap();
        let status = tokio::task::block_in_place(|| {
            std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"))
                .args(["simulate", "--config"])
                .arg(&file)
                .args(["--devices", "50", "--messages", "30", "--rate", "0"])
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
        });
        assert!(status.success());
        let got = tokio::task::block_in_place(|| read_all(&broker, &t.input));
        // (tansu may drop records of multi-record batches: not all 30.)
        assert!(
            !got.is_empty(),
            "nothing on the configuration's input topic"
        );
        for m in &got {
            let r = proto::DeviceReading::decode(m.payload.as_slice()).unwrap();
            assert_eq!(r.stream, "cabin_temp_c", "only the configuration's stream");
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
