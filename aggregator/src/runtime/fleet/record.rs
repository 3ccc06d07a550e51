//! A fleet record built from the releases of one seq: the combined
//! statistics ([`crate::dp::release::FleetStatistic`] arithmetic through
//! `StreamPlan::combine`) and the public fields (post-processing of
//! published releases; docs/DESIGN.md §6).

use crate::config::Validated;
use crate::dp::release::{FleetCache, PartRelease, RawMoments, ReleasedStatistic};
use std::collections::{BTreeMap, HashMap};

/// The record for the partitions' releases `parts` of one seq (none if they cannot be combined,
/// which `Combiner::offer`'s checks rule out).
pub(super) fn build(
    v: &Validated,
    cache: &mut FleetCache,
    input_partitions: i32,
    (s, seq): (usize, u64),
    parts: &BTreeMap<i32, proto::WindowRelease>,
    keyed: Option<(usize, String, HashMap<String, String>)>,
) -> Option<proto::FleetRelease> {
    let plan = &v.plan.streams[keyed.as_ref().map_or(s, |k| k.0)];
    let stats: Vec<Vec<ReleasedStatistic>> = parts
        .values()
        .map(|r| r.statistics.iter().map(released).collect())
        .collect();
    let combined_parts: Vec<PartRelease<'_>> = parts
        .values()
        .zip(&stats)
        .map(|(r, st)| PartRelease {
            n: r.n,
            statistics: st,
            moments: r.moments.as_ref().map(|m| RawMoments {
                count: m.count,
                centred_sum: m.centred_sum,
                centred_sum_sq: m.centred_sum_sq,
                boundary: m.boundary,
                sum: m.sum,
            }),
        })
        .collect();
    let combined = match plan.combine(&combined_parts, cache) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(stream = %plan.spec.name, window_seq = seq, "fleet release not combined: {e}");
            return None;
        }
    };
    let first = parts.values().next()?;
    let statistics = combined
        .into_iter()
        .zip(&first.statistics)
        .map(|(c, part)| proto::FleetStatistic {
            name: c.name,
            values: c.values,
            level: c.level,
            combination: c.combination,
            std: c.std,
            half_width: c.half_width,
            bin_edges: part.bin_edges.clone(),
            spent: part.spent,
        })
        .collect();
    let rs = || parts.values();
    let (stream, group) = match keyed {
        Some((_, name, group)) => (name, group),
        None => (
            plan.spec.name.clone(),
            crate::config::dimensions::group_map(plan),
        ),
    };
    Some(proto::FleetRelease {
        stream,
        window_seq: seq,
        partitions: parts.keys().copied().collect(),
        input_partitions,
        complete: parts.len() == input_partitions as usize,
        n: rs().map(|r| r.n).sum(),
        padded: rs().map(|r| r.padded).sum(),
        first_event_time_ms: rs().map(|r| r.first_event_time_ms).min().unwrap_or(0),
        last_event_time_ms: rs().map(|r| r.last_event_time_ms).max().unwrap_or(0),
        statistics,
        guarantee: first.guarantee.clone(),
        group,
        running: running(parts),
        released_at_ms: rs().map(|r| r.released_at_ms).max().unwrap_or(0),
    })
}

/// A published statistic as the privacy core's combination reads it.
fn released(s: &proto::Statistic) -> ReleasedStatistic {
    ReleasedStatistic {
        name: s.name.clone(),
        level: s.level,
        values: s.values.clone(),
        mechanism: s.mechanism.clone(),
        sensitivity: s.sensitivity,
        scale: s.scale,
        spent: s.spent,
        half_width: s.half_width,
        rank_half_width: s.rank_half_width,
    }
}

/// The partitions' running totals of one seq added up: values, counts and
/// the summed and combined estimates; each std is the root of the summed
/// variances, the partitions' noises being independent (keyed per
/// partition). Post-processing of published totals: free. Empty unless
/// every part carries the same totals (names, windows, bins, estimates):
/// a lane whose totals stopped or restarted is not added to the others.
fn running(parts: &BTreeMap<i32, proto::WindowRelease>) -> Vec<proto::v1::RunningTotal> {
    let Some(first) = parts.values().next().map(|r| &r.running) else {
        return vec![];
    };
    let shape = |t: &proto::v1::RunningTotal| {
        (
            t.name.clone(),
            t.windows,
            t.values.len(),
            (t.summed.is_some(), t.combined.is_some()),
            (t.summed_bins.len(), t.combined_bins.len()),
        )
    };
    let same = |ts: &[proto::v1::RunningTotal]| ts.iter().map(shape).eq(first.iter().map(shape));
    if !parts.values().all(|r| same(&r.running)) {
        return vec![];
    }
    first
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let all = || parts.values().map(move |r| &r.running[i]);
            let add = |f: fn(&proto::v1::RunningTotal) -> &[f64]| -> Vec<f64> {
                (0..f(t).len())
                    .map(|j| all().map(|r| f(r)[j]).sum())
                    .collect()
            };
            let total = |f: fn(&proto::v1::RunningTotal) -> Option<f64>| all().map(f).sum();
            let root = |f: fn(&proto::v1::RunningTotal) -> Option<f64>| {
                all()
                    .map(|r| f(r).map(|s| s * s))
                    .sum::<Option<f64>>()
                    .map(f64::sqrt)
            };
            proto::v1::RunningTotal {
                name: t.name.clone(),
                windows: t.windows,
                count: all().map(|r| r.count).sum(),
                values: add(|r| &r.values),
                std: root(|r| Some(r.std)).unwrap_or(0.0),
                mechanism: t.mechanism.clone(),
                spent: t.spent,
                bin_edges: t.bin_edges.clone(),
                summed: total(|r| r.summed),
                summed_std: root(|r| r.summed_std),
                combined: total(|r| r.combined),
                combined_std: root(|r| r.combined_std),
                summed_bins: add(|r| &r.summed_bins),
                combined_bins: add(|r| &r.combined_bins),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::v1::RunningTotal;

    fn part(p: i32, windows: u64, sum: f64, std: f64, bins: Vec<f64>) -> proto::WindowRelease {
        proto::WindowRelease {
            partition: p,
            running: vec![
                RunningTotal {
                    name: "sum".into(),
                    windows,
                    count: windows * 10,
                    values: vec![sum],
                    std,
                    summed: Some(sum + 1.0),
                    summed_std: Some(2.0 * std),
                    combined: Some(sum + 0.5),
                    combined_std: Some(std / 2.0),
                    ..Default::default()
                },
                RunningTotal {
                    name: "histogram".into(),
                    windows,
                    count: windows * 10,
                    values: bins.clone(),
                    std: 1.0,
                    summed_std: Some(3.0),
                    summed_bins: bins,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    /// The fleet's running totals are the partitions' added up, each std
    /// the root of the summed variances; partitions whose totals differ in
    /// shape (another number of windows: a lane that restarted its totals)
    /// give none rather than a sum of unlike totals.
    #[test]
    fn running_totals_add_up_over_partitions() {
        let parts: BTreeMap<i32, proto::WindowRelease> = [
            (0, part(0, 5, 100.0, 3.0, vec![1.0, 2.0])),
            (1, part(1, 5, 50.0, 4.0, vec![10.0, 20.0])),
        ]
        .into();
        let r = running(&parts);
        assert_eq!(r.len(), 2);
        let (sum, hist) = (&r[0], &r[1]);
        assert_eq!(
            (sum.windows, sum.count, sum.values.clone()),
            (5, 100, vec![150.0])
        );
        assert!((sum.std - 5.0).abs() < 1e-12, "{}", sum.std);
        assert_eq!((sum.summed, sum.combined), (Some(152.0), Some(151.0)));
        assert!((sum.summed_std.unwrap() - 10.0).abs() < 1e-12);
        assert!((sum.combined_std.unwrap() - 2.5).abs() < 1e-12);
        assert_eq!(hist.values, vec![11.0, 22.0]);
        assert_eq!(hist.summed_bins, vec![11.0, 22.0]);
        assert!((hist.summed_std.unwrap() - 18f64.sqrt()).abs() < 1e-12);
        assert_eq!((hist.combined, hist.combined_std), (None, None));

        let mut unlike = parts.clone();
        unlike.insert(1, part(1, 4, 50.0, 4.0, vec![10.0, 20.0]));
        assert!(running(&unlike).is_empty(), "windows differ");
        let mut none = parts;
        none.get_mut(&1).unwrap().running.clear();
        assert!(running(&none).is_empty(), "a partition without totals");
    }
}
