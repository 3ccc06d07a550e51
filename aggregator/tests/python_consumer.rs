//! The manual's Python consumer (`docs/output.md`, confluent-kafka), run as written against
//! the broker: it prints the fleet-wide releases of a two-partition stream,
//! one line per seq covering both partitions, and nothing else.
//!
//! Needs a Python with confluent-kafka (tests/run.sh installs it into
//! `.tools/venv` and sets FLEETDP_PYTHON); without one the test says so and
//! passes, unless FLEETDP_REQUIRE_PYTHON_CLIENT is set (tests/run.sh sets it).

use crate::harness;

use fleetdp::Partitioner;
use harness::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The output page's block after "A consumer in Python".
fn readme_snippet() -> String {
    let readme = include_str!("../../docs/output.md");
    let from = readme
        .find("A consumer in Python")
        .expect("docs/output.md shows a Python consumer");
    let rest = &readme[from..];
    let start = rest.find("```python\n").expect("a python block") + "```python\n".len();
    let len = rest[start..].find("```").expect("the block ends");
    rest[start..start + len].to_string()
}

#[test]
fn the_readme_python_consumer_prints_fleet_wide_releases() {
    let Some(py) = harness::front::python_client() else {
        return;
    };
    let snippet = readme_snippet();
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "pyfleet", 2).await;
        let mut v = config(
            &broker,
            &t,
            "epsilon_per_device = 4.0\nhorizon = \"24h\"",
            "",
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\n\
             max_windows_per_device = 10\nstatistics = [\"count\", \"mean\"]",
        );
        v.config.kafka.output_format = fleetdp::config::OutputFormat::Json;
        let base = now_ms() - 60_000;
        // Ten devices per partition, placed where the partitioner puts them.
        let (mut per, mut msgs) = ([0; 2], Vec::new());
        for i in 0.. {
            let device = format!("d{i}");
            let p = Partitioner::Murmur2.partition(device.as_bytes(), 2).unwrap();
            if per[p as usize] < 10 {
                per[p as usize] += 1;
                msgs.push(temp_reading(Some(p), &device, 20.0 + i as f64 % 7.0, base + i));
            }
            if per == [10, 10] {
                break;
            }
        }
        produce(&broker, &t.input, &msgs).await;
        let (stop, _c, h) = spawn_pipeline(v, [5; 32]);
        let written =
            || tokio::task::block_in_place(|| fleet_releases(&broker, &t.output)).len() >= 2;
        assert!(wait_until(Duration::from_secs(120), written).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();

        // As a user would: their brokers, topic and a group of their own.
        let line = "BROKERS, TOPIC = \"127.0.0.1:9092\", \"releases\"";
        assert!(snippet.contains(line), "{snippet}");
        let code = snippet
            .replace(
                line,
                &format!("BROKERS, TOPIC = {:?}, {:?}", broker.brokers, t.output),
            )
            .replace("\"fleet-view\"", &format!("{:?}", unique("pyfleet-view")))
            // Fast group joins on the test broker.
            .replace(
                "\"auto.offset.reset\": \"earliest\"",
                "\"auto.offset.reset\": \"earliest\", \"session.timeout.ms\": 6000, \"heartbeat.interval.ms\": 500",
            );
        let mut child = Command::new(&py)
            .args(["-u", "-c", &code])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python runs");
        let out = child.stdout.take().unwrap();
        let lines = tokio::task::block_in_place(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
            let deadline = Instant::now() + Duration::from_secs(90);
            let mut lines = Vec::new();
            while lines.len() < 2 && Instant::now() < deadline {
                if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                    lines.push(l);
                }
            }
            lines
        });
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(lines.len(), 2, "printed {lines:?}");
        for (seq, l) in lines.iter().enumerate() {
            let head = format!("temp #{seq} [2/2] count 10.00 ± 0.00, mean ");
            assert!(l.starts_with(&head), "{l:?} does not start with {head:?}");
        }
    });
}
