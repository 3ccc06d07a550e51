//! Utility of running totals at equal privacy (zCDP, ρ the same for all,
//! event level: W = 1, unit sensitivity): the worst standard deviation of
//! the running total over T windows, closed form, for the BLT (this
//! service), the square-root factorization (the best Toeplitz, calibrated
//! for T only), the Gaussian binary tree with and without Honaker's
//! weights, and per-window releases summed. Ratios against the square-root
//! factorization and the plain tree are printed beside; a Monte-Carlo run
//! of the BLT's generator checks the closed form at T = 2¹⁰, and the cost of
//! one step is timed.
//!
//! Then the release path at 10⁶ windows per lane, change-one beside
//! add-remove (which adds a noisy running count): the cost of one window's
//! running step (its window estimates included) and the lane's state bytes
//! (the JSON its state record carries), both measures.
//!
//! `cargo bench -p fleetdp-dp --bench continual`. Targets at T = 2¹⁶: BLT
//! within 5% of the square-root factorization, ≥ 3× below the plain tree.

#[path = "../tests/common/mod.rs"]
mod common;

use fleetdp_dp::continual::{baseline, Blt, BltNoise, RunningState};
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, StatKind};
use fleetdp_dp::rng::ReleaseKey;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::time::Instant;

fn main() {
    // std in units of 1/√(2ρ) (sensitivity 1): √loss.
    println!(
        "{:>6} {:>9} {:>9} {:>11} {:>11} {:>11} {:>9} {:>11}",
        "T", "BLT", "sqrt", "tree", "tree+Hon.", "summed", "BLT/sqrt", "tree/BLT"
    );
    for l in [10u32, 16, 20] {
        let t = 1u64 << l;
        let blt = Blt::for_lifetime(l).loss(t).sqrt();
        let sqrt = baseline::sqrt_factorization(t).sqrt();
        let tree = baseline::gaussian_tree(t, false).sqrt();
        let honaker = baseline::gaussian_tree(t, true).sqrt();
        let summed = baseline::summed_windows(t).sqrt();
        println!(
            "{:>6} {blt:>9.3} {sqrt:>9.3} {tree:>11.3} {honaker:>11.3} {summed:>11.1} {:>9.4} {:>11.2}",
            format!("2^{l}"),
            blt / sqrt,
            tree / blt
        );
    }

    // Monte Carlo at T = 2^10 with Gaussian draws (Box–Muller), σ = 1.
    let b = Blt::for_lifetime(10);
    let t = 1usize << 10;
    let reps = 4000;
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut last = Vec::with_capacity(reps);
    let started = Instant::now();
    for _ in 0..reps {
        let mut s = BltNoise::new(b.buffers());
        let mut x = 0.0;
        for _ in 0..t {
            x = s.step(&b, normal(&mut rng));
        }
        last.push(x);
    }
    let per_step = started.elapsed().as_secs_f64() / (reps * t) as f64;
    let var = last.iter().map(|x| x * x).sum::<f64>() / reps as f64;
    println!(
        "\nMonte Carlo, T = 2^10, {reps} runs: variance of the last running total {var:.3} \
         vs closed form {:.3} (ratio {:.3}, ±{:.3} at 2 SE)",
        b.noise_energy(t as u64),
        var / b.noise_energy(t as u64),
        2.0 * (2.0 / reps as f64).sqrt()
    );
    println!(
        "one BLT step (d = 4, Gaussian draw included): {:.0} ns",
        per_step * 1e9
    );
    release_path();
}

/// Windows per lane in the release-path figures.
const LANE_WINDOWS: u64 = 1_000_000;

/// One lane's running totals through [`LANE_WINDOWS`] windows of 10
/// readings: (µs per window, state bytes at the end).
fn lane(relation: Relation, measure: Measure) -> (f64, usize) {
    let window_size = if relation == Relation::ChangeOne {
        10
    } else {
        0
    };
    let mut spec = common::stream_spec(
        (-20.0, 60.0, 0.1),
        window_size,
        vec![StatKind::Mean, StatKind::Histogram],
    );
    spec.max_windows_per_device = 24;
    spec.histogram_edges = vec![-20.0, 0.0, 20.0, 40.0, 60.0];
    spec.running_share = 0.5;
    spec.running_lifetime = LANE_WINDOWS;
    let privacy = common::privacy(relation, measure, 1.0);
    let planned = plan(&privacy, &[spec]).expect("plans");
    let stream = &planned.streams[0];
    let mut state = RunningState::new(stream.running.as_ref().expect("running totals"));
    let key = ReleaseKey::from_bytes([3; 32]);
    let values: Vec<i64> = (0..10).map(|i| 100 + 37 * i).collect();
    let started = Instant::now();
    for seq in 0..LANE_WINDOWS {
        stream
            .running_step(&key, 0, seq, &values, &mut state)
            .expect("within the lifetime");
    }
    let per_window = started.elapsed().as_secs_f64() / LANE_WINDOWS as f64;
    let bytes = serde_json::to_vec(&state).expect("serialises").len();
    (per_window * 1e6, bytes)
}

fn release_path() {
    println!(
        "\nrelease path, {LANE_WINDOWS} windows of 10 readings per lane (sum + 4-bin histogram):"
    );
    println!(
        "{:>6} {:>12} {:>14} {:>14} {:>12} {:>14}",
        "", "change-one", "", "add-remove", "", "add-rem./c-one"
    );
    println!(
        "{:>6} {:>12} {:>14} {:>14} {:>12} {:>14}",
        "", "µs/window", "state bytes", "µs/window", "state bytes", "time, bytes"
    );
    for measure in [Measure::Zcdp, Measure::Pure] {
        let (c_us, c_bytes) = lane(Relation::ChangeOne, measure);
        let (a_us, a_bytes) = lane(Relation::AddRemove, measure);
        println!(
            "{:>6} {c_us:>12.2} {c_bytes:>14} {a_us:>14.2} {a_bytes:>12} {:>7.2}, {:>5.2}",
            format!("{measure:?}"),
            a_us / c_us,
            a_bytes as f64 / c_bytes as f64
        );
    }
}

fn normal(rng: &mut ChaCha20Rng) -> f64 {
    use rand::Rng;
    let (u, v): (f64, f64) = (rng.gen::<f64>().max(f64::MIN_POSITIVE), rng.gen());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}
