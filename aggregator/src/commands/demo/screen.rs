//! What the demo prints while releases land: each fleet-wide release next
//! to its true value (each partition's too with `--partitions`), and at
//! the end the accuracy summaries and the latest mean of every group.

use super::DemoOutcome;
use crate::commands::show;
use crate::config::Validated;
use crate::dp::release::ReleasedStatistic;
use crate::runtime::pipeline::ReleaseEvent;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Window values by (stream, seq) and partition until their fleet-wide
/// release arrives (the truth of the fleet's window is computed from them).
#[derive(Default)]
struct FleetTruth {
    values: BTreeMap<(String, u64), BTreeMap<i32, Vec<i64>>>,
}

/// A group's latest fleet-wide mean: (window seq, value, 95% half-width).
type GroupMean = (u64, f64, Option<f64>);

/// Most window seqs [`FleetTruth`] holds (the oldest go first).
const TRUTH_SEQS: usize = 1000;

impl FleetTruth {
    fn keep(&mut self, e: &ReleaseEvent) {
        if let Some(values) = &e.values {
            let r = &e.release;
            self.values
                .entry((r.stream.clone(), r.window_seq))
                .or_default()
                .insert(r.partition, values.clone());
            while self.values.len() > TRUTH_SEQS {
                self.values.pop_first();
            }
        }
    }

    /// The truth of `f`'s partitions' windows together, if all are known.
    fn of(&self, v: &Validated, f: &proto::FleetRelease) -> Option<Vec<ReleasedStatistic>> {
        let stream = v.plan.streams.iter().find(|s| s.spec.name == f.stream)?;
        let parts = self.values.get(&(f.stream.clone(), f.window_seq))?;
        let mut all = Vec::new();
        for p in &f.partitions {
            all.extend_from_slice(parts.get(p)?);
        }
        Some(stream.truth(&all))
    }
}

/// The demo's terminal while it runs.
pub(super) struct Screen {
    v: Arc<Validated>,
    units: BTreeMap<String, String>,
    started: Instant,
    /// Print every partition's release too.
    partitions: bool,
    truths: FleetTruth,
    summary: show::Summary,
    fleet_summary: show::Summary,
    /// Grouped streams: the latest fleet-wide mean of each group.
    groups: BTreeMap<String, BTreeMap<String, GroupMean>>,
    fleet_releases: u64,
}

impl Screen {
    pub(super) fn new(v: Arc<Validated>, partitions: bool) -> Self {
        Self {
            units: show::units(&v),
            summary: show::Summary::new(&v),
            fleet_summary: show::Summary::new(&v),
            v,
            started: Instant::now(),
            partitions,
            truths: FleetTruth::default(),
            groups: BTreeMap::new(),
            fleet_releases: 0,
        }
    }

    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// A partition's release landed.
    pub(super) fn landed(&mut self, e: ReleaseEvent) {
        if self.partitions {
            let line = show::release(&self.at(), &e.release, e.truth.as_deref(), &self.units);
            println!("{line}");
        }
        if let Some(t) = &e.truth {
            self.summary.add(&e.release, t);
        }
        self.truths.keep(&e);
    }

    /// A fleet-wide release landed.
    pub(super) fn fleet_landed(&mut self, f: proto::FleetRelease) {
        let plan = self.v.plan.streams.iter().find(|s| s.spec.name == f.stream);
        if let (Some(g), Some(m)) = (
            plan.and_then(|p| p.group.as_ref()),
            f.statistics.iter().find(|s| s.name == "mean"),
        ) {
            self.groups
                .entry(g.base.clone())
                .or_default()
                .insert(g.key.clone(), (f.window_seq, m.values[0], m.half_width));
        }
        let truth = self.truths.of(&self.v, &f);
        println!(
            "{}",
            show::fleet(&self.at(), &f, truth.as_deref(), &self.units)
        );
        if let Some(t) = &truth {
            self.fleet_summary.add_fleet(&f, t);
        }
        self.fleet_releases += 1;
    }

    /// The run's outcome, its summary text included.
    pub(super) fn finish(self, windows_released: u64) -> DemoOutcome {
        let mut text = self.fleet_summary.to_text("Fleet-wide")
            + &self.summary.to_text("Per partition (drill-down)");
        for (stream, by) in &self.groups {
            let unit = self.units.get(stream.as_str()).cloned().unwrap_or_default();
            let parts: Vec<String> = by
                .iter()
                .map(|(k, (seq, m, hw))| {
                    let hw = hw.map_or(String::new(), |h| format!(" ± {h:.3}"));
                    format!("{k}: {m:.3}{hw} {unit} (window {seq})")
                })
                .collect();
            text += &format!(
                "By group, {stream} mean, latest fleet-wide: {}\n",
                parts.join(" · ")
            );
        }
        DemoOutcome {
            useful: self.summary.useful(),
            fleet_useful: self.fleet_summary.useful(),
            fleet_releases: self.fleet_releases,
            summary: text,
            group_means: self
                .groups
                .iter()
                .flat_map(|(s, by)| by.iter().map(move |(k, m)| ((s.clone(), k.clone()), m.1)))
                .collect(),
            windows_released,
        }
    }

    /// The time since the start, as each line shows it.
    fn at(&self) -> String {
        format!("[{:>5.1}s]", self.started.elapsed().as_secs_f64())
    }
}
