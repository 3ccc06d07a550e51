//! Splitting a stream's per-window budget by accuracy targets
//! (`target_error`): each targeted statistic's measurements get the least
//! spend whose 95% half-width meets the target; the other measurements
//! share what is left evenly (or, when every measurement is targeted, the
//! slack raises all of them alike). A target the budget cannot meet is
//! refused, naming the statistic, what it needs and what the stream has.
//!
//! Privacy argument: nothing changes in what is private. The accountant
//! fixes the stream's per-window budget as before; this only divides it
//! among the stream's measurements, each still calibrated to its own
//! sensitivity, and the division depends on the declaration alone (public
//! parameters), never on data. The per-window spend is the sum of the
//! parts, at most the budget.

use super::*;
use crate::accuracy;
use crate::mechanism::{Measure, Noise};
use crate::rational::{self, exact};
use crate::relation::Relation;
use crate::stats::Sensitivity;
use num_rational::BigRational;
use num_traits::Zero;

/// Per-measurement budgets for `ms` (with their sensitivities) out of the
/// stream's per-window `total`: `total / |ms|` each without targets.
pub(super) fn split(
    spec: &StreamSpec,
    relation: Relation,
    measure: Measure,
    resolution: f64,
    ms: &[(&Measurement, &Sensitivity)],
    total: &BigRational,
    floor: f64,
) -> Result<Vec<BigRational>, PlanError> {
    // Shares by weight (a joint selection of m levels weighs m).
    let weight = |i: usize| BigRational::from_integer(ms[i].0.weight().into());
    let weights: BigRational = (0..ms.len()).map(weight).sum();
    let even = || {
        (0..ms.len())
            .map(|i| total * weight(i) / &weights)
            .collect::<Vec<_>>()
    };
    if spec.target_error.is_empty() {
        return Ok(even());
    }
    let cap = rational::to_f64(total);
    let mut need: Vec<Option<f64>> = vec![None; ms.len()];
    let mut wants = Vec::new();
    for &(stat, target) in &spec.target_error {
        let got = needs(spec, relation, measure, resolution, ms, stat, target, cap)?;
        let sum: f64 = got.iter().map(|(_, s)| s).sum();
        wants.push(format!("{} ±{target} needs {sum:.4}", stat.name()));
        for (i, s) in got {
            let s = s.max(floor);
            need[i] = Some(need[i].map_or(s, |n: f64| n.max(s)));
        }
    }
    let needed: f64 = need.iter().flatten().sum();
    let (what, field) = match measure {
        Measure::Pure => ("ε", "epsilon_per_device"),
        Measure::Zcdp => ("ρ", "rho_per_device"),
    };
    if needed > cap {
        return Err(field_err(
            spec,
            "target_error",
            format!(
                "the targets need {what} = {needed:.4} per window ({}); the stream has {cap:.4} \
                 (privacy.{field} × budget_share × (1 − running_share) / max_windows_per_device): \
                 raise the budget or the share, lower max_windows_per_device, or loosen a target",
                wants.join(", ")
            ),
        ));
    }
    let weights: Vec<BigRational> = (0..ms.len()).map(weight).collect();
    let untargeted = need.iter().filter(|n| n.is_none()).count();
    exact_parts(&need, total, &weights, floor).map_err(|each| {
        field_err(
            spec,
            "target_error",
            format!(
                "the targets ({}) leave {what} = {each:e} for each of the {untargeted} untargeted measurements, \
                 below the floor {floor:e}: loosen a target, target those statistics too, or raise the budget",
                wants.join(", "),
            ),
        )
    })
}

/// The exact parts of `total` for measurements that `need` a spend (a
/// target's) and the rest shared by `weights` among those that do not;
/// `Err`: what each untargeted weight would get, below `floor`.
fn exact_parts(
    need: &[Option<f64>],
    total: &BigRational,
    weights: &[BigRational],
    floor: f64,
) -> Result<Vec<BigRational>, f64> {
    // Exact parts: each need rounded up a little (the search stops within
    // 10⁻⁹ of the boundary), the rest from what the needs leave.
    let parts: Vec<Option<BigRational>> = need
        .iter()
        .map(|n| n.map(|n| exact(n * (1.0 + 1e-9)).min(total.clone())))
        .collect();
    let spent: BigRational = parts.iter().flatten().sum();
    let untargeted = parts.iter().filter(|p| p.is_none()).count();
    if spent > *total {
        // Rounding pushed the needs just past the budget: scale to fit.
        let f = total / &spent;
        return Ok(parts
            .into_iter()
            .map(|p| p.map_or_else(BigRational::zero, |p| p * &f))
            .collect());
    }
    let rest = total - &spent;
    if untargeted == 0 {
        // Everything targeted: the slack raises every part alike.
        let f = total / &spent;
        return Ok(parts
            .into_iter()
            .map(|p| p.expect("targeted") * &f)
            .collect());
    }
    let untargeted_weight: BigRational = (0..parts.len())
        .filter(|&i| parts[i].is_none())
        .map(|i| weights[i].clone())
        .sum();
    let each = rest / untargeted_weight;
    if rational::to_f64(&each) < floor {
        return Err(rational::to_f64(&each));
    }
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| p.unwrap_or_else(|| &each * &weights[i]))
        .collect())
}

/// The measurements statistic `stat` reads and the spend each needs for a
/// 95% half-width of `target` (stream units), at most `cap` each.
#[allow(clippy::too_many_arguments)]
fn needs(
    spec: &StreamSpec,
    relation: Relation,
    measure: Measure,
    resolution: f64,
    ms: &[(&Measurement, &Sensitivity)],
    stat: StatKind,
    target: f64,
    cap: f64,
) -> Result<Vec<(usize, f64)>, PlanError> {
    let field = "target_error";
    if !(target.is_finite() && target > 0.0) {
        return Err(field_err(
            spec,
            field,
            format!("{}: must be a positive number, got {target}", stat.name()),
        ));
    }
    // `variance` also targets the std's measurements (the same two sums).
    let declared = spec.statistics.contains(&stat)
        || (stat == StatKind::Variance && spec.statistics.contains(&StatKind::Std));
    if !declared {
        return Err(field_err(
            spec,
            field,
            format!("{}: not among the stream's statistics", stat.name()),
        ));
    }
    let planned = target_of(spec, relation, resolution, ms, stat)?;
    let n = spec.window_size as f64;
    let calibrate = |i: usize, s: f64| Noise::calibrate(measure, ms[i].1, &exact(s)).0;
    let meets = |s: f64| -> bool {
        match planned {
            Target::Linear(i, a) => accuracy::half_width(&calibrate(i, s)) as f64 * a <= target,
            Target::Variance(c1, c2) => {
                // The error bound of `moments`, h₂/n + 2(|m̂| + h₁/n)h₁/n +
                // h₁²/n² (quarter units²), for data centred in the universe
                // (|m̂| is then at most the noise, h₁/n, at 95%): h₂/n +
                // 5h₁²/n², with both measurements at the same spend.
                let level = 1.0 - (1.0 - accuracy::LEVEL) / 2.0;
                let h1 = accuracy::half_width_at(&calibrate(c1, s), level) as f64;
                let h2 = accuracy::half_width_at(&calibrate(c2, s), level) as f64;
                (h2 / n + 5.0 * h1 * h1 / (n * n)) / 4.0 * resolution * resolution <= target
            }
        }
    };
    let reads = match planned {
        Target::Linear(i, _) => vec![i],
        Target::Variance(a, b) => vec![a, b],
    };
    let spend = least_spend(meets, cap);
    Ok(reads.into_iter().map(|i| (i, spend)).collect())
}

/// How the target of `stat` reads the plan's measurements `ms`, or why
/// it has no closed form.
fn target_of(
    spec: &StreamSpec,
    relation: Relation,
    resolution: f64,
    ms: &[(&Measurement, &Sensitivity)],
    stat: StatKind,
) -> Result<Target, PlanError> {
    let find = |pred: &dyn Fn(&Measurement) -> bool| ms.iter().position(|(m, _)| pred(m));
    let change_one = relation == Relation::ChangeOne;
    let n = spec.window_size as f64;
    let unsupported = |why: &str| {
        Err(field_err(
            spec,
            "target_error",
            format!("{}: {why}", stat.name()),
        ))
    };
    let centred = find(&|m| *m == Measurement::CentredSum);
    let squares = find(&|m| *m == Measurement::CentredSumSq);
    let linear = |i: Option<usize>, a: f64| i.map(|i| Target::Linear(i, a));
    let planned = match stat {
        StatKind::Count if change_one => {
            return unsupported("the count is public under change-one (exact): no target applies")
        }
        StatKind::Count => linear(find(&|m| *m == Measurement::Count), 1.0),
        StatKind::Sum if change_one => linear(centred, resolution / 2.0),
        StatKind::Sum => match find(&|m| *m == Measurement::Sum) {
            Some(i) => Some(Target::Linear(i, resolution)),
            None => return unsupported(
                "under add-remove with a count this sum is derived from two noisy measurements: \
                     no closed-form target; target `count` instead",
            ),
        },
        StatKind::Mean if change_one => linear(centred, resolution / 2.0 / n),
        StatKind::Histogram => linear(find(&|m| matches!(m, Measurement::Histogram { .. })), 1.0),
        StatKind::Clamped if change_one => linear(find(&|m| *m == Measurement::Boundary), 1.0 / n),
        StatKind::Variance if change_one => {
            centred.zip(squares).map(|(a, b)| Target::Variance(a, b))
        }
        StatKind::Mean | StatKind::Clamped | StatKind::Variance => {
            return unsupported(
                "under add-remove it is a ratio of noisy measurements: no closed-form target",
            )
        }
        StatKind::Std => {
            return unsupported(
                "a std's half-width depends on the std itself; target `variance` \
                 (units², also for a stream that releases only the std: the std's \
                 half-width is about the variance's / (2 × std))",
            )
        }
        StatKind::Quantiles => {
            return unsupported(
                "quantile accuracy depends on the data's density near the quantile; \
                 untargeted measurements share what the targets leave",
            )
        }
    };
    planned.map_or_else(|| unsupported("no measurement of the plan computes it"), Ok)
}

/// The least spend that `meets` the target: bisection in log space below
/// the budget `cap`, or (for the refusal's message) below the first
/// doubling of it that meets the target.
fn least_spend(meets: impl Fn(f64) -> bool, cap: f64) -> f64 {
    let mut upper = cap.max(1e-12);
    while !meets(upper) && upper < 1e12 {
        upper *= 2.0;
    }
    let (mut lo, mut spend) = (upper * 1e-12, upper);
    for _ in 0..60 {
        let mid = (lo * spend).sqrt();
        if meets(mid) {
            spend = mid;
        } else {
            lo = mid;
        }
    }
    spend
}

/// How a target reads the plan's measurements.
#[derive(Clone, Copy)]
enum Target {
    /// One additive measurement, and stream units per measurement unit.
    Linear(usize, f64),
    /// The variance from the centred sum and the centred sum of squares.
    Variance(usize, usize),
}

#[cfg(test)]
mod tests {
    use super::super::tests::{privacy, spec};
    use super::*;

    fn temp(targets: &[(StatKind, f64)], per_horizon: f64) -> Result<Plan, PlanError> {
        let mut s = spec();
        s.lower = -20.0;
        s.upper = 60.0;
        s.histogram_edges = vec![-20.0, 0.0, 10.0, 20.0, 30.0, 40.0, 60.0];
        s.window_size = 500;
        s.max_windows_per_device = 4;
        s.statistics = vec![
            StatKind::Mean,
            StatKind::Variance,
            StatKind::Std,
            StatKind::Histogram,
            StatKind::Quantiles,
        ];
        s.target_error = targets.to_vec();
        let mut p = privacy(Measure::Pure, Relation::ChangeOne);
        p.budget.per_horizon = per_horizon;
        plan(&p, &[s])
    }

    fn half_width(p: &Plan, name: &str) -> f64 {
        p.streams[0]
            .describe()
            .iter()
            .find(|s| s.name == name)
            .unwrap()
            .half_width
            .unwrap()
    }

    #[test]
    fn targets_are_met_and_the_rest_is_shared() {
        let even = temp(&[], 40.0).unwrap();
        let t = [(StatKind::Mean, 0.3), (StatKind::Variance, 8.0)];
        let p = temp(&t, 40.0).unwrap();
        for (name, target) in [("mean", 0.3), ("variance", 8.0)] {
            let h = half_width(&p, name);
            // Met, and not by much more than needed (the rest went elsewhere).
            assert!(
                h <= target && h > 0.8 * target,
                "{name}: ±{h} for a target of {target}"
            );
        }
        // The untargeted histogram and quantiles got what was left, evenly.
        let s = &p.streams[0];
        let spent = |name: &str| {
            s.measurements
                .iter()
                .filter(|m| m.measurement.name() == name)
                .map(|m| rational::to_f64(&m.spent))
                .collect::<Vec<_>>()
        };
        let (h, q) = (spent("histogram")[0], spent("quantile"));
        assert!(
            q.iter().all(|&x| (x / h - 1.0).abs() < 1e-6),
            "{h} vs {q:?}"
        );
        // The same per-window spend as the even split (never more).
        let (a, b) = (
            rational::to_f64(&p.streams[0].per_window),
            rational::to_f64(&even.streams[0].per_window),
        );
        assert!(a <= b * (1.0 + 1e-9) && a > b * 0.999, "{a} vs {b}");
    }

    #[test]
    fn with_every_measurement_targeted_the_slack_raises_them_all() {
        let mut s = spec();
        s.statistics = vec![StatKind::Mean];
        s.quantiles.clear();
        s.histogram_edges.clear();
        s.target_error = vec![(StatKind::Mean, 2.0)];
        let mut privacy = privacy(Measure::Zcdp, Relation::ChangeOne);
        privacy.budget.per_horizon = 100.0;
        let p = plan(&privacy, &[s]).unwrap();
        assert!(half_width(&p, "mean") < 2.0);
    }

    #[test]
    fn a_target_the_budget_cannot_meet_is_refused_with_what_it_needs() {
        let e = temp(&[(StatKind::Mean, 0.05)], 6.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("target_error")
                && e.contains("mean ±0.05 needs")
                && e.contains("the stream has"),
            "{e}"
        );
        // Two targets each within the budget, but not together.
        // Two targets each within the budget, but not together.
        let one = |t: &[(StatKind, f64)]| temp(t, 8.0);
        assert!(
            one(&[(StatKind::Mean, 0.3)]).is_ok() && one(&[(StatKind::Histogram, 5.0)]).is_ok()
        );
        let e = one(&[(StatKind::Mean, 0.3), (StatKind::Histogram, 5.0)]).unwrap_err();
        assert!(e.to_string().contains("histogram ±5 needs 1.07"), "{e}");
    }

    #[test]
    fn unsupported_targets_name_the_statistic_and_why() {
        for (stat, why) in [
            (StatKind::Std, "target `variance`"),
            (StatKind::Quantiles, "density"),
            (StatKind::Count, "not among"),
        ] {
            let e = temp(&[(stat, 1.0)], 40.0).unwrap_err().to_string();
            assert!(e.contains("target_error") && e.contains(why), "{e}");
        }
        let e = temp(&[(StatKind::Mean, -1.0)], 40.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("positive"), "{e}");
        let mut s = spec();
        s.window_ms = Some(300_000);
        s.window_size = 0;
        s.target_error = vec![(StatKind::Mean, 1.0)];
        let e = plan(&privacy(Measure::Pure, Relation::AddRemove), &[s])
            .unwrap_err()
            .to_string();
        assert!(e.contains("ratio"), "{e}");
    }
}
