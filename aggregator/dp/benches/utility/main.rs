//! The `utility` bench: FleetDP's accuracy beside OpenDP 0.16's on identical
//! data, in the same run. Each row is one statistic alone at ε per window
//! (pure DP, k = 1, one window per device), one neighbouring relation, one
//! data shape: 300 windows of n = 1000 readings on [-40, 85] °C at 0.1.
//! Errors are |released − true| (histograms: L1 over the bins; quantiles:
//! the distance to the window's exact quantile interval). Columns: FleetDP
//! (declared candidates), FleetDP with `adaptive_quantiles`, OpenDP, and the
//! closed form of FleetDP's own noise (Laplace: median b·ln 2, p90 b·ln 10)
//! where one exists, and FleetDP's mean error over OpenDP's with the
//! z-score of their difference (declared candidates for quantiles, like for
//! like): z > 3 is worse beyond sampling noise. A last table shows the
//! running sum beside the summed windows and their combination.
//!
//! Run: `cargo bench -p fleetdp-dp --bench utility`. OpenDP is installed
//! from PyPI into `.tools/opendp-venv` on the first run (or set
//! `FLEETDP_OPENDP_PYTHON` to an interpreter that has it); without it the
//! FleetDP columns are printed alone. `FLEETDP_UTILITY_WINDOWS` changes the
//! number of windows per shape.

mod advisor;
mod local;

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::continual::RunningState;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PrivacySpec, QuantileTrack, StatKind, StreamPlan, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::Command;

const N: usize = 1000;
const LOWER: f64 = -40.0;
const UPPER: f64 = 85.0;
const RES: f64 = 0.1;
const EDGES: [f64; 7] = [-40.0, 0.0, 10.0, 20.0, 30.0, 40.0, 85.0];
const EPSILONS: [f64; 3] = [0.1, 0.5, 1.0];
const SHAPES: [&str; 4] = ["normal", "long-tail", "bimodal", "jump"];
const STATS: [&str; 5] = ["mean", "sum", "histogram", "p50", "p90"];
const OPENDP: &str = "opendp==0.16.0";

fn gauss(rng: &mut impl Rng, mean: f64, sd: f64) -> f64 {
    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
    mean + sd * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// `windows` windows of `N` readings of a shape, in grid units.
fn shape(name: &str, windows: usize) -> Vec<Vec<i64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(name.len() as u64 * 7919);
    (0..windows)
        .map(|t| {
            (0..N)
                .map(|_| {
                    let x = match name {
                        "normal" => gauss(&mut rng, 22.0, 5.0),
                        // 15 °C plus an exponential tail of mean 6 °C.
                        "long-tail" => 15.0 - 6.0 * rng.gen_range(f64::EPSILON..1.0f64).ln(),
                        // Half the readings on one value (as midpoint padding makes).
                        "atom" if rng.gen_bool(0.5) => 20.0,
                        "atom" => gauss(&mut rng, 22.0, 5.0),
                        "bimodal" if rng.gen_bool(0.5) => gauss(&mut rng, 5.0, 3.0),
                        "bimodal" => gauss(&mut rng, 35.0, 4.0),
                        // The mean jumps by 30 °C half-way.
                        _ if t < windows / 2 => gauss(&mut rng, 22.0, 5.0),
                        _ => gauss(&mut rng, 52.0, 5.0),
                    };
                    ((x / RES).round() as i64).clamp((LOWER / RES) as i64, (UPPER / RES) as i64)
                })
                .collect()
        })
        .collect()
}

fn spec(stat: &str, relation: Relation, adaptive: bool, running: bool) -> StreamSpec {
    let joint = stat == "p50+p90 joint";
    let (statistics, quantiles) = match stat {
        "mean" => (vec![StatKind::Mean], vec![]),
        "sum" => (vec![StatKind::Sum], vec![]),
        "histogram" => (vec![StatKind::Histogram], vec![]),
        "p50" => (vec![StatKind::Quantiles], vec![0.5]),
        "p50+p90" | "p50+p90 joint" => (vec![StatKind::Quantiles], vec![0.5, 0.9]),
        _ => (vec![StatKind::Quantiles], vec![0.9]),
    };
    let change_one = relation == Relation::ChangeOne;
    StreamSpec {
        name: "cabin_temp_c".into(),
        lower: LOWER,
        upper: UPPER,
        resolution: RES,
        window_size: if change_one { N as u64 } else { 0 },
        window_ms: (!change_one).then_some(300_000),
        max_readings_per_device: 1,
        max_windows_per_device: 1,
        budget_share: 1.0,
        histogram_edges: if stat == "histogram" {
            EDGES.to_vec()
        } else {
            vec![]
        },
        statistics,
        quantiles,
        quantile_candidates: None,
        adaptive_quantiles: adaptive,
        joint_quantiles: joint,
        target_error: vec![],
        window_timeout_ms: None,
        running_share: if running { 0.5 } else { 0.0 },
        running_lifetime: 1 << 10,
        device_alarm_share: 0.0,
        groups: None,
    }
}

fn stream(stat: &str, relation: Relation, eps: f64, adaptive: bool) -> StreamPlan {
    let privacy = PrivacySpec {
        relation,
        budget: Budget {
            measure: Measure::Pure,
            per_horizon: eps,
            delta: 0.0,
        },
    };
    plan(&privacy, &[spec(stat, relation, adaptive, false)])
        .expect("the bench's streams plan")
        .streams
        .remove(0)
}

/// The error of a released value against a window (units).
fn error(stat: &str, released: &[f64], window: &[i64]) -> f64 {
    let xs: Vec<f64> = window.iter().map(|&u| u as f64 * RES).collect();
    match stat {
        "mean" => (released[0] - xs.iter().sum::<f64>() / xs.len() as f64).abs(),
        "sum" => (released[0] - xs.iter().sum::<f64>()).abs(),
        "histogram" => {
            let mut counts = [0f64; EDGES.len() - 1];
            for &x in &xs {
                let bin = EDGES[1..EDGES.len() - 1]
                    .iter()
                    .position(|&e| x < e - RES / 2.0)
                    .unwrap_or(EDGES.len() - 2);
                counts[bin] += 1.0;
            }
            counts
                .iter()
                .zip(released)
                .map(|(c, r)| (c - r).abs())
                .sum()
        }
        _ => {
            let q = if stat == "p50" { 0.5 } else { 0.9 };
            let mut s = xs;
            s.sort_by(f64::total_cmp);
            let qn = q * s.len() as f64;
            let lo = s[(qn.ceil() as usize).max(1) - 1];
            let hi = s[(qn.floor() as usize).min(s.len() - 1)];
            (lo - released[0]).max(released[0] - hi).max(0.0)
        }
    }
}

/// Mean and its standard error.
fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, (var / n).sqrt())
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() as f64 * p).ceil() as usize).clamp(1, s.len()) - 1]
}

struct Case {
    stat: &'static str,
    relation: Relation,
    eps: f64,
    shape: &'static str,
}

/// FleetDP's releases of one case (adaptive: quantile track carried window
/// to window) and the Laplace scale it reports.
fn fleetdp(c: &Case, windows: &[Vec<i64>], adaptive: bool) -> (Vec<Vec<f64>>, f64) {
    let s = stream(c.stat, c.relation, c.eps, adaptive);
    let key = ReleaseKey::from_bytes([5; 32]);
    let mut track = QuantileTrack::default();
    let mut scale = f64::NAN;
    let out = windows
        .iter()
        .enumerate()
        .map(|(t, w)| {
            let r = s.release_after(&key, 0, t as u64, w, &track);
            s.track_step(&key, 0, t as u64, w, &mut track);
            scale = r[0].scale;
            r[0].values.clone()
        })
        .collect();
    (out, scale)
}

fn opendp_python(root: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FLEETDP_OPENDP_PYTHON") {
        return Some(p.into());
    }
    let venv = root.join(".tools/opendp-venv");
    let python = venv.join("bin/python");
    let has = |p: &Path| {
        Command::new(p)
            .args(["-c", "import opendp"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.exists() && has(&python) {
        return Some(python);
    }
    eprintln!("installing {OPENDP} from PyPI into {}", venv.display());
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", OPENDP])
            .status()
            .is_ok_and(|s| s.success());
    (ok && has(&python)).then_some(python)
}

/// OpenDP's releases of every case, from the Python side in the same run.
fn opendp(root: &Path, cases: &[Case], shapes: &[Vec<Vec<i64>>]) -> Option<Vec<Vec<Vec<f64>>>> {
    let python = opendp_python(root)?;
    let dir = std::env::temp_dir().join(format!("fleetdp-utility-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let (job, out) = (dir.join("job.json"), dir.join("out.json"));
    let floats: serde_json::Map<String, serde_json::Value> = SHAPES
        .iter()
        .zip(shapes)
        .map(|(name, ws)| {
            let ws: Vec<Vec<f64>> = ws
                .iter()
                .map(|w| {
                    w.iter()
                        .map(|&u| (u as f64 * RES * 10.0).round() / 10.0)
                        .collect()
                })
                .collect();
            (name.to_string(), serde_json::json!(ws))
        })
        .collect();
    let cases_json: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "statistic": c.stat,
                "relation": c.relation.to_string(),
                "epsilon": c.eps,
                "shape": c.shape,
                "level": if c.stat == "p50" { 0.5 } else { 0.9 },
            })
        })
        .collect();
    let body = serde_json::json!({
        "lower": LOWER, "upper": UPPER, "resolution": RES, "n": N, "edges": EDGES,
        "shapes": floats, "cases": cases_json,
    });
    std::fs::write(&job, serde_json::to_vec(&body).ok()?).ok()?;
    let script = root.join("aggregator/dp/benches/utility/opendp_side.py");
    let status = Command::new(python)
        .arg(script)
        .arg(&job)
        .arg(&out)
        .status()
        .ok()?;
    let parsed: Option<Vec<serde_json::Value>> = status
        .success()
        .then(|| serde_json::from_slice(&std::fs::read(&out).ok()?).ok())
        .flatten();
    let _ = std::fs::remove_dir_all(&dir);
    parsed?
        .into_iter()
        .map(|case| serde_json::from_value(case["values"].clone()).ok())
        .collect()
}

fn main() {
    // FLEETDP_UTILITY_ONLY=advisor: the advisor's table alone.
    if std::env::var("FLEETDP_UTILITY_ONLY").as_deref() == Ok("advisor") {
        advisor::advisor_table();
        return;
    }
    if std::env::var("FLEETDP_UTILITY_ONLY").as_deref() == Ok("local") {
        let shapes: Vec<Vec<Vec<i64>>> = SHAPES.iter().map(|s| shape(s, 300)).collect();
        local::ptr_table(&shapes);
        local::aggregate_table(&shapes);
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    let windows: usize = std::env::var("FLEETDP_UTILITY_WINDOWS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(300);
    let shapes: Vec<Vec<Vec<i64>>> = SHAPES.iter().map(|s| shape(s, windows)).collect();
    let mut cases = Vec::new();
    for stat in STATS {
        for relation in [Relation::ChangeOne, Relation::AddRemove] {
            for eps in EPSILONS {
                for shape in SHAPES {
                    // OpenDP has no mean over unsized data.
                    if !(stat == "mean" && relation == Relation::AddRemove) {
                        cases.push(Case {
                            stat,
                            relation,
                            eps,
                            shape,
                        });
                    }
                }
            }
        }
    }
    let theirs = opendp(&root, &cases, &shapes);
    if theirs.is_none() {
        eprintln!("OpenDP is not available: printing FleetDP's columns alone");
    }
    println!("| statistic | relation | ε | data | FleetDP p50 · p90 | adaptive p50 · p90 | OpenDP p50 · p90 | closed form p50 · p90 | mean error vs OpenDP's (z) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut worse = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let ws = &shapes[SHAPES.iter().position(|s| *s == c.shape).unwrap()];
        let errors = |released: &[Vec<f64>]| -> Vec<f64> {
            released
                .iter()
                .zip(ws)
                .map(|(r, w)| error(c.stat, r, w))
                .collect()
        };
        let pair = |e: &[f64]| format!("{:.3} · {:.3}", percentile(e, 0.5), percentile(e, 0.9));
        let (ours, scale) = fleetdp(c, ws, false);
        let ours = errors(&ours);
        let quantile = c.stat.starts_with('p');
        let adaptive = quantile.then(|| errors(&fleetdp(c, ws, true).0));
        let other = theirs.as_ref().map(|t| errors(&t[i]));
        let closed = matches!(c.stat, "mean" | "sum");
        // Mean |error| against OpenDP's: ratio and z-score of the
        // difference (declared candidates for quantiles: like for like).
        let z = other.as_ref().map(|o| {
            let (a, b) = (mean_se(&ours), mean_se(o));
            (
                a.0 / b.0.max(1e-12),
                (a.0 - b.0) / (a.1 * a.1 + b.1 * b.1).sqrt().max(1e-12),
            )
        });
        if z.is_some_and(|(_, z)| z > 3.0) {
            worse.push(i);
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.stat,
            c.relation,
            c.eps,
            c.shape,
            pair(&ours),
            adaptive.as_deref().map_or("—".into(), pair),
            other.as_deref().map_or("—".into(), pair),
            if closed {
                format!("{:.3} · {:.3}", scale * 2f64.ln(), scale * 10f64.ln())
            } else {
                "—".into()
            },
            z.map_or("—".into(), |(r, z)| format!("{r:.2}× ({z:+.1})")),
        );
    }
    if theirs.is_some() {
        println!(
            "\nrows where FleetDP's mean error exceeds OpenDP's beyond sampling noise (z > 3): {} of {}",
            worse.len(),
            cases.len()
        );
    }
    running_table(&shapes[0]);
    joint_table(&shapes);
    local::ptr_table(&shapes);
    local::aggregate_table(&shapes);
    advisor::advisor_table();
}

/// Two levels (p50, p90) at ε per window under change-one: FleetDP's split
/// (ε/2 per level) beside `joint_quantiles` (one selection at ε), each on
/// the declared and the adaptive candidates. Errors per level.
fn joint_table(shapes: &[Vec<Vec<i64>>]) {
    println!("\nTwo quantile levels at ε per window, change-one (errors of the p50 · of the p90, each median / p90 over windows):");
    println!(
        "| ε | data | split, declared | split, adaptive | joint, declared | joint, adaptive |"
    );
    println!("|---|---|---|---|---|---|");
    let key = ReleaseKey::from_bytes([8; 32]);
    // And a shape with an atom, where the joint selection's gap counts fail.
    let atom = shape("atom", shapes[0].len());
    let all: Vec<(&str, &Vec<Vec<i64>>)> = SHAPES
        .iter()
        .copied()
        .zip(shapes)
        .chain([("atom", &atom)])
        .collect();
    for eps in EPSILONS {
        for &(shape, ws) in &all {
            let run = |stat: &str, adaptive: bool| -> String {
                let s = stream(stat, Relation::ChangeOne, eps, adaptive);
                let mut track = QuantileTrack::default();
                let released: Vec<Vec<f64>> = ws
                    .iter()
                    .enumerate()
                    .map(|(t, w)| {
                        let r = s.release_after(&key, 0, t as u64, w, &track);
                        s.track_step(&key, 0, t as u64, w, &mut track);
                        r.iter().map(|q| q.values[0]).collect()
                    })
                    .collect();
                ["p50", "p90"]
                    .iter()
                    .enumerate()
                    .map(|(l, stat)| {
                        let e: Vec<f64> = released
                            .iter()
                            .zip(ws)
                            .map(|(r, w)| error(stat, &r[l..=l], w))
                            .collect();
                        format!("{:.1} / {:.1}", percentile(&e, 0.5), percentile(&e, 0.9))
                    })
                    .collect::<Vec<_>>()
                    .join(" · ")
            };
            println!(
                "| {eps} | {shape} | {} | {} | {} | {} |",
                run("p50+p90", false),
                run("p50+p90", true),
                run("p50+p90 joint", false),
                run("p50+p90 joint", true)
            );
        }
    }
}

/// The running sum (change-one, ε = 1, half the budget on the running
/// total) beside the sum of the windows' released sums and their
/// inverse-variance combination: each one's std, at several points.
fn running_table(windows: &[Vec<i64>]) {
    let privacy = PrivacySpec {
        relation: Relation::ChangeOne,
        budget: Budget {
            measure: Measure::Pure,
            per_horizon: 1.0,
            delta: 0.0,
        },
    };
    let s = plan(&privacy, &[spec("sum", Relation::ChangeOne, false, true)])
        .expect("plans")
        .streams
        .remove(0);
    let key = ReleaseKey::from_bytes([6; 32]);
    let mut state = RunningState::default();
    println!(
        "\nRunning sum (normal data, change-one, ε = 1 per window, half on the running total):"
    );
    println!("| windows | tree std | summed windows std | combined std | combined ≤ min |");
    println!("|---|---|---|---|---|");
    for (t, w) in windows.iter().enumerate() {
        let r = s
            .running_step(&key, 0, t as u64, w, &mut state)
            .expect("a running total");
        let t = t + 1;
        if [1, 2, 5, 10, 30, 100, 300, 1000].contains(&t) {
            let v = &r[0];
            let (summed, combined) = (v.summed.unwrap().1, v.combined.unwrap().1);
            println!(
                "| {t} | {:.1} | {summed:.1} | {combined:.1} | {} |",
                v.std,
                combined <= v.std.min(summed) + 1e-9
            );
        }
    }
}
