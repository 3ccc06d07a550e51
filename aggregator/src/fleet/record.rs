//! A fleet record built from the releases of one seq: the combined
//! statistics ([`crate::dp::release::FleetStatistic`] arithmetic through
//! `StreamPlan::combine`) and the public fields (post-processing of
//! published releases; docs/DESIGN.md §6).

use crate::config::Validated;
use crate::dp::release::{FleetCache, PartRelease, ReleasedStatistic};
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
