//! The alarm's guarantee computed exactly: the distribution of "first
//! check that fires" (or none) over neighbouring count sequences.

use super::*;
use crate::rational::exact;

/// `P(X = x)` of the discrete Laplace with this scale.
fn pmf(scale: f64, x: i64) -> f64 {
    let r = (-1.0 / scale).exp();
    (1.0 - r) / (1.0 + r) * (-(x.unsigned_abs() as f64) / scale).exp()
}

/// `P(X ≥ x)` in closed form: `r^x/(1 + r)` for `x ≥ 1`, the complement
/// of `P(X ≥ 1 − x)` otherwise (`r = e^(−1/scale)`).
fn tail(scale: f64, x: i64) -> f64 {
    let r = (-1.0 / scale).exp();
    match x >= 1 {
        true => r.powi(x as i32) / (1.0 + r),
        false => 1.0 - r.powi((1 - x) as i32) / (1.0 + r),
    }
}

/// The exact output distribution of AboveThreshold with threshold 0:
/// entry `i` is "check `i` fires first", the last entry "none fires".
fn outcomes(counts: &[i64], (t_scale, c_scale): (f64, f64)) -> Vec<f64> {
    let reach = (80.0 * t_scale) as i64;
    let mut out = vec![0.0; counts.len() + 1];
    for rho in -reach..=reach {
        let p_rho = pmf(t_scale, rho);
        let mut below = 1.0;
        for (i, c) in counts.iter().enumerate() {
            let fire = tail(c_scale, rho - c);
            out[i] += p_rho * below * fire;
            below *= 1.0 - fire;
        }
        out[counts.len()] += p_rho * below;
    }
    out
}

/// The largest `ln(P/P')` over every outcome and every pair of count
/// sequences (three checks, counts in −3..=3) that differ by at most one
/// at each check.
fn worst_loss(scales: (f64, f64)) -> f64 {
    let seqs: Vec<Vec<i64>> = (0..7 * 7 * 7)
        .map(|i| vec![i % 7 - 3, (i / 7) % 7 - 3, i / 49 - 3])
        .collect();
    let mut worst: f64 = 0.0;
    for c in &seqs {
        let p = outcomes(c, scales);
        for d in 0..27 {
            let shift = [d % 3 - 1, (d / 3) % 3 - 1, d / 9 - 1];
            let c2: Vec<i64> = c.iter().zip(shift).map(|(a, s)| a + s).collect();
            let q = outcomes(&c2, scales);
            for (a, b) in p.iter().zip(&q) {
                worst = worst.max((a / b).ln());
            }
        }
    }
    worst
}

#[test]
fn the_first_answer_is_eps_dp_exactly() {
    for eps in [0.5, 1.0, 2.0] {
        let loss = worst_loss((2.0 / eps, 4.0 / eps));
        assert!(loss <= eps * (1.0 + 1e-9), "ε = {eps}: loss {loss}");
        assert!(
            loss > eps / 4.0,
            "ε = {eps}: the pairs reach the bound ({loss})"
        );
    }
}

#[test]
fn the_exact_check_fails_with_too_little_check_noise() {
    // ν at the threshold's scale instead of twice it: the halting answer
    // leaks more than ε.
    let eps = 1.0;
    let loss = worst_loss((2.0 / eps, 1.0 / eps));
    assert!(loss > eps * 1.05, "loss {loss}");
}

#[test]
fn calibration_spends_the_budget_in_two_instances() {
    let pure = AlarmPlan::calibrate(Measure::Pure, &exact(0.02));
    assert!((pure.epsilon - 0.01).abs() < 1e-15);
    let (t, c) = pure.scales();
    assert!((200.0..200.0 * (1.0 + 1e-9)).contains(&t), "{t}");
    assert!((400.0..400.0 * (1.0 + 1e-9)).contains(&c), "{c}");
    // zCDP: ρ = 2 · ε²/2.
    let z = AlarmPlan::calibrate(Measure::Zcdp, &exact(0.0002));
    assert!((z.epsilon * z.epsilon - 0.0002).abs() < 1e-15);
    assert_eq!(AlarmPlan::threshold(1000), 900);
    // configuration.md: at ε = 0.01 one check fires with 99% probability
    // about 1,700 devices above the threshold.
    let m = AlarmPlan::calibrate(Measure::Pure, &exact(0.02)).margin_for(0.99);
    assert!((1600..1800).contains(&m), "{m}");
    assert_eq!(AlarmPlan::threshold(11), 10);
}

#[test]
fn far_above_fires_far_below_does_not_and_checks_repeat() {
    let key = ReleaseKey::from_bytes(core::array::from_fn(|i| i as u8 * 7 + 1));
    let plan = AlarmPlan::calibrate(Measure::Pure, &exact(2.0));
    let lane = ("s", 0);
    let fired = |count| {
        (0..200)
            .filter(|&seq| plan.fires(&key, lane, 5, seq, count, 1000))
            .count()
    };
    // ε = 1: scales 2 and 4; 100 away is 25 check scales.
    assert_eq!(fired(1100), 200);
    assert_eq!(fired(900), 0);
    let near = fired(1000);
    assert!((50..150).contains(&near), "{near}");
    // Keyed: the same check gives the same answer; another horizon's
    // threshold is another draw.
    assert_eq!(
        plan.fires(&key, lane, 5, 7, 1000, 1000),
        plan.fires(&key, lane, 5, 7, 1000, 1000)
    );
}

#[test]
fn the_margin_is_where_one_check_fires_with_the_asked_odds() {
    let key = ReleaseKey::from_bytes(core::array::from_fn(|i| i as u8 * 13 + 5));
    let plan = AlarmPlan::calibrate(Measure::Pure, &exact(0.5));
    let m = plan.margin_for(0.99);
    // ε = 0.25: scales 8 and 16; the difference's 1% tail is tens of them.
    assert!((40..200).contains(&m), "{m}");
    assert_eq!(plan.margin_for(0.5), 0);
    // Sampled over many instances (horizons) and checks.
    let trials = 4000u64;
    let fired = (0..trials)
        .filter(|&i| plan.fires(&key, ("s", 1), i as i64, i, 1000 + m, 1000))
        .count() as f64;
    assert!(fired / trials as f64 > 0.98, "{fired}");
    let fired_below = (0..trials)
        .filter(|&i| plan.fires(&key, ("s", 1), i as i64, i, 1000 - m, 1000))
        .count() as f64;
    assert!(fired_below / (trials as f64) < 0.02, "{fired_below}");
}
