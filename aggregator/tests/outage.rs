//! Broker outage: the broker goes away for a while in the middle of the
//! stream (connections dropped, new ones refused) and comes back; the
//! service recovers by itself — no restart, no error exit — and in the end
//! every window is released, in order, each once (a copy can only be
//! bit-identical: a retried publish repeats the same bytes).
//!
//! FLEETDP_OUTAGE_SECS sets the outage (default 15 s).

use crate::harness;

use fleetdp::sim::{FleetSpec, Signal};
use harness::outage::OutageBroker;
use harness::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [9; 32];

#[test]
fn the_service_rides_out_a_broker_outage() {
    let rt = runtime();
    rt.block_on(async {
        let mut ob = OutageBroker::start().await;
        let broker = &ob.broker;
        let t = Topics::new("outage");
        broker
            .create_topics(&[(&t.input, 2), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let n = 25u64;
        let v = config(
            broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "",
            &format!(
                r#"
[[stream]]
name = "cabin_temp_c"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = {n}
max_windows_per_device = 1000
statistics = ["mean", "sum"]
"#
            ),
        );
        let msgs = fleet_messages(
            FleetSpec {
                devices: 100,
                signals: vec![Signal::CabinTemp],
                bad_fraction: 0.0,
                ..FleetSpec::default()
            },
            3000,
        );
        let (first, second) = msgs.split_at(1500);
        let (stop, c, h) = spawn_pipeline(v, KEY);
        produce(broker, &t.input, first).await;
        assert!(
            wait_until(Duration::from_secs(120), || Counters::get(
                &c.windows_released
            ) >= 20)
            .await,
            "no releases before the outage"
        );

        let secs: u64 = std::env::var("FLEETDP_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(15);
        eprintln!("taking {} down for {secs}s", ob.describe());
        ob.down();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        assert!(!h.is_finished(), "the service gave up during the outage");
        ob.up().await;
        eprintln!("broker back");
        let broker = &ob.broker;
        produce(broker, &t.input, second).await;

        // Expected: every full window of every partition.
        let input = tokio::task::block_in_place(|| read_all(broker, &t.input));
        assert_eq!(
            input.len(),
            msgs.len(),
            "the input must be intact after the outage"
        );
        let mut per: BTreeMap<i32, u64> = BTreeMap::new();
        for m in &input {
            *per.entry(m.partition).or_default() += 1;
        }
        let expected: u64 = per.values().map(|c| c / n).sum();
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut got = Vec::new();
        while Instant::now() < deadline {
            got = tokio::task::block_in_place(|| releases(broker, &t.output));
            let distinct: std::collections::BTreeSet<_> =
                got.iter().map(|r| (r.partition, r.window_seq)).collect();
            if distinct.len() as u64 >= expected {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        stop.send(true).unwrap();
        h.await
            .unwrap()
            .expect("the service must stop cleanly after recovering");

        // Copies of a window must be bit-identical; then each window once,
        // contiguous seqs, tiling offsets.
        let mut by: BTreeMap<(i32, u64), proto::WindowRelease> = BTreeMap::new();
        let mut copies = 0;
        for r in got {
            if let Some(prev) = by.get(&(r.partition, r.window_seq)) {
                assert_eq!(
                    prev.statistics, r.statistics,
                    "a second, different release of one window"
                );
                assert_eq!(
                    (prev.first_offset, prev.last_offset),
                    (r.first_offset, r.last_offset)
                );
                copies += 1;
            } else {
                by.insert((r.partition, r.window_seq), r);
            }
        }
        let unique: Vec<proto::WindowRelease> = by.into_values().collect();
        assert_eq!(
            unique.len() as u64,
            expected,
            "windows lost across the outage"
        );
        assert_contiguous_and_tiling(&unique, n);
        eprintln!("{expected} windows released, {copies} bit-identical copies");
    });
}

use fleetdp::telemetry::Counters;

/// A loop blocked on a broker that does not acknowledge turns `/healthz`
/// (and `/readyz`) red within `http.stall_timeout`, and green again once it
/// moves (the probes used to stay green while the loop was wedged).
#[test]
fn a_blocked_loop_turns_the_liveness_probe_red() {
    let rt = runtime();
    rt.block_on(async {
        let mut ob = OutageBroker::start().await;
        let t = Topics::new("stall");
        ob.broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let v = config(
            &ob.broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "[http]\nstall_timeout = \"3s\"",
            "[[stream]]\nname = \"cabin_temp_c\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nmax_windows_per_device = 100000\nstatistics = [\"mean\"]",
        );
        let msgs = fleet_messages(
            FleetSpec {
                devices: 1000,
                signals: vec![Signal::CabinTemp],
                bad_fraction: 0.0,
                ..FleetSpec::default()
            },
            20_000,
        );
        produce(&ob.broker, &t.input, &msgs).await;
        let p = fleetdp::pipeline::Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes(KEY));
        let (board, c) = (p.board.clone(), p.counters.clone());
        let (stop, rx) = tokio::sync::watch::channel(false);
        let h = tokio::spawn(async move { p.run(rx, fleetdp::pipeline::Options::default()).await });
        assert!(
            wait_until(Duration::from_secs(120), || Counters::get(&c.windows_released) >= 1).await,
            "no release before the outage"
        );
        // Windows keep closing from the prefetched input while their
        // releases cannot be acknowledged: the loop blocks.
        ob.down();
        let red = wait_until(Duration::from_secs(20), || {
            board.health(fleetdp::pipeline::now_ms()).is_err()
        })
        .await;
        let why = board.health(fleetdp::pipeline::now_ms()).err();
        let not_ready = board.ready().is_err();
        ob.up().await;
        let green = wait_until(Duration::from_secs(120), || {
            board.health(fleetdp::pipeline::now_ms()).is_ok()
                && Counters::get(&c.windows_released) >= 100
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(red, "the liveness probe stayed green while the loop was blocked");
        assert!(not_ready, "ready while stalled: {why:?}");
        assert!(why.unwrap().contains("not moved"));
        assert!(green, "not live again after the broker came back");
    });
}
