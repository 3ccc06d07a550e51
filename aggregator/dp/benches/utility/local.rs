//! The local-sensitivity methods of *Programming Differential Privacy* (docs/DESIGN.md §10) beside the defaults, same windows.
//!
//! Propose-test-release's median beside the default (the exponential
//! mechanism over candidates, `quantiles = [0.5]`), same windows, same total
//! ε (PTR: ε/2 to test, ε/2 to release, δ = 10⁻⁶; change-one, k = 1), and
//! how often PTR refuses (a refusal is scored as releasing the universe's
//! midpoint, which is what a consumer without a value would fall back to),
//! and the smooth-sensitivity release at the same total ε and δ.

use super::{error, fleetdp, percentile, Case, LOWER, RES, SHAPES, UPPER};
use fleetdp_dp::local::ptr_median;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::smooth::smooth_median;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// PTR's proposed bound on the local sensitivity, grid units (0.5 °C).
const B: i64 = 5;

pub fn ptr_table(shapes: &[Vec<Vec<i64>>]) {
    println!("\nMedian per window, change-one, same total ε: default (exponential mechanism) beside propose-test-release (b = 0.5 °C, δ = 10⁻⁶) and smooth sensitivity (δ = 10⁻⁶); errors p50 · p90 over windows, °C:");
    println!("| ε | data | default | PTR | PTR refused | smooth sensitivity |");
    println!("|---|---|---|---|---|---|");
    let (lo, hi) = ((LOWER / RES) as i64, (UPPER / RES) as i64);
    for eps in [0.1, 0.5, 1.0] {
        for (shape, ws) in SHAPES.iter().zip(shapes).take(3) {
            let c = Case {
                stat: "p50",
                relation: Relation::ChangeOne,
                eps,
                shape,
            };
            let ours: Vec<f64> = fleetdp(&c, ws, false)
                .0
                .iter()
                .zip(ws)
                .map(|(r, w)| error("p50", r, w))
                .collect();
            let mut rng = ChaCha8Rng::seed_from_u64(17);
            let mut refused = 0;
            let ptr: Vec<f64> = ws
                .iter()
                .map(|w| {
                    let mut s = w.clone();
                    s.sort_unstable();
                    let v =
                        ptr_median(&mut rng, &s, lo, hi, B, eps / 2.0, 1e-6).unwrap_or_else(|| {
                            refused += 1;
                            (lo + hi) / 2
                        });
                    error("p50", &[v as f64 * RES], w)
                })
                .collect();
            let smooth: Vec<f64> = ws
                .iter()
                .map(|w| {
                    let mut s = w.clone();
                    s.sort_unstable();
                    let v = smooth_median(&mut rng, &s, lo, hi, eps, 1e-6);
                    error("p50", &[v as f64 * RES], w)
                })
                .collect();
            println!(
                "| {eps} | {shape} | {:.3} · {:.3} | {:.3} · {:.3} | {refused} of {} | {:.3} · {:.3} |",
                percentile(&ours, 0.5),
                percentile(&ours, 0.9),
                percentile(&ptr, 0.5),
                percentile(&ptr, 0.9),
                ws.len(),
                percentile(&smooth, 0.5),
                percentile(&smooth, 0.9),
            );
        }
    }
}

/// Sample-and-aggregate's trimmed mean (m = 20 blocks, 10% trimmed each
/// end) beside the default mean, same windows and ε (change-one, k = 1),
/// both scored against the window's mean.
pub fn aggregate_table(shapes: &[Vec<Vec<i64>>]) {
    use fleetdp_dp::aggregate::{estimates, release};
    println!("\nMean per window, change-one: default (Laplace, sensitivity (upper − lower)/n) beside sample-and-aggregate (trimmed mean on 20 blocks, 10% trim); errors against the window's mean, p50 · p90, °C:");
    println!("| ε | data | default | sample-and-aggregate |");
    println!("|---|---|---|---|");
    let (lo, hi) = ((LOWER / RES) as i64, (UPPER / RES) as i64);
    for eps in [0.1, 0.5, 1.0] {
        for (shape, ws) in SHAPES.iter().zip(shapes).take(3) {
            let c = Case {
                stat: "mean",
                relation: Relation::ChangeOne,
                eps,
                shape,
            };
            let ours: Vec<f64> = fleetdp(&c, ws, false)
                .0
                .iter()
                .zip(ws)
                .map(|(r, w)| error("mean", r, w))
                .collect();
            let mut rng = ChaCha8Rng::seed_from_u64(23);
            let sa: Vec<f64> = ws
                .iter()
                .map(|w| {
                    let mut blocks = vec![Vec::new(); 20];
                    for (i, &v) in w.iter().enumerate() {
                        blocks[i % 20].push(v);
                    }
                    let e = estimates(&mut blocks, 0.1, lo, hi);
                    let v = release(&mut rng, &e, lo, hi, eps);
                    error("mean", &[v as f64 * RES], w)
                })
                .collect();
            println!(
                "| {eps} | {shape} | {:.3} · {:.3} | {:.3} · {:.3} |",
                percentile(&ours, 0.5),
                percentile(&ours, 0.9),
                percentile(&sa, 0.5),
                percentile(&sa, 0.9),
            );
        }
    }
}
