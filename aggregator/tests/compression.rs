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

mod harness;

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

#[test]
fn input_in_every_codec_is_released_and_zstd_releases_read_back() {
    let Some(py) = harness::front::python_client() else {
        return;
    };
    let broker = Broker::start();
    if !broker.is_external() {
        // The Python client cannot reach the in-process mock cluster.
        return;
    }
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
