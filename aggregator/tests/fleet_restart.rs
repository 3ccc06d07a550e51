//! Fleet-wide records over the broker, read as a consumer that keeps the
//! latest record per key would: through a restart and past
//! `fleet.max_pending`, the latest record of every seq all partitions
//! released is complete and holds every partition's window (n = the sum of
//! theirs), and no record of a key is ever followed by one with fewer
//! partitions.
//!
//! Issue: a restarted combiner re-read only its look-back and republished
//! finished seqs with what it found (4 of 8 complete records followed by a
//! partial one); past `max_pending` every partition's release got its own
//! one-partition record and seqs were never completed.

mod harness;

use harness::*;
use std::collections::BTreeMap;
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
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {N}\nstatistics = [\"count\", \"mean\"]"
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
            }
        }
        // The cap was reached: some seq had a partial record first.
        assert!(
            by.values().any(|r| r.len() > 1 && !r[0].complete),
            "max_pending never cut a wait short: {by:?}"
        );
    });
}
