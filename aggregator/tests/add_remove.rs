//! Privacy over whole streams, over the broker (docs/DESIGN.md §3):
//!
//! - add-remove with time windows: releases at the declared boundaries, one
//!   per window and none skipped (empty windows too), late and future
//!   readings dropped and counted, nothing exact about presence in the
//!   output (values, keys, headers, record timestamps) or `/api/status`;
//! - change-one: the issue's horizon repro — a window holding a device's
//!   readings of two horizons is charged to both, so the device's readings
//!   of the second horizon reach no second window when `W = 1`.

use crate::harness;

use fleetdp::pipeline::{Options, Pipeline};
use harness::*;
use std::collections::HashMap;
use std::time::Duration;

const KEY: [u8; 32] = [9; 32];
const WAIT: Duration = Duration::from_secs(120);

fn json_reading(device: &str, value: f64, event_ms: i64) -> Out {
    temp_reading(Some(0), device, value, event_ms)
}

#[test]
fn add_remove_time_windows_release_on_their_boundaries_and_publish_nothing_exact() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("timed");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let v = config(
            &broker,
            &t,
            "relation = \"add-remove\"\nepsilon_per_device = 200.0\nhorizon = \"1h\"",
            // Release timing has a test of its own (below).
            "[limits]\nmax_lateness = \"1s\"\nmax_clock_skew = \"1m\"\nrelease_delay = \"100ms\"",
            r#"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window = "2s"
statistics = ["count", "mean"]
"#,
        );
        let p = Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes(KEY));
        let (c, board, cfg) = (p.counters.clone(), p.board.clone(), p.config());
        let (stop, rx) = tokio::sync::watch::channel(false);
        let h = tokio::spawn(async move { p.run(rx, Options::default()).await });

        // With no input at all, windows are released (empty) on the clock.
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= 2).await,
            "no empty window released"
        );
        // 30 devices, one reading each, all in the window of `at`.
        let at = now_ms();
        let busy = (at / 2000) as u64;
        let msgs: Vec<Out> = (0..30)
            .map(|i| json_reading(&format!("dev-{i}"), 20.0, at))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        assert!(
            wait_until(WAIT, || count(&c.readings_accepted) >= 30).await,
            "accepted {}",
            count(&c.readings_accepted)
        );
        // A reading of a window released long ago (dropped and counted),
        // and one from a clock ten minutes fast (dead-lettered `future`).
        produce(
            &broker,
            &t.input,
            &[
                json_reading("late", 20.0, at - 60_000),
                json_reading("fast", 20.0, now_ms() + 600_000),
            ],
        )
        .await;
        assert!(
            wait_until(WAIT, || count(&c.dropped_time_window) >= 1
                && c.dead_letters(ingest::Reason::Future) >= 1)
            .await,
            "dropped {}",
            count(&c.dropped_time_window)
        );
        let released_before = count(&c.windows_released);
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= released_before + 3).await,
            "the clock stopped releasing windows"
        );
        // The fleet-wide records follow (read back from the output topic).
        let released = count(&c.windows_released) as usize;
        let combined = || tokio::task::block_in_place(|| fleet_releases(&broker, &t.output)).len();
        assert!(
            wait_until(WAIT, || combined() >= released).await,
            "{} fleet records for {released} windows",
            combined()
        );
        // The page's JSON carries no exact count under add-remove.
        let status = board.to_json(&cfg, &c);
        assert!(status["messages"].is_null() && status["dead_letters"].is_null());
        assert!(status["lag"].is_null());
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(count(&c.readings_accepted), 30);
        assert_eq!(count(&c.dropped_time_window), 1);
        assert_eq!(c.dead_letters(ingest::Reason::Future), 1);

        let all = tokio::task::block_in_place(|| read_all(&broker, &t.output));
        let (fleet, out): (Vec<Read>, Vec<Read>) = all.into_iter().partition(|m| m.is_fleet());
        let mut by_seq = HashMap::new();
        for m in &out {
            let r = fleetdp::kafka::decode_release(
                &m.payload,
                m.headers.get("content-type").map(String::as_str),
            )
            .unwrap();
            // Keys, headers and record timestamps: public facts only.
            assert_eq!(m.key, format!("temp/0/{}", r.window_seq).into_bytes());
            // (The key's id and the state format: one value per key and
            // build, whatever the data.)
            let mut headers: Vec<(&str, &str)> = m
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            headers.sort();
            let id = fleetdp::dp::rng::ReleaseKey::from_bytes(KEY).id();
            let ct = m.headers["content-type"].as_str();
            assert_eq!(
                headers,
                [
                    ("content-type", ct),
                    ("fleetdp-release-key-id", id.as_str()),
                    ("fleetdp-state-format", "2")
                ]
            );
            assert_eq!(
                m.timestamp,
                Some(r.released_at_ms),
                "record stamped with its due moment"
            );
            assert!(
                by_seq.insert(r.window_seq, r).is_none(),
                "a window released twice"
            );
        }
        let first = *by_seq.keys().min().unwrap();
        let last = *by_seq.keys().max().unwrap();
        assert_eq!(
            by_seq.len() as u64,
            last - first + 1,
            "a window was skipped"
        );
        assert!(first < busy && busy < last, "{first} {busy} {last}");
        for (seq, r) in &by_seq {
            let start = *seq as i64 * 2000;
            assert_eq!(
                (
                    r.first_event_time_ms,
                    r.last_event_time_ms,
                    r.released_at_ms
                ),
                (start, start + 2000, start + 3000),
                "window {seq}: bounds and due moment"
            );
            assert_eq!(
                (r.n, r.padded, r.first_offset, r.last_offset),
                (0, 0, 0, 0),
                "window {seq}: nothing exact about its size"
            );
            assert_eq!(r.guarantee.as_ref().unwrap().relation, "add-remove");
            let count = r.statistics.iter().find(|s| s.name == "count").unwrap();
            assert_ne!(count.mechanism, "exact");
            assert!(count.scale > 0.0 && count.half_width.is_some());
            // ε = 100 per measurement: the noise is far below 2.
            let truth = if *seq == busy { 30.0 } else { 0.0 };
            assert!(
                (count.values[0] - truth).abs() < 2.0,
                "window {seq}: count {} for {truth}",
                count.values[0]
            );
        }
        // Fleet-wide records (one input partition): one per seq, keyed and
        // stamped like the windows, complete, the count's noise as its own.
        let mut fleet_seqs = Vec::new();
        for m in &fleet {
            let ct = m.headers.get("content-type").map(String::as_str);
            let f = fleetdp::fleet::decode_fleet(&m.payload, ct).unwrap();
            assert_eq!(m.key, format!("temp/fleet/{}", f.window_seq).into_bytes());
            assert_eq!(m.headers["fleetdp-record"], "fleet");
            assert_eq!(m.partition, 0);
            let r = &by_seq[&f.window_seq];
            assert_eq!(m.timestamp, Some(r.released_at_ms));
            assert!(f.complete && f.partitions == [0] && f.input_partitions == 1);
            let count = f.statistics.iter().find(|s| s.name == "count").unwrap();
            let part = r.statistics.iter().find(|s| s.name == "count").unwrap();
            assert_eq!(count.values, part.values, "one partition: its own value");
            assert_eq!(count.half_width, part.half_width, "one draw: its interval");
            fleet_seqs.push(f.window_seq);
        }
        // One per window, in order, none missing up to the last combined
        // (windows released after the wait above may not be combined yet).
        fleet_seqs.sort_unstable();
        let windows: Vec<u64> = by_seq
            .keys()
            .copied()
            .filter(|&s| s <= *fleet_seqs.last().unwrap())
            .collect();
        let mut sorted = windows.clone();
        sorted.sort_unstable();
        assert_eq!(fleet_seqs, sorted, "fleet seqs against window seqs");
        assert!(fleet_seqs.len() >= released && fleet_seqs.contains(&busy));
    });
}

/// The issue's repro over the broker: n = 2, k = 2, W = 1, horizon 1h,
/// values distinct powers of two, near-noiseless. A 1 at 00:59:58, A 2 at
/// 01:00:01, A 4 at 01:00:02, then B 8, C 16, D 32. Window 0 = {A 1, A 2}
/// is charged to both hours, so A 4 is dropped and window 1 = {B 8, C 16}.
#[test]
fn a_window_straddling_a_horizon_boundary_charges_both_over_the_broker() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("straddle");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 100000.0\nhorizon = \"1h\"",
            "",
            r#"
[[stream]]
name = "temp"
lower = 0.0
upper = 64.0
resolution = 1.0
window_size = 2
max_readings_per_device = 2
max_windows_per_device = 1
statistics = ["sum"]
"#,
        );
        let hour = 1_767_225_600_000i64 + 3_600_000; // 01:00:00
        let msgs = [
            json_reading("A", 1.0, hour - 2_000),
            json_reading("A", 2.0, hour + 1_000),
            json_reading("A", 4.0, hour + 2_000),
            json_reading("B", 8.0, hour + 3_000),
            json_reading("C", 16.0, hour + 4_000),
            json_reading("D", 32.0, hour + 5_000),
        ];
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, KEY);
        assert!(wait_until(WAIT, || count(&c.windows_released) >= 2).await);
        assert!(wait_until(WAIT, || count(&c.messages) >= 6).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(count(&c.dropped_horizon_cap), 1, "A 4 must be dropped");
        let releases = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let sums: Vec<(u64, f64)> = {
            let mut v: Vec<_> = releases
                .iter()
                .map(|r| (r.window_seq, r.statistics[0].values[0]))
                .collect();
            v.sort_by_key(|x| x.0);
            v
        };
        assert_eq!(sums.len(), 2);
        assert!((sums[0].1 - 3.0).abs() < 1.0, "{sums:?}");
        assert!(
            (sums[1].1 - 24.0).abs() < 1.0,
            "window 1 must be B + C: {sums:?}"
        );
    });
}

/// Stopped while a time window holding readings is still open, then
/// restarted: every window from the first to the last is released exactly
/// once, and the open window's readings are replayed into it, not lost.
#[test]
fn time_windows_are_released_exactly_once_across_a_restart() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("timed-restart");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let v = || {
            config(
                &broker,
                &t,
                "relation = \"add-remove\"\nepsilon_per_device = 200.0\nhorizon = \"1h\"",
                "[limits]\nmax_lateness = \"3s\"",
                r#"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window = "2s"
statistics = ["count"]
"#,
            )
        };
        let (stop, c1, h) = spawn_pipeline(v(), KEY);
        assert!(wait_until(WAIT, || count(&c1.windows_released) >= 1).await);
        let at = now_ms();
        let busy = (at / 2000) as u64;
        let msgs: Vec<Out> = (0..30)
            .map(|i| json_reading(&format!("dev-{i}"), 20.0, at))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        assert!(wait_until(WAIT, || count(&c1.readings_accepted) >= 30).await);
        // The window of `at` is due 3 s after its end: stop before that.
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        let before = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert!(
            before.iter().all(|r| r.window_seq < busy),
            "the busy window closed before the stop; the test needs it open"
        );
        let (stop, c2, h) = spawn_pipeline(v(), KEY);
        let target = busy + 3;
        assert!(
            wait_until(WAIT, || {
                tokio::task::block_in_place(|| releases(&broker, &t.output))
                    .iter()
                    .any(|r| r.window_seq >= target)
            })
            .await
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(
            count(&c2.readings_accepted),
            30,
            "the open window's readings are replayed"
        );
        let all = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let mut seqs: Vec<u64> = all.iter().map(|r| r.window_seq).collect();
        seqs.sort_unstable();
        let (first, last) = (seqs[0], *seqs.last().unwrap());
        assert_eq!(
            seqs,
            (first..=last).collect::<Vec<_>>(),
            "a window skipped or released twice"
        );
        let busy_count = all
            .iter()
            .find(|r| r.window_seq == busy)
            .unwrap()
            .statistics[0]
            .values[0];
        assert!((busy_count - 30.0).abs() < 2.0, "count {busy_count}");
    });
}

/// Release timing (docs/operations.md, "When time windows are released"):
/// under add-remove a time window's release is written at its due moment
/// plus `limits.release_delay`, never when it happens to be ready, so its
/// arrival does not tell how long making it took (how many readings and
/// devices it holds). A reader on the output topic notes when each release
/// arrives: none before due + delay, a window of 3,000 devices as well as
/// empty ones. Before, each was written as soon as it was made.
#[test]
fn time_window_releases_arrive_no_earlier_than_due_plus_the_release_delay() {
    const DELAY_MS: i64 = 4000;
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("timed-delay");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let v = config(
            &broker,
            &t,
            "relation = \"add-remove\"\nepsilon_per_device = 200.0\nhorizon = \"1h\"",
            &format!("[limits]\nmax_lateness = \"1s\"\nmax_clock_skew = \"1m\"\nrelease_delay = \"{DELAY_MS}ms\""),
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow = \"2s\"\nstatistics = [\"count\", \"mean\"]",
        );
        let (stop, c, h) = spawn_pipeline(v, KEY);
        // The busy window starts 10 s from now: every reading is produced
        // long before it is due.
        let at = (now_ms() / 2000 + 5) * 2000;
        let busy = (at / 2000) as u64;
        let reader = {
            let (brokers, topic) = (broker.client(), t.output.clone());
            std::thread::spawn(move || arrivals(brokers, &topic, busy + 1))
        };
        let msgs: Vec<Out> = (0..3000)
            .map(|i| json_reading(&format!("dev-{i}"), 20.0, at + 1))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let seen = tokio::task::block_in_place(|| reader.join().unwrap());
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(seen.iter().any(|r| r.0 == busy), "the busy window was not read: {seen:?}");
        // (tansu 0.6 may lose records of multi-record produce batches.)
        assert!(count(&c.readings_accepted) >= 1000, "the busy window's readings");
        for (seq, due, arrived) in &seen {
            assert!(
                *arrived >= due + DELAY_MS,
                "window {seq} arrived {} ms after its due moment, before the {DELAY_MS} ms delay: {seen:?}",
                arrived - due
            );
        }
    });
}

/// Read the releases of `topic` as they arrive, up to window `last`:
/// (seq, published release time, wall clock on arrival), all in ms.
fn arrivals(client: rdkafka::ClientConfig, topic: &str, last: u64) -> Vec<(u64, i64, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let mut c = client;
    let consumer: BaseConsumer = c
        .set("group.id", unique("arrivals"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let (mut seen, end) = (Vec::new(), std::time::Instant::now() + WAIT);
    while !seen.iter().any(|r: &(u64, i64, i64)| r.0 >= last) && std::time::Instant::now() < end {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) else {
            continue;
        };
        let arrived = now_ms();
        if fleetdp::kafka::header(&m, "fleetdp-record") == Some("fleet") {
            continue;
        }
        if let Ok(r) = fleetdp::kafka::decode_release(m.payload().unwrap_or(&[]), None) {
            seen.push((r.window_seq, r.released_at_ms, arrived));
        }
    }
    seen
}
