use super::*;
use crate::accountant::Budget;
use crate::continual::RunningState;
use crate::mechanism::Measure;
use crate::rational::{self};
use crate::relation::Relation;
use crate::rng::ReleaseKey;
use num_rational::BigRational;

pub(crate) fn spec() -> StreamSpec {
    StreamSpec {
        name: "cabin_temp_c".into(),
        lower: -40.0,
        upper: 85.0,
        resolution: 0.1,
        window_size: 100,
        max_readings_per_device: 1,
        max_windows_per_device: 24,
        budget_share: 1.0,
        statistics: vec![
            StatKind::Count,
            StatKind::Mean,
            StatKind::Std,
            StatKind::Histogram,
            StatKind::Quantiles,
        ],
        histogram_edges: vec![-40.0, 0.0, 10.0, 20.0, 30.0, 40.0, 85.0],
        quantiles: vec![0.5, 0.9],
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
    }
}

/// [`spec`] with the windows its relation needs.
pub(crate) fn spec_for(relation: Relation) -> StreamSpec {
    let mut s = spec();
    if relation == Relation::AddRemove {
        s.window_ms = Some(300_000);
        s.window_size = 0;
    }
    s
}

/// [`spec_for`] with only `statistics` (and the settings they need).
fn only(relation: Relation, statistics: Vec<StatKind>) -> StreamSpec {
    let mut s = spec_for(relation);
    if !statistics.contains(&StatKind::Histogram) {
        s.histogram_edges.clear();
    }
    if !statistics.contains(&StatKind::Quantiles) {
        s.quantiles.clear();
    }
    s.statistics = statistics;
    s
}

/// A release key per Monte Carlo repetition (`fill` tells tests apart).
fn rep_key(rep: u64, fill: u8) -> ReleaseKey {
    let mut b = [fill; 32];
    b[..8].copy_from_slice(&rep.to_le_bytes());
    ReleaseKey::from_bytes(b)
}

pub(crate) fn privacy(measure: Measure, relation: Relation) -> PrivacySpec {
    PrivacySpec {
        relation,
        budget: Budget {
            measure,
            per_horizon: 1.0,
            delta: 1e-6,
        },
    }
}

#[test]
fn projection_onto_simplex() {
    let p = project_to_simplex(&[5.0, -2.0, 3.0], 6.0);
    assert!((p.iter().sum::<f64>() - 6.0).abs() < 1e-9);
    assert_eq!(p[1], 0.0);
    assert!((p[0] - 4.0).abs() < 1e-9 && (p[2] - 2.0).abs() < 1e-9);
    assert_eq!(project_to_simplex(&[1.0, 2.0], 3.0), vec![1.0, 2.0]);
}

#[test]
fn field_errors_name_the_field() {
    let p = privacy(Measure::Pure, Relation::ChangeOne);
    type Mutation = Box<dyn Fn(&mut StreamSpec)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (Box::new(|s| s.resolution = 0.0), "resolution"),
        (Box::new(|s| s.upper = 85.05), "upper"),
        (Box::new(|s| s.window_size = 0), "window_size"),
        (
            Box::new(|s| s.max_readings_per_device = 0),
            "max_readings_per_device",
        ),
        (
            Box::new(|s| s.histogram_edges = vec![-40.0, 10.0, 0.0, 85.0]),
            "histogram_edges",
        ),
        (
            Box::new(|s| s.histogram_edges = vec![-30.0, 85.0]),
            "histogram_edges",
        ),
        (Box::new(|s| s.quantiles = vec![1.5]), "quantiles"),
        (Box::new(|s| s.statistics.clear()), "statistics"),
        (
            Box::new(|s| {
                s.resolution = 1e-9;
                s.window_size = 1_000_000_000_000_000;
            }),
            "window_size",
        ),
    ];
    for (mutate, field) in cases {
        let mut s = spec();
        mutate(&mut s);
        match plan(&p, &[s]) {
            Err(PlanError::Field {
                field: f, stream, ..
            }) => {
                assert_eq!((f, stream.as_str()), (field, "cabin_temp_c"))
            }
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn plan_spends_within_budget_and_splits_evenly() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        for rel in [Relation::ChangeOne, Relation::AddRemove] {
            let plan = plan(&privacy(measure, rel), &[spec_for(rel)]).unwrap();
            assert!(plan.per_horizon <= rational::int(1));
            let s = &plan.streams[0];
            let m = s.measurements.len();
            // count (add-remove only), centred sum, sum sq, histogram, 2 quantiles
            assert_eq!(m, if rel == Relation::AddRemove { 6 } else { 5 });
            let spent = rational::to_f64(&plan.per_horizon);
            assert!(spent > 0.999, "{measure:?} {rel:?}: {spent}");
        }
    }
}

#[test]
fn release_is_consistent_with_truth() {
    let plan = plan(&privacy(Measure::Pure, Relation::ChangeOne), &[spec()]).unwrap();
    let s = &plan.streams[0];
    let values: Vec<i64> = (0..100).map(|i| 150 + (i % 20) * 5).collect();
    let truth = s.truth(&values);
    let names: Vec<&str> = truth.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["count", "mean", "std", "histogram", "quantile", "quantile"]
    );
    assert_eq!(truth[0].values, vec![100.0]);
    let mean = values.iter().sum::<i64>() as f64 / 100.0 * 0.1;
    assert!((truth[1].values[0] - mean).abs() < 1e-9);
    assert_eq!(truth[3].values.iter().sum::<f64>(), 100.0);
    let key = ReleaseKey::from_bytes([1; 32]);
    let r = s.release(&key, 0, 0, &values);
    assert_eq!(r.len(), truth.len());
    assert!(r[1].half_width.unwrap() > 0.0);
    assert!((r[3].values.iter().sum::<f64>() - 100.0).abs() < 1e-6);
    assert!(r[4].values[0] <= r[5].values[0]);
}

#[test]
fn windows_must_fit_the_relation() {
    let ar = privacy(Measure::Pure, Relation::AddRemove);
    let co = privacy(Measure::Pure, Relation::ChangeOne);
    let field = |r: Result<Plan, PlanError>| match r {
        Err(PlanError::Field { field, message, .. }) => (field, message),
        other => panic!("{other:?}"),
    };
    // Count windows under add-remove: refused, saying why.
    let (f, msg) = field(plan(&ar, &[spec()]));
    assert_eq!(f, "window");
    assert!(msg.contains("presence"), "{msg}");
    // Time windows under change-one, window_size or a timeout beside them.
    assert_eq!(
        field(plan(&co, &[spec_for(Relation::AddRemove)])).0,
        "window"
    );
    let mut s = spec_for(Relation::AddRemove);
    s.window_size = 10;
    assert_eq!(field(plan(&ar, &[s])).0, "window_size");
    let mut s = spec_for(Relation::AddRemove);
    s.window_timeout_ms = Some(60_000);
    assert_eq!(field(plan(&ar, &[s])).0, "window_timeout");
    // Under add-remove an empty window releases (count 0 plus noise).
    let p = plan(&ar, &[spec_for(Relation::AddRemove)]).unwrap();
    let key = ReleaseKey::from_bytes([3; 32]);
    let r = p.streams[0].release(&key, 0, 7, &[]);
    assert_eq!(r[0].name, "count");
    assert!(r[0].half_width.unwrap() > 0.0);
}

/// A sorted quantile depends on every level's selection: each states
/// the joint spend, and the window's total is unchanged.
#[test]
fn sorted_quantiles_state_the_joint_spend() {
    let mut sp = spec();
    sp.statistics = vec![StatKind::Quantiles];
    sp.histogram_edges.clear();
    sp.quantiles = vec![0.1, 0.5, 0.9];
    let plan = plan(&privacy(Measure::Pure, Relation::ChangeOne), &[sp]).unwrap();
    let s = &plan.streams[0];
    let per_level: Vec<f64> = s
        .measurements
        .iter()
        .map(|m| rational::to_f64(&m.spent))
        .collect();
    let joint: f64 = per_level.iter().sum();
    let values: Vec<i64> = (0..100).collect();
    for st in s.release(&ReleaseKey::from_bytes([2; 32]), 0, 0, &values) {
        assert!((st.spent - joint).abs() < 1e-12, "{} vs {joint}", st.spent);
    }
    assert!((joint - rational::to_f64(&s.per_window)).abs() < 1e-12);
    assert!(per_level[0] < joint);
}

/// Under add-remove, statistics post-processed with the noisy count
/// state its spend too.
#[test]
fn add_remove_statistics_include_the_counts_spend() {
    let p = plan(
        &privacy(Measure::Pure, Relation::AddRemove),
        &[spec_for(Relation::AddRemove)],
    )
    .unwrap();
    let s = &p.streams[0];
    let spent = |name: &str| {
        s.measurements
            .iter()
            .filter(|m| m.measurement.name() == name)
            .map(|m| rational::to_f64(&m.spent))
            .sum::<f64>()
    };
    let key = ReleaseKey::from_bytes([4; 32]);
    for st in s.release(&key, 0, 0, &[100, 200, 300]) {
        let want = match st.name.as_str() {
            "count" => spent("count"),
            "mean" => spent("centred_sum") + spent("count"),
            "std" => spent("centred_sum_sq") + spent("centred_sum") + spent("count"),
            "histogram" => spent("histogram") + spent("count"),
            _ => continue,
        };
        assert!(
            (st.spent - want).abs() < 1e-12,
            "{}: {} vs {want}",
            st.name,
            st.spent
        );
    }
}

/// Every published `spent` covers the measurements its value depends
/// on: each measurement is perturbed in turn (both ways, several sizes;
/// a quantile's choice moved to each end of its candidates) and every
/// statistic whose value moves must state at least that measurement's
/// spend — both relations, both measures, every statistic.
#[test]
fn every_stated_spend_covers_what_its_value_depends_on() {
    use rand_chacha::ChaCha20Rng;
    let cases = [
        (Relation::ChangeOne, false),
        (Relation::ChangeOne, true),
        (Relation::AddRemove, false),
    ];
    for (rel, joint) in cases {
        for measure in [Measure::Pure, Measure::Zcdp] {
            let mut sp = spec_for(rel);
            sp.statistics = vec![
                StatKind::Count,
                StatKind::Sum,
                StatKind::Mean,
                StatKind::Variance,
                StatKind::Std,
                StatKind::Histogram,
                StatKind::Quantiles,
            ];
            sp.quantiles = vec![0.1, 0.5, 0.9];
            sp.joint_quantiles = joint;
            let p = plan(&privacy(measure, rel), &[sp]).unwrap();
            let s = &p.streams[0];
            let values: Vec<i64> = (0..100).map(|i| -300 + (i * 37) % 900).collect();
            let base = s.measure_first::<ChaCha20Rng>(&values, None, 0..s.measurements.len(), None);
            let out0 = s.post_process(&values, &base, true);
            let mut deps: Vec<Vec<usize>> = vec![Vec::new(); out0.len()];
            for i in 0..base.len() {
                let variants: Vec<Measured> = match &base[i] {
                    Measured::Scalar(v) => [1, 7, 50, 400, 5000]
                        .iter()
                        .flat_map(|d| [Measured::Scalar(v + d), Measured::Scalar(v - d)])
                        .collect(),
                    Measured::Vector(v) => (0..v.len())
                        .flat_map(|b| {
                            [3i128, -3, 40, -40].map(|d| {
                                let mut w = v.clone();
                                w[b] += d;
                                Measured::Vector(w)
                            })
                        })
                        .collect(),
                    Measured::Choice(_) => {
                        let c = match &s.measurements[i].measurement {
                            Measurement::Quantile { candidates, .. } => candidates,
                            _ => unreachable!(),
                        };
                        vec![Measured::Choice(c[0]), Measured::Choice(*c.last().unwrap())]
                    }
                    Measured::Choices(cs) => {
                        let c = s.measurements[i].measurement.candidates().unwrap();
                        let (lo, hi) = (c[0], *c.last().unwrap());
                        (0..cs.len())
                            .flat_map(|l| {
                                let mut a = cs.clone();
                                a[..=l].iter_mut().for_each(|x| *x = lo);
                                let mut b = cs.clone();
                                b[l..].iter_mut().for_each(|x| *x = hi);
                                [Measured::Choices(a), Measured::Choices(b)]
                            })
                            .collect()
                    }
                };
                for m in variants {
                    let mut all = base.clone();
                    all[i] = m;
                    for (j, (a, b)) in out0
                        .iter()
                        .zip(s.post_process(&values, &all, true))
                        .enumerate()
                    {
                        if a.values != b.values && !deps[j].contains(&i) {
                            deps[j].push(i);
                        }
                    }
                }
            }
            // Not vacuous: every measurement moves some statistic.
            for i in 0..base.len() {
                assert!(
                    deps.iter().any(|d| d.contains(&i)),
                    "{rel:?} {measure:?}: measurement {i} moves nothing"
                );
            }
            for (j, st) in out0.iter().enumerate() {
                let needed: f64 = deps[j]
                    .iter()
                    .map(|&i| rational::to_f64(&s.measurements[i].spent))
                    .sum();
                assert!(
                    st.spent >= needed - 1e-12,
                    "{rel:?} {measure:?} {}({:?}): states {} but depends on {:?} = {needed}",
                    st.name,
                    st.level,
                    st.spent,
                    deps[j]
                        .iter()
                        .map(|&i| s.measurements[i].measurement.name())
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

/// Add-remove measures the count only for statistics that divide by it
/// (or ask for it): a lone sum is a direct noisy Σx, a histogram projects
/// onto its own noisy total; each then has the whole window budget.
#[test]
fn add_remove_measures_the_count_only_where_needed() {
    use StatKind::*;
    let names = |stats: Vec<StatKind>| {
        let sp = only(Relation::AddRemove, stats);
        let p = plan(&privacy(Measure::Pure, Relation::AddRemove), &[sp]).unwrap();
        p.streams[0]
            .measurements
            .iter()
            .map(|m| m.measurement.name())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(vec![Sum]), ["sum"]);
    assert_eq!(names(vec![Histogram]), ["histogram"]);
    assert_eq!(names(vec![Sum, Histogram]), ["sum", "histogram"]);
    assert_eq!(names(vec![Sum, Count]), ["count", "centred_sum"]);
    assert_eq!(names(vec![Mean]), ["count", "centred_sum"]);
    assert_eq!(
        names(vec![Sum, Std]),
        ["count", "centred_sum", "centred_sum_sq"]
    );
    // Change-one keeps the exact count: the sum stays centred (2kΔ over n known).
    let sp = only(Relation::ChangeOne, vec![Sum]);
    let p = plan(&privacy(Measure::Pure, Relation::ChangeOne), &[sp]).unwrap();
    assert_eq!(
        p.streams[0].measurements[0].measurement.name(),
        "centred_sum"
    );
}

/// The direct add-remove sum: calibrated to `k·max(|L|, |U|)` at the
/// stream's whole per-window budget, its released error matches that
/// Laplace scale (std `√2·scale`), it comes with an interval that covers
/// ≈ 95%, and its error std is below the count-and-centred-sum estimate it
/// replaces (both measured here on the same data).
#[test]
fn the_add_remove_sum_is_direct_and_tighter() {
    let mut direct = only(Relation::AddRemove, vec![StatKind::Sum]);
    direct.max_windows_per_device = 1;
    let mut derived = direct.clone();
    derived.statistics = vec![StatKind::Sum, StatKind::Count];
    let pv = privacy(Measure::Pure, Relation::AddRemove);
    let (pd, pc) = (
        plan(&pv, &[direct]).unwrap(),
        plan(&pv, &[derived]).unwrap(),
    );
    let (sd, sc) = (&pd.streams[0], &pc.streams[0]);
    // 850 units = 85 °C at 0.1, k = 1, ε = 1.
    assert!((sd.measurements[0].sensitivity.l1_f64() - 850.0).abs() < 1e-9);
    let values: Vec<i64> = (0..500).map(|i| 100 + i % 300).collect();
    let truth: f64 = values.iter().sum::<i64>() as f64 * 0.1;
    let key = ReleaseKey::from_bytes([7; 32]);
    let (mut err_d, mut err_c, mut covered) = (Vec::new(), Vec::new(), 0);
    const DRAWS: u64 = 40_000;
    for seq in 0..DRAWS {
        let rd = sd.release(&key, 0, seq, &values);
        let rc = sc.release(&key, 1, seq, &values);
        let sum_c = rc.iter().find(|r| r.name == "sum").unwrap().values[0];
        let e = rd[0].values[0] - truth;
        covered += usize::from(e.abs() <= rd[0].half_width.expect("an interval"));
        err_d.push(e);
        err_c.push(sum_c - truth);
    }
    let std = |e: &[f64]| (e.iter().map(|x| x * x).sum::<f64>() / e.len() as f64).sqrt();
    let want = std::f64::consts::SQRT_2 * 850.0 * 0.1; // √2 · scale, in °C
                                                       // The closed form within 3% (the estimate's own error is ≈ 0.6%).
    assert!(
        (std(&err_d) / want - 1.0).abs() < 0.03,
        "{} vs {want}",
        std(&err_d)
    );
    assert!(
        std(&err_d) < 0.8 * std(&err_c),
        "{} vs {}",
        std(&err_d),
        std(&err_c)
    );
    let rate = covered as f64 / DRAWS as f64;
    assert!((0.945..=0.965).contains(&rate), "coverage {rate}");
}

/// An add-remove histogram alone spends the whole budget on its bins and
/// projects onto their own noisy total: its L1 error is well below that of
/// the same histogram beside a noisy count (half the budget each).
#[test]
fn an_add_remove_histogram_alone_needs_no_count() {
    let alone = only(Relation::AddRemove, vec![StatKind::Histogram]);
    let mut with_count = alone.clone();
    with_count.statistics = vec![StatKind::Histogram, StatKind::Count];
    let pv = privacy(Measure::Pure, Relation::AddRemove);
    let (pa, pc) = (
        plan(&pv, &[alone]).unwrap(),
        plan(&pv, &[with_count]).unwrap(),
    );
    let (sa, sc) = (&pa.streams[0], &pc.streams[0]);
    let values: Vec<i64> = (0..300).map(|i| 100 + (i * 7) % 600).collect();
    let truth = sa.truth(&values)[0].values.clone();
    let key = ReleaseKey::from_bytes([3; 32]);
    let l1 = |got: &[f64]| {
        got.iter()
            .zip(&truth)
            .map(|(a, b)| (a - b).abs())
            .sum::<f64>()
    };
    let (mut ea, mut ec) = (0.0, 0.0);
    for seq in 0..2000u64 {
        let ra = sa.release(&key, 0, seq, &values);
        assert!(ra[0].values.iter().all(|&c| c >= 0.0));
        ea += l1(&ra[0].values);
        let rc = sc.release(&key, 0, seq, &values);
        ec += l1(&rc.iter().find(|r| r.name == "histogram").unwrap().values);
    }
    assert!(ea < 0.7 * ec, "L1 alone {ea} vs with a count {ec}");
}

/// The running sum is published beside the sum of the windows' released
/// sums and their inverse-variance combination: the summed windows repeat
/// the released sums exactly (same keyed draws), each stated std matches
/// its Monte Carlo error (within 12%), and the combination's std is at
/// most either's.
#[test]
fn running_sums_combine_with_the_summed_windows() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        let mut sp = only(Relation::ChangeOne, vec![StatKind::Sum]);
        sp.window_size = 50;
        // One window per device per horizon: noise small enough that the
        // release's clamp to [nL, nU] (which the stated std ignores) is rare.
        sp.max_windows_per_device = 1;
        sp.running_share = 0.5;
        sp.running_lifetime = 1 << 10;
        let p = plan(&privacy(measure, Relation::ChangeOne), &[sp]).unwrap();
        let s = &p.streams[0];
        let values: Vec<i64> = (0..50).map(|i| 100 + i * 3).collect();
        let truth_one: f64 = values.iter().sum::<i64>() as f64 * 0.1;
        let steps = 40u64;
        let (mut running, mut summed, mut combined) = (Vec::new(), Vec::new(), Vec::new());
        let mut stated = None;
        for rep in 0..300u64 {
            let key = rep_key(rep, 0);
            let mut state = RunningState::default();
            let mut released_total = 0.0;
            let mut last = None;
            for seq in 0..steps {
                released_total += s.release(&key, 0, seq, &values)[0].values[0];
                let r = s
                    .running_step(&key, 0, seq, &values, &mut state)
                    .unwrap()
                    .remove(0);
                let (sum, _) = r.summed.expect("a per-window sum is released");
                assert!(
                    (sum - released_total).abs() < 1e-6,
                    "{sum} vs {released_total}"
                );
                last = Some(r);
            }
            let r = last.unwrap();
            let truth = truth_one * steps as f64;
            running.push(r.values[0] - truth);
            summed.push(r.summed.unwrap().0 - truth);
            combined.push(r.combined.unwrap().0 - truth);
            stated = Some((r.std, r.summed.unwrap().1, r.combined.unwrap().1));
        }
        let (std_r, std_s, std_c) = stated.unwrap();
        assert!(
            std_c <= std_r.min(std_s) + 1e-12,
            "{std_c} vs {std_r}, {std_s}"
        );
        let rms = |e: &[f64]| (e.iter().map(|x| x * x).sum::<f64>() / e.len() as f64).sqrt();
        for (name, e, want) in [("summed", &summed, std_s), ("combined", &combined, std_c)] {
            let got = rms(e);
            assert!(
                (got / want - 1.0).abs() < 0.12,
                "{measure:?} {name}: {got} vs {want}"
            );
        }
    }
}

/// The running histogram is published beside the windows' noisy bins added
/// up and their bin-by-bin combination: each stated per-bin std matches its
/// Monte Carlo error (within 12%) and the combination's is at most either's.
#[test]
fn running_histograms_combine_with_the_summed_bins() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        let mut sp = only(Relation::ChangeOne, vec![StatKind::Histogram]);
        sp.window_size = 50;
        sp.max_windows_per_device = 1;
        sp.running_share = 0.5;
        sp.running_lifetime = 1 << 10;
        let p = plan(&privacy(measure, Relation::ChangeOne), &[sp]).unwrap();
        let s = &p.streams[0];
        let values: Vec<i64> = (0..50).map(|i| -300 + i * 20).collect();
        let steps = 30u64;
        let truth: Vec<f64> = crate::stats::histogram(&values, &s.histogram_edges_units())
            .into_iter()
            .map(|c| c as f64 * steps as f64)
            .collect();
        let (mut summed, mut combined, mut stated) = (Vec::new(), Vec::new(), None);
        for rep in 0..200u64 {
            let key = rep_key(rep, 1);
            let mut state = RunningState::default();
            let mut last = None;
            for seq in 0..steps {
                let mut r = s.running_step(&key, 0, seq, &values, &mut state).unwrap();
                assert_eq!(r.len(), 2, "sum and histogram");
                last = Some(r.remove(1));
            }
            let r = last.unwrap();
            assert_eq!(r.name, "histogram");
            let (sb, sb_std) = r.summed_bins.clone().expect("summed bins");
            let (cb, cb_std) = r.combined_bins.clone().expect("combined bins");
            summed.extend(sb.iter().zip(&truth).map(|(x, t)| x - t));
            combined.extend(cb.iter().zip(&truth).map(|(x, t)| x - t));
            stated = Some((r.std, sb_std, cb_std));
        }
        let (std_r, std_s, std_c) = stated.unwrap();
        assert!(
            std_c <= std_r.min(std_s) + 1e-12,
            "{std_c} vs {std_r}, {std_s}"
        );
        let rms = |e: &[f64]| (e.iter().map(|x| x * x).sum::<f64>() / e.len() as f64).sqrt();
        for (name, e, want) in [("summed", &summed, std_s), ("combined", &combined, std_c)] {
            let got = rms(e);
            assert!(
                (got / want - 1.0).abs() < 0.12,
                "{measure:?} {name}: {got} vs {want}"
            );
        }
    }
}

/// Under add-remove every statistic's reported sensitivity and scale come
/// from public quantities: the same for windows of any size (they used to
/// be divided by the window's noisy count).
#[test]
fn add_remove_metadata_does_not_depend_on_the_window() {
    let sp = only(
        Relation::AddRemove,
        vec![StatKind::Mean, StatKind::Variance, StatKind::Std],
    );
    let p = plan(&privacy(Measure::Pure, Relation::AddRemove), &[sp]).unwrap();
    let s = &p.streams[0];
    let key = ReleaseKey::from_bytes([8; 32]);
    let meta = |n: i64, seq: u64| {
        let values: Vec<i64> = (0..n).map(|i| 100 + i % 50).collect();
        s.release(&key, 0, seq, &values)
            .into_iter()
            .map(|r| (r.name, r.sensitivity, r.scale))
            .collect::<Vec<_>>()
    };
    let first = meta(10, 0);
    for (n, seq) in [(500, 1), (37, 2), (2000, 3)] {
        assert_eq!(meta(n, seq), first, "n = {n}");
    }
}

/// Variance and std (change-one) come with 95% intervals that cover the
/// truth in at least 95% of windows, for spread-out data and for a window
/// of equal values (where the clamped 0 used to look exact: it now carries
/// the width the noise allows); where clamping is rare the estimate's mean
/// error is its stated bias `−Var(e₁)/(4n²)` (within 3 standard errors).
#[test]
fn variance_and_std_have_intervals_and_no_bias() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        let mut sp = only(Relation::ChangeOne, vec![StatKind::Variance, StatKind::Std]);
        sp.window_size = 2000;
        sp.max_windows_per_device = 1;
        let p = plan(&privacy(measure, Relation::ChangeOne), &[sp]).unwrap();
        let s = &p.streams[0];
        let spread: Vec<i64> = (0..2000).map(|i| (i * 37) % 1250 - 400).collect();
        let flat = vec![200i64; 2000];
        for (name, values) in [("spread", spread), ("flat", flat)] {
            let truth = s.truth(&values);
            let (tv, ts) = (truth[0].values[0], truth[1].values[0]);
            let key = ReleaseKey::from_bytes([6; 32]);
            let (mut cover_v, mut cover_s, mut errs) = (0, 0, Vec::new());
            let runs = 3000u64;
            for seq in 0..runs {
                let r = s.release(&key, 0, seq, &values);
                let (v, hv) = (r[0].values[0], r[0].half_width.expect("an interval"));
                let (sd, hs) = (r[1].values[0], r[1].half_width.expect("an interval"));
                cover_v += usize::from((v - tv).abs() <= hv + 1e-9);
                cover_s += usize::from((sd - ts).abs() <= hs + 1e-9);
                errs.push(v - tv);
                if name == "flat" {
                    assert!(hv > 0.0 && hs > 0.0, "a released 0 shows its width");
                }
            }
            for (what, c) in [("variance", cover_v), ("std", cover_s)] {
                let rate = c as f64 / runs as f64;
                assert!(rate >= 0.95, "{measure:?} {name} {what}: coverage {rate}");
            }
            if name == "spread" {
                let mean = errs.iter().sum::<f64>() / runs as f64;
                let sd =
                    (errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / runs as f64).sqrt();
                let se = sd / (runs as f64).sqrt();
                let Mechanism::Additive(e1) = &s.measurements[0].mechanism else {
                    unreachable!("the centred sum is additive")
                };
                let want = super::moments::bias(2000.0, e1) * 0.01; // units² → °C²
                assert!(
                    (mean - want).abs() <= 3.0 * se,
                    "{measure:?}: bias {mean} vs {want} (se {se})"
                );
            }
        }
    }
}

/// `clamped`: the share of a window's readings at the universe's bounds,
/// a DP statistic with its own measurement (sensitivity `k`); under
/// change-one its interval covers the true share in ≥ 95% of windows, under
/// add-remove it divides by the noisy count and states that spend too.
#[test]
fn the_clamped_share_is_a_dp_statistic() {
    let u_lo = -400; // -40.0 °C at 0.1
    let values: Vec<i64> = (0..1000)
        .map(|i| match i % 10 {
            0 => u_lo,
            1 => 850,
            _ => 100 + i % 300,
        })
        .collect();
    let sp = only(Relation::ChangeOne, vec![StatKind::Clamped]);
    let mut sp = sp;
    sp.window_size = 1000;
    let p = plan(&privacy(Measure::Pure, Relation::ChangeOne), &[sp]).unwrap();
    let s = &p.streams[0];
    assert_eq!(s.measurements[0].measurement.name(), "boundary_count");
    assert_eq!(s.truth(&values)[0].values, vec![0.2]);
    let key = ReleaseKey::from_bytes([2; 32]);
    let mut covered = 0;
    for seq in 0..2000u64 {
        let r = &s.release(&key, 0, seq, &values)[0];
        assert_eq!(r.name, "clamped");
        assert!((0.0..=1.0).contains(&r.values[0]));
        covered += usize::from((r.values[0] - 0.2).abs() <= r.half_width.unwrap() + 1e-12);
    }
    assert!(covered as f64 / 2000.0 >= 0.95, "coverage {covered}/2000");
    let ar = only(Relation::AddRemove, vec![StatKind::Clamped]);
    let p = plan(&privacy(Measure::Pure, Relation::AddRemove), &[ar]).unwrap();
    let names: Vec<&str> = p.streams[0]
        .measurements
        .iter()
        .map(|m| m.measurement.name())
        .collect();
    assert_eq!(names, ["count", "boundary_count"]);
    let r = &p.streams[0].release(&key, 0, 0, &values)[0];
    let both: f64 = p.streams[0]
        .measurements
        .iter()
        .map(|m| rational::to_f64(&m.spent))
        .sum();
    assert!(
        (r.spent - both).abs() < 1e-12,
        "states the count's spend too"
    );
}

/// The device-limit alarm takes its share of the stream's budget (per
/// group's lane, `G` times in the stream's spend), the windows the rest,
/// and the whole plan still spends exactly the budget; a share that leaves
/// the windows nothing is refused naming it.
#[test]
fn the_device_alarm_takes_its_share_and_the_plan_spends_the_budget() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        let pr = privacy(measure, Relation::ChangeOne);
        let budget = rational::exact(pr.budget.per_horizon);
        let without = plan(&pr, &[spec()]).unwrap();
        let mut sp = spec();
        sp.device_alarm_share = 0.2;
        let with = plan(&pr, &[sp.clone()]).unwrap();
        let s = &with.streams[0];
        let alarm = s.alarm.as_ref().expect("planned");
        assert_eq!(alarm.spent, &budget * rational::decimal(0.2));
        // Calibration rounds each measurement's spend down a little.
        let near = |a: &BigRational, b: &BigRational| {
            let (a, b) = (rational::to_f64(a), rational::to_f64(b));
            a <= b * (1.0 + 1e-12) && a >= b * (1.0 - 1e-9)
        };
        assert!(with.per_horizon <= budget);
        assert!(near(&with.per_horizon, &budget), "{}", with.per_horizon);
        assert_eq!(s.per_horizon(), with.per_horizon);
        let windows = &without.streams[0].per_window * rational::decimal(0.8);
        assert!(
            near(&s.per_window, &windows),
            "{} {}",
            s.per_window,
            windows
        );
        assert!(without.streams[0].alarm.is_none());
        sp.running_share = 0.8;
        let err = plan(&pr, &[sp]).unwrap_err().to_string();
        assert!(err.contains("device_alarm_share"), "{err}");
    }
}
