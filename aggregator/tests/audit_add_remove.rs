//! Statistical audit of add-remove over whole streams (docs/DESIGN.md §3):
//! the audit shape that found the shifted-window leak, run through the real
//! windower (time windows) and release. Neighbouring streams differ by one
//! extra device reading of the universe's top value, arriving before a
//! block of windows whose readings alternate high and low between windows.
//! Per side, `RUNS` independent blocks (keyed noise, a new seq each).
//!
//! Asserted: every published field without noise is identical on both
//! sides; the Clopper–Pearson lower bound on ε (Bonferroni-corrected over
//! each family of threshold events) stays within what is charged: for the
//! window holding the device, the stated spend of its statistic; for the
//! next window, which it does not touch, nothing; for the block's signed
//! sum, the device's budget per horizon. Running totals (a second test):
//! the running count and sum after the block, each within its stated spend,
//! their public fields identical on both sides.

#[path = "../dp/tests/common/mod.rs"]
mod common;

use common::{cp_lower, cp_upper};
use fleetdp::dp::accountant::Budget;
use fleetdp::dp::continual::RunningState;
use fleetdp::dp::mechanism::Measure;
use fleetdp::dp::relation::Relation;
use fleetdp::dp::release::{plan, PrivacySpec, StatKind, StreamPlan, StreamSpec};
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::{device_key, ClosedWindow, PublishedWindow, StreamRules, Windower};

const RUNS: u64 = 200_000;
const ALPHA: f64 = 0.05;
const BLOCK: u64 = 4;
const LEN: i64 = 10;
const BUDGET: f64 = 2.0;

fn stream() -> StreamPlan {
    stream_with(0.0)
}

/// The audited stream with `running_share` of its budget on running totals
/// (tuned for one block).
fn stream_with(running_share: f64) -> StreamPlan {
    let spec = StreamSpec {
        name: "audit".into(),
        lower: 0.0,
        upper: 10.0,
        resolution: 1.0,
        window_size: 0,
        window_ms: Some(10),
        max_readings_per_device: 1,
        max_windows_per_device: 1,
        budget_share: 1.0,
        statistics: vec![StatKind::Count, StatKind::Sum],
        histogram_edges: vec![],
        quantiles: vec![],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        running_share,
        running_lifetime: BLOCK,
        device_alarm_share: 0.0,
        groups: None,
    };
    let privacy = PrivacySpec {
        relation: Relation::AddRemove,
        budget: Budget {
            measure: Measure::Pure,
            per_horizon: BUDGET,
            delta: 0.0,
        },
    };
    plan(&privacy, &[spec]).unwrap().streams.remove(0)
}

/// One block of run `run`: per window (published fields, released sum);
/// `extra` adds the neighbour's device before the block.
fn block(s: &StreamPlan, key: &ReleaseKey, run: u64, extra: bool) -> Vec<(PublishedWindow, f64)> {
    closed_block(run, extra)
        .iter()
        .map(|c| {
            let stats = s.release(key, 0, c.seq, &c.values);
            let sum = stats.iter().find(|x| x.name == "sum").unwrap().values[0];
            (c.published(0), sum)
        })
        .collect()
}

/// The windows of run `run`'s block, through the windower.
fn closed_block(run: u64, extra: bool) -> Vec<ClosedWindow> {
    let rules = StreamRules {
        name: "audit".into(),
        window_size: 0,
        max_readings_per_device: 1,
        max_windows_per_device: 1,
        midpoint: 5,
        timeout_ms: None,
        window_ms: Some(LEN),
        count_devices: false,
        group: None,
    };
    // A horizon per block: every block is a fresh stretch of time.
    let horizon = LEN * BLOCK as i64;
    let t0 = run as i64 * horizon;
    let mut w = Windower::new(vec![rules], horizon, 0);
    w.start_time_lanes(0, t0);
    let mut closed = Vec::new();
    let mut offset = 0;
    if extra {
        w.admit(0, 0, offset, device_key("extra"), 10, t0, t0, &mut closed);
        offset += 1;
    }
    for i in 0..BLOCK as i64 {
        let value = if i % 2 == 0 { 10 } else { 0 };
        for d in 0..10 {
            let t = t0 + i * LEN + d;
            w.admit(
                0,
                0,
                offset,
                device_key(&format!("d{i}-{d}")),
                value,
                t,
                t,
                &mut closed,
            );
            offset += 1;
        }
    }
    let end = t0 + horizon;
    w.close_due(end, |_| end, |_| 0, usize::MAX, &mut closed);
    assert_eq!(closed.len() as u64, BLOCK);
    closed
}

/// Largest Clopper–Pearson lower bound on ε over threshold events of `x`
/// vs `y` (both directions), and the stated spend it is compared with.
fn epsilon_lower_bound(x: &[f64], y: &[f64]) -> f64 {
    let mut all: Vec<f64> = x.iter().chain(y).copied().collect();
    all.sort_by(f64::total_cmp);
    let thresholds: Vec<f64> = (1..40).map(|i| all[i * all.len() / 40]).collect();
    let a = ALPHA / (4.0 * thresholds.len() as f64);
    let n = x.len() as u64;
    let mut best = f64::MIN;
    for t in thresholds {
        let cx = x.iter().filter(|v| **v >= t).count() as u64;
        let cy = y.iter().filter(|v| **v >= t).count() as u64;
        for (p, q) in [(cx, cy), (cy, cx), (n - cx, n - cy), (n - cy, n - cx)] {
            if q > 0 {
                best = best.max((cp_lower(p, n, a) / cp_upper(q, n, a)).ln());
            }
        }
    }
    best
}

#[test]
fn add_remove_over_a_block_of_windows_stays_within_its_charge() {
    let s = stream();
    let spent_sum = s.describe().iter().find(|x| x.name == "sum").unwrap().spent;
    let (ka, kb) = (
        ReleaseKey::from_bytes([21; 32]),
        ReleaseKey::from_bytes([22; 32]),
    );
    let mut with: Vec<Vec<f64>> = vec![Vec::new(); BLOCK as usize + 1];
    let mut without = with.clone();
    for run in 0..RUNS {
        let a = block(&s, &ka, run, true);
        let b = block(&s, &kb, run, false);
        let (ma, mb): (Vec<_>, Vec<_>) = (
            a.iter().map(|x| x.0.clone()).collect(),
            b.iter().map(|x| x.0.clone()).collect(),
        );
        assert_eq!(ma, mb, "published fields differ between neighbours");
        for (i, ((_, x), (_, y))) in a.iter().zip(&b).enumerate() {
            with[i].push(*x);
            without[i].push(*y);
        }
        let signed = |v: &[(PublishedWindow, f64)]| {
            v.iter()
                .enumerate()
                .map(|(i, (_, x))| if i % 2 == 0 { *x } else { -*x })
                .sum::<f64>()
        };
        with[BLOCK as usize].push(signed(&a));
        without[BLOCK as usize].push(signed(&b));
    }
    let holding = epsilon_lower_bound(&with[0], &without[0]);
    let next = epsilon_lower_bound(&with[1], &without[1]);
    let signed = epsilon_lower_bound(&with[BLOCK as usize], &without[BLOCK as usize]);
    println!(
        "add-remove audit: window holding the device {holding:.3} (stated {spent_sum}), \
         next window {next:.3} (stated 0), signed block sum {signed:.3} (budget {BUDGET})"
    );
    assert!(holding <= spent_sum, "{holding} > {spent_sum}");
    assert!(next <= 0.05, "a window without the device leaks: {next}");
    assert!(signed <= BUDGET, "{signed} > {BUDGET}");
    // Not vacuous: the window holding the device is distinguishable.
    assert!(holding > 0.3, "{holding}");
}

/// Running totals under add-remove through the windower and the release
/// path: after the block (the device's window and three more), the noisy
/// running count and sum each stay within their stated spend; every public
/// field of the totals (steps, the count field, std, mechanism, spend) is
/// the same on both sides.
#[test]
fn add_remove_running_totals_stay_within_their_charge() {
    let s = stream_with(0.5);
    let running = s.running.as_ref().unwrap();
    let (ka, kb) = (
        ReleaseKey::from_bytes([23; 32]),
        ReleaseKey::from_bytes([24; 32]),
    );
    let totals = |key: &ReleaseKey, run: u64, extra: bool| {
        let mut state = RunningState::new(running);
        let mut last = Vec::new();
        for c in closed_block(run, extra) {
            last = s
                .running_step(key, 0, c.seq, &c.values, &mut state)
                .unwrap();
        }
        last
    };
    let names = ["sum", "count"];
    let (mut with, mut without) = (vec![Vec::new(); 2], vec![Vec::new(); 2]);
    for run in 0..RUNS / 2 {
        let (a, b) = (totals(&ka, run, true), totals(&kb, run, false));
        let public = |ts: &[fleetdp::dp::release::RunningValue]| {
            ts.iter()
                .map(|t| {
                    (
                        t.name,
                        t.windows,
                        t.count,
                        t.std.to_bits(),
                        t.mechanism,
                        t.spent.to_bits(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            public(&a),
            public(&b),
            "published fields differ between neighbours"
        );
        for (i, name) in names.iter().enumerate() {
            let value = |ts: &[fleetdp::dp::release::RunningValue]| {
                ts.iter().find(|t| t.name == *name).unwrap().values[0]
            };
            with[i].push(value(&a));
            without[i].push(value(&b));
        }
    }
    for (i, name) in names.iter().enumerate() {
        let stated = running.groups.iter().find(|g| g.name == *name).unwrap();
        let stated = fleetdp::dp::rational::to_f64(&stated.spent);
        let bound = epsilon_lower_bound(&with[i], &without[i]);
        println!("add-remove running {name} audit: {bound:.3} (stated {stated})");
        assert!(bound <= stated, "running {name}: {bound} > {stated}");
        // Not vacuous: the device's reading shows in its totals.
        assert!(bound > 0.02, "running {name}: {bound}");
    }
}
