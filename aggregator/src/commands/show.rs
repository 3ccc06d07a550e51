//! Releases as text for a terminal: one line per window (each statistic
//! with its 95% interval, and the true value where the caller has it: the
//! demo owns its data), plus a line for the running totals. Used by
//! `fleetdp demo` and `fleetdp tail`.

use crate::config::Validated;
use crate::dp::release::ReleasedStatistic;
use std::collections::BTreeMap;

/// Each stream's `unit` setting (streams without one are left out).
pub(crate) fn units(v: &Validated) -> BTreeMap<String, String> {
    let declared: BTreeMap<&str, &String> = v
        .config
        .streams
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.unit.as_ref()?)))
        .collect();
    // Planned names too: a group's stream has its declared stream's unit.
    v.plan
        .streams
        .iter()
        .filter_map(|s| {
            Some((
                s.spec.name.clone(),
                (*declared.get(s.declared_name())?).clone(),
            ))
        })
        .chain(declared.iter().map(|(k, u)| (k.to_string(), (*u).clone())))
        .collect()
}

/// The unit a statistic's values are in, given the readings' unit.
fn unit_of(name: &str, unit: &str) -> String {
    match name {
        _ if unit.is_empty() => String::new(),
        "mean" | "sum" | "std" | "quantile" => format!(" {unit}"),
        "variance" => format!(" {unit}²"),
        _ => String::new(),
    }
}

/// A statistic as the printers and the summary read it (a partition's or
/// a fleet-wide one).
pub(crate) struct View<'a> {
    name: &'a str,
    level: Option<f64>,
    values: &'a [f64],
    half_width: Option<f64>,
    /// Quantiles: the rank interval's half-width in readings.
    rank_half_width: Option<f64>,
    spent: f64,
    bin_edges: &'a [f64],
}

/// Both statistic messages have these fields under the same names (a
/// window's quantiles also a rank interval: `$rank` reads it).
macro_rules! view_from {
    ($t:ty, $rank:expr) => {
        impl<'a> From<&'a $t> for View<'a> {
            fn from(s: &'a $t) -> Self {
                View {
                    name: &s.name,
                    level: s.level,
                    values: &s.values,
                    half_width: s.half_width,
                    rank_half_width: $rank(s),
                    spent: s.spent,
                    bin_edges: &s.bin_edges,
                }
            }
        }
    };
}
view_from!(proto::Statistic, |s: &proto::Statistic| s.rank_half_width);
view_from!(proto::FleetStatistic, |_| None);

impl View<'_> {
    fn label(&self) -> String {
        match self.level {
            Some(q) => format!("p{}", (q * 100.0).round()),
            None => self.name.to_string(),
        }
    }
}

/// `n`: the window's size where it is public (a rank interval then reads
/// as levels too), else 0.
fn stat(r: &View<'_>, truth: Option<&ReleasedStatistic>, unit: &str, n: u64) -> String {
    let name = r.label();
    if r.name == "histogram" {
        // Each bin after its edges, `[a,b)` (the last closed).
        let bins = r.values.len();
        let v: Vec<String> = r
            .values
            .iter()
            .enumerate()
            .map(
                |(i, x)| match (r.bin_edges.get(i), r.bin_edges.get(i + 1)) {
                    (Some(a), Some(b)) => {
                        let close = if i + 1 == bins { ']' } else { ')' };
                        format!("[{a},{b}{close}:{x:.0}")
                    }
                    _ => format!("{x:.0}"),
                },
            )
            .collect();
        // The truth only where it is known (the demo), never "(true [])".
        let t = truth.map_or(String::new(), |t| {
            let t: Vec<String> = t.values.iter().map(|x| format!("{x:.0}")).collect();
            format!(" (true {})", t.join(" "))
        });
        return format!("hist {}{t}", v.join(" "));
    }
    let v = r.values.first().copied().unwrap_or(f64::NAN);
    let hw = r
        .half_width
        .map(|h| format!(" ± {h:.2}"))
        .or(r.rank_half_width.map(|h| rank_text(h, r.level, n)))
        .unwrap_or_default();
    let t = truth
        .and_then(|t| t.values.first())
        .map(|x| format!(" (true {x:.2})"))
        .unwrap_or_default();
    let u = unit_of(r.name, unit);
    format!("{name} {v:.2}{hw}{u}{t}")
}

/// A rank interval of `r` readings as text: with a public window size
/// `n` also as the levels it spans ("p38–p62" for p50, r = 12, n = 100).
fn rank_text(r: f64, level: Option<f64>, n: u64) -> String {
    match level.filter(|_| n > 0) {
        Some(q) => {
            let at = |x: f64| (100.0 * x.clamp(0.0, 1.0)).round();
            let (lo, hi) = (at(q - r / n as f64), at(q + r / n as f64));
            format!(" (p{lo}–p{hi}: ranks ± {r:.0})")
        }
        None => format!(" (ranks ± {r:.0})"),
    }
}

/// A fleet-wide release as text, after `at`: the partitions it combines
/// out of all, then every statistic with its interval.
pub(crate) fn fleet(
    at: &str,
    f: &proto::FleetRelease,
    truth: Option<&[ReleasedStatistic]>,
    units: &BTreeMap<String, String>,
) -> String {
    let unit = units.get(&f.stream).map_or("", String::as_str);
    let stats: Vec<String> = f
        .statistics
        .iter()
        .enumerate()
        .map(|(i, s)| stat(&s.into(), truth.and_then(|t| t.get(i)), unit, 0))
        .collect();
    let n = if f.n > 0 {
        format!(" n={}", f.n)
    } else {
        String::new()
    };
    format!(
        "{at} {:<13} FLEET #{:<3} [{}/{} partitions]{n} {}",
        f.stream,
        f.window_seq,
        f.partitions.len(),
        f.input_partitions,
        stats.join(" · ")
    ) + &running_mean(&f.running, unit, "fleet-wide ")
}

/// A release as text, after `at` (a time or an elapsed time).
pub(crate) fn release(
    at: &str,
    r: &proto::WindowRelease,
    truth: Option<&[ReleasedStatistic]>,
    units: &BTreeMap<String, String>,
) -> String {
    let unit = units.get(&r.stream).map_or("", String::as_str);
    let stats: Vec<String> = r
        .statistics
        .iter()
        .enumerate()
        .map(|(i, s)| stat(&s.into(), truth.and_then(|t| t.get(i)), unit, r.n))
        .collect();
    let out = format!(
        "{at} {:<13} p{} #{:<3} n={} {}",
        r.stream,
        r.partition,
        r.window_seq,
        r.n,
        stats.join(" · ")
    );
    out + &running_mean(&r.running, unit, "")
}

/// The running mean since the start (post-processing of the running sum),
/// beside the summed windows and the combination of both, as a line of its
/// own (`scope` says whose: "" or "fleet-wide "); "" without a running sum.
/// Under add-remove the readings' count is a noisy total of its own: the
/// line divides by it and shows both totals.
fn running_mean(running: &[proto::v1::RunningTotal], unit: &str, scope: &str) -> String {
    let mut out = String::new();
    let noisy_count = running
        .iter()
        .find(|t| t.name == "count")
        .and_then(|t| Some((*t.values.first()?, t.std)));
    if let (Some(sum), Some((c, c_std))) = (running.iter().find(|t| t.name == "sum"), noisy_count) {
        let line = format!(
            "{scope}running mean over {} windows: {:.2}{} (sum {:.2} ± {:.2}, count {:.0} ± {:.0}, 1 std)",
            sum.windows,
            sum.values[0] / c.max(1.0),
            unit_of("mean", unit),
            sum.values[0],
            sum.std,
            c,
            c_std
        );
        return format!("\n{:>9} {line}", "");
    }
    if let Some(sum) = running.iter().find(|t| t.name == "sum") {
        let count = sum.count.max(1) as f64;
        let mut line = format!(
            "{scope}running mean over {} windows: {:.2} ± {:.2}{} (1 std)",
            sum.windows,
            sum.values[0] / count,
            sum.std / count,
            unit_of("mean", unit)
        );
        if let (Some(s), Some(ss), Some(c), Some(cs)) =
            (sum.summed, sum.summed_std, sum.combined, sum.combined_std)
        {
            line += &format!(
                "; summed windows {:.2} ± {:.2}; combined {:.2} ± {:.2}",
                s / count,
                ss / count,
                c / count,
                cs / count
            );
        }
        out += &format!("\n{:>9} {line}", "");
    }
    out
}

/// How the demo's releases compared with the truth, per stream and
/// statistic: releases, how often the 95% interval held the true value,
/// the median |error| and the spend per window (ε or ρ).
#[derive(Debug, Default)]
pub(crate) struct Summary {
    rows: std::collections::BTreeMap<(String, String), Row>,
    /// What each planned stream declares a useful figure to be.
    tolerances: BTreeMap<String, crate::commands::judge::Tolerance>,
    units: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct Row {
    values: u64,
    with_interval: u64,
    covered: u64,
    /// Quantiles: values with a rank interval, and the widest.
    with_ranks: u64,
    ranks: f64,
    /// Within the stream's target or the plan's bound (`crate::commands::judge`).
    useful: u64,
    errors: Vec<f64>,
    spent: f64,
    /// The bound, as text.
    bound: String,
}

impl Summary {
    /// An empty summary judging figures by `v`'s streams (`crate::commands::judge`).
    pub fn new(v: &Validated) -> Self {
        Self {
            tolerances: crate::commands::judge::tolerances(v),
            units: units(v),
            ..Self::default()
        }
    }

    /// Count one release against its noise-free statistics.
    pub fn add(&mut self, r: &proto::WindowRelease, truth: &[ReleasedStatistic]) {
        let stats = r.statistics.iter().map(View::from);
        self.add_views(&r.stream, (r.n, 1), stats, truth);
    }

    /// Count one fleet-wide release against the truth of its partitions'
    /// windows together.
    pub fn add_fleet(&mut self, f: &proto::FleetRelease, truth: &[ReleasedStatistic]) {
        let stats = f.statistics.iter().map(View::from);
        self.add_views(&f.stream, (f.n, f.partitions.len()), stats, truth);
    }

    /// `(n, partitions)`: the release's readings and how many partitions
    /// it combines.
    fn add_views<'a>(
        &mut self,
        stream: &str,
        (n, partitions): (u64, usize),
        stats: impl Iterator<Item = View<'a>>,
        truth: &[ReleasedStatistic],
    ) {
        let tolerance = self.tolerances.get(stream).cloned().unwrap_or_default();
        let unit = self.units.get(stream).map_or("", String::as_str);
        for (s, t) in stats.zip(truth) {
            let bound = tolerance.bound(s.name, n, partitions);
            let row = self
                .rows
                .entry((stream.to_string(), s.label()))
                .or_default();
            row.spent = s.spent;
            row.bound = tolerance.describe(s.name, n, partitions, unit);
            // Histograms: every bin counts as a value.
            for (v, tv) in s.values.iter().zip(&t.values) {
                let err = (v - tv).abs();
                row.values += 1;
                row.errors.push(err);
                let inside = s.half_width.is_some_and(|h| err <= h + 1e-9);
                if s.half_width.is_some() {
                    row.with_interval += 1;
                    row.covered += u64::from(inside);
                }
                if let Some(r) = s.rank_half_width {
                    row.with_ranks += 1;
                    row.ranks = row.ranks.max(r);
                }
                row.useful += u64::from(err <= bound + 1e-9);
            }
        }
    }

    /// Figures (histogram bins each) within their stream's target or the
    /// plan's bound, and all figures.
    pub fn useful(&self) -> (u64, u64) {
        self.rows
            .values()
            .fold((0, 0), |(u, n), r| (u + r.useful, n + r.values))
    }

    /// The summary as text under `title`, one line per stream and statistic.
    pub fn to_text(&self, title: &str) -> String {
        let (useful, all) = self.useful();
        let mut out = format!(
            "{title} (every released value against the truth the demo knows): {useful} of {all} figures useful: \
             within the stream's target_error, or else the bound `fleetdp plan` warns at (5% of the range; \
             a histogram bin: the readings it expects)\n"
        );
        for ((stream, stat), row) in &self.rows {
            let mut errors = row.errors.clone();
            errors.sort_by(f64::total_cmp);
            let median = errors.get(errors.len() / 2).copied().unwrap_or(f64::NAN);
            let coverage = if row.with_interval > 0 {
                format!(
                    "interval held the truth {}/{} ({:.0}%)",
                    row.covered,
                    row.with_interval,
                    100.0 * row.covered as f64 / row.with_interval as f64
                )
            } else if row.with_ranks > 0 {
                // The truth here is a value, not the window's ranks: the
                // rank interval is stated, not checked.
                format!(
                    "rank interval ±{:.0} readings in {}/{}",
                    row.ranks, row.with_ranks, row.values
                )
            } else {
                "no interval".into()
            };
            out += &format!(
                "  {stream:<13} {stat:<10} {:>5} values · {coverage} · median |error| {median:.2} · useful {}/{} within {} · spent {:.4} per window\n",
                row.values, row.useful, row.values, row.bound, row.spent
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(
        name: &str,
        level: Option<f64>,
        values: Vec<f64>,
        half_width: Option<f64>,
    ) -> proto::Statistic {
        proto::Statistic {
            name: name.into(),
            values,
            level,
            half_width,
            spent: 0.25,
            ..Default::default()
        }
    }

    fn truth(name: &str, values: Vec<f64>) -> ReleasedStatistic {
        ReleasedStatistic {
            name: name.into(),
            level: None,
            values,
            mechanism: "none".into(),
            sensitivity: 0.0,
            scale: 0.0,
            spent: 0.0,
            half_width: None,
            rank_half_width: None,
        }
    }

    /// `tail` (which knows no truth) ended every histogram line with a
    /// stray "(true [])"; bins were printed without their edges.
    #[test]
    fn a_histogram_shows_its_edges_and_its_truth_only_when_known() {
        let mut h = stat("histogram", None, vec![3.0, 5.0], Some(2.0));
        h.bin_edges = vec![-20.0, 0.0, 12.5];
        let r = proto::WindowRelease {
            stream: "temp".into(),
            statistics: vec![h],
            ..Default::default()
        };
        let units = BTreeMap::new();
        let line = release("[t]", &r, None, &units);
        assert!(
            line.contains("hist [-20,0):3 [0,12.5]:5") && !line.contains("true"),
            "{line}"
        );
        let t = [truth("histogram", vec![4.0, 4.0])];
        let line = release("[t]", &r, Some(&t), &units);
        assert!(
            line.contains("hist [-20,0):3 [0,12.5]:5 (true 4 4)"),
            "{line}"
        );
    }

    #[test]
    fn an_add_remove_running_mean_divides_by_the_noisy_count() {
        let total = |name: &str, value: f64, std: f64| proto::v1::RunningTotal {
            name: name.into(),
            windows: 4,
            count: 0,
            values: vec![value],
            std,
            ..Default::default()
        };
        let line = running_mean(
            &[total("sum", 1000.0, 20.0), total("count", 50.4, 3.0)],
            "°C",
            "",
        );
        assert!(
            line.contains(
                "running mean over 4 windows: 19.84 °C (sum 1000.00 ± 20.00, count 50 ± 3, 1 std)"
            ),
            "{line}"
        );
        // Change-one: the public count.
        let mut sum = total("sum", 1000.0, 20.0);
        sum.count = 50;
        assert!(running_mean(&[sum], "", "").contains("running mean over 4 windows: 20.00 ± 0.40"));
    }

    #[test]
    fn values_carry_their_unit() {
        let r = proto::WindowRelease {
            stream: "temp".into(),
            statistics: vec![
                stat("mean", None, vec![20.5], Some(0.3)),
                stat("variance", None, vec![40.0], Some(8.0)),
                stat("quantile", Some(0.9), vec![27.0], None),
                stat("clamped", None, vec![0.01], Some(0.005)),
            ],
            ..Default::default()
        };
        let units = BTreeMap::from([("temp".to_string(), "°C".to_string())]);
        let line = release("[t]", &r, None, &units);
        for part in [
            "mean 20.50 ± 0.30 °C",
            "variance 40.00 ± 8.00 °C²",
            "p90 27.00 °C ·",
            "clamped 0.01 ± 0.01",
        ] {
            assert!(line.contains(part), "{part:?} in {line}");
        }
        assert!(
            line.ends_with("clamped 0.01 ± 0.01"),
            "no unit on a share: {line}"
        );
        assert!(!release("[t]", &r, None, &BTreeMap::new()).contains('°'));
    }

    #[test]
    fn the_summary_counts_coverage_and_median_errors() {
        let mut s = Summary::default();
        // Without a declared stream every figure's bound is 0: none is
        // useful unless exact (the demo's streams are always declared).
        for (v, h) in [(20.5, 1.0), (22.0, 1.0), (19.9, 0.05)] {
            let r = proto::WindowRelease {
                stream: "temp".into(),
                statistics: vec![
                    stat("mean", None, vec![v], Some(h)),
                    stat("quantile", Some(0.9), vec![v + 3.0], None),
                    stat("histogram", None, vec![4.0, 6.0], Some(1.5)),
                ],
                ..Default::default()
            };
            s.add(
                &r,
                &[
                    truth("mean", vec![20.0]),
                    truth("quantile", vec![23.0]),
                    truth("histogram", vec![5.0, 5.0]),
                ],
            );
        }
        let text = s.to_text("Summary");
        // Mean: errors 0.5 (held), 2.0 (missed), 0.1 (missed by 0.05).
        assert!(text.contains("temp          mean           3 values · interval held the truth 1/3 (33%) · median |error| 0.50"), "{text}");
        assert!(
            text.contains("p90            3 values · no interval"),
            "{text}"
        );
        assert!(
            text.contains("histogram      6 values · interval held the truth 6/6 (100%)"),
            "{text}"
        );
        assert_eq!(s.useful(), (0, 12), "an undeclared stream has no bound");
    }

    /// A quantile's rank interval is shown as such (in readings), on its
    /// line and in the summary; it is never printed as a value interval.
    #[test]
    fn a_rank_interval_is_shown_in_readings() {
        let mut q = stat("quantile", Some(0.5), vec![21.0], None);
        q.rank_half_width = Some(12.4);
        let r = proto::WindowRelease {
            stream: "temp".into(),
            statistics: vec![q.clone()],
            ..Default::default()
        };
        let line = release("[t]", &r, None, &BTreeMap::new());
        assert!(line.contains("p50 21.00 (ranks ± 12)"), "{line}");
        // With a public window size, also as the levels it spans.
        let sized = proto::WindowRelease {
            n: 100,
            ..r.clone()
        };
        let line = release("[t]", &sized, None, &BTreeMap::new());
        assert!(line.contains("p50 21.00 (p38–p62: ranks ± 12)"), "{line}");
        let mut s = Summary::default();
        s.add(&r, &[truth("quantile", vec![20.0])]);
        let mut bare = r.clone();
        bare.statistics[0].rank_half_width = None;
        s.add(&bare, &[truth("quantile", vec![20.0])]);
        let text = s.to_text("Summary");
        assert!(
            text.contains("p50            2 values · rank interval ±12 readings in 1/2"),
            "{text}"
        );
    }
}
