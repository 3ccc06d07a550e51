//! No side channel (docs/DESIGN.md §8): two `fleetdp run` processes on neighbouring
//! inputs — the same arrival pattern (keys, partitions, offsets, event
//! times, bad messages), one device's valid values changed — with the same
//! release key. Every exported counter and gauge except durations and the
//! released values, and every log line once timestamps, durations and topic
//! names are removed, must be identical between the two runs; so must the
//! output topic's window records — the same windows, each with the same
//! key, headers and every published field but its noisy values and its
//! release time (the wall clock's here); and so must their OpenTelemetry
//! copies on `kafka.otlp_topic`, but for their values and release times.

use crate::harness;

use fleetdp::sim::{FleetSpec, Signal};
use harness::*;
use prost::Message as _;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEY_HEX: &str = "45d9b922669e0e6069c3dd5e64c68e3ed569f27e1a64d4a2774365b7ae0f9aa3";

const STREAM: &str = r#"
[[stream]]
name = "cabin_temp_c"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 25
max_readings_per_device = 1
max_windows_per_device = 3
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-20, 0, 10, 20, 30, 40, 60]
quantiles = [0.5]
running_share = 0.2
running_lifetime = 1024
"#;

/// The run's OpenTelemetry copy of its releases.
fn otlp_topic(t: &Topics) -> String {
    format!("{}-otlp", t.output)
}

/// The OTLP records of a run by key: key, headers and every field but the
/// points' values and release times (the wall clock's here).
fn otlp_public(broker: &Broker, t: &Topics) -> BTreeMap<String, String> {
    use proto::otlp::{metric, ExportMetricsServiceRequest};
    read_all(broker, &otlp_topic(t))
        .into_iter()
        .map(|m| {
            let mut req = ExportMetricsServiceRequest::decode(&*m.payload).unwrap();
            for rm in &mut req.resource_metrics {
                for sm in &mut rm.scope_metrics {
                    for metric in &mut sm.metrics {
                        if let Some(metric::Data::Gauge(g)) = &mut metric.data {
                            for p in &mut g.data_points {
                                p.value = None;
                                p.time_unix_nano = 0;
                            }
                        }
                    }
                }
            }
            let key = String::from_utf8(m.key.clone()).unwrap();
            let headers: BTreeMap<_, _> = m.headers.iter().collect();
            (key, format!("{headers:?} {req:?}"))
        })
        .collect()
}

struct Run {
    metrics: Vec<String>,
    logs: Vec<String>,
}

/// Run `fleetdp run` over `t` until `windows` are released and it is caught
/// up; return its normalised metrics and logs.
fn run(broker: &Broker, t: &Topics, windows: u64, dir: &Path, name: &str) -> Run {
    let port = free_port();
    let text = config_text(
        broker,
        t,
        "measure = \"zcdp\"\nrho_per_device = 2.0\ndelta = 1e-6\nhorizon = \"1h\"\nkey_env = \"FLEETDP_SIDE_KEY\"",
        &format!("[http]\nlisten = \"127.0.0.1:{port}\""),
        STREAM,
    )
    .replace(
        "[kafka]\n",
        &format!("[kafka]\notlp_topic = \"{}\"\n", otlp_topic(t)),
    );
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, text).unwrap();
    let log_path = dir.join(format!("{name}.log"));
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["run", "--config"])
        .arg(&cfg)
        .env("FLEETDP_SIDE_KEY", KEY_HEX)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut settled = None;
    let mut previous = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1000));
        let Some((200, body)) = http_get(&format!("{base}/api/status")) else {
            continue;
        };
        let s: serde_json::Value = serde_json::from_str(&body).unwrap();
        let caught_up = s["lag"]
            .as_object()
            .is_some_and(|l| !l.is_empty() && l.values().all(|v| v == 0));
        let released = s["windows_released"].as_u64();
        // Caught up, and nothing released since the last poll: settled.
        if released >= Some(windows) && caught_up && previous == released {
            settled = http_get(&format!("{base}/metrics"));
            break;
        }
        previous = released;
    }
    // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert!(
        child.wait().unwrap().success(),
        "{name} did not stop cleanly; log {}",
        log_path.display()
    );
    let (status, metrics) =
        settled.unwrap_or_else(|| panic!("{name} never caught up; log {}", log_path.display()));
    assert_eq!(status, 200);
    assert_eq!(
        http_get(&format!("{base}/healthz")),
        None,
        "the process is gone"
    );

    // Released values and times (durations, timestamps) are exempt.
    let excluded = [
        "fleetdp_release_value",
        "fleetdp_release_half_width",
        // Fleet-wide values are noisy; how many were written by the scrape
        // is timing.
        "fleetdp_fleet_release_value",
        "fleetdp_fleet_release_half_width",
        "fleetdp_fleet_releases_total",
        "fleetdp_fleet_pending",
        "fleetdp_release_latency_seconds",
        "fleetdp_last_release_timestamp_seconds",
        "fleetdp_partition_last_release_timestamp_seconds",
        // The process's own CPU time, memory and descriptors.
        "process_",
    ];
    let mut m: Vec<String> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter(|l| !excluded.iter().any(|e| l.starts_with(e)))
        .map(String::from)
        .collect();
    m.sort();
    let listen = format!("127.0.0.1:{port}");
    let names = [
        (&t.input, "INPUT"),
        (&t.output, "OUTPUT"),
        (&t.dlq, "DLQ"),
        (&t.state, "STATE"),
        (&t.group, "GROUP"),
        (&listen, "LISTEN"),
    ];
    // A fleet release's line (stream, seq, partitions combined, complete:
    // public) is written by its own thread after the windows it combines;
    // whether the last one made it before the stop is timing.
    let mut logs: Vec<String> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("fleet release"))
        .map(|l| {
            // Drop the timestamp and any duration; name topics generically.
            let mut l = l
                .split_once(' ')
                .map_or(l, |(_, rest)| rest)
                .trim()
                .to_string();
            if let Some(i) = l.find("latency_ms=") {
                let end = l[i..].find(' ').map_or(l.len(), |e| i + e);
                // Milliseconds to the microsecond, without float dust.
                let ms = &l[i + "latency_ms=".len()..end];
                let decimals = ms.split_once('.').map_or(0, |(_, d)| d.len());
                assert!(
                    ms.parse::<f64>().is_ok() && decimals <= 3,
                    "latency_ms={ms}"
                );
                l.replace_range(i..end, "latency_ms=_");
            }
            for (from, to) in names {
                l = l.replace(from.as_str(), to);
            }
            l
        })
        .collect();
    logs.sort();
    Run { metrics: m, logs }
}

#[test]
fn telemetry_is_identical_on_neighbouring_inputs() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let msgs = fleet_messages(
            FleetSpec {
                devices: 60,
                signals: vec![Signal::CabinTemp],
                bad_fraction: 0.02,
                outlier_fraction: 0.01,
                ..FleetSpec::default()
            },
            60 * 20,
        );
        // The neighbour: one device's valid readings get other valid values.
        let target = msgs[0].key.clone();
        let mut changed = 0;
        let neighbour: Vec<Out> = msgs
            .iter()
            .map(|m| {
                let mut payload = m.payload.clone();
                if m.key == target {
                    if let Ok(mut r) = proto::DeviceReading::decode(&*m.payload) {
                        if r.value.is_some_and(f64::is_finite) && r.device_id == target {
                            r.value = Some(if changed % 2 == 0 { 59.9 } else { -19.5 });
                            changed += 1;
                            payload = r.encode_to_vec();
                            assert_eq!(payload.len(), m.payload.len(), "the same size on the wire");
                        }
                    }
                }
                Out {
                    partition: m.partition,
                    key: m.key.clone(),
                    payload,
                    content_type: m.content_type.clone(),
                }
            })
            .collect();
        assert!(changed >= 10, "the neighbour must differ in many readings");

        let dir = std::env::temp_dir().join(unique("fleetdp-side"));
        std::fs::create_dir_all(&dir).unwrap();
        let (ta, tb) = (Topics::new("sidea"), Topics::new("sideb"));
        let mut runs = Vec::new();
        let mut runs_windows = 0;
        for (t, input, name) in [(&ta, &msgs, "a"), (&tb, &neighbour, "b")] {
            broker
                .create_topics(&[
                    (&t.input, 2),
                    (&t.output, 1),
                    (&t.dlq, 1),
                    (&t.state, 1),
                    (&otlp_topic(t), 1),
                ])
                .await;
            produce(&broker, &t.input, input).await;
            let stored = tokio::task::block_in_place(|| read_all(&broker, &t.input));
            let mut per: BTreeMap<i32, u64> = BTreeMap::new();
            for m in &stored {
                *per.entry(m.partition).or_default() += 1;
            }
            // A lower bound on the windows (caps drop some readings).
            let windows = per.values().map(|c| c / 25 / 3).sum::<u64>().max(1);
            runs_windows = windows;
            runs.push(tokio::task::block_in_place(|| {
                run(&broker, t, windows, &dir, name)
            }));
        }
        let (a, b) = (&runs[0], &runs[1]);
        assert!(a
            .metrics
            .iter()
            .any(|l| l.starts_with("fleetdp_windows_released_total")));
        assert!(a
            .metrics
            .iter()
            .any(|l| l.starts_with("fleetdp_consumer_lag")));
        assert!(a
            .metrics
            .iter()
            .any(|l| l.starts_with("fleetdp_budget_remaining_per_horizon")));
        assert!(a.logs.iter().any(|l| l.contains("window released")));
        let diff = |x: &[String], y: &[String]| -> Vec<String> {
            x.iter().filter(|l| !y.contains(l)).cloned().collect()
        };
        assert_eq!(
            a.metrics,
            b.metrics,
            "metrics differ: only in a {:?}, only in b {:?}",
            diff(&a.metrics, &b.metrics),
            diff(&b.metrics, &a.metrics)
        );
        assert_eq!(
            a.logs,
            b.logs,
            "logs differ: only in a {:?}, only in b {:?}",
            diff(&a.logs, &b.logs),
            diff(&b.logs, &a.logs)
        );
        let records = |t: &Topics| -> BTreeMap<(String, i32, u64), String> {
            tokio::task::block_in_place(|| read_all(&broker, &t.output))
                .into_iter()
                .filter(|m| !m.is_fleet())
                .map(|m| {
                    let ct = m.headers.get("content-type").map(String::as_str);
                    let r = fleetdp::kafka::decode_release(&m.payload, ct).unwrap();
                    let headers: BTreeMap<_, _> = m.headers.iter().collect();
                    let public = release_public_fields(&r, false);
                    let seen = format!("{:?} {headers:?} {public}", m.key);
                    ((r.stream.clone(), r.partition, r.window_seq), seen)
                })
                .collect()
        };
        let (ra, rb) = (records(&ta), records(&tb));
        assert!(ra.len() as u64 >= runs_windows, "{} windows", ra.len());
        assert!(
            ra.values().any(|p| p.contains("\"quantile\"")),
            "quantiles among the compared fields"
        );
        assert_eq!(
            ra.keys().collect::<Vec<_>>(),
            rb.keys().collect::<Vec<_>>(),
            "the released windows differ"
        );
        for (w, a) in &ra {
            assert_eq!(a, &rb[w], "window {w:?}: published fields differ");
        }
        // The OpenTelemetry copy: one per window and fleet release, the
        // same on both sides but for its values and release times.
        let (oa, ob) =
            tokio::task::block_in_place(|| (otlp_public(&broker, &ta), otlp_public(&broker, &tb)));
        assert!(
            oa.len() >= ra.len(),
            "{} OTLP records for {} windows",
            oa.len(),
            ra.len()
        );
        assert_eq!(
            oa.keys().collect::<Vec<_>>(),
            ob.keys().collect::<Vec<_>>(),
            "the OTLP records differ"
        );
        for (k, a) in &oa {
            assert_eq!(a, &ob[k], "OTLP record {k}: published fields differ");
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
