//! Device churn: memory of the per-device counts when every horizon brings
//! a new set of device ids (a fleet with rotating ids, or random ids from a
//! buggy producer). Runs the windower alone, no broker.
//!
//! Per horizon it prints the devices counted, the counts' bytes per device
//! and the process's resident memory (now and peak); at the end the worst
//! bytes per device and, as a baseline measured in the same run, what a
//! general hash map of the same devices' unpacked counts takes. The table
//! keeps the size its largest device count of the last horizon needed (it
//! does not shrink right after a sweep, to regrow at once), so bytes per
//! device are measured against that count: the most devices counted in
//! the last horizon's worth of readings.
//!
//! A second part (in a child process, so its peak memory is its own)
//! restores a lane's counts from state records as a restart does — 10⁶
//! devices charged in 24 windows each, records of 40,000 charges — and
//! prints the peak memory against the restored table's.
//!
//!   cargo bench -p fleetdp --bench churn
//! FLEETDP_CHURN_DEVICES (default 10⁶ per horizon) and FLEETDP_CHURN_HORIZONS
//! (default 12) change the size.

#[path = "pipeline/target.rs"]
mod target;

use fleetdp::{Admission, StreamRules, Windower};
use std::collections::HashMap;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident memory now and its peak (kB), from /proc.
fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Restore a lane from generated state records, one at a time; print the
/// memory figures (the child process's part).
fn restore_part() {
    let devices = env("FLEETDP_CHURN_DEVICES", 1_000_000);
    const WINDOWS: u64 = 240;
    const PER_WINDOW: u64 = 100_000;
    const PER_RECORD: u64 = fleetdp::MAX_CHARGES_PER_RECORD as u64;
    let rules = StreamRules {
        name: "restore".into(),
        window_size: PER_WINDOW as usize,
        max_readings_per_device: 1,
        max_windows_per_device: 24,
        midpoint: 0,
        timeout_ms: None,
        window_ms: None,
        count_devices: false,
        group: None,
    };
    let mut w = Windower::new(vec![rules], 3_600_000, 60_000);
    let (start, _) = rss_kb();
    let started = std::time::Instant::now();
    // Sized as restore sizes it: from its first pass's estimate.
    let mut sketch = fleetdp::state::Distinct::default();
    (0..devices).for_each(|d| sketch.add(splitmix(d)));
    let mut r = w.restorer(0, sketch.estimate() as usize);
    let records = PER_WINDOW.div_ceil(PER_RECORD) as u32;
    for seq in 0..WINDOWS {
        for rec in 0..records as u64 {
            let from = rec * PER_RECORD;
            let charges: Vec<(u64, i64)> = (from..(from + PER_RECORD).min(PER_WINDOW))
                .map(|j| (splitmix((seq * PER_WINDOW + j) % devices), 0))
                .collect();
            r.add(seq, records, &charges);
        }
    }
    w.install_restored(0, 0, r);
    let took = started.elapsed();
    let (steady, peak) = rss_kb();
    let (n, bytes) = w
        .lane_devices()
        .fold((0, 0), |(n, b), (_, d, by)| (n + d, b + by));
    println!(
        "restore: {n} devices from {} records of ≤ {PER_RECORD} charges in {:.2} s; table {:.1} \
         MiB ({:.1} B/device); RSS above start: {:.1} MiB restored, {:.1} MiB at peak ({:.2}×)",
        WINDOWS * records as u64,
        took.as_secs_f64(),
        bytes as f64 / 1048576.0,
        bytes as f64 / n as f64,
        (steady - start) as f64 / 1024.0,
        (peak - start) as f64 / 1024.0,
        (peak - start) as f64 / (steady - start).max(1) as f64
    );
}

fn main() {
    if std::env::var_os("FLEETDP_CHURN_RESTORE_PART").is_some() {
        return restore_part();
    }
    let child = std::process::Command::new(std::env::current_exe().expect("this bench"))
        .env("FLEETDP_CHURN_RESTORE_PART", "1")
        .status();
    assert!(child.is_ok_and(|s| s.success()), "the restore part failed");
    let per_horizon = env("FLEETDP_CHURN_DEVICES", 1_000_000);
    let horizons = env("FLEETDP_CHURN_HORIZONS", 12) as i64;
    const HORIZON_MS: i64 = 3_600_000;
    let rules = StreamRules {
        name: "churn".into(),
        window_size: 10_000,
        max_readings_per_device: 1,
        max_windows_per_device: 4,
        midpoint: 0,
        timeout_ms: None,
        window_ms: None,
        count_devices: false,
        group: None,
    };
    let mut w = Windower::new(vec![rules], HORIZON_MS, 60_000);
    let mut closed = Vec::new();
    let (rss_start, _) = rss_kb();
    println!("{per_horizon} new device ids per horizon, {horizons} horizons, one lane");
    println!("horizon  devices  bytes/device  RSS MiB  peak RSS MiB");
    let mut worst = 0.0f64;
    let mut at_end = 0.0f64;
    // Devices counted at the last samples, one horizon's worth of them.
    let mut recent: std::collections::VecDeque<usize> = Default::default();
    let samples_per_horizon = (per_horizon / 100_000).max(1) as usize;
    let started = std::time::Instant::now();
    let mut offset = 0i64;
    for h in 0..horizons {
        for d in 0..per_horizon {
            let key = splitmix((h as u64) << 40 | d);
            let event = h * HORIZON_MS + (d as i64 * HORIZON_MS) / per_horizon as i64;
            let a = w.admit(0, 0, offset, key, 1, event, event, &mut closed);
            assert_eq!(a, Admission::Accepted, "reading {offset}");
            offset += 1;
            closed.clear();
            if d % 100_000 == 0 {
                let (devices, bytes) = w
                    .lane_devices()
                    .fold((0, 0), |(n, b), (_, d, by)| (n + d, b + by));
                recent.push_back(devices);
                if recent.len() > samples_per_horizon + 1 {
                    recent.pop_front();
                }
                let most = recent.iter().copied().max().unwrap_or(0);
                if most > 10_000 {
                    worst = worst.max(bytes as f64 / most as f64);
                }
            }
        }
        let (devices, bytes) = w
            .lane_devices()
            .fold((0, 0), |(n, b), (_, d, by)| (n + d, b + by));
        let (rss, peak) = rss_kb();
        at_end = at_end.max(bytes as f64 / devices as f64);
        println!(
            "{h:>7}  {devices:>7}  {:>12.1}  {:>7.1}  {:>12.1}",
            bytes as f64 / devices as f64,
            rss as f64 / 1024.0,
            peak as f64 / 1024.0
        );
    }
    let took = started.elapsed();
    let (_, peak) = rss_kb();
    // Baseline: the same number of devices in a general hash map of
    // unpacked counts (key, horizon, windows, in-window count, last seq).
    let live = w.lane_devices().map(|(_, d, _)| d).sum::<usize>();
    let mut baseline: HashMap<u64, (i64, u32, u32, u64)> = HashMap::new();
    for i in 0..live as u64 {
        baseline.insert(splitmix(i), (0, 0, 0, 0));
    }
    let entry = std::mem::size_of::<(u64, (i64, u32, u32, u64))>() + 1;
    let baseline_bytes = baseline.capacity() * entry;
    println!(
        "worst bytes per device: {worst:.1}, sampled every 10⁵ readings (growing holds 50 for \
         a moment, which the peak RSS includes); baseline std HashMap of unpacked counts: \
         {:.1} B per device ({:.2}× our worst)",
        baseline_bytes as f64 / live as f64,
        baseline_bytes as f64 / (live as f64 * worst.max(1.0))
    );
    target::line(
        "memory per device at a horizon's end",
        &format!("{at_end:.1} B"),
        "≤ 32 B",
        at_end <= 32.0,
    );
    println!(
        "peak RSS {:.1} MiB (start {:.1} MiB); {:.0} ns per reading",
        peak as f64 / 1024.0,
        rss_start as f64 / 1024.0,
        took.as_nanos() as f64 / offset as f64
    );
}
