//! Fleet-wide records over the broker, read as a consumer that keeps the
//! latest record per key would: through a restart and past
//! `fleet.max_pending`, the latest record of every seq all partitions
//! released is complete and holds every partition's window (n = the sum of
//! theirs), and no record of a key is ever followed by one with fewer
//! partitions.
//!
//! Two instances of a group: only the one holding input partition 0 writes
//! fleet records, and the role moves with the partition.
//!
//! Issue: a restarted combiner re-read only its look-back and republished
//! finished seqs with what it found (4 of 8 complete records followed by a
//! partial one); past `max_pending` every partition's release got its own
//! one-partition record and seqs were never completed.

use crate::harness;

use harness::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const KEY: [u8; 32] = [9; 32];
const WAIT: Duration = Duration::from_secs(60);
const PARTITIONS: i32 = 4;
/// Readings per count window.
const N: usize = 5;

/// `windows` windows of readings on `partition`, each from its own device
/// (device ids that the declared partitioner places there).
fn readings(partition: i32, windows: usize, tag: &str) -> Vec<Out> {
    let placed = |d: &String| {
        fleetdp::Partitioner::Murmur2.partition(d.as_bytes(), PARTITIONS) == Some(partition)
    };
    (0..)
        .map(|i| format!("{tag}-d{i}"))
        .filter(placed)
        .take(windows * N)
        .map(|d| temp_reading(Some(partition), &d, 20.0, now_ms()))
        .collect()
}

/// Produce one message at a time (tansu 0.6 loses records of multi-record
/// batches in one partition).
async fn produce_each(broker: &Broker, topic: &str, msgs: &[Out]) {
    for m in msgs {
        produce(broker, topic, std::slice::from_ref(m)).await;
    }
}

/// Fleet records of the output topic, per seq, in offset order.
fn fleet_records(broker: &Broker, topic: &str) -> BTreeMap<u64, Vec<proto::FleetRelease>> {
    let mut by: BTreeMap<u64, Vec<proto::FleetRelease>> = BTreeMap::new();
    for m in read_all(broker, topic).into_iter().filter(|m| m.is_fleet()) {
        let ct = m.headers.get("content-type").map(String::as_str);
        let f = fleetdp::fleet::decode_fleet(&m.payload, ct).unwrap();
        assert_eq!(m.key, format!("temp/fleet/{}", f.window_seq).into_bytes());
        by.entry(f.window_seq).or_default().push(f);
    }
    by
}

#[test]
fn the_latest_fleet_record_per_key_is_complete_after_a_restart_and_an_overflow() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "fleet-restart", PARTITIONS).await;
        let stream = format!(
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {N}\nstatistics = [\"count\", \"mean\", \"variance\"]"
        );
        // No timer: only the pending cap cuts a wait short.
        let fleet = "[fleet]\nmax_pending = 2\nmax_wait = \"1h\"\nlookback = \"10m\"";
        let privacy = "epsilon_per_device = 1.0\nhorizon = \"24h\"";

        // Partition 0 runs 8 windows ahead: seqs 0..8 wait for the others,
        // far past the cap of 2, and are published with partition 0 only.
        let v = config(&broker, &t, privacy, fleet, &stream);
        let (stop, c, h) = spawn_pipeline(v, KEY);
        produce_each(&broker, &t.input, &readings(0, 8, "a")).await;
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= 8).await,
            "released {}, messages {}, accepted {}, dead letters {:?}",
            count(&c.windows_released),
            count(&c.messages),
            count(&c.readings_accepted),
            ingest::Reason::ALL.map(|r| c.dead_letters(r))
        );
        // The others release seqs 0..4: those complete.
        for p in 1..PARTITIONS {
            produce_each(&broker, &t.input, &readings(p, 4, "a")).await;
        }
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= 8 + 3 * 4).await,
            "released {}",
            count(&c.windows_released)
        );
        let complete_before = |by: &BTreeMap<u64, Vec<proto::FleetRelease>>| {
            (0..4).all(|s| by.get(&s).and_then(|r| r.last()).is_some_and(|f| f.complete))
        };
        assert!(
            wait_until(WAIT, || complete_before(&tokio::task::block_in_place(|| {
                fleet_records(&broker, &t.output)
            })))
            .await,
            "seqs 0..4 never completed before the restart: {:?}",
            tokio::task::block_in_place(|| fleet_records(&broker, &t.output))
                .iter()
                .map(|(s, r)| (*s, r.iter().map(|f| (f.partitions.clone(), f.complete)).collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();

        // Restart (a fresh group: tansu may not reassign a rejoined one):
        // the combiner reads its look-back, then the others release 4..8.
        let v = config(&broker, &t.regroup(), privacy, fleet, &stream);
        let (stop, c, h) = spawn_pipeline(v, KEY);
        for p in 1..PARTITIONS {
            produce_each(&broker, &t.input, &readings(p, 4, "b")).await;
        }
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= 3 * 4).await,
            "released {} after the restart",
            count(&c.windows_released)
        );
        let all_complete = |by: &BTreeMap<u64, Vec<proto::FleetRelease>>| {
            (0..8).all(|s| by.get(&s).and_then(|r| r.last()).is_some_and(|f| f.complete))
        };
        let done = wait_until(WAIT, || {
            all_complete(&tokio::task::block_in_place(|| {
                fleet_records(&broker, &t.output)
            }))
        })
        .await;
        // Let anything still in flight land before judging the sequence.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();

        let by = tokio::task::block_in_place(|| fleet_records(&broker, &t.output));
        assert!(done, "not every seq completed: {by:?}");
        for (seq, records) in &by {
            for pair in records.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                assert!(
                    a.partitions.iter().all(|p| b.partitions.contains(p))
                        && b.partitions.len() > a.partitions.len(),
                    "seq {seq}: {:?} followed by {:?}",
                    a.partitions,
                    b.partitions
                );
            }
            let latest = records.last().unwrap();
            if *seq < 8 {
                assert!(latest.complete, "seq {seq}: {latest:?}");
                assert_eq!(latest.partitions, (0..PARTITIONS).collect::<Vec<_>>());
                assert_eq!(latest.n, (PARTITIONS as usize * N) as u64, "seq {seq}");
                // The pooled variance's interval, from the partitions'
                // raw moments carried through the topic (change-one).
                let var = latest.statistics.iter().find(|s| s.name == "variance").unwrap();
                assert!(
                    var.half_width.is_some_and(|h| h.is_finite() && h > 0.0) && var.std.is_none(),
                    "seq {seq}: {var:?}"
                );
            }
        }
        // The cap was reached: some seq had a partial record first.
        assert!(
            by.values().any(|r| r.len() > 1 && !r[0].complete),
            "max_pending never cut a wait short: {by:?}"
        );
    });
}

/// A pipeline whose written fleet records are sent to the returned receiver.
fn spawn_observed(
    v: fleetdp::config::Validated,
) -> (
    tokio::sync::watch::Sender<bool>,
    std::sync::Arc<fleetdp::telemetry::Counters>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
    tokio::sync::mpsc::UnboundedReceiver<proto::FleetRelease>,
) {
    let p = fleetdp::pipeline::Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes(KEY));
    let counters = p.counters.clone();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (fleet_tx, fleet_rx) = tokio::sync::mpsc::unbounded_channel();
    let opts = fleetdp::pipeline::Options {
        fleet_events: Some(fleet_tx),
        ..Default::default()
    };
    let h = tokio::spawn(async move { p.run(rx, opts).await });
    (tx, counters, h, fleet_rx)
}

/// The seqs of the fleet records an instance wrote.
fn written(rx: &mut tokio::sync::mpsc::UnboundedReceiver<proto::FleetRelease>) -> BTreeSet<u64> {
    std::iter::from_fn(|| rx.try_recv().ok())
        .map(|f| f.window_seq)
        .collect()
}

/// Every seq up to `seqs` has a complete record on the topic.
async fn wait_complete(broker: &Broker, topic: &str, seqs: u64) -> bool {
    wait_until(WAIT, || {
        let by = tokio::task::block_in_place(|| fleet_records(broker, topic));
        (0..seqs).all(|s| {
            by.get(&s)
                .and_then(|r| r.last())
                .is_some_and(|f| f.complete)
        })
    })
    .await
}

#[test]
fn one_instance_writes_the_fleet_records_and_hands_over_with_partition_zero() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "fleet-leader", PARTITIONS).await;
        let stream = format!(
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {N}\nstatistics = [\"count\", \"mean\"]"
        );
        // No timer: every record is a complete one, identical whoever
        // builds it, so only the writer rule keeps them single.
        let fleet = "[fleet]\nmax_wait = \"1h\"";
        let privacy = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
        let v = || config(&broker, &t, privacy, fleet, &stream);
        let (b_, t_) = (&broker, &t);
        let phase = move |tag: &'static str, windows: usize| async move {
            for p in 0..PARTITIONS {
                produce_each(b_, &t_.input, &readings(p, windows, tag)).await;
            }
        };

        // A alone writes seqs 0 and 1.
        let (stop_a, _, ha, mut fleet_a) = spawn_observed(v());
        phase("a", 2).await;
        assert!(wait_complete(&broker, &t.output, 2).await, "A alone");
        // B joins (its combiner sees every release too): seqs 2 to 6.
        let (stop_b, cb, hb, mut fleet_b) = spawn_observed(v());
        tokio::time::sleep(Duration::from_secs(5)).await;
        phase("b", 5).await;
        assert!(wait_complete(&broker, &t.output, 7).await, "A and B");
        // A leaves; B takes partition 0 over: seqs 7 and 8.
        stop_a.send(true).unwrap();
        ha.await.unwrap().unwrap();
        phase("c", 2).await;
        assert!(wait_complete(&broker, &t.output, 9).await, "B after A left");
        // Let anything still in flight land before judging.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop_b.send(true).unwrap();
        hb.await.unwrap().unwrap();
        assert!(count(&cb.windows_released) > 0, "B never got partitions");

        let (a, b) = (written(&mut fleet_a), written(&mut fleet_b));
        let by = tokio::task::block_in_place(|| fleet_records(&broker, &t.output));
        let summary = by
            .iter()
            .map(|(s, r)| (*s, r.len()))
            .collect::<Vec<_>>();
        assert!(a.contains(&0) && a.contains(&1), "A alone wrote {a:?}");
        assert!(b.contains(&7) && b.contains(&8), "B, the only one left, wrote {b:?}");
        assert_eq!(a.union(&b).copied().collect::<Vec<_>>(), (0..9).collect::<Vec<_>>());
        // One writer per key; only a record in flight at a handover (at
        // most one per handover, two here) may be written twice.
        let both: Vec<_> = a.intersection(&b).collect();
        assert!(both.len() <= 2, "A wrote {a:?}, B wrote {b:?}; on the topic {summary:?}");
        let twice = by.values().filter(|r| r.len() > 1).count();
        assert!(twice <= 2, "records per seq {summary:?}");
        for (seq, records) in &by {
            assert!(
                records.iter().all(|r| r == &records[0] && r.complete),
                "seq {seq}: copies differ {records:?}"
            );
            assert_eq!(records[0].n, (PARTITIONS as usize * N) as u64, "seq {seq}");
        }
    });
}

/// Running totals of a grouped stream (public keys): every group's lane
/// carries its own, counting only its readings, continued across a
/// restart, and each group's fleet record adds them up over the
/// partitions. Before: `running_share` with `group_by` was refused at plan
/// time.
#[test]
fn grouped_streams_carry_running_totals_per_group_and_fleet_wide() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "grouped-running", PARTITIONS).await;
        let stream = format!(
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {N}\nmax_windows_per_device = 100\nstatistics = [\"count\", \"mean\"]\nrunning_share = 0.5\nrunning_lifetime = 1024\ngroup_by = [\"firmware\"]\nmax_groups_per_device = 1"
        );
        let privacy = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
        let dimensions = "[dimensions]\nfirmware = [\"a\", \"b\"]\n\n[fleet]\nmax_wait = \"1h\"";
        // Two windows of each group on each partition, all readings 20.0:
        // the first of each before a restart, the second after it.
        let mut phases: [Vec<Out>; 2] = [vec![], vec![]];
        for p in 0..PARTITIONS {
            for (i, mut m) in readings(p, 4, "g").into_iter().enumerate() {
                let fw = if i < 2 * N { "a" } else { "b" };
                let json = String::from_utf8(m.payload).unwrap();
                let labelled = format!(
                    "{},\"labels\":{{\"firmware\":\"{fw}\"}}}}",
                    json.trim_end_matches('}')
                );
                m.payload = labelled.into_bytes();
                phases[usize::from(i % (2 * N) >= N)].push(m);
            }
        }
        let per_phase = PARTITIONS as u64 * 2;
        let v = config(&broker, &t, privacy, dimensions, &stream);
        let (stop, c, h) = spawn_pipeline(v, KEY);
        produce_each(&broker, &t.input, &phases[0]).await;
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= per_phase).await,
            "released {} of {per_phase} before the restart",
            count(&c.windows_released)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        // A new process (a fresh group: tansu may not reassign a rejoined
        // one) continues each group's totals from the state topic.
        let v = config(&broker, &t.regroup(), privacy, dimensions, &stream);
        let (stop, c, h) = spawn_pipeline(v, KEY);
        produce_each(&broker, &t.input, &phases[1]).await;
        let windows = 2 * per_phase;
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= per_phase).await,
            "released {} of {per_phase} after the restart",
            count(&c.windows_released)
        );
        let group_streams = ["temp[firmware=a]", "temp[firmware=b]"];
        let fleet_done = || {
            let fs = tokio::task::block_in_place(|| fleet_releases(&broker, &t.output));
            group_streams.iter().all(|s| {
                fs.iter()
                    .any(|f| f.stream == *s && f.window_seq == 1 && f.complete)
            })
        };
        let done = wait_until(WAIT, fleet_done).await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(done, "no complete fleet record per group");

        let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert_eq!(rs.len() as u64, windows);
        for r in &rs {
            assert!(group_streams.contains(&r.stream.as_str()), "{}", r.stream);
            let sum = r.running.iter().find(|x| x.name == "sum").expect("a running sum");
            let readings = (r.window_seq + 1) * N as u64;
            assert_eq!((sum.windows, sum.count), (r.window_seq + 1, readings), "{}", r.stream);
            let truth = readings as f64 * 20.0;
            assert!(
                (sum.values[0] - truth).abs() <= 6.0 * sum.std,
                "{} {}#{}: {} vs {truth} (std {})",
                r.stream,
                r.partition,
                r.window_seq,
                sum.values[0],
                sum.std
            );
        }
        let fs = tokio::task::block_in_place(|| fleet_releases(&broker, &t.output));
        for s in group_streams {
            let f = fs
                .iter()
                .rfind(|f| f.stream == s && f.window_seq == 1)
                .expect("a fleet record");
            let sum = f.running.iter().find(|x| x.name == "sum").expect("fleet running sum");
            assert_eq!(sum.count, 2 * N as u64 * PARTITIONS as u64, "{s}");
        }
    });
}
