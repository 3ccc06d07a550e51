//! The bounds advisor's quality against ε: on raw (unclamped)
//! samples of the normal, long-tailed and bimodal shapes, how much of the
//! sample the proposed bounds cover and how wide they are beside the
//! narrowest range holding 99% of it — the AboveThreshold scans the command
//! uses beside *Programming Differential Privacy*'s noisy clipped sums (docs/DESIGN.md §10), same samples and ε.

use fleetdp_dp::advise::{advise, Advice, AdviseError, AdviseSpec};
use fleetdp_dp::advise_sums::advise_by_sums;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SAMPLE: usize = 10_000;
const SEEDS: u64 = 40;

fn draw(shape: &str, rng: &mut ChaCha8Rng) -> f64 {
    match shape {
        "normal" => super::gauss(rng, 22.0, 5.0),
        "long-tail" => 15.0 - 6.0 * rng.gen_range(f64::EPSILON..1.0f64).ln(),
        _ if rng.gen_bool(0.5) => super::gauss(rng, 5.0, 3.0),
        _ => super::gauss(rng, 35.0, 4.0),
    }
}

pub fn advisor_table() {
    println!("\nBounds advisor (fleetdp advise), {SAMPLE} readings (k = 1), {SEEDS} seeds per row, coverage target 99%:");
    println!("| data | ε | method | runs covering ≥ 99% | coverage p10 · p50 | width / central 99% range, p50 · p90 |");
    println!("|---|---|---|---|---|---|");
    type Method = fn(&mut ChaCha8Rng, &[f64], &AdviseSpec) -> Result<Advice, AdviseError>;
    let methods: [(&str, Method); 2] = [("scans", advise), ("clipped sums", advise_by_sums)];
    for shape in ["normal", "long-tail", "bimodal"] {
        for (eps, (method, run)) in [0.1, 0.5, 1.0, 2.0]
            .into_iter()
            .flat_map(|e| methods.iter().map(move |m| (e, m)))
        {
            let (mut covered, mut cov, mut width) = (0, Vec::new(), Vec::new());
            for seed in 0..SEEDS {
                let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + shape.len() as u64);
                let mut data: Vec<f64> = (0..SAMPLE).map(|_| draw(shape, &mut rng)).collect();
                let spec = AdviseSpec {
                    epsilon: eps,
                    max_readings_per_device: 1,
                    coverage: 0.99,
                };
                let a = run(&mut rng, &data, &spec).expect("valid");
                data.sort_by(f64::total_cmp);
                let inside = data
                    .iter()
                    .filter(|&&x| a.lower <= x && x <= a.upper)
                    .count();
                let share = inside as f64 / SAMPLE as f64;
                if share >= 0.99 {
                    covered += 1;
                }
                cov.push(share);
                let central = data[SAMPLE * 995 / 1000] - data[SAMPLE * 5 / 1000];
                width.push((a.upper - a.lower) / central);
            }
            println!(
                "| {shape} | {eps} | {method} | {covered} of {SEEDS} | {:.4} · {:.4} | {:.2} · {:.2} |",
                super::percentile(&cov, 0.1),
                super::percentile(&cov, 0.5),
                super::percentile(&width, 0.5),
                super::percentile(&width, 0.9)
            );
        }
    }
}
