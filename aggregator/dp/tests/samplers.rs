//! Goodness of fit of the exact samplers against their exact distributions:
//! chi-square on ≥ 10⁶ draws each, fixed seeds.

mod common;

use common::chi_square_p;
use fleetdp_dp::rational::exact;
use fleetdp_dp::sampler::{bernoulli, bernoulli_exp, DiscreteGaussian, DiscreteLaplace};
use num_bigint::BigUint;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

const DRAWS: usize = 1_000_000;
/// Fixed seeds make the tests deterministic; a correct sampler passes at any
/// seed with probability 1 − P_MIN.
const P_MIN: f64 = 1e-4;

fn laplace_p(scale: f64, pmf_scale: f64, seed: u64) -> f64 {
    let d = DiscreteLaplace::new(&exact(scale));
    let reference = DiscreteLaplace::new(&exact(pmf_scale));
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let samples: Vec<i128> = (0..DRAWS).map(|_| d.sample(&mut rng)).collect();
    let m = (40.0 * pmf_scale).ceil() as i128 + 5;
    chi_square_p(&samples, |x| reference.pmf(x), (-m, m), 200.0)
}

fn gaussian_p(sigma2: f64, pmf_sigma2: f64, seed: u64) -> f64 {
    let g = DiscreteGaussian::new(&exact(sigma2));
    let reference = DiscreteGaussian::new(&exact(pmf_sigma2));
    let norm = reference.normaliser();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let samples: Vec<i128> = (0..DRAWS).map(|_| g.sample(&mut rng)).collect();
    let m = (12.0 * pmf_sigma2.sqrt()).ceil() as i128 + 5;
    chi_square_p(&samples, |x| reference.weight(x) / norm, (-m, m), 200.0)
}

#[test]
fn discrete_laplace_below_one() {
    let p = laplace_p(0.4, 0.4, 1);
    assert!(p > P_MIN, "p = {p}");
}

#[test]
fn discrete_laplace_near_ten() {
    let p = laplace_p(10.0, 10.0, 2);
    assert!(p > P_MIN, "p = {p}");
}

#[test]
fn discrete_laplace_above_thousand() {
    let p = laplace_p(2500.0, 2500.0, 3);
    assert!(p > P_MIN, "p = {p}");
}

#[test]
fn discrete_laplace_with_a_fractional_scale() {
    let p = laplace_p(10.0 / 3.0, 10.0 / 3.0, 4);
    assert!(p > P_MIN, "p = {p}");
}

#[test]
fn discrete_gaussian_sigma_below_one() {
    let p = gaussian_p(0.5, 0.5, 5);
    assert!(p > P_MIN, "p = {p}");
}

#[test]
fn discrete_gaussian_sigma_above_hundred() {
    let p = gaussian_p(150.0 * 150.0, 150.0 * 150.0, 6);
    assert!(p > P_MIN, "p = {p}");
}

#[test]
fn discrete_gaussian_fractional_variance() {
    let p = gaussian_p(12.345, 12.345, 7);
    assert!(p > P_MIN, "p = {p}");
}

/// The test can fail: a 5% wrong scale is rejected.
#[test]
fn a_wrong_scale_is_rejected() {
    assert!(laplace_p(10.5, 10.0, 8) < 1e-6);
    assert!(gaussian_p(105.0, 100.0, 9) < 1e-6);
}

#[test]
fn bernoulli_exp_minus_gamma() {
    // γ = num/den, including 0, fractions, 1 and values above 1.
    for (num, den) in [(0u64, 1u64), (1, 3), (1, 1), (7, 4), (27, 10), (5, 1)] {
        let mut rng = ChaCha20Rng::seed_from_u64(num * 1000 + den);
        let p = (-(num as f64) / den as f64).exp();
        let fast = (0..DRAWS)
            .filter(|_| bernoulli_exp(&mut rng, &(num as u128), &(den as u128)))
            .count();
        let big = (0..DRAWS)
            .filter(|_| bernoulli_exp(&mut rng, &BigUint::from(num), &BigUint::from(den)))
            .count();
        for hits in [fast, big] {
            // Two-cell chi-square, 1 dof: |z| < 4 ⇔ p-value > 6e-5.
            let sd = (DRAWS as f64 * p * (1.0 - p)).sqrt().max(1e-9);
            let z = (hits as f64 - DRAWS as f64 * p) / sd;
            assert!(
                z.abs() < 4.0 || (p == 1.0 && hits == DRAWS),
                "γ={num}/{den}: z = {z}"
            );
        }
    }
}

#[test]
fn bernoulli_rational() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let hits = (0..DRAWS)
        .filter(|_| bernoulli(&mut rng, &3u128, &7u128))
        .count();
    let p = 3.0 / 7.0;
    let z = (hits as f64 - DRAWS as f64 * p) / (DRAWS as f64 * p * (1.0 - p)).sqrt();
    assert!(z.abs() < 4.0, "z = {z}");
}
