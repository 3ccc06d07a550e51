//! Group-by throughput and memory, in process: 10⁶ devices, one stream
//! grouped by three dimensions (model × region × firmware, 504 groups with
//! each dimension's `other`), beside the same stream without groups,
//! measured in the same run:
//!
//! - readings/s through decode → group → bound → window → release, the
//!   groups found in a 10⁶-device registry (the DashMap the registry topic
//!   fills, copied into the loop's replica) or in each reading's labels;
//! - bytes per device, counted by this binary's allocator: the registry's
//!   rows, and what the processor holds per device (lane counts, group
//!   table and, in the registry case, its replica of the rows, whose slots
//!   keep each device's window state);
//! - the registry case again with that state in the windows' tables
//!   (`registry-tables`: what the service did before), to show what the
//!   slots bring.
//!
//! Target: the registry-grouped case ≥ 0.9× the single-group readings/s
//! (a `TARGET` line with this run's verdict). The
//! labels case is also shown beside the same labelled messages read by the
//! stream without `group_by` (what carrying labels costs, apart from what
//! grouping costs).
//!
//!   cargo bench -p fleetdp --bench groups
//! FLEETDP_GROUPS_DEVICES (default 10⁶) and FLEETDP_GROUPS_READINGS
//! (default 3·10⁶) change the size, FLEETDP_GROUPS_ROUNDS (default 3) how
//! many times every case runs: figures are each case's best round, and the
//! ratios also as the median of the ratios within a round (the cases of a
//! round run back to back, so a slow spell of a shared machine shows on
//! both sides of it).

#[path = "pipeline/target.rs"]
mod target;

use fleetdp::config::{Config, Validated};
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::registry::Registry;
use fleetdp::telemetry::Counters;
use fleetdp::Processor;
use prost::Message as _;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Bytes currently allocated (the allocator below keeps it).
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: forwards every call to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l` (the caller's contract).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc`, passed on unchanged.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const MODELS: usize = 6;
const REGIONS: usize = 7;
const FIRMWARES: usize = 8;

fn config(grouped: bool) -> Validated {
    let list = |p: &str, n: usize| {
        (0..n)
            .map(|i| format!("\"{p}{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let group = if grouped {
        "group_by = [\"model\", \"region\", \"firmware\"]\nmax_groups_per_device = 2\n"
    } else {
        ""
    };
    let text = format!(
        r#"
[kafka]
brokers = "unused"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
[dimensions]
model = [{}]
region = [{}]
firmware = [{}]
[[stream]]
name = "temp"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 1000
max_windows_per_device = 1000
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, 0, 20, 40, 85]
quantiles = [0.5, 0.9]
{group}"#,
        list("m", MODELS),
        list("r", REGIONS),
        list("f", FIRMWARES)
    );
    Config::parse(&text).unwrap().validate().unwrap()
}

/// Device `i`'s attributes.
fn attributes(i: usize) -> [(String, String); 3] {
    [
        ("firmware".into(), format!("f{}", (i / 42) % FIRMWARES)),
        ("model".into(), format!("m{}", i % MODELS)),
        ("region".into(), format!("r{}", (i / 6) % REGIONS)),
    ]
}

/// Protobuf readings, device by device round-robin; with `labels`, each
/// carries its device's attributes.
fn readings(devices: usize, n: usize, labels: bool) -> Vec<Vec<u8>> {
    (0..n)
        .map(|j| {
            let i = j % devices;
            proto::DeviceReading {
                device_id: format!("dev-{i:07}"),
                stream: "temp".into(),
                value: Some(20.0 + (j % 100) as f64 / 10.0),
                event_time_ms: Some(1_795_541_400_000 + j as i64),
                labels: if labels {
                    attributes(i).into_iter().collect()
                } else {
                    Default::default()
                },
            }
            .encode_to_vec()
        })
        .collect()
}

/// Readings/s, windows released, and the bytes the processor holds after.
/// `hosting` false: every device's window state in the windows' tables,
/// none in its replica slot (the registry case before slots kept it).
fn run(
    v: &Validated,
    registry: Option<Arc<Registry>>,
    msgs: &[Vec<u8>],
    hosting: bool,
) -> (f64, u64, isize) {
    let key = ReleaseKey::from_bytes([1; 32]);
    let before = live();
    let mut p = Processor::new(v, Arc::new(Counters::default()));
    if let Some(r) = registry {
        p = p.with_registry(r);
    }
    if !hosting {
        p = p.without_hosting();
    }
    let (mut closed, mut windows, mut sink) = (Vec::new(), 0u64, 0.0);
    let t = Instant::now();
    // As the service's consuming loop: each message is prepared (decoded,
    // its devices' or registry rows' slots prefetched)
    // `PREPARE_AHEAD` messages before it is applied.
    for (i, m) in msgs.iter().enumerate() {
        p.prepare(0, i as i64, m, None, None).expect("valid");
        if i >= fleetdp::PREPARE_AHEAD {
            p.apply(&mut closed).expect("valid");
        }
        if i % 64 == 0 {
            p.flush_counters_busy();
        }
        for w in closed.drain(..) {
            let r = v.plan.streams[w.stream].release(&key, w.partition, w.seq, &w.values);
            sink += r[0].values[0];
            windows += 1;
        }
    }
    for _ in 0..fleetdp::PREPARE_AHEAD.min(msgs.len()) {
        p.apply(&mut closed).expect("valid");
    }
    p.flush_counters();
    let rate = msgs.len() as f64 / t.elapsed().as_secs_f64();
    std::hint::black_box(sink);
    let held = live() - before;
    drop(p);
    (rate, windows, held)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let devices = env("FLEETDP_GROUPS_DEVICES", 1_000_000);
    let n = env("FLEETDP_GROUPS_READINGS", 3_000_000);
    let (flat, grouped) = (config(false), config(true));
    println!(
        "FleetDP group-by benchmark: {devices} devices, {n} readings of one stream, {} groups (model × region × firmware, each with `other`), G = 2, n = 1000 per window",
        grouped.plan.streams.len()
    );
    let before = live();
    let registry = Arc::new(Registry::new(grouped.grouped_dimensions(), devices));
    for i in 0..devices {
        let row = serde_json::to_vec(&serde_json::Map::from_iter(
            attributes(i)
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v))),
        ))
        .unwrap();
        registry
            .apply(Some(format!("dev-{i:07}").as_bytes()), Some(&row))
            .unwrap();
    }
    let registry_bytes = (live() - before) as f64 / devices as f64;
    let plain = readings(devices, n, false);
    let labelled = readings(devices, n, true);
    let best = |xs: &[(f64, u64, isize)]| xs.iter().map(|x| x.0).fold(0.0, f64::max);
    let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut e = Vec::new();
    // FLEETDP_GROUPS_ONLY=single|registry|registry-tables|labels|
    // single-labelled runs one case (profiling).
    let only = std::env::var("FLEETDP_GROUPS_ONLY").unwrap_or_default();
    let rounds = env("FLEETDP_GROUPS_ROUNDS", 3).max(1);
    let on = |case: &str| only.is_empty() || only == case;
    for _ in 0..rounds {
        if on("single") {
            a.push(run(&flat, None, &plain, true));
        }
        if on("registry") {
            b.push(run(&grouped, Some(registry.clone()), &plain, true));
        }
        if on("registry-tables") {
            e.push(run(&grouped, Some(registry.clone()), &plain, false));
        }
        if on("labels") {
            c.push(run(&grouped, None, &labelled, true));
        }
        if on("single-labelled") {
            d.push(run(&flat, None, &labelled, true));
        }
    }
    if !only.is_empty() {
        let cases = [
            ("single", &a),
            ("registry", &b),
            ("registry-tables", &e),
            ("labels", &c),
            ("single-labelled", &d),
        ];
        for (case, xs) in cases {
            if !xs.is_empty() {
                println!("{case}: {:.0} readings/s", best(xs));
            }
        }
        return;
    }
    let (ra, rb, rc, rd) = (best(&a), best(&b), best(&c), best(&d));
    // Each round runs every case back to back: the ratio within a round is
    // paired in time, so a slow spell of a shared machine moves both sides.
    let paired = |xs: &[(f64, u64, isize)]| {
        let mut r: Vec<f64> = xs.iter().zip(&a).map(|(x, s)| x.0 / s.0).collect();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 2], r[0], r[r.len() - 1])
    };
    let per = |x: isize| x as f64 / devices as f64;
    println!(
        "single group (no group_by):          {ra:>12.0} readings/s, {:>6} windows, {:>6.1} bytes/device of window state",
        a[0].1,
        per(a[0].2)
    );
    println!(
        "504 groups, registry (replica):      {rb:>12.0} readings/s, {:>6} windows, {:>6.1} bytes/device of window state and replica ({:.2}× single)",
        b[0].1,
        per(b[0].2),
        rb / ra
    );
    target::line(
        "in process, 504 registry groups / one group",
        &format!("{:.2}×", rb / ra),
        "≥ 0.9×",
        rb / ra >= 0.9,
    );
    println!(
        "504 groups, registry, state in tables:{:>12.0} readings/s, {:>6} windows, {:>6.1} bytes/device (each device's window state in the lanes' and group tables, not in its replica slot: {:.2}× single)",
        best(&e),
        e[0].1,
        per(e[0].2),
        best(&e) / ra
    );
    println!(
        "504 groups, labels on each reading:  {rc:>12.0} readings/s, {:>6} windows, {:>6.1} bytes/device of window state ({:.2}× single; {:.2}× the same labelled messages without group_by)",
        c[0].1,
        per(c[0].2),
        rc / ra,
        rc / rd
    );
    println!(
        "single group, the labelled messages: {rd:>12.0} readings/s (labels decoded, not used: what carrying them costs without group_by)"
    );
    println!("registry: {registry_bytes:.1} bytes/device ({devices} rows of 3 attributes)");
    for (case, xs) in [("registry", &b), ("registry-tables", &e), ("labels", &c)] {
        let (median, lo, hi) = paired(xs);
        println!(
            "{case} / single within each of {rounds} rounds: median {median:.2}× (range {lo:.2}–{hi:.2})"
        );
    }
}
