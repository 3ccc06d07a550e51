//! Crash test (docs/DESIGN.md §7): three `fleetdp run` processes share one consumer
//! group on a deterministic fleet while the harness kills them with SIGKILL
//! — at random moments (often mid-rebalance, since every kill triggers one)
//! and at armed crash points of the release protocol (before the state
//! write, between state and release, between release and commit, after a
//! commit, while applying an assignment) — and restarts them.
//!
//! At the end every window an uninterrupted run would release must be in
//! the output exactly once or as bit-identical copies, with the same `n`,
//! offsets and noisy statistics (so no window was re-noised and no device
//! exceeded its caps, which would shift the offsets), nothing else may be
//! released, every bad message is dead-lettered, and the state topic's
//! charges keep every device within `W` windows per horizon.
//!
//! Half of the input goes as batches (each device's readings of two rounds
//! in one message), so windows close inside messages and kills land between
//! two readings of one message: a restart must resume at the reading.
//!
//! Needs the `crash-points` feature (tests/run.sh enables it): without it
//! the binary has no crash points and this file compiles to nothing.
#![cfg(feature = "crash-points")]

use crate::harness;

use fleetdp::config::Config;
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::faults::CrashPoint;
use fleetdp::sim::{FleetSpec, Signal};
use fleetdp::telemetry::Counters;
use fleetdp::Processor;
use harness::*;
use prost::Message as _;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY_HEX: &str = "1f63aca3dd09043aa9c3c75dac6626036f235c6a29b1b68d8399a16a0c709aca";
const INSTANCES: usize = 3;
const MIN_KILLS: usize = 24;
const W: u32 = 2;
/// An armed instance that has not reached its point by then is killed by hand.
const ARMED_PATIENCE: Duration = Duration::from_secs(30);

const STREAMS: &str = r#"
[[stream]]
name = "cabin_temp_c"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 20
max_readings_per_device = 1
max_windows_per_device = 2
budget_share = 0.5
statistics = ["mean", "histogram"]
histogram_edges = [-20, 0, 10, 20, 30, 40, 60]

[[stream]]
name = "battery_v"
lower = 10.0
upper = 15.0
resolution = 0.01
window_size = 20
max_readings_per_device = 1
max_windows_per_device = 2
budget_share = 0.5
statistics = ["mean", "quantiles"]
quantiles = [0.5]
"#;

/// One `fleetdp run` process.
struct Instance {
    child: Option<Child>,
    armed: Option<CrashPoint>,
    since: Instant,
    runs: usize,
}

fn start(
    bin: &Path,
    config: &Path,
    dir: &Path,
    id: usize,
    run: usize,
    armed: Option<(CrashPoint, u32)>,
) -> Child {
    let log = std::fs::File::create(dir.join(format!("instance-{id}-run-{run}.log"))).unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg("run")
        .arg("--config")
        .arg(config)
        .env("FLEETDP_CRASH_KEY", KEY_HEX)
        .env("RUST_LOG", "info")
        .env_remove("FLEETDP_CRASH_AT")
        .stdout(Stdio::null())
        .stderr(log);
    if let Some((p, n)) = armed {
        cmd.env("FLEETDP_CRASH_AT", format!("{}:{n}", p.as_str()));
    }
    cmd.spawn().expect("spawn fleetdp run")
}

/// Every other chunk of `chunk` messages merged per key (device) into
/// `ReadingBatch` messages, in order of each key's first message; a message
/// that is not a `DeviceReading` (garbage) stays as it is.
fn batched(msgs: Vec<Out>, chunk: usize) -> Vec<Out> {
    let mut out = Vec::new();
    for (i, c) in msgs.chunks(chunk).enumerate() {
        if i % 2 == 0 {
            out.extend_from_slice(c);
            continue;
        }
        let mut order: Vec<String> = Vec::new();
        let mut batches: HashMap<String, Vec<proto::DeviceReading>> = HashMap::new();
        for m in c {
            match proto::DeviceReading::decode(m.payload.as_slice()) {
                Ok(r) if !m.payload.is_empty() => {
                    if !batches.contains_key(&m.key) {
                        order.push(m.key.clone());
                    }
                    batches.entry(m.key.clone()).or_default().push(r);
                }
                _ => out.push(m.clone()),
            }
        }
        for k in order {
            let readings = batches.remove(&k).unwrap();
            out.push(Out {
                partition: None,
                key: k,
                payload: proto::ReadingBatch { readings }.encode_to_vec(),
                content_type: Some(ingest::Format::ProtobufBatch.content_type().into()),
            });
        }
    }
    out
}

/// Died by SIGKILL (ours or its own crash point)?
fn killed(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

#[test]
fn killed_instances_release_every_window_exactly_once() {
    let broker = Broker::start();
    let rt = runtime();
    let seed: u64 = std::env::var("FLEETDP_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("crash test seed {seed} (FLEETDP_CRASH_SEED={seed} repeats the schedule)");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rt.block_on(async {
        let t = Topics::new("crash");
        broker
            .create_topics(&[(&t.input, 4), (&t.output, 2), (&t.dlq, 1), (&t.state, 2)])
            .await;
        let dir: PathBuf = std::env::temp_dir().join(unique("fleetdp-crash"));
        std::fs::create_dir_all(&dir).unwrap();
        let text = config_text(
            &broker,
            &t,
            "epsilon_per_device = 4.0\nhorizon = \"1h\"\nkey_env = \"FLEETDP_CRASH_KEY\"",
            "[http]\nlisten = \"\"",
            STREAMS,
        );
        let config_path = dir.join("fleetdp.toml");
        std::fs::write(&config_path, &text).unwrap();
        let v = Config::parse(&text).unwrap().validate().unwrap();

        // 240 devices × 2 streams × 30 rounds (15 simulated minutes each):
        // W = 2 per hour drops about half of the readings. Fed slice by slice
        // while the kills go on; 60 more rounds are held in reserve, produced
        // only while a crash point still waits for input to reach it.
        let msgs = fleet_messages(
            FleetSpec {
                devices: 240,
                seed: 7,
                signals: vec![Signal::CabinTemp, Signal::BatteryVolts],
                bad_fraction: 0.01,
                ..FleetSpec::default()
            },
            240 * 2 * 90,
        );
        // Every other pair of rounds goes as batches: each device's four
        // readings of the pair in one message, so windows close inside
        // messages and a restart can land between two readings of one.
        let msgs = batched(msgs, 240 * 2 * 2);
        let slices: Vec<&[Out]> = msgs.chunks(600).collect();
        let base = slices.len() / 3;
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_fleetdp"));
        let mut instances: Vec<Instance> = (0..INSTANCES)
            .map(|i| Instance {
                child: Some(start(&bin, &config_path, &dir, i, 0, None)),
                armed: None,
                since: Instant::now(),
                runs: 1,
            })
            .collect();

        let mut kills = 0usize;
        let mut external = 0usize;
        let mut points_hit: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut next_point = 0usize;
        let mut produced = 0usize;
        let started = Instant::now();
        while kills < MIN_KILLS || produced < base || points_hit.len() < CrashPoint::ALL.len() {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "kill phase did not finish: {kills} kills, points {points_hit:?}; logs in {}",
                dir.display()
            );
            if produced < base
                || (produced < slices.len() && points_hit.len() < CrashPoint::ALL.len())
            {
                produce(&broker, &t.input, slices[produced]).await;
                produced += 1;
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2000))).await;
            // Instances that died by their crash point.
            for (i, inst) in instances.iter_mut().enumerate() {
                let child = inst.child.as_mut().unwrap();
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(
                        killed(status),
                        "instance {i} exited by itself with {status}; logs in {}",
                        dir.display()
                    );
                    let p = inst.armed.expect("only armed instances die by themselves");
                    *points_hit.entry(p.as_str()).or_default() += 1;
                    kills += 1;
                    inst.child = None;
                }
            }
            // Kill one instance at a random moment: an unarmed one, or one
            // armed for longer than ARMED_PATIENCE (its point may need a
            // rebalance or input that is not coming).
            let live: Vec<usize> = (0..INSTANCES)
                .filter(|&i| {
                    let inst = &instances[i];
                    inst.child.is_some()
                        && (inst.armed.is_none() || inst.since.elapsed() > ARMED_PATIENCE)
                })
                .collect();
            if !live.is_empty() && (kills < MIN_KILLS || rng.gen_bool(0.3)) {
                let i = live[rng.gen_range(0..live.len())];
                let mut child = instances[i].child.take().unwrap();
                child.kill().unwrap();
                let status = child.wait().unwrap();
                if killed(status) {
                    kills += 1;
                    external += 1;
                }
            }
            // Restart the dead, some of them armed with the next crash point:
            // every restart until each point was reached, then half; never
            // all at once, so an unarmed instance is always there to kill
            // (which makes the rebalances `during_rebalance` waits for).
            for i in 0..INSTANCES {
                if instances[i].child.is_some() {
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(0..800))).await;
                let others_armed = instances
                    .iter()
                    .filter(|o| o.child.is_some() && o.armed.is_some())
                    .count();
                let want = points_hit.len() < CrashPoint::ALL.len() || rng.gen_bool(0.5);
                let armed = (want && others_armed < INSTANCES - 1).then(|| {
                    // Points not reached yet first, then round robin.
                    let p = CrashPoint::ALL
                        .into_iter()
                        .find(|p| !points_hit.contains_key(p.as_str()))
                        .unwrap_or_else(|| {
                            next_point += 1;
                            CrashPoint::ALL[next_point % CrashPoint::ALL.len()]
                        });
                    // A restarted instance's first assignment comes in the
                    // middle of the group's rebalance; a later one may give
                    // it no new partition, so that point is armed at 1.
                    let n = match p {
                        CrashPoint::DuringRebalance => 1,
                        _ => rng.gen_range(1..=2),
                    };
                    (p, n)
                });
                let inst = &mut instances[i];
                inst.armed = armed.map(|a| a.0);
                inst.since = Instant::now();
                inst.child = Some(start(&bin, &config_path, &dir, i, inst.runs, armed));
                inst.runs += 1;
            }
        }
        // Disarm the survivors: the rest of the run checks the output only.
        for (i, inst) in instances.iter_mut().enumerate() {
            if inst.armed.take().is_some() {
                let mut c = inst.child.take().unwrap();
                c.kill().unwrap();
                if killed(c.wait().unwrap()) {
                    kills += 1;
                    external += 1;
                }
                inst.child = Some(start(&bin, &config_path, &dir, i, inst.runs, None));
                inst.runs += 1;
            }
        }
        eprintln!(
            "{kills} kills ({external} at random moments, crash points {points_hit:?}) in {:.0}s",
            started.elapsed().as_secs_f64()
        );

        // The reference: one uninterrupted pass over the input as stored.
        let input = tokio::task::block_in_place(|| read_all(&broker, &t.input));
        let mut by_partition: BTreeMap<i32, Vec<&Read>> = BTreeMap::new();
        for m in &input {
            by_partition.entry(m.partition).or_default().push(m);
        }
        let key = ReleaseKey::from_hex(KEY_HEX).unwrap();
        let mut processor = Processor::new(&v, Arc::new(Counters::default()));
        processor.set_input_partitions(4);
        let mut expected = BTreeMap::new();
        let mut expected_charges = BTreeMap::new();
        let mut bad: BTreeSet<(i32, i64)> = BTreeSet::new();
        // Each lane's quantile track, stepped in window order as the
        // service steps it (adaptive quantiles are the default).
        let mut tracks: BTreeMap<(usize, i32), fleetdp::dp::release::QuantileTrack> =
            BTreeMap::new();
        for (p, ms) in &by_partition {
            let mut closed = Vec::new();
            for m in ms {
                if processor
                    .process(
                        *p,
                        m.offset,
                        &m.payload,
                        m.headers.get("content-type").map(String::as_str),
                        None,
                        &mut closed,
                    )
                    .is_err()
                {
                    bad.insert((*p, m.offset));
                }
            }
            for w in closed {
                let s = &v.plan.streams[w.stream];
                let track = tracks.entry((w.stream, w.partition)).or_default();
                let released = s.release_after(&key, w.partition, w.seq, &w.values, track);
                s.track_step(&key, w.partition, w.seq, &w.values, track);
                let stats = fleetdp::pipeline::build_release(&v, s, &w, &released, &[]);
                let k = (s.spec.name.clone(), w.partition, w.seq);
                expected_charges.insert(k.clone(), w.charges.clone());
                expected.insert(k, stats);
            }
        }
        assert!(
            expected.len() > 200,
            "the dataset should make hundreds of windows, got {}",
            expected.len()
        );

        // Let the survivors finish, then stop them cleanly.
        let distinct = || {
            tokio::task::block_in_place(|| releases(&broker, &t.output))
                .into_iter()
                .map(|r| (r.stream, r.partition, r.window_seq))
                .collect::<BTreeSet<_>>()
        };
        let done = {
            let deadline = Instant::now() + Duration::from_secs(240);
            loop {
                let d = distinct();
                if d.len() >= expected.len() || Instant::now() > deadline {
                    break d.len() >= expected.len();
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        for inst in &mut instances {
            let mut c = inst.child.take().unwrap();
            // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let status = c.wait().unwrap();
            assert!(
                status.success() || killed(status),
                "an instance failed on shutdown ({status}); logs in {}",
                dir.display()
            );
        }
        assert!(
            done,
            "not every window was released: {} of {}; logs in {}",
            distinct().len(),
            expected.len(),
            dir.display()
        );

        // Every window exactly once or as bit-identical copies, equal to the reference.
        let got = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let mut copies: BTreeMap<(String, i32, u64), usize> = BTreeMap::new();
        for r in &got {
            let k = (r.stream.clone(), r.partition, r.window_seq);
            let e = expected
                .get(&k)
                .unwrap_or_else(|| panic!("{k:?} released but not in the reference (seed {seed})"));
            assert_eq!(
                (r.n, r.first_offset, r.last_offset, r.padded),
                (e.n, e.first_offset, e.last_offset, e.padded),
                "{k:?}: window contents differ from an uninterrupted run (seed {seed})"
            );
            assert_eq!(
                r.statistics, e.statistics,
                "{k:?}: re-noised or different values (seed {seed})"
            );
            *copies.entry(k).or_default() += 1;
        }
        assert_eq!(copies.len(), expected.len());
        let duplicates: usize = copies.values().map(|c| c - 1).sum();
        eprintln!(
            "{} windows released, {duplicates} bit-identical duplicates",
            copies.len()
        );

        // Every bad message is dead-lettered (at least once: a replay may repeat one).
        let dlq: BTreeSet<(i32, i64)> = tokio::task::block_in_place(|| read_all(&broker, &t.dlq))
            .iter()
            .map(|m| {
                (
                    m.headers["fleetdp-source-partition"].parse().unwrap(),
                    m.headers["fleetdp-source-offset"].parse().unwrap(),
                )
            })
            .collect();
        assert!(!bad.is_empty());
        assert_eq!(dlq, bad, "dead letters differ from the bad messages");

        // The state topic: each released window's charges as in the reference,
        // and no device beyond W windows per (stream, horizon).
        let mut per_device: HashMap<(String, u64, i64), BTreeSet<u64>> = HashMap::new();
        let (mut tombstones, mut ledger_entries) = (0, 0);
        for m in tokio::task::block_in_place(|| read_all(&broker, &t.state)) {
            match m
                .headers
                .get(fleetdp::state::RECORD_KIND)
                .map(String::as_str)
            {
                Some(fleetdp::state::LEDGER) => {
                    ledger_entries += 1;
                    continue;
                }
                _ if m.payload.is_empty() => {
                    tombstones += 1;
                    continue;
                }
                _ => {}
            }
            let c = proto::v1::WindowCharges::decode(m.payload.as_slice()).unwrap();
            assert_eq!(c.device_key_scheme, fleetdp::DEVICE_KEY_SCHEME);
            let k = (c.stream.clone(), c.partition, c.window_seq);
            let charges: Vec<(u64, i64)> = c
                .device_keys
                .iter()
                .copied()
                .zip(c.horizons.iter().copied())
                .collect();
            if let Some(e) = expected_charges.get(&k) {
                assert_eq!(&charges, e, "{k:?}: charges differ from the reference");
            }
            for (d, h) in charges {
                per_device
                    .entry((c.stream.clone(), d, h))
                    .or_default()
                    .insert(c.window_seq);
            }
        }
        assert!(
            ledger_entries > 0 && tombstones > 0,
            "ledger entries {ledger_entries}, tombstones {tombstones}"
        );
        let worst = per_device.values().map(|s| s.len()).max().unwrap_or(0);
        assert!(
            worst as u32 <= W,
            "a device was charged {worst} windows in one horizon (W = {W})"
        );
        assert_eq!(worst as u32, W, "the dataset should make devices reach W");
        assert!(kills >= 20 && external > 0, "{kills} kills");
        let _ = std::fs::remove_dir_all(&dir);
    });
}
