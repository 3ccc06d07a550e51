//! Running totals (dp::continual): the BLT sensitivity bound against the
//! materialised matrices by brute force, the closed-form noise energy
//! against the direct recursion, Monte-Carlo variances against the closed
//! forms (BLT and the Honaker tree), restart continuity, the utility
//! targets at T = 2¹⁶, and the partitions' independence that fleet-wide
//! totals rely on.

mod common;

use fleetdp_dp::continual::{baseline, Blt, BltNoise, RunningPlan, RunningState};
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::rational::ratio;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Strategies to check: the tuned ones and a few fast-decaying ones.
fn strategies() -> Vec<Blt> {
    let mut out: Vec<Blt> = [10, 16, 24].iter().map(|&l| Blt::for_lifetime(l)).collect();
    out.push(Blt::new(vec![0.5], vec![0.5]).unwrap());
    out.push(Blt::new(vec![0.3, 0.8], vec![0.2, 0.7]).unwrap());
    out.push(Blt::new(vec![0.9, 0.1, 0.6], vec![0.05, 0.5, 0.45]).unwrap());
    out
}

/// `C` for `t` windows.
fn c_matrix(b: &Blt, t: usize) -> Vec<Vec<f64>> {
    (0..t)
        .map(|i| {
            (0..t)
                .map(|j| if j <= i { b.c(i - j) } else { 0.0 })
                .collect()
        })
        .collect()
}

/// max over window sets S (|S| ≤ w) and changes u ∈ [−1, 1]^S of ‖C·u‖²
/// (a convex function: the maximum is at a vertex, u ∈ {±1}^S).
fn brute_force(c: &[Vec<f64>], w: usize) -> f64 {
    let t = c.len();
    let mut best = 0.0f64;
    let mut set = Vec::new();
    fn rec(c: &[Vec<f64>], w: usize, start: usize, set: &mut Vec<usize>, best: &mut f64) {
        if !set.is_empty() {
            for signs in 0u32..(1 << set.len()) {
                let mut norm = 0.0;
                for row in c {
                    let mut v = 0.0;
                    for (a, &s) in set.iter().enumerate() {
                        let u = if signs >> a & 1 == 1 { -1.0 } else { 1.0 };
                        v += row[s] * u;
                    }
                    norm += v * v;
                }
                *best = best.max(norm);
            }
        }
        if set.len() == w {
            return;
        }
        for s in start..c.len() {
            set.push(s);
            rec(c, w, s + 1, set, best);
            set.pop();
        }
    }
    rec(c, w, 0, &mut set, &mut best);
    let _ = t;
    best
}

#[test]
fn sensitivity_bound_holds_against_the_materialised_matrices() {
    for b in strategies() {
        // The decay conditions the proof needs.
        for i in 0..200 {
            assert!(
                b.c(i) >= 0.0 && b.c(i + 1) <= b.c(i),
                "c must be non-negative, non-increasing"
            );
        }
        for w in 1..=3u32 {
            let bound = b.sensitivity_sq(w);
            for t in [w as usize, 6, 11] {
                let bf = brute_force(&c_matrix(&b, t), w as usize);
                assert!(
                    bf <= bound * (1.0 + 1e-12),
                    "T={t} W={w}: brute force {bf} > bound {bound} for {b:?}"
                );
            }
        }
    }
}

#[test]
fn sensitivity_bound_is_tight_for_long_streams() {
    // With fast decay, a 200-window prefix holds the whole infinite sum:
    // contiguous windows from the start, all changed upwards, attain it.
    let b = Blt::new(vec![0.3, 0.8], vec![0.2, 0.7]).unwrap();
    let c = c_matrix(&b, 200);
    for w in 1..=3usize {
        let attained: f64 = c
            .iter()
            .map(|row| row[..w].iter().sum::<f64>().powi(2))
            .sum();
        let bound = b.sensitivity_sq(w as u32);
        assert!(
            (attained - bound).abs() <= 1e-9 * bound,
            "W={w}: {attained} vs {bound}"
        );
    }
}

#[test]
fn vector_changes_stay_within_l2_times_the_bound() {
    // Histograms: each changed window moves a vector of L2 norm ≤ 1.
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    for b in strategies() {
        let t = 12;
        let c = c_matrix(&b, t);
        for w in 1..=3usize {
            let bound = b.sensitivity_sq(w as u32);
            for _ in 0..300 {
                let mut set: Vec<usize> = (0..t).collect();
                for i in 0..w {
                    let j = rng.gen_range(i..t);
                    set.swap(i, j);
                }
                let set = &set[..w];
                let dim = 4;
                let u: Vec<Vec<f64>> = (0..w)
                    .map(|_| {
                        let v: Vec<f64> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
                        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                        v.iter().map(|x| x / n).collect()
                    })
                    .collect();
                let mut norm = 0.0;
                for row in &c {
                    for k in 0..dim {
                        let v: f64 = set.iter().zip(&u).map(|(&s, uv)| row[s] * uv[k]).sum();
                        norm += v * v;
                    }
                }
                assert!(norm <= bound * (1.0 + 1e-12));
            }
        }
    }
}

#[test]
fn closed_form_noise_energy_matches_the_recursion() {
    for b in strategies() {
        let coeffs = b.noise_coefficients(3000);
        let mut direct = 0.0;
        for (i, x) in coeffs.iter().enumerate() {
            direct += x * x;
            let t = i as u64 + 1;
            if [1, 2, 3, 7, 64, 1000, 3000].contains(&t) {
                let closed = b.noise_energy(t);
                assert!(
                    (closed - direct).abs() <= 1e-9 * direct,
                    "t={t}: {closed} vs {direct}"
                );
            }
        }
    }
}

#[test]
fn the_blt_meets_its_utility_targets_at_2_to_the_16() {
    let t = 1u64 << 16;
    let blt = Blt::for_lifetime(16).loss(t);
    let sqrt = baseline::sqrt_factorization(t);
    let tree = baseline::gaussian_tree(t, false);
    let ratio_sqrt = (blt / sqrt).sqrt();
    let ratio_tree = (tree / blt).sqrt();
    assert!(
        ratio_sqrt <= 1.05,
        "BLT std is {ratio_sqrt}× the square-root factorization's"
    );
    assert!(
        ratio_tree >= 3.0,
        "the plain tree's std is only {ratio_tree}× the BLT's"
    );
    // And the tuner finds nothing much better than the table.
    let tuned = fleetdp_dp::continual::tune(4, t).loss(t);
    assert!(blt <= tuned * 1.01);
}

/// Empirical variance of `samples` and its standard error.
fn var_and_se(samples: &[f64]) -> (f64, f64) {
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let m4 = samples.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n;
    (var, ((m4 - var * var) / n).sqrt())
}

fn monte_carlo(plan: &RunningPlan, steps: usize, reps: usize, at: &[usize]) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::with_capacity(reps); at.len()];
    for rep in 0..reps {
        let mut rng = ChaCha20Rng::seed_from_u64(rep as u64);
        let mut state = RunningState::new(plan);
        for step in 0..steps {
            let r = plan.step(&mut state, &[vec![0]], &mut rng).unwrap();
            if let Some(i) = at.iter().position(|&a| a == step + 1) {
                out[i].push(r[0][0]);
            }
        }
    }
    out
}

#[test]
fn monte_carlo_variance_matches_the_closed_form() {
    for measure in [Measure::Zcdp, Measure::Pure] {
        // Sum of a universe of width 100, k = 1, W = 2, ρ (or ε) = 1 per horizon.
        let plan = RunningPlan::calibrate(
            measure,
            &[("sum", 1, 100, 100 * 100)],
            2,
            &ratio(1, 1),
            10,
            1.0,
        );
        let at = [1usize, 5, 64, 255];
        let samples = monte_carlo(&plan, 255, 20_000, &at);
        for (t, s) in at.iter().zip(&samples) {
            let (var, se) = var_and_se(s);
            let std = plan.groups[0].noise.std_after(*t as u64).unwrap();
            // The BLT's noise is rounded to the grid: + 1/12 per release.
            let expected = std * std
                + if measure == Measure::Zcdp {
                    1.0 / 12.0
                } else {
                    0.0
                };
            assert!(
                (var - expected).abs() <= 5.0 * se,
                "{measure:?} t={t}: empirical variance {var} vs closed form {expected} (se {se})"
            );
        }
    }
}

#[test]
fn a_restart_continues_the_same_noise_and_never_renoises_a_step() {
    for measure in [Measure::Zcdp, Measure::Pure] {
        let plan = RunningPlan::calibrate(
            measure,
            &[("sum", 1, 50, 2500), ("histogram", 3, 2, 2)],
            1,
            &ratio(1, 2),
            12,
            0.1,
        );
        let window = |i: u64| vec![vec![(i as i128 * 37) % 50], vec![1, (i % 2) as i128, 0]];
        // The keyed generator of window i: the same bits on a replay.
        let rng = |i: u64| ChaCha20Rng::seed_from_u64(1000 + i);
        let mut a = RunningState::new(&plan);
        let straight: Vec<_> = (0..100)
            .map(|i| plan.step(&mut a, &window(i), &mut rng(i)).unwrap())
            .collect();
        // Stop after 60, persist, restore in a "new process", continue.
        let mut b = RunningState::new(&plan);
        for i in 0..60 {
            plan.step(&mut b, &window(i), &mut rng(i)).unwrap();
        }
        let saved = serde_json::to_vec(&b).unwrap();
        let mut restored: RunningState = serde_json::from_slice(&saved).unwrap();
        assert_eq!(restored, b);
        // Replaying window 59 from the state before it gives the same release.
        let before_59 = {
            let mut s = RunningState::new(&plan);
            for i in 0..59 {
                plan.step(&mut s, &window(i), &mut rng(i)).unwrap();
            }
            s
        };
        assert_eq!(
            plan.step(&mut before_59.clone(), &window(59), &mut rng(59))
                .unwrap(),
            straight[59]
        );
        for i in 60..100 {
            let r = plan.step(&mut restored, &window(i), &mut rng(i)).unwrap();
            assert_eq!(
                r, straight[i as usize],
                "{measure:?}: step {i} differs after the restart"
            );
        }
        // The noise really is correlated over time (not re-drawn per step):
        // consecutive errors of the running sum are close.
        let truth: Vec<f64> = (0..100u64)
            .scan(0i128, |acc, i| {
                *acc += window(i)[0][0];
                Some(*acc as f64)
            })
            .collect();
        let errs: Vec<f64> = straight
            .iter()
            .zip(&truth)
            .map(|(r, t)| r[0][0] - t)
            .collect();
        let jump = errs.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / 99.0;
        let spread = errs.iter().map(|e| e.abs()).sum::<f64>() / 100.0;
        assert!(
            jump < 2.0 * spread + 1.0,
            "{measure:?}: mean step {jump} vs mean error {spread}"
        );
    }
}

#[test]
fn the_tree_stops_at_its_lifetime() {
    let plan = RunningPlan::calibrate(
        Measure::Pure,
        &[("sum", 1, 10, 100)],
        1,
        &ratio(1, 1),
        3,
        1.0,
    );
    let mut s = RunningState::new(&plan);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    for _ in 0..8 {
        assert!(plan.step(&mut s, &[vec![1]], &mut rng).is_some());
    }
    assert!(plan.step(&mut s, &[vec![1]], &mut rng).is_none());
    assert_eq!(s.steps, 8);
}

#[test]
fn blt_noise_is_independent_of_data() {
    // Two neighbouring streams (one window differs) with the same draws:
    // the released difference is exactly the data difference.
    let plan = RunningPlan::calibrate(
        Measure::Zcdp,
        &[("sum", 1, 100, 10_000)],
        1,
        &ratio(1, 1),
        10,
        1.0,
    );
    let (mut a, mut b) = (RunningState::new(&plan), RunningState::new(&plan));
    for i in 0..50i128 {
        let ra = plan
            .step(
                &mut a,
                &[vec![i]],
                &mut ChaCha20Rng::seed_from_u64(i as u64),
            )
            .unwrap();
        let rb = plan
            .step(
                &mut b,
                &[vec![if i == 7 { i + 100 } else { i }]],
                &mut ChaCha20Rng::seed_from_u64(i as u64),
            )
            .unwrap();
        assert_eq!(rb[0][0] - ra[0][0], if i >= 7 { 100.0 } else { 0.0 });
    }
    let _ = BltNoise::new(1);
}

/// Fleet-wide running totals add the partitions' totals and state the root
/// of their summed variances: that needs the partitions' running noises to
/// be independent (keyed per partition). Over many keys the fleet total's
/// empirical variance matches the sum of the lanes' variances (within 5
/// standard errors), for both measures.
#[test]
fn partitions_running_noises_are_independent() {
    use common::{privacy, stream_spec};
    use fleetdp_dp::relation::Relation;
    use fleetdp_dp::release::{plan, StatKind};
    use fleetdp_dp::rng::ReleaseKey;
    for measure in [Measure::Zcdp, Measure::Pure] {
        let mut spec = stream_spec((0.0, 100.0, 1.0), 4, vec![StatKind::Mean]);
        (spec.max_windows_per_device, spec.running_share) = (2, 0.5);
        spec.running_lifetime = 1 << 10;
        let privacy = privacy(Relation::ChangeOne, measure, 1.0);
        let s = plan(&privacy, &[spec]).unwrap().streams.remove(0);
        let running = s.running.as_ref().unwrap();
        let values = [10i64, 20, 30, 40];
        let steps = 6u64;
        let (mut fleet, mut lanes) = (Vec::new(), 0.0);
        for rep in 0..6000u64 {
            let mut b = [3u8; 32];
            b[..8].copy_from_slice(&rep.to_le_bytes());
            let key = ReleaseKey::from_bytes(b);
            let mut total = 0.0;
            for p in 0..2 {
                let mut state = RunningState::new(running);
                let mut last = None;
                for seq in 0..steps {
                    last = s.running_step(&key, p, seq, &values, &mut state);
                }
                let r = &last.unwrap()[0];
                total += r.values[0] - 100.0 * steps as f64;
                if rep == 0 {
                    lanes += r.std * r.std;
                }
            }
            fleet.push(total);
        }
        let (var, se) = var_and_se(&fleet);
        // The BLT's noise is rounded to the grid: + 1/12 per lane.
        let expected = lanes
            + if measure == Measure::Zcdp {
                2.0 / 12.0
            } else {
                0.0
            };
        assert!(
            (var - expected).abs() <= 5.0 * se,
            "{measure:?}: fleet variance {var} vs Σ lanes {expected} (se {se})"
        );
    }
}

/// The dyadic nodes of a tree over `t = 2^(levels−1)` windows, as
/// (first window, length).
fn tree_nodes(levels: u32) -> Vec<(usize, usize)> {
    let t = 1usize << (levels - 1);
    (0..levels)
        .flat_map(|h| (0..t >> h).map(move |k| (k << h, 1usize << h)))
        .collect()
}

/// max over window sets S (|S| ≤ w) and changes u ∈ [−1, 1]^S of the L1
/// change of the tree's node sums, Σ_node |Σ_{s∈S∩node} u_s| (a vertex:
/// all changes of one sign attain it; checked over every sign pattern).
fn tree_brute_force(levels: u32, w: usize) -> f64 {
    let nodes = tree_nodes(levels);
    let t = 1usize << (levels - 1);
    let mut best = 0.0f64;
    for set in 0u32..(1 << t) {
        let s: Vec<usize> = (0..t).filter(|i| set >> i & 1 == 1).collect();
        if s.is_empty() || s.len() > w {
            continue;
        }
        for signs in 0u32..(1 << s.len()) {
            let u = |a: usize| if signs >> a & 1 == 1 { -1.0 } else { 1.0 };
            let l1: f64 = nodes
                .iter()
                .map(|&(first, len)| {
                    s.iter()
                        .enumerate()
                        .filter(|(_, &x)| (first..first + len).contains(&x))
                        .map(|(a, _)| u(a))
                        .sum::<f64>()
                        .abs()
                })
                .sum();
            best = best.max(l1);
        }
    }
    best
}

/// Running totals of a grouped stream (public keys): a device counts in up
/// to `G` groups, each group's totals are their own mechanism, so its loss
/// is the sum over its groups. By brute force over the tree (pure DP) the
/// worst device in `G` groups spends at most the running share, and the
/// bound is tight: totals calibrated for one group fewer than a device
/// joins overspend. Under zCDP the BLT's `W`-window bound is checked above;
/// here its per-group spend composes to the share.
#[test]
fn grouped_running_totals_compose_over_g_groups_within_the_share() {
    use fleetdp_dp::continual::RunningNoise;
    use fleetdp_dp::mechanism::Measure;
    use fleetdp_dp::relation::Relation;
    use fleetdp_dp::release::{plan, GroupSpec, StatKind};
    let (epsilon, share, w) = (1.0, 0.5, 2u32);
    let grouped = |g: u32, measure: Measure| {
        let mut s = common::stream_spec((0.0, 10.0, 1.0), 10, vec![StatKind::Mean]);
        s.max_windows_per_device = w;
        s.running_share = share;
        s.running_lifetime = 8;
        s.groups = Some(GroupSpec {
            keys: ["fw=a", "fw=b", "fw=c", "fw=d"].map(String::from).to_vec(),
            max_groups_per_device: g,
            private: None,
        });
        let p = common::privacy(Relation::ChangeOne, measure, epsilon);
        plan(&p, &[s]).unwrap().streams.remove(0)
    };
    // The worst loss of a device in `joined` groups of a plan made for `g`.
    let loss = |g: u32, joined: u32| {
        let running = grouped(g, Measure::Pure).running.expect("running totals");
        let per_group: f64 = running
            .groups
            .iter()
            .map(|r| match &r.noise {
                RunningNoise::Tree {
                    levels, laplace, ..
                } => {
                    tree_brute_force(*levels, w as usize) * r.window_sensitivity
                        / laplace.scale_f64()
                }
                other => panic!("pure DP runs a tree, not {other:?}"),
            })
            .sum();
        per_group * joined as f64
    };
    let budget = epsilon * share;
    for g in 1..=4 {
        let worst = loss(g, g);
        assert!(worst <= budget * (1.0 + 1e-12), "G={g}: {worst} > {budget}");
        assert!(worst >= budget * (1.0 - 1e-9), "G={g}: {worst}, not tight");
        if g >= 2 {
            let short = loss(g - 1, g);
            assert!(short > budget * 1.01, "calibrated for G={}: {short}", g - 1);
        }
        let zcdp = grouped(g, Measure::Zcdp).running.expect("running totals");
        let spent = fleetdp_dp::rational::to_f64(&zcdp.spent()) * g as f64;
        assert!((spent - budget).abs() <= 1e-12, "zCDP G={g}: {spent}");
    }
}

/// Every multiset of `len` values from `values`.
fn multisets(values: &[i64], len: usize) -> Vec<Vec<i64>> {
    if len == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        for mut rest in multisets(&values[i..], len - 1) {
            rest.insert(0, v);
            out.push(rest);
        }
    }
    out
}

/// A window's effect on the running totals, per relation, by brute force
/// over a small universe (grid −3..=2, bins [−3, 0) and [0, 2], k = 2):
/// change-one replaces up to k readings, add-remove adds up to k. The
/// largest change of the sum (L1), count and bins (L1 and L2²) equals what
/// each planned total is calibrated to — so a bound one unit smaller would
/// be exceeded — and the count is a total only where it is not public.
#[test]
fn running_window_sensitivities_are_the_brute_force_maxima() {
    use fleetdp_dp::mechanism::Measure;
    use fleetdp_dp::relation::Relation;
    use fleetdp_dp::release::{plan, StatKind};
    let (grid, k) = ((-3i64..=2).collect::<Vec<_>>(), 2usize);
    let bin = |v: i64| usize::from(v >= 0);
    let effect = |a: &[i64], b: &[i64]| {
        let sum = |w: &[i64]| w.iter().sum::<i64>();
        let bins = |w: &[i64]| {
            w.iter().fold([0i64; 2], |mut h, &v| {
                h[bin(v)] += 1;
                h
            })
        };
        let (ha, hb) = (bins(a), bins(b));
        let d = [ha[0] - hb[0], ha[1] - hb[1]];
        (
            (sum(a) - sum(b)).abs(),
            (a.len() as i64 - b.len() as i64).abs(),
            d[0].abs() + d[1].abs(),
            d[0] * d[0] + d[1] * d[1],
        )
    };
    for relation in [Relation::ChangeOne, Relation::AddRemove] {
        // (sum L1, count, bins L1, bins L2²) over neighbouring windows.
        let mut worst = (0, 0, 0, 0);
        for base_len in 0..=2 {
            for base in multisets(&grid, base_len) {
                for j in 1..=k {
                    for extra in multisets(&grid, j) {
                        let with: Vec<i64> = base.iter().chain(&extra).copied().collect();
                        let pairs: Vec<Vec<i64>> = match relation {
                            Relation::AddRemove => vec![base.clone()],
                            // The same readings but j of them replaced.
                            Relation::ChangeOne => multisets(&grid, j)
                                .into_iter()
                                .map(|r| base.iter().chain(&r).copied().collect())
                                .collect(),
                        };
                        for other in pairs {
                            let e = effect(&with, &other);
                            worst = (
                                worst.0.max(e.0),
                                worst.1.max(e.1),
                                worst.2.max(e.2),
                                worst.3.max(e.3),
                            );
                        }
                    }
                }
            }
        }
        let window = match relation {
            Relation::ChangeOne => 10,
            Relation::AddRemove => 0,
        };
        let mut s = common::stream_spec(
            (-3.0, 2.0, 1.0),
            window,
            vec![StatKind::Mean, StatKind::Histogram],
        );
        s.max_readings_per_device = k as u32;
        s.histogram_edges = vec![-3.0, 0.0, 2.0];
        s.running_share = 0.5;
        s.running_lifetime = 8;
        for measure in [Measure::Pure, Measure::Zcdp] {
            let p = common::privacy(relation, measure, 1.0);
            let planned = plan(&p, std::slice::from_ref(&s)).unwrap();
            let running = planned.streams[0].running.as_ref().unwrap();
            let of = |name: &str| {
                running
                    .groups
                    .iter()
                    .find(|g| g.name == name)
                    .map(|g| g.window_sensitivity)
            };
            let l2 = |sq: i64| (sq as f64).sqrt();
            let (sum, count, bins) = match measure {
                Measure::Pure => (worst.0 as f64, worst.1 as f64, worst.2 as f64),
                Measure::Zcdp => (worst.0 as f64, worst.1 as f64, l2(worst.3)),
            };
            let what = format!("{relation:?} {measure:?}");
            assert_eq!(of("sum"), Some(sum), "{what}: sum");
            assert_eq!(of("histogram"), Some(bins), "{what}: histogram");
            match relation {
                Relation::ChangeOne => assert_eq!(of("count"), None, "{what}: n is public"),
                Relation::AddRemove => assert_eq!(of("count"), Some(count), "{what}: count"),
            }
        }
    }
}

/// Add-remove running totals through the release path: the noisy running
/// count (a total of its own, the `count` field 0) and sum are centred on
/// the truth with the variance their `std` states, both measures, at
/// several steps; no summed windows (a window's size is not public).
#[test]
fn add_remove_running_count_and_sum_carry_their_stated_noise() {
    use fleetdp_dp::mechanism::Measure;
    use fleetdp_dp::relation::Relation;
    use fleetdp_dp::release::{plan, StatKind};
    use fleetdp_dp::rng::ReleaseKey;
    for measure in [Measure::Pure, Measure::Zcdp] {
        let mut s =
            common::stream_spec((-10.0, 30.0, 0.5), 0, vec![StatKind::Count, StatKind::Mean]);
        s.running_share = 0.5;
        s.running_lifetime = 16;
        let p = common::privacy(Relation::AddRemove, measure, 1.0);
        let planned = plan(&p, &[s]).unwrap();
        let stream = &planned.streams[0];
        let running = stream.running.as_ref().unwrap();
        let names: Vec<&str> = running.groups.iter().map(|g| g.name).collect();
        assert_eq!(names, ["sum", "count"]);
        let at = [1u64, 5, 16];
        let reps = 4000;
        // Windows of 3 + seq readings of 12.5 (25 grid units).
        let mut errors = vec![vec![Vec::with_capacity(reps); at.len()]; 2];
        let mut stds = vec![vec![0.0; at.len()]; 2];
        for rep in 0..reps {
            let mut b = [7u8; 32];
            b[..8].copy_from_slice(&(rep as u64).to_le_bytes());
            let key = ReleaseKey::from_bytes(b);
            let mut state = RunningState::new(running);
            let (mut n, mut sum) = (0.0, 0.0);
            for seq in 0..16u64 {
                let values = vec![25i64; 3 + seq as usize];
                n += values.len() as f64;
                sum += 12.5 * values.len() as f64;
                let totals = stream
                    .running_step(&key, 0, seq, &values, &mut state)
                    .unwrap();
                let Some(i) = at.iter().position(|&t| t == seq + 1) else {
                    continue;
                };
                for (j, (name, truth)) in [("sum", sum), ("count", n)].into_iter().enumerate() {
                    let t = totals.iter().find(|t| t.name == name).unwrap();
                    assert_eq!(
                        (t.windows, t.count),
                        (seq + 1, 0),
                        "{name}: n is not public"
                    );
                    assert!(t.summed.is_none() && t.combined.is_none(), "{name}");
                    errors[j][i].push(t.values[0] - truth);
                    stds[j][i] = t.std;
                }
            }
        }
        for (j, name) in ["sum", "count"].into_iter().enumerate() {
            for (i, t) in at.iter().enumerate() {
                let e = &errors[j][i];
                let (var, se) = var_and_se(e);
                let mean = e.iter().sum::<f64>() / e.len() as f64;
                // The BLT's noise is rounded to the grid (sum: units of 0.5).
                let rounding = match (measure, name) {
                    (Measure::Zcdp, "sum") => 0.25 / 12.0,
                    (Measure::Zcdp, _) => 1.0 / 12.0,
                    _ => 0.0,
                };
                let expected = stds[j][i].powi(2) + rounding;
                assert!(
                    (var - expected).abs() <= 5.0 * se,
                    "{measure:?} {name} t={t}: variance {var} vs stated {expected} (se {se})"
                );
                assert!(
                    mean.abs() <= 5.0 * (expected / e.len() as f64).sqrt(),
                    "{measure:?} {name} t={t}: biased by {mean}"
                );
            }
        }
    }
}
