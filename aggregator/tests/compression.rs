//! Compressed topics, with a real client on both sides: input produced by
//! confluent-kafka (the README's Python client) with each codec — gzip,
//! snappy, lz4, zstd — is released like uncompressed input, and releases
//! written with `compression.type = "zstd"` are read back by the same
//! client.
//!
//! Issue: the build had no zstd; zstd input stalled the service (a
//! "Decompression … Not implemented" error every 10 s) while `/healthz`
//! and `/readyz` stayed green.
//!
//! Needs a Python with confluent-kafka (tests/run.sh installs it and sets
//! FLEETDP_PYTHON, FLEETDP_REQUIRE_PYTHON_CLIENT) and a broker other
//! processes reach.

use crate::harness;

use harness::*;
use std::process::Command;
use std::time::Duration;

const KEY: [u8; 32] = [3; 32];
const WAIT: Duration = Duration::from_secs(60);
/// Readings per window (one window per codec).
const N: usize = 10;

/// Produce `N` readings with `codec` (one record per batch: tansu 0.6
/// loses records of multi-record batches in one partition).
const PRODUCE: &str = r#"
import json, sys, time
from confluent_kafka import Producer
brokers, topic, codec, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
p = Producer({"bootstrap.servers": brokers, "compression.type": codec})
now = int(time.time() * 1000)
for i in range(n):
    reading = {"device_id": f"{codec}-dev-{i}", "stream": "temp", "value": 20.0 + i, "event_time_ms": now}
    p.produce(topic, key=reading["device_id"], value=json.dumps(reading),
              headers={"content-type": "application/json"})
    if p.flush(10) != 0:
        sys.exit("not delivered")
"#;

/// Print the keys of the topic's records (partition 0, from the start).
const READ: &str = r#"
import sys, time
from confluent_kafka import Consumer, TopicPartition
brokers, topic, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": brokers, "group.id": "fleetdp-codec-reader", "enable.auto.commit": False})
c.assign([TopicPartition(topic, 0, 0)])
got, end = 0, time.time() + 30
while got < want and time.time() < end:
    m = c.poll(0.5)
    if m is None or m.error():
        continue
    got += 1
    print(m.key().decode(), len(m.value()))
c.close()
"#;

/// The Python client and a broker other processes reach, or `None` (the
/// test skips: the in-process mock cluster is not reachable from outside).
fn python_and_broker() -> Option<(String, Broker)> {
    let py = harness::front::python_client()?;
    let broker = Broker::start();
    broker.is_external().then_some((py, broker))
}

#[test]
fn input_in_every_codec_is_released_and_zstd_releases_read_back() {
    let Some((py, broker)) = python_and_broker() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        for codec in ["gzip", "snappy", "lz4", "zstd"] {
            let t = Topics::created(&broker, &format!("codec-{codec}"), 1).await;
            let v = config(
                &broker,
                &t,
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                "[kafka.properties]\n\"compression.type\" = \"zstd\"",
                &format!("[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {N}\nstatistics = [\"count\", \"mean\"]"),
            );
            let (stop, c, h) = spawn_pipeline(v, KEY);
            let produced = tokio::task::block_in_place(|| {
                Command::new(&py)
                    .args(["-c", PRODUCE, &broker.brokers, &t.input, codec])
                    .arg(N.to_string())
                    .status()
                    .unwrap()
            });
            assert!(produced.success(), "{codec}: producing failed");
            let released = wait_until(WAIT, || count(&c.windows_released) >= 1).await;
            stop.send(true).unwrap();
            h.await.unwrap().unwrap();
            assert!(
                released,
                "{codec}: nothing released ({} messages read)",
                count(&c.messages)
            );
            assert_eq!(count(&c.messages), N as u64, "{codec}");
            assert_eq!(count(&c.readings_accepted), N as u64, "{codec}");
            let out = tokio::task::block_in_place(|| {
                Command::new(&py)
                    .args(["-c", READ, &broker.brokers, &t.output, "1"])
                    .output()
                    .unwrap()
            });
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.lines().any(|l| l.starts_with("temp/0/0 ")),
                "{codec}: the zstd release was not read back: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    });
}

/// Write one record batch that claims gzip but holds no gzip stream to
/// partition 0 of a topic, with a raw Produce request (v3): no client
/// library writes such a batch. Its records (argument 3, default 1)
/// take that many offsets; argument 4 is the partition (default 0). Prints the partition's error code (a broker
/// that validates batches, as Apache Kafka does, answers 2,
/// CORRUPT_MESSAGE).
const CORRUPT: &str = r#"
import socket, struct, sys, time
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF
def kstr(s):
    return struct.pack(">h", len(s)) + s.encode()
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
now = int(time.time() * 1000)
n = int(sys.argv[3]) if len(sys.argv) > 3 else 1
# attributes 1 (gzip), last offset delta, timestamps, no producer id,
# the record count, then a payload that is not gzip.
body = struct.pack(">hiqqqhii", 1, n - 1, now, now, -1, -1, -1, n) + b"\x1f\x8bnot gzip at all" * 4
tail = struct.pack(">ib", 0, 2) + struct.pack(">I", crc32c(body)) + body
batch = struct.pack(">qi", 0, len(tail)) + tail
req = struct.pack(">hhi", 0, 3, 1) + kstr("fleetdp-test") + struct.pack(">hhi", -1, 1, 10000)
partition = int(sys.argv[4]) if len(sys.argv) > 4 else 0
req += struct.pack(">i", 1) + kstr(sys.argv[2]) + struct.pack(">iii", 1, partition, len(batch)) + batch
s = socket.create_connection((host, int(port)))
s.sendall(struct.pack(">i", len(req)) + req)
n = struct.unpack(">i", s.recv(4))[0]
resp = b""
while len(resp) < n:
    resp += s.recv(n - len(resp))
# correlation id, topics, name, partitions, index, then the error code.
at = 4 + 4 + 2 + len(sys.argv[2]) + 4 + 4
print(struct.unpack(">h", resp[at:at + 2])[0])
"#;

/// A batch the consumer cannot decompress stops its partition for good:
/// the service must not stay green. `/readyz` turns red naming the
/// decompression error and the metric moves, while `/healthz` (the loop
/// itself) stays live. Before, the loop retried forever with both probes
/// at 200 and no metric.
#[test]
fn an_undecompressable_batch_turns_readiness_red_and_counts_the_error() {
    let Some((py, broker)) = python_and_broker() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "codec-corrupt", 1).await;
        let service = harness::child::Service::start(
            &broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "stall_timeout = \"3s\"",
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"count\"]",
        );
        assert!(
            service.ready_within(WAIT).await,
            "never ready: {}",
            service.log()
        );
        let out = tokio::task::block_in_place(|| {
            Command::new(&py)
                .args(["-c", CORRUPT, &broker.brokers, &t.input])
                .output()
                .unwrap()
        });
        let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if code == "2" {
            eprintln!("the broker validates batches (CORRUPT_MESSAGE): a corrupt batch cannot reach a consumer there; skipped");
            return;
        }
        assert_eq!(code, "0", "{}", String::from_utf8_lossy(&out.stderr));
        let mut last = None;
        let red = wait_until(WAIT, || {
            last = service.get("/readyz");
            last.as_ref()
                .is_some_and(|(s, body)| *s == 503 && body.contains("decompression"))
        })
        .await;
        assert!(red, "readiness stayed {last:?}; log:\n{}", service.log());
        let (live, _) = service.get("/healthz").unwrap();
        assert_eq!(live, 200, "the loop itself is live");
        let (_, metrics) = service.get("/metrics").unwrap();
        let errors: f64 = metrics
            .lines()
            .find(|l| {
                l.starts_with("fleetdp_kafka_errors_total{")
                    && l.contains("client=\"consumer\"")
                    && l.contains("kind=\"decompression\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0);
        assert!(errors >= 1.0, "no decompression error counted:\n{metrics}");
        let log = service.log();
        assert!(log.contains("compression.type"), "the log names the setting: {log}");
    });
}

/// Readings per window in the skip test: half before the bad batch, half
/// after it.
const HALF: usize = 10;

/// Produce readings `from..to` of a skip test to `partition`, one record
/// per batch.
async fn produce_readings(broker: &Broker, topic: &str, partition: i32, from: usize, to: usize) {
    for i in from..to {
        let m = temp_reading(
            Some(partition),
            &format!("dev-{partition}-{i}"),
            20.0,
            now_ms(),
        );
        produce(broker, topic, &[m]).await;
    }
}

/// Write the bad batch of `records` records to `partition`; `false` if
/// the broker validates batches (none can reach a consumer there).
fn write_bad_batch(py: &str, broker: &Broker, topic: &str, records: i64, partition: i32) -> bool {
    let out = tokio::task::block_in_place(|| {
        Command::new(py)
            .args(["-c", CORRUPT, &broker.brokers, topic])
            .args([records.to_string(), partition.to_string()])
            .output()
            .unwrap()
    });
    let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if code == "2" {
        eprintln!("the broker validates batches (CORRUPT_MESSAGE): a corrupt batch cannot reach a consumer there; skipped");
        return false;
    }
    assert_eq!(code, "0", "{}", String::from_utf8_lossy(&out.stderr));
    true
}

/// The supported way past a poisoned batch: by default the partition stops
/// there (`/readyz` red, naming `kafka.undecodable`); restarted with
/// `kafka.undecodable = "skip"`, the service passes exactly the batch's
/// offsets, records them as one dead letter, and the window open across
/// the batch is released whole: readings before it (rebuilt from the
/// input) and after it. Before, the only way through was committing the
/// group's offset past it by hand, which lost the open window's readings.
#[test]
fn an_undecodable_batch_is_skipped_when_asked_and_nothing_else_is_lost() {
    let Some((py, broker)) = python_and_broker() else {
        return;
    };
    const BAD: i64 = 3;
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "codec-skip", 1).await;
        let key = fleetdp::dp::rng::ReleaseKey::ephemeral().to_hex();
        let streams = format!("[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {}\nstatistics = [\"count\"]", 2 * HALF);
        let parts = ["epsilon_per_device = 1.0\nhorizon = \"24h\"", "stall_timeout = \"3s\"", streams.as_str()];
        let service = harness::child::Service::start_with(&broker, &t, parts, "", &key);
        assert!(service.ready_within(WAIT).await, "never ready: {}", service.log());
        produce_readings(&broker, &t.input, 0, 0, HALF).await;
        if !write_bad_batch(&py, &broker, &t.input, BAD, 0) {
            return;
        }
        produce_readings(&broker, &t.input, 0, HALF, 2 * HALF).await;
        let mut last = None;
        let red = wait_until(WAIT, || {
            last = service.get("/readyz");
            last.as_ref()
                .is_some_and(|(s, body)| *s == 503 && body.contains("kafka.undecodable"))
        })
        .await;
        assert!(red, "readiness {last:?} does not name the way past; log:\n{}", service.log());
        // The partition's own stall signal, for the FleetDPPartitionStalled page.
        let (_, metrics) = service.get("/metrics").unwrap();
        assert!(metrics.contains("fleetdp_partition_stalled{partition=\"0\"} 1"), "{metrics}");
        let (status, log) = service.stop(libc::SIGTERM);
        assert!(status.success(), "{log}");
        assert!(tokio::task::block_in_place(|| releases(&broker, &t.output)).is_empty());

        let service = harness::child::Service::start_with(&broker, &t, parts, "undecodable = \"skip\"", &key);
        let released = wait_until(WAIT, || {
            !tokio::task::block_in_place(|| releases(&broker, &t.output)).is_empty()
        })
        .await;
        assert!(released, "nothing released after the skip; log:\n{}", service.log());
        let r = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert_eq!(r.len(), 1, "{r:?}");
        let first_bad = HALF as i64;
        // The window holds every reading: offsets 0..HALF, then HALF after
        // the BAD skipped offsets.
        assert_eq!(
            (r[0].window_seq, r[0].n, r[0].first_offset, r[0].last_offset),
            (0, 2 * HALF as u64, 0, first_bad + BAD + HALF as i64 - 1),
            "{:?}",
            r[0]
        );
        let dead = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        assert_eq!(dead.len(), 1, "{dead:?}");
        let h = &dead[0].headers;
        assert_eq!(h["fleetdp-reason"], "undecodable_batch");
        assert_eq!(h["fleetdp-source-partition"], "0");
        assert_eq!(h["fleetdp-source-offset"], first_bad.to_string());
        assert_eq!(h["fleetdp-source-end-offset"], (first_bad + BAD).to_string());
        assert!(dead[0].payload.is_empty() && dead[0].key.is_empty());
        assert!(service.ready_within(WAIT).await, "not ready after the skip: {:?}", service.get("/readyz"));
        let (_, metrics) = service.get("/metrics").unwrap();
        assert!(
            metrics.contains("fleetdp_dead_letters_total{reason=\"undecodable_batch\"} 1"),
            "{metrics}"
        );
        assert!(metrics.contains("fleetdp_partition_stalled{partition=\"0\"} 0"), "{metrics}");
    });
}

/// Skipping while running, on a partition where nothing was read or
/// committed yet (the batch is its first record) and beside a healthy
/// partition: the probe finds the right partition from the earliest
/// offset, and both partitions' windows are released whole.
#[test]
fn a_bad_batch_first_on_one_of_two_partitions_is_skipped_while_running() {
    let Some((py, broker)) = python_and_broker() else {
        return;
    };
    const BAD: i64 = 2;
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "codec-skip-two", 2).await;
        let key = fleetdp::dp::rng::ReleaseKey::ephemeral().to_hex();
        let streams = format!("[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {HALF}\nstatistics = [\"count\"]");
        let parts = ["epsilon_per_device = 1.0\nhorizon = \"24h\"", "stall_timeout = \"3s\"", streams.as_str()];
        if !write_bad_batch(&py, &broker, &t.input, BAD, 1) {
            return;
        }
        let kafka = "undecodable = \"skip\"\ninput_partitioner = \"none\"";
        let service = harness::child::Service::start_with(&broker, &t, parts, kafka, &key);
        produce_readings(&broker, &t.input, 1, 0, HALF).await;
        produce_readings(&broker, &t.input, 0, 0, HALF).await;
        let both = wait_until(WAIT, || {
            tokio::task::block_in_place(|| releases(&broker, &t.output)).len() >= 2
        })
        .await;
        assert!(both, "not both partitions released; log:\n{}", service.log());
        let mut r = tokio::task::block_in_place(|| releases(&broker, &t.output));
        r.sort_by_key(|r| r.partition);
        let seen: Vec<_> = r.iter().map(|r| (r.partition, r.n, r.first_offset, r.last_offset)).collect();
        let h = HALF as i64;
        assert_eq!(seen, [(0, HALF as u64, 0, h - 1), (1, HALF as u64, BAD, BAD + h - 1)]);
        let dead = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        let ranges: Vec<_> = dead
            .iter()
            .map(|d| {
                let h = &d.headers;
                (h["fleetdp-reason"].as_str(), h["fleetdp-source-partition"].as_str(), h["fleetdp-source-offset"].as_str(), h["fleetdp-source-end-offset"].as_str())
            })
            .collect();
        assert_eq!(ranges, [("undecodable_batch", "1", "0", "2")], "{}", service.log());
    });
}
