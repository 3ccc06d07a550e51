//! Tune the BLT strategies tabled in `dp::continual` (d = 4 buffers) for
//! lifetimes 2¹⁰ … 2²⁴ windows and print them with their loss against the
//! square-root factorization and the binary tree at the same lifetime.
//!
//! `cargo run --release -p fleetdp-dp --features tuner --example tune_blt`

use fleetdp_dp::continual::{baseline, tune};

fn main() {
    println!("// (log2 lifetime, θ, ω); loss vs sqrt factorization, vs plain Gaussian tree");
    for l in (10..=24).step_by(2) {
        let t = 1u64 << l;
        let b = tune(4, t);
        let (loss, sqrt, tree) = (
            b.loss(t),
            baseline::sqrt_factorization(t),
            baseline::gaussian_tree(t, false),
        );
        println!(
            "    ({l}, {:?}, {:?}), // std ×{:.4} of sqrt, tree/BLT std {:.2}",
            b.theta(),
            b.omega(),
            (loss / sqrt).sqrt(),
            (tree / loss).sqrt()
        );
    }
}
