//! No side channel under add-remove (docs/DESIGN.md §8): two `fleetdp run`
//! processes side by side, each on its own topics, fed at the same moments
//! with neighbouring inputs — the second has one more device, with readings
//! in several windows and, the stream being grouped by firmware, in three
//! groups (`G` = 2 keeps two). Time windows make releases depend on the
//! clock, so both run at once and are compared over the windows both
//! released, group by group.
//!
//! Required: every record of the output topics agrees between the two runs
//! in key, headers, record timestamp and every published field but the
//! noisy values (no exact count, padding, offset or data-dependent time),
//! and the data's releases arrive in the same order (the temp stream's
//! groups carry running totals: their public fields agree too, the
//! readings' count among them being 0, not public);
//! `/metrics` with `http.hide_exact_counts` shows no family that counts the
//! input and the same lines otherwise (released values and times excepted);
//! `/api/status` and `/readyz` carry no exact count; logs have the same lines once seqs
//! and durations are removed. A second stream is grouped by a dimension
//! with private keys: the common devices' build is selected, the extra
//! device's own build is not, so which private keys exist (slots bound,
//! their releases and `group`) is the same in both runs.

use crate::harness;

use harness::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEY_HEX: &str = "7bda32603daf3b6d69a63b2dc566513c71d0d0a9030cf17ee74c2bba3f7d7809";

const STREAM: &str = r#"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window = "2s"
max_windows_per_device = 3
statistics = ["count", "mean", "histogram", "quantiles"]
histogram_edges = [-20, 0, 20, 60]
quantiles = [0.5]
group_by = ["firmware"]
max_groups_per_device = 2
budget_share = 0.5
running_share = 0.2

[[stream]]
name = "volt"
lower = 0.0
upper = 20.0
resolution = 0.1
window = "2s"
max_windows_per_device = 3
statistics = ["count", "mean"]
group_by = ["build"]
budget_share = 0.5
key_selection_share = 0.3
"#;

/// The groups of [`STREAM`].
const GROUPS: [&str; 3] = [
    "temp[firmware=4.1]",
    "temp[firmware=4.2]",
    "temp[firmware=other]",
];

/// Running totals' steps and stds across both runs: each total's `windows`
/// counts the seqs since its lane's first release (its start), and its
/// `std` is one function of (`name`, `windows`) for both runs — so neither
/// depends on the input.
#[derive(Default)]
struct RunningSteps(BTreeMap<(String, String, u64), u64>);

impl RunningSteps {
    fn check(&mut self, stream: &str, seq: u64, first: u64, ts: &[proto::v1::RunningTotal]) {
        for t in ts {
            assert_eq!(
                t.windows,
                seq - first + 1,
                "{stream}#{seq} {}: steps since the start",
                t.name
            );
            let std = *self
                .0
                .entry((stream.to_string(), t.name.clone(), t.windows))
                .or_insert(t.std.to_bits());
            assert_eq!(
                std,
                t.std.to_bits(),
                "{stream}#{seq} {}: std of {} steps",
                t.name,
                t.windows
            );
        }
    }
}

struct Proc {
    child: Child,
    base: String,
    listen: String,
    log: std::path::PathBuf,
}

fn start(broker: &Broker, t: &Topics, dir: &Path, name: &str) -> Proc {
    let port = free_port();
    let text = config_text(
        broker,
        t,
        "relation = \"add-remove\"\nmeasure = \"zcdp\"\nrho_per_device = 2.0\ndelta = 1e-6\nhorizon = \"6s\"\nkey_env = \"FLEETDP_SIDE_KEY\"",
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\nhide_exact_counts = true\n[limits]\nmax_lateness = \"1s\"\nmax_clock_skew = \"2s\"\n[dimensions]\nfirmware = [\"4.1\", \"4.2\"]\nbuild = {{ private = true, max_keys = 2 }}"),
        STREAM,
    );
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, text).unwrap();
    let log = dir.join(format!("{name}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["run", "--config"])
        .arg(&cfg)
        .env("FLEETDP_SIDE_KEY", KEY_HEX)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Proc {
        child,
        base: format!("http://127.0.0.1:{port}"),
        listen: format!("127.0.0.1:{port}"),
        log,
    }
}

fn status(p: &Proc) -> Option<serde_json::Value> {
    match http_get(&format!("{}/api/status", p.base)) {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

fn released(p: &Proc) -> u64 {
    status(p)
        .and_then(|s| s["windows_released"].as_u64())
        .unwrap_or(0)
}

/// A `volt` reading labelled with its build (a private dimension).
fn volt_reading(device: &str, value: f64, event_ms: i64, build: &str) -> Out {
    let mut o = json_reading(device, value, event_ms, None);
    let text = String::from_utf8(o.payload).unwrap();
    o.payload = text
        .replace(r#""stream":"temp""#, r#""stream":"volt""#)
        .trim_end_matches('}')
        .to_string()
        .into_bytes();
    o.payload
        .extend_from_slice(format!(r#","labels":{{"build":"{build}"}}}}"#).as_bytes());
    o
}

/// A reading labelled with its firmware (`None`: no label, group `other`).
fn json_reading(device: &str, value: f64, event_ms: i64, firmware: Option<&str>) -> Out {
    let mut o = temp_reading(None, device, value, event_ms);
    if let Some(f) = firmware {
        let body = String::from_utf8(o.payload).unwrap();
        let body = body.trim_end_matches('}').to_string()
            + &format!(r#","labels":{{"firmware":"{f}"}}}}"#);
        o.payload = body.into_bytes();
    }
    o
}

/// Metrics lines without released values and times, and the log lines
/// without timestamps, seqs and durations.
fn normalised(
    p: &Proc,
    metrics: &str,
    names: &[(&String, &str)],
) -> (Vec<String>, BTreeSet<String>) {
    let excluded = [
        "fleetdp_release_value",
        "fleetdp_release_half_width",
        // Fleet-wide values are noisy; how many were written by the scrape
        // is timing (the records themselves are compared below).
        "fleetdp_fleet_release_value",
        "fleetdp_fleet_release_half_width",
        "fleetdp_fleet_releases_total",
        "fleetdp_fleet_pending",
        "fleetdp_last_release_timestamp_seconds",
        "fleetdp_partition_last_release_timestamp_seconds",
        "fleetdp_release_window_seq",
        "fleetdp_windows_released_total",
    ];
    let mut m: Vec<String> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter(|l| !excluded.iter().any(|e| l.starts_with(e)))
        .map(String::from)
        .collect();
    m.sort();
    let scrub = |l: &str, key: &str| -> String {
        let mut l = l.to_string();
        if let Some(i) = l.find(key) {
            let end = l[i..].find(' ').map_or(l.len(), |e| i + e);
            l.replace_range(i..end, &format!("{key}_"));
        }
        l
    };
    // A fleet release's line (stream, seq, partitions combined, complete:
    // public) is written by its own thread after the windows it combines;
    // whether the last one made it before the stop is timing. The records
    // are compared below.
    let logs = std::fs::read_to_string(&p.log)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("fleet release"))
        .map(|l| {
            let mut l = l.split_once(' ').map_or(l, |(_, r)| r).trim().to_string();
            for k in ["latency_ms=", "window_seq=", "address="] {
                l = scrub(&l, k);
            }
            for (from, to) in names {
                l = l.replace(from.as_str(), to);
            }
            l
        })
        .collect();
    (m, logs)
}

/// Whether a probe body carries no number but a partition's and the
/// configured bound (an exact count of messages behind would be another).
fn without_counts(body: &str) -> bool {
    let words: Vec<&str> = body.split_whitespace().collect();
    words.iter().enumerate().all(|(i, w)| {
        !w.bytes().any(|b| b.is_ascii_digit())
            || (i > 0 && words[i - 1] == "partition")
            || (i > 0 && words[i - 1] == "bound")
    })
}

#[test]
fn add_remove_telemetry_and_output_are_identical_on_neighbouring_inputs() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(unique("fleetdp-side-ar"));
        std::fs::create_dir_all(&dir).unwrap();
        let (ta, tb) = (Topics::new("sidear-a"), Topics::new("sidear-b"));
        for t in [&ta, &tb] {
            broker
                .create_topics(&[(&t.input, 2), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
                .await;
        }
        // The second starts a window later: how early each began releasing
        // must not matter to the comparison (only the input may differ).
        let mut a = start(&broker, &ta, &dir, "a");
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let mut b = start(&broker, &tb, &dir, "b");
        // Both assigned and releasing (empty windows) before any input.
        let deadline = Instant::now() + Duration::from_secs(90);
        while (released(&a) < 2 || released(&b) < 2) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            released(&a) >= 2 && released(&b) >= 2,
            "not releasing; logs in {}",
            dir.display()
        );
        let first_data = now_ms() / 2000;
        // Seven rounds, one window apart (over two horizons, so a selection
        // routes the last ones): 40 devices each, on both streams; the
        // neighbour adds device "extra" in every round.
        let mut readyz = Vec::new();
        for round in 0..7 {
            let at = now_ms();
            let common: Vec<Out> = (0..40)
                .flat_map(|i| {
                    let fw = ["4.1", "4.2"][i % 2];
                    [
                        json_reading(&format!("dev-{i}"), 10.0 + (i % 7) as f64, at, Some(fw)),
                        volt_reading(&format!("dev-{i}"), 12.0, at, "b1"),
                    ]
                })
                .collect();
            let mut with = common
                .iter()
                .map(|o| Out {
                    partition: o.partition,
                    key: o.key.clone(),
                    payload: o.payload.clone(),
                    content_type: o.content_type.clone(),
                })
                .collect::<Vec<_>>();
            // The extra device moves group every round: 4.1, 4.2, other;
            // its build is its own (never selected).
            let fw = [Some("4.1"), Some("4.2"), None][round % 3];
            with.push(json_reading("extra", 59.0, at, fw));
            with.push(volt_reading("extra", 19.0, at, "b-extra"));
            let (pa, pb) = tokio::join!(
                produce(&broker, &ta.input, &common),
                produce(&broker, &tb.input, &with)
            );
            let _ = (pa, pb);
            // /readyz while the round is being read: no exact count.
            for _ in 0..4 {
                for p in [&a, &b] {
                    if let Some((_, body)) = http_get(&format!("{}/readyz", p.base)) {
                        readyz.push(body);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(1700)).await;
        }
        for body in &readyz {
            assert!(without_counts(body), "/readyz: {body}");
        }
        let last_data = now_ms() / 2000;
        // Wait until both released well past the data.
        let target = |p: &Proc| -> bool {
            status(p).is_some_and(|s| {
                s["streams"][0]["series"]["count"]
                    .as_array()
                    .and_then(|pts| pts.last())
                    .and_then(|pt| pt["window_seq"].as_u64())
                    .is_some_and(|seq| seq as i64 >= last_data + 2)
            })
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while !(target(&a) && target(&b)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            target(&a) && target(&b),
            "releases stalled; logs in {}",
            dir.display()
        );
        for p in [&a, &b] {
            let s = status(p).unwrap();
            assert!(s["messages"].is_null() && s["dead_letters"].is_null() && s["lag"].is_null());
        }
        let scrape = |p: &Proc| http_get(&format!("{}/metrics", p.base)).unwrap().1;
        let (ma, mb) = (scrape(&a), scrape(&b));
        for p in [&mut a, &mut b] {
            // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
            unsafe {
                libc::kill(p.child.id() as i32, libc::SIGTERM);
            }
            assert!(p.child.wait().unwrap().success(), "did not stop cleanly");
        }
        for m in [&ma, &mb] {
            for fam in fleetdp::telemetry::EXACT_COUNT_METRICS {
                assert!(!m.contains(fam), "{fam} exposed with hide_exact_counts");
            }
        }
        let names_a = [
            (&ta.input, "INPUT"),
            (&ta.output, "OUTPUT"),
            (&ta.dlq, "DLQ"),
            (&ta.state, "STATE"),
            (&ta.group, "GROUP"),
            (&a.listen, "LISTEN"),
        ];
        let names_b = [
            (&tb.input, "INPUT"),
            (&tb.output, "OUTPUT"),
            (&tb.dlq, "DLQ"),
            (&tb.state, "STATE"),
            (&tb.group, "GROUP"),
            (&b.listen, "LISTEN"),
        ];
        let (na, la) = normalised(&a, &ma, &names_a);
        let (nb, lb) = normalised(&b, &mb, &names_b);
        assert_eq!(na, nb, "metrics differ");
        assert_eq!(la, lb, "log lines differ");
        assert!(la.iter().any(|l| l.contains("window released")));

        // The output topics, over the windows both released.
        let all = |t: &Topics| tokio::task::block_in_place(|| read_all(&broker, &t.output));
        let (all_a, all_b) = (all(&ta), all(&tb));
        type Lane = (String, i32, u64);
        let read = |out: &[Read]| -> BTreeMap<Lane, (Read, proto::WindowRelease)> {
            out.iter()
                .filter(|m| !m.is_fleet())
                .cloned()
                .map(|m| {
                    let r = fleetdp::kafka::decode_release(
                        &m.payload,
                        m.headers.get("content-type").map(String::as_str),
                    )
                    .unwrap();
                    ((r.stream.clone(), r.partition, r.window_seq), (m, r))
                })
                .collect()
        };
        let (oa, ob) = (read(&all_a), read(&all_b));
        let common: Vec<Lane> = oa.keys().filter(|s| ob.contains_key(*s)).cloned().collect();
        // Each lane's first release in a run: its start.
        let firsts = |o: &BTreeMap<Lane, (Read, proto::WindowRelease)>| {
            let mut f: BTreeMap<(String, i32), u64> = BTreeMap::new();
            for (stream, p, seq) in o.keys() {
                let e = f.entry((stream.clone(), *p)).or_insert(*seq);
                *e = (*e).min(*seq);
            }
            f
        };
        let (first_a, first_b) = (firsts(&oa), firsts(&ob));
        let mut steps = RunningSteps::default();
        for g in GROUPS {
            for p in 0..2 {
                for s in first_data as u64..=last_data as u64 {
                    assert!(
                        common.contains(&(g.to_string(), p, s)),
                        "window {g}/{p}/{s} missing from one run"
                    );
                }
            }
        }
        // Which private keys exist: the same slots released in both runs
        // (the common build bound, on both partitions; the extra device's
        // never), with the same `group`, over the windows of the data. The
        // windows before it are empty in both runs; how many of them each
        // released is when its process was assigned (the `other` slot
        // releases from the start), not the input.
        let private = |o: &BTreeMap<Lane, (Read, proto::WindowRelease)>| -> Vec<(Lane, String)> {
            o.iter()
                .filter(|((s, _, seq), _)| {
                    s.starts_with("volt[") && (first_data..=last_data).contains(&(*seq as i64))
                })
                .map(|(k, (_, r))| (k.clone(), format!("{:?}", r.group)))
                .collect()
        };
        assert_eq!(private(&oa), private(&ob), "private keys differ");
        for p in 0..2 {
            assert!(
                oa.iter().any(|((s, q, _), (_, r))| s == "volt[build=#1]"
                    && *q == p
                    && r.group.get("build").map(String::as_str) == Some("b1")),
                "the common build was not selected on partition {p}"
            );
        }
        assert!(oa
            .keys()
            .chain(ob.keys())
            .all(|(s, _, _)| s != "volt[build=#2]"));
        // Arrival order: the data's windows reach the output topic in the
        // same order in both runs (releases of one due moment go out in
        // (stream, partition) order once every partition is read past it,
        // whatever each partition's input).
        let order = |out: &[Read]| -> Vec<Lane> {
            let mut seen = Vec::new();
            for m in out.iter().filter(|m| !m.is_fleet()) {
                let ct = m.headers.get("content-type").map(String::as_str);
                let r = fleetdp::kafka::decode_release(&m.payload, ct).unwrap();
                let lane = (r.stream.clone(), r.partition, r.window_seq);
                if common.contains(&lane)
                    && (first_data..=last_data).contains(&(r.window_seq as i64))
                    && !seen.contains(&lane)
                {
                    seen.push(lane);
                }
            }
            seen
        };
        assert_eq!(order(&all_a), order(&all_b), "arrival order differs");
        for s in &common {
            let ((ra, a), (rb, b)) = (&oa[s], &ob[s]);
            assert_eq!(
                (&ra.key, &ra.headers, ra.timestamp),
                (&rb.key, &rb.headers, rb.timestamp),
                "window {s:?}"
            );
            let public = |r: &proto::WindowRelease| release_public_fields(r, true);
            assert_eq!(
                public(a),
                public(b),
                "window {s:?}: published fields differ"
            );
            if GROUPS.contains(&s.0.as_str()) {
                assert!(!a.running.is_empty(), "window {s:?}: no running totals");
                assert!(a.moments.is_some(), "window {s:?}: no raw moments");
            }
            let lane = (s.0.clone(), s.1);
            steps.check(&s.0, s.2, first_a[&lane], &a.running);
            steps.check(&s.0, s.2, first_b[&lane], &b.running);
        }

        // Fleet-wide records: for every seq both combined, the same key,
        // headers, timestamp, partitions and public fields.
        let fleet = |out: &[Read]| -> BTreeMap<(String, u64), (Read, proto::FleetRelease)> {
            out.iter()
                .filter(|m| m.is_fleet())
                .map(|m| {
                    let ct = m.headers.get("content-type").map(String::as_str);
                    let f = fleetdp::fleet::decode_fleet(&m.payload, ct).unwrap();
                    ((f.stream.clone(), f.window_seq), (m.clone(), f))
                })
                .collect()
        };
        let (fa, fb) = (fleet(&all_a), fleet(&all_b));
        for s in
            (first_data as u64..=last_data as u64).flat_map(|s| GROUPS.map(|g| (g.to_string(), s)))
        {
            let (Some((ra, a)), Some((rb, b))) = (fa.get(&s), fb.get(&s)) else {
                panic!("fleet seq {s:?} missing from a run");
            };
            assert_eq!(
                (&ra.key, &ra.headers, ra.timestamp),
                (&rb.key, &rb.headers, rb.timestamp),
                "fleet seq {s:?}"
            );
            assert!(a.complete && a.partitions == [0, 1], "{a:?}");
            // The mean's interval from the partitions' summed raw moments.
            assert!(
                a.statistics
                    .iter()
                    .any(|x| x.name == "mean" && x.half_width.is_some() && x.std.is_none()),
                "fleet seq {s:?}: no add-remove mean interval"
            );
            let public = |f: &proto::FleetRelease| {
                (
                    f.partitions.clone(),
                    f.group.clone(),
                    f.complete,
                    f.n,
                    f.padded,
                    f.first_event_time_ms,
                    f.last_event_time_ms,
                    f.released_at_ms,
                    f.guarantee.clone(),
                    f.statistics
                        .iter()
                        .map(|x| {
                            // An interval from one noise's exact
                            // distribution (it states its std) is public;
                            // one from the summed moments' box varies with
                            // them (post-processing): only its presence.
                            let public_width =
                                x.half_width
                                    .map(|h| if x.std.is_some() { h.to_bits() } else { 0 });
                            (x.name.clone(), x.values.len(), public_width, x.std)
                        })
                        .collect::<Vec<_>>(),
                    running_public(&f.running),
                )
            };
            // Running totals are added up where the partitions' lanes
            // started at the same seq (the same steps): in each run, the
            // record carries them exactly then.
            for (f, first) in [(a, &first_a), (b, &first_b)] {
                let starts: BTreeSet<u64> = (0..2).map(|p| first[&(s.0.clone(), p)]).collect();
                assert_eq!(
                    !f.running.is_empty(),
                    starts.len() == 1,
                    "fleet seq {s:?}: {starts:?}"
                );
                if let Some(&start) = starts.iter().next().filter(|_| starts.len() == 1) {
                    steps.check(&format!("fleet {}", s.0), s.1, start, &f.running);
                }
            }
            if a.running.is_empty() != b.running.is_empty() {
                // One run's partitions started apart: nothing to compare.
                let (mut a, mut b) = (a.clone(), b.clone());
                a.running.clear();
                b.running.clear();
                assert_eq!(
                    public(&a),
                    public(&b),
                    "fleet seq {s:?}: published fields differ"
                );
                continue;
            }
            assert_eq!(
                public(a),
                public(b),
                "fleet seq {s:?}: published fields differ"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
