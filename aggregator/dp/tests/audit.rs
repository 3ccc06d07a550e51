//! Statistical privacy audits: run a mechanism ≥ 10⁶ times on each of two
//! neighbouring windows; over a family of threshold events, the
//! Clopper–Pearson lower bound on ε (Bonferroni-corrected) must not exceed
//! the declared ε, and the best point estimate must come close to it (the
//! noise is not inflated).

mod common;

use common::{cp_lower, cp_upper};
use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::{Measure, Selection};
use fleetdp_dp::rational::exact;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PrivacySpec, StatKind, StreamPlan, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;
use fleetdp_dp::sampler::DiscreteGaussian;
use fleetdp_dp::stats::{self, QuantileLevel};

const RUNS: u64 = 1_000_000;
const ALPHA: f64 = 0.05;

fn sum_stream(measure: Measure, budget: f64) -> StreamPlan {
    let spec = StreamSpec {
        name: "audit".into(),
        lower: 0.0,
        upper: 10.0,
        resolution: 1.0,
        window_size: 10,
        max_readings_per_device: 1,
        max_windows_per_device: 1,
        budget_share: 1.0,
        statistics: vec![StatKind::Sum],
        histogram_edges: vec![],
        quantiles: vec![],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        window_ms: None,
        running_share: 0.0,
        running_lifetime: 1 << 24,
        device_alarm_share: 0.0,
        groups: None,
    };
    let privacy = PrivacySpec {
        relation: Relation::ChangeOne,
        budget: Budget {
            measure,
            per_horizon: budget,
            delta: 1e-6,
        },
    };
    plan(&privacy, &[spec]).unwrap().streams.remove(0)
}

/// Released sums of `RUNS` windows with the same values (keyed noise, a new
/// seq each run), as half units.
fn released_sums(s: &StreamPlan, values: &[i64], key: &ReleaseKey) -> Vec<i64> {
    (0..RUNS)
        .map(|seq| (s.release(key, 0, seq, values)[0].values[0] * 2.0).round() as i64)
        .collect()
}

fn tail_counts(samples: &[i64], thresholds: &[i64]) -> Vec<u64> {
    thresholds
        .iter()
        .map(|&t| samples.iter().filter(|&&x| x >= t).count() as u64)
        .collect()
}

/// Worst neighbours for a sum: one device moves from L to U.
fn neighbouring_windows() -> (Vec<i64>, Vec<i64>) {
    let d = vec![0i64; 10];
    let mut e = d.clone();
    e[0] = 10;
    (d, e)
}

#[test]
fn discrete_laplace_sum_at_epsilon_one() {
    let s = sum_stream(Measure::Pure, 1.0);
    let (d, e) = neighbouring_windows();
    let key = ReleaseKey::from_bytes([5; 32]);
    let (x0, x1) = (
        released_sums(&s, &d, &key),
        released_sums(&s, &e, &ReleaseKey::from_bytes([6; 32])),
    );
    // Events {sum ≥ τ} (favouring e) and {sum < τ} (favouring d), τ in half units.
    let thresholds: Vec<i64> = (0..=120).step_by(4).collect();
    let (t0, t1) = (tail_counts(&x0, &thresholds), tail_counts(&x1, &thresholds));
    let family = 2 * thresholds.len();
    let a = ALPHA / (2.0 * family as f64);
    let (mut best_lb, mut best_point) = (f64::MIN, f64::MIN);
    for (&c0, &c1) in t0.iter().zip(&t1) {
        for (p, q) in [(c1, c0), (RUNS - c0, RUNS - c1)] {
            if q == 0 {
                continue;
            }
            let lb = (cp_lower(p, RUNS, a) / cp_upper(q, RUNS, a)).ln();
            best_lb = best_lb.max(lb);
            if q >= 1_000 {
                best_point = best_point.max((p as f64 / q as f64).ln());
            }
        }
    }
    println!("laplace: lower bound {best_lb:.4}, point estimate {best_point:.4}");
    assert!(
        best_lb <= 1.0,
        "empirical ε lower bound {best_lb} exceeds 1"
    );
    assert!(
        best_point >= 0.8,
        "point estimate {best_point}: noise inflated"
    );
}

/// Hockey-stick divergence of two discrete Gaussians `Δ` apart:
/// `δ(ε) = Σ_x max(0, P(Z = x − Δ) − e^ε P(Z = x))`.
fn gaussian_delta(g: &DiscreteGaussian, shift: i128, eps: f64) -> f64 {
    let norm = g.normaliser();
    let m = (14.0 * g.sigma_f64()) as i128 + shift.abs() + 2;
    (-m..=m)
        .map(|x| (g.weight(x - shift) / norm - eps.exp() * g.weight(x) / norm).max(0.0))
        .sum()
}

#[test]
fn discrete_gaussian_sum_against_its_privacy_curve() {
    let rho = 0.5;
    let s = sum_stream(Measure::Zcdp, rho);
    let (d, e) = neighbouring_windows();
    let (x0, x1) = (
        released_sums(&s, &d, &ReleaseKey::from_bytes([7; 32])),
        released_sums(&s, &e, &ReleaseKey::from_bytes([8; 32])),
    );
    // The noise actually used (half units): σ² = Δ₂²/(2ρ) with Δ₂ = 2Δ = 20.
    let g = DiscreteGaussian::new(&exact(400.0));
    let shift = 20i128;
    // The stated conversion holds for this mechanism: δ(ε_BS(δ)) ≤ δ.
    let delta = 1e-6;
    let eps_bs = fleetdp_dp::mechanism::zcdp_to_approx_dp(rho, delta);
    assert!(gaussian_delta(&g, shift, eps_bs) <= delta);

    let thresholds: Vec<i64> = (-20..=100).step_by(4).collect();
    let (t0, t1) = (tail_counts(&x0, &thresholds), tail_counts(&x1, &thresholds));
    let a = ALPHA / (2.0 * thresholds.len() as f64);
    let eps_grid: [f64; 7] = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0];
    let (mut best_point, mut best_theory) = (f64::MIN, f64::MIN);
    let norm = g.normaliser();
    let tail = |t: i64, mean: i128| -> f64 {
        let m = (14.0 * g.sigma_f64()) as i128 + 2;
        (-m..=m)
            .filter(|&z| z + mean >= t as i128)
            .map(|z| g.weight(z) / norm)
            .sum()
    };
    for ((&c0, &c1), &t) in t0.iter().zip(&t1).zip(&thresholds) {
        let (lo1, hi0) = (cp_lower(c1, RUNS, a), cp_upper(c0, RUNS, a));
        for &eps in &eps_grid {
            let bound = lo1 - eps.exp() * hi0;
            let curve = gaussian_delta(&g, shift, eps);
            assert!(
                bound <= curve + 1e-12,
                "τ={t} ε={eps}: lower bound {bound} above δ(ε) = {curve}"
            );
        }
        if c0 >= 1_000 {
            best_point = best_point.max((c1 as f64 / c0 as f64).ln());
            best_theory = best_theory.max((tail(t, shift) / tail(t, 0)).ln());
        }
    }
    println!("gaussian: best point {best_point:.4}, exact {best_theory:.4}");
    assert!(
        best_point >= 0.8 * best_theory,
        "{best_point} vs {best_theory}: noise inflated"
    );
}

#[test]
fn quantile_selection_at_epsilon_one() {
    // Median over candidates 0..=4 of windows of 3 readings. The neighbouring
    // pair audited is the one with the largest exact privacy loss, found by
    // searching every window and every one-reading change.
    let candidates: Vec<i64> = (0..=4).collect();
    let level = QuantileLevel::new(0.5).unwrap();
    let (sel, spent) = Selection::calibrate(Measure::Pure, level.den as u64, &exact(1.0));
    assert_eq!(spent, exact(1.0));
    let util = |w: &[i64]| stats::quantile_utilities(w, &candidates, level);
    let loss = |a: &[i64], b: &[i64]| exact_loss(&sel, &util(a), &util(b));
    let worst = worst_change(5, loss);
    let (_, d, e) = worst;
    let (best_lb, best_point, exact_loss) = audit_selection(
        &sel,
        &stats::quantile_utilities(&d, &candidates, level),
        &stats::quantile_utilities(&e, &candidates, level),
    );
    println!(
        "quantile: lower bound {best_lb:.4}, point {best_point:.4}, exact loss {exact_loss:.4}"
    );
    assert!(exact_loss <= 1.0 + 1e-9);
    assert!(
        best_lb <= 1.0,
        "empirical ε lower bound {best_lb} exceeds 1"
    );
    assert!(
        best_point >= 0.8 * exact_loss,
        "point {best_point} vs exact {exact_loss}"
    );
}

/// The adaptive prior (`release/adaptive.rs`): the median over candidates
/// 0..=4 with only candidate 1 favoured (the others lose `ln 4` nats), at
/// ε = 1 under both selections. The exact loss over every window of 3
/// readings and every one-reading change stays ≤ 1 (the penalty does not
/// depend on the window), and the Monte Carlo lower bound on the worst pair
/// stays ≤ 1.
#[test]
fn quantile_selection_under_the_adaptive_prior_at_epsilon_one() {
    use fleetdp_dp::release::apply_prior;
    let candidates: Vec<i64> = (0..=4).collect();
    let level = QuantileLevel::new(0.5).unwrap();
    for measure in [Measure::Pure, Measure::Zcdp] {
        let budget = if measure == Measure::Pure { 1.0 } else { 0.125 };
        let (sel, _) = Selection::calibrate(measure, level.den as u64, &exact(budget));
        assert!((sel.epsilon_f64() - 1.0).abs() < 1e-9);
        let util = |w: &[i64]| {
            let mut u = stats::quantile_utilities(w, &candidates, level);
            apply_prior(&mut u, &candidates, &[1], &sel);
            u
        };
        assert!(util(&[0, 0, 0])[0] < 0, "the prior is applied");
        audit_worst_change(&format!("{measure:?} prior"), &sel, 5, util);
    }
}

/// Monte Carlo audit of one selection on two neighbours' utilities: the
/// Clopper–Pearson lower bound on ε over the events {= c} and {≤ c} in both
/// directions, the point estimate, and the exact loss.
fn audit_selection(sel: &Selection, u0: &[i128], u1: &[i128]) -> (f64, f64, f64) {
    let m = u0.len();
    let mut rng0 = <rand_chacha::ChaCha20Rng as rand::SeedableRng>::seed_from_u64(1);
    let mut rng1 = <rand_chacha::ChaCha20Rng as rand::SeedableRng>::seed_from_u64(2);
    let (mut h0, mut h1) = (vec![0u64; m], vec![0u64; m]);
    for _ in 0..RUNS {
        h0[sel.select(&mut rng0, u0)] += 1;
        h1[sel.select(&mut rng1, u1)] += 1;
    }
    let mut events: Vec<(u64, u64)> = Vec::new();
    for c in 0..m {
        let le0: u64 = h0[..=c].iter().sum();
        let le1: u64 = h1[..=c].iter().sum();
        events.extend([(h0[c], h1[c]), (h1[c], h0[c]), (le0, le1), (le1, le0)]);
    }
    let a = ALPHA / (2.0 * events.len() as f64);
    let exact = exact_loss(sel, u0, u1);
    let (mut best_lb, mut best_point) = (f64::MIN, f64::MIN);
    for (p, q) in events {
        if q == 0 || p == 0 {
            continue;
        }
        best_lb = best_lb.max((cp_lower(p, RUNS, a) / cp_upper(q, RUNS, a)).ln());
        best_point = best_point.max((p as f64 / q as f64).ln());
    }
    (best_lb, best_point, exact)
}

/// The exact privacy loss of a selection between two neighbours'
/// utilities: the largest |ln| ratio of their output probabilities.
fn exact_loss(sel: &Selection, u0: &[i128], u1: &[i128]) -> f64 {
    sel.probabilities(u0)
        .iter()
        .zip(&sel.probabilities(u1))
        .map(|(x, y)| (x / y).ln().abs())
        .fold(0.0, f64::max)
}

/// Add-remove quantiles are calibrated to the tight utility sensitivity
/// `k·max(q, 1 − q)`: at q = 0.9 the exact loss of every window of up to 4
/// readings on 5 candidates against every neighbour with one reading added
/// or removed is at most ε = 1 (calibrated to `min(q, 1 − q)` instead, the
/// worst pair loses more), and the Monte Carlo lower bound stays ≤ 1.
#[test]
fn add_remove_quantile_selection_at_epsilon_one() {
    let candidates: Vec<i64> = (0..=4).collect();
    let level = QuantileLevel::new(0.9).unwrap();
    let nb = fleetdp_dp::relation::Neighbouring::new(Relation::AddRemove, 1);
    let du = level.utility_sensitivity(nb);
    assert_eq!(
        du * 10,
        9 * level.den as u64,
        "k·max(q, 1 − q) in 1/den units"
    );
    let (sel, _) = Selection::calibrate(Measure::Pure, du, &exact(1.0));
    let util = |w: &[i64]| stats::quantile_utilities(w, &candidates, level);
    let loss = |a: &[i64], b: &[i64]| exact_loss(&sel, &util(a), &util(b));
    // Every sorted window of 1..=4 readings and every one-reading addition.
    let mut windows: Vec<Vec<i64>> = vec![vec![]];
    let mut worst = (f64::MIN, vec![], vec![]);
    for _ in 0..4 {
        let mut next = Vec::new();
        for w in &windows {
            for v in 0..5 {
                let mut b = w.clone();
                b.push(v);
                b.sort_unstable();
                if !w.is_empty() {
                    let l = loss(w, &b);
                    if l > worst.0 {
                        worst = (l, w.clone(), b.clone());
                    }
                }
                next.push(b);
            }
        }
        next.sort();
        next.dedup();
        windows = next;
    }
    let (max_loss, d, e) = worst;
    assert!(
        max_loss <= 1.0 + 1e-9,
        "exact loss {max_loss} on {d:?} vs {e:?}"
    );
    // The search finds what an under-calibration would leak: at the looser
    // min(q, 1 − q) the same windows lose more than ε = 1.
    let (wrong, _) = Selection::calibrate(Measure::Pure, du / 9, &exact(1.0));
    let wrong_loss = exact_loss(&wrong, &util(&d), &util(&e));
    assert!(
        wrong_loss > 1.0,
        "an under-calibrated selection loses {wrong_loss}"
    );
    let (best_lb, best_point, exact_loss) = audit_selection(&sel, &util(&d), &util(&e));
    println!("add-remove q = 0.9: lower bound {best_lb:.4}, point {best_point:.4}, exact {exact_loss:.4}");
    assert!(
        best_lb <= 1.0,
        "empirical ε lower bound {best_lb} exceeds 1"
    );
    assert!(
        best_point >= 0.8 * exact_loss,
        "point {best_point} vs exact {exact_loss}"
    );
}

/// Joint quantiles (p50 and p90 by one selection, change-one, k = 1) at
/// ε = 1: the exact loss over every window of 3 readings on 4 candidates
/// and every one-reading change is at most 1, and the Monte Carlo lower
/// bound on the worst pair stays ≤ 1.
#[test]
fn joint_quantile_selection_at_epsilon_one() {
    use fleetdp_dp::joint;
    let candidates: Vec<i64> = (0..4).collect();
    let nums = [500_000, 900_000];
    let nb = fleetdp_dp::relation::Neighbouring::new(Relation::ChangeOne, 1);
    let du = fleetdp_dp::release::joint_utility_sensitivity(nb);
    let (sel, _) = Selection::calibrate(Measure::Pure, du, &exact(1.0));
    let util = |w: &[i64]| joint::utilities(w, &candidates, &nums, QuantileLevel::DEN);
    audit_worst_change("joint p50+p90", &sel, 4, util);
}

/// The worst neighbouring pair of `util` (windows of 3 readings on
/// `0..values`, one reading changed) must lose at most ε = 1 exactly, and
/// its Monte Carlo audit must bound ε by 1 from below and come close to the
/// exact loss (the selection is not looser than it claims).
fn audit_worst_change(
    name: &str,
    sel: &Selection,
    values: i64,
    util: impl Fn(&[i64]) -> Vec<i128>,
) {
    let (max_loss, d, e) = worst_change(values, |a, b| exact_loss(sel, &util(a), &util(b)));
    assert!(
        max_loss <= 1.0 + 1e-9,
        "{name}: exact loss {max_loss} on {d:?} vs {e:?}"
    );
    let (best_lb, best_point, exact_loss) = audit_selection(sel, &util(&d), &util(&e));
    println!("{name}: lower bound {best_lb:.4}, point {best_point:.4}, exact {exact_loss:.4}");
    assert!(
        best_lb <= 1.0,
        "{name}: empirical ε lower bound {best_lb} exceeds 1"
    );
    assert!(
        best_point >= 0.8 * exact_loss,
        "{name}: point {best_point} vs exact {exact_loss}"
    );
}

/// The pair (window of 3 readings on `0..values`, the same with one reading
/// changed) of the largest `loss`, and that loss.
fn worst_change(values: i64, loss: impl Fn(&[i64], &[i64]) -> f64) -> (f64, Vec<i64>, Vec<i64>) {
    let mut worst = (f64::MIN, vec![], vec![]);
    for a in 0..values {
        for b in a..values {
            for c in b..values {
                let d = vec![a, b, c];
                for i in 0..3 {
                    for v in 0..values {
                        let mut e = d.clone();
                        e[i] = v;
                        e.sort_unstable();
                        let l = loss(&d, &e);
                        if l > worst.0 {
                            worst = (l, d.clone(), e);
                        }
                    }
                }
            }
        }
    }
    worst
}
