//! The stream-level privacy check (docs/DESIGN.md §7): privacy over whole
//! neighbouring *streams*, not one window at a time.
//!
//! Small streams (three devices, universe {0, 1, 2}, horizons of 4 ms,
//! event times crossing horizon boundaries, in and out of order, with
//! late, ahead-of-time, out-of-order and capped readings) run through the real windowing, caps,
//! padding, published-field rules and exact measurements (noise off). For
//! every stream and neighbour under the relation — change-one: one device's
//! values changed; add-remove: one device's readings removed, or a new
//! device's readings inserted at any positions — it asserts, on one input
//! partition and on two (devices split between them, their readings
//! interleaved, each partition's lanes its own):
//!
//! (a) every published field without noise (which windows exist, their
//!     seq, offsets, event span, `n`, padding, release time) is identical;
//! (b) for the device that differs: every window whose measurements differ
//!     holds its readings and is charged to it; each measurement moves by
//!     at most the sensitivity it is calibrated to (L1 and L2; L∞ of
//!     quantile utilities, joint or not); every window holding its
//!     readings of horizon `h` is charged to `h`; and at most `W` windows
//!     are charged to any horizon. With (a), a device's loss over the whole stream is then at
//!     most `W` windows' spend per horizon — what the accountant charges.
//! (c) every window is charged to devices of its own partition only, so a
//!     device's caps are counted in one lane.
//!
//! A control shows the check is not vacuous: count windows under add-remove
//! (what FleetDP did before time windows) fail it.

use fleetdp::dp::accountant::Budget;
use fleetdp::dp::mechanism::Measure;
use fleetdp::dp::relation::Relation;
use fleetdp::dp::release::{plan, PrivacySpec, StatKind, StreamPlan, StreamSpec};
use fleetdp::{device_key, Admission, PublishedWindow, StreamRules, Windower};
use num_traits::ToPrimitive;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

const HORIZON: i64 = 4;
const LATENESS: i64 = 1;
const END: i64 = 64;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    device: u8,
    value: i64,
    event: i64,
    /// The message's (broker) timestamp: its arrival, nondecreasing.
    msg: i64,
}

#[derive(Debug, Clone, Copy)]
enum Windows {
    Count { n: usize, timeout: Option<i64> },
    Time { len: i64 },
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    relation: Relation,
    k: u32,
    w: u32,
    windows: Windows,
    /// Input partitions: device `d` is read on partition `d mod partitions`.
    partitions: i32,
}

/// One released window: published fields, exact measurements, charges.
type Released = (PublishedWindow, Vec<Vec<i128>>, Vec<(u64, i64)>);

/// A window: its input partition and seq.
type WindowId = (i32, u64);

/// What one run publishes and what it charged.
#[derive(Debug)]
struct Run {
    /// Window → what was released.
    windows: BTreeMap<WindowId, Released>,
    /// (device key, horizon) → windows holding its readings of it.
    holds: BTreeMap<(u64, i64), BTreeSet<WindowId>>,
}

/// The input partition device `d` is read on.
fn partition_of(d: u8, partitions: i32) -> i32 {
    i32::from(d) % partitions
}

fn device(d: u8) -> u64 {
    device_key(&format!("dev-{d}"))
}

fn stream_plan(relation: Relation) -> StreamPlan {
    let spec = StreamSpec {
        name: "s".into(),
        lower: 0.0,
        upper: 2.0,
        resolution: 1.0,
        window_size: if relation == Relation::ChangeOne {
            3
        } else {
            0
        },
        window_ms: (relation == Relation::AddRemove).then_some(1),
        max_readings_per_device: 2,
        max_windows_per_device: 2,
        budget_share: 1.0,
        statistics: vec![
            StatKind::Count,
            StatKind::Sum,
            StatKind::Mean,
            StatKind::Variance,
            StatKind::Histogram,
            StatKind::Quantiles,
            StatKind::Clamped,
        ],
        histogram_edges: vec![0.0, 1.0, 2.0],
        // Change-one: two levels released jointly (crate::joint's utility).
        quantiles: match relation {
            Relation::ChangeOne => vec![0.5, 0.9],
            Relation::AddRemove => vec![0.5],
        },
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: relation == Relation::ChangeOne,
        target_error: vec![],
        window_timeout_ms: None,
        running_share: 0.0,
        running_lifetime: 1 << 24,
        device_alarm_share: 0.0,
        groups: None,
    };
    let privacy = PrivacySpec {
        relation,
        budget: Budget {
            measure: Measure::Pure,
            per_horizon: 1.0,
            delta: 0.0,
        },
    };
    plan(&privacy, &[spec]).unwrap().streams.remove(0)
}

/// The measurements scale with `k` in the plan: recompute per `k` from the
/// plan's `k = 2` calibration (sensitivities are linear in `k`).
fn sensitivities(p: &StreamPlan, k: u32) -> Vec<(f64, f64)> {
    (0..p.measurements.len())
        .map(|i| {
            let s = p.calibrated_to(i);
            let f = k as f64 / 2.0;
            (
                s.l1.to_f64().unwrap() * f,
                s.l2_sq.to_f64().unwrap() * f * f,
            )
        })
        .collect()
}

fn run(setup: Setup, p: &StreamPlan, stream: &[Reading]) -> Run {
    let (window_size, timeout_ms, window_ms) = match setup.windows {
        Windows::Count { n, timeout } => (n, timeout, None),
        Windows::Time { len } => (0, None, Some(len)),
    };
    let rules = StreamRules {
        name: "s".into(),
        window_size,
        max_readings_per_device: setup.k,
        max_windows_per_device: setup.w,
        midpoint: 1,
        timeout_ms,
        window_ms,
        count_devices: false,
        group: None,
    };
    let mut win = Windower::new(vec![rules], HORIZON, LATENESS);
    if window_ms.is_some() {
        for p in 0..setup.partitions {
            win.start_time_lanes(p, 0);
        }
    }
    let mut closed = Vec::new();
    let mut holds: BTreeMap<(u64, i64), BTreeSet<WindowId>> = BTreeMap::new();
    for (offset, r) in stream.iter().enumerate() {
        let dk = device(r.device);
        let partition = partition_of(r.device, setup.partitions);
        // Offsets rise within each partition (one count for all is enough).
        let a = win.admit(
            0,
            partition,
            offset as i64,
            dk,
            r.value,
            r.event,
            r.msg,
            &mut closed,
        );
        if a == Admission::Accepted {
            holds
                .entry((dk, r.event.div_euclid(HORIZON)))
                .or_default()
                .insert((partition, win.last_accepted_seq()));
        }
        if window_ms.is_some() {
            // Every message up to this one has been handled, on every
            // partition; each partition's releases go to its own output.
            win.close_due(r.msg, |_| r.msg, |p| p, usize::MAX, &mut closed);
        }
    }
    if window_ms.is_some() {
        win.close_due(END, |_| END, |p| p, usize::MAX, &mut closed);
    }
    let windows = closed
        .into_iter()
        .map(|w| {
            (
                (w.partition, w.seq),
                (
                    w.published(LATENESS),
                    p.exact_measurements(&w.values),
                    w.charges.clone(),
                ),
            )
        })
        .collect();
    Run { windows, holds }
}

/// Checks (a) and (b) for `device` between a run where it is present (or
/// changed) and its neighbour.
fn check(
    setup: Setup,
    p: &StreamPlan,
    with: &[Reading],
    without: &[Reading],
    who: u8,
) -> Result<(), String> {
    assert_eq!(p.neighbouring.relation, setup.relation);
    let (a, b) = (run(setup, p, with), run(setup, p, without));
    let meta =
        |r: &Run| -> Vec<PublishedWindow> { r.windows.values().map(|w| w.0.clone()).collect() };
    if meta(&a) != meta(&b) {
        return Err(format!(
            "(a) published fields differ:\n{:?}\nvs\n{:?}",
            meta(&a),
            meta(&b)
        ));
    }
    let dk = device(who);
    let sens = sensitivities(p, setup.k);
    for run in [&a, &b] {
        // Each partition's lanes are its own: a window holds (and is
        // charged to) devices of its partition only, so each device's caps
        // are counted in one place.
        for ((partition, seq), (_, _, charges)) in &run.windows {
            let strays: Vec<u8> = (0..=3u8)
                .filter(|&d| partition_of(d, setup.partitions) != *partition)
                .filter(|&d| charges.iter().any(|c| c.0 == device(d)))
                .collect();
            if !strays.is_empty() {
                return Err(format!(
                    "(c) window {seq} of partition {partition} is charged to devices {strays:?} of another partition"
                ));
            }
        }
        for ((d, h), seqs) in &run.holds {
            if *d != dk {
                continue;
            }
            for s in seqs {
                if let Some((_, _, charges)) = run.windows.get(s) {
                    if !charges.contains(&(dk, *h)) {
                        return Err(format!(
                            "(b) window {s:?} holds the device's readings of horizon {h} but is not charged to it: {charges:?}"
                        ));
                    }
                }
            }
        }
        let mut per_horizon: BTreeMap<i64, u32> = BTreeMap::new();
        for (_, _, charges) in run.windows.values() {
            for h in charges
                .iter()
                .filter(|c| c.0 == dk)
                .map(|c| c.1)
                .collect::<BTreeSet<_>>()
            {
                *per_horizon.entry(h).or_default() += 1;
            }
        }
        if let Some((h, n)) = per_horizon.iter().find(|(_, n)| **n > setup.w) {
            return Err(format!(
                "(b) {n} windows charged to horizon {h}, W = {}",
                setup.w
            ));
        }
    }
    for (seq, (_, ma, ca)) in &a.windows {
        let (_, mb, cb) = &b.windows[seq];
        let charged = ca.iter().chain(cb).any(|c| c.0 == dk);
        for (i, (x, y)) in ma.iter().zip(mb).enumerate() {
            let quantile = p.measurements[i].measurement.candidates().is_some();
            let diffs: Vec<f64> = x.iter().zip(y).map(|(u, v)| (u - v).abs() as f64).collect();
            if diffs.iter().all(|d| *d == 0.0) {
                continue;
            }
            if !charged {
                return Err(format!(
                    "(b) window {seq:?}: measurement {} differs but the device is not charged in it",
                    p.measurements[i].measurement.name()
                ));
            }
            let (l1, l2_sq) = sens[i];
            let (d1, d2) = if quantile {
                let m = diffs.iter().cloned().fold(0.0, f64::max);
                (m, m * m)
            } else {
                (diffs.iter().sum(), diffs.iter().map(|d| d * d).sum())
            };
            if d1 > l1 + 1e-9 || d2 > l2_sq + 1e-9 {
                return Err(format!(
                    "(b) window {seq:?}: {} moved by L1 {d1} / L2² {d2} > sensitivity {l1} / {l2_sq}",
                    p.measurements[i].measurement.name()
                ));
            }
        }
    }
    Ok(())
}

/// A random stream in arrival order: nondecreasing message timestamps,
/// event times around them (some late, some ahead), crossing horizons.
fn random_stream(rng: &mut ChaCha8Rng, len: usize, devices: u8) -> Vec<Reading> {
    let mut msg = 0;
    (0..len)
        .map(|_| {
            msg += rng.gen_range(0..=2);
            Reading {
                device: rng.gen_range(0..devices),
                value: rng.gen_range(0..=2),
                event: (msg - rng.gen_range(-2..=3)).max(0),
                msg,
            }
        })
        .collect()
}

/// Change-one neighbours of `s`: one device's values reassigned.
fn change_one(rng: &mut ChaCha8Rng, s: &[Reading]) -> Vec<(Vec<Reading>, u8)> {
    let mut out = Vec::new();
    for d in s.iter().map(|r| r.device).collect::<BTreeSet<_>>() {
        for _ in 0..6 {
            let mut t = s.to_vec();
            for r in t.iter_mut().filter(|r| r.device == d) {
                r.value = rng.gen_range(0..=2);
            }
            if t != s {
                out.push((t, d));
            }
        }
    }
    out
}

/// Add-remove neighbours: each device removed, and a new device (3)
/// inserted with 1–3 readings at random positions (its message timestamps
/// fit the arrival order).
fn add_remove(rng: &mut ChaCha8Rng, s: &[Reading]) -> Vec<(Vec<Reading>, Vec<Reading>, u8)> {
    let mut out = Vec::new();
    for d in s.iter().map(|r| r.device).collect::<BTreeSet<_>>() {
        let without: Vec<Reading> = s.iter().copied().filter(|r| r.device != d).collect();
        out.push((s.to_vec(), without, d));
    }
    for _ in 0..8 {
        let mut with = s.to_vec();
        for _ in 0..rng.gen_range(1..=3) {
            let at = rng.gen_range(0..=with.len());
            let lo = if at == 0 { 0 } else { with[at - 1].msg };
            let hi = with.get(at).map_or(lo + 3, |r| r.msg);
            let msg = rng.gen_range(lo..=hi);
            with.insert(
                at,
                Reading {
                    device: 3,
                    value: rng.gen_range(0..=2),
                    event: (msg - rng.gen_range(-2..=3)).max(0),
                    msg,
                },
            );
        }
        out.push((with, s.to_vec(), 3));
    }
    out
}

fn setups(relation: Relation) -> Vec<Setup> {
    let windows: Vec<Windows> = match relation {
        Relation::ChangeOne => vec![
            Windows::Count {
                n: 2,
                timeout: None,
            },
            Windows::Count {
                n: 3,
                timeout: None,
            },
            Windows::Count {
                n: 3,
                timeout: Some(2),
            },
        ],
        Relation::AddRemove => vec![
            Windows::Time { len: 1 },
            Windows::Time { len: 2 },
            Windows::Time { len: 4 },
        ],
    };
    let mut out = Vec::new();
    for windows in windows {
        for k in [1, 2] {
            for w in [1, 2] {
                for partitions in [1, 2] {
                    out.push(Setup {
                        relation,
                        k,
                        w,
                        windows,
                        partitions,
                    });
                }
            }
        }
    }
    out
}

/// Pairs checked per relation, for the record (≥ 10⁵ each).
fn sweep(relation: Relation, streams: usize) -> usize {
    let p = stream_plan(relation);
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0012);
    let mut pairs = 0;
    for setup in setups(relation) {
        for _ in 0..streams {
            let len = rng.gen_range(1..=7);
            let s = random_stream(&mut rng, len, 3);
            let neighbours: Vec<(Vec<Reading>, Vec<Reading>, u8)> = match relation {
                Relation::ChangeOne => change_one(&mut rng, &s)
                    .into_iter()
                    .map(|(t, d)| (s.clone(), t, d))
                    .collect(),
                Relation::AddRemove => add_remove(&mut rng, &s),
            };
            for (with, without, d) in neighbours {
                if let Err(e) = check(setup, &p, &with, &without, d) {
                    panic!("{setup:?}\nstream {with:?}\nneighbour {without:?}\ndevice {d}: {e}");
                }
                pairs += 1;
            }
        }
    }
    pairs
}

#[test]
fn change_one_streams_keep_the_per_device_bound() {
    let pairs = sweep(Relation::ChangeOne, 750);
    assert!(pairs >= 100_000, "{pairs}");
}

#[test]
fn add_remove_streams_keep_the_per_device_bound() {
    let pairs = sweep(Relation::AddRemove, 750);
    assert!(pairs >= 100_000, "{pairs}");
}

/// The horizon repro, through the check: n = 2, k = 2, W = 1.
#[test]
fn the_horizon_straddling_repro_passes_the_check() {
    let p = stream_plan(Relation::ChangeOne);
    let setup = Setup {
        relation: Relation::ChangeOne,
        k: 2,
        w: 1,
        windows: Windows::Count {
            n: 2,
            timeout: None,
        },
        partitions: 1,
    };
    let r = |device, value, event| Reading {
        device,
        value,
        event,
        msg: event,
    };
    // A at 3 and 4 (horizons 0 and 1), A at 5, then B, C.
    let s = vec![
        r(0, 0, 3),
        r(0, 1, 4),
        r(0, 2, 5),
        r(1, 2, 5),
        r(2, 1, 6),
        r(1, 0, 7),
    ];
    let mut t = s.clone();
    for x in t.iter_mut().filter(|x| x.device == 0) {
        x.value = 2 - x.value;
    }
    check(setup, &p, &s, &t, 0).unwrap();
    let run = run(setup, &p, &s);
    assert!(
        run.windows[&(0, 0)].2.contains(&(device(0), 1)),
        "window 0 charged to horizon 1 too"
    );
}

/// The control: count windows under add-remove — one inserted reading
/// shifts every later window — are caught by the check.
#[test]
fn count_windows_under_add_remove_fail_the_check() {
    let p = stream_plan(Relation::AddRemove);
    let setup = Setup {
        relation: Relation::AddRemove,
        k: 1,
        w: 4,
        windows: Windows::Count {
            n: 2,
            timeout: None,
        },
        partitions: 1,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut failures = 0;
    for _ in 0..200 {
        let s = random_stream(&mut rng, 6, 3);
        for (with, without, d) in add_remove(&mut rng, &s) {
            failures += check(setup, &p, &with, &without, d).is_err() as usize;
        }
    }
    assert!(failures > 100, "{failures}");
}
