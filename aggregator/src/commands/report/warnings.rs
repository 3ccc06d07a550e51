//! Whether a plan releases useful figures: a statistic whose 95% interval
//! is wide against the stream's declared range (or, for a histogram, whose
//! per-bin noise exceeds the count a bin expects) is mostly noise, and
//! `fleetdp plan` says so with what would fix it; `plan --strict` fails on
//! it. Post-processing of the plan: no data, no privacy cost.
//!
//! The fixes scale as the mechanisms do: a mean's or std's noise falls as
//! 1/n (the window size), a histogram bin's expected count grows as n while
//! its noise does not; every noise scale falls as 1/ε per window under pure
//! DP (1/√ρ under zCDP), and the budget per window is the budget per
//! horizon over W (windows per device per horizon).

use super::{StatisticReport, StreamReport};
use serde::Serialize;

/// A figure whose 95% half-width exceeds this share of its stream's range
/// `upper − lower` is flagged.
pub const USEFUL_SHARE: f64 = 0.05;

/// One statistic the plan releases mostly as noise, and what would fix it.
#[derive(Debug, Serialize)]
pub struct PlanWarning {
    pub stream: String,
    pub statistic: String,
    pub half_width_95: f64,
    /// The half-width above which the statistic is flagged.
    pub bound: f64,
    pub message: String,
}

/// What [`warnings`] needs of a stream's declaration.
pub struct Declared {
    pub lower: f64,
    pub upper: f64,
    pub unit: String,
    /// Histogram bins (between the declared edges).
    pub bins: usize,
}

/// The statistics of `s` that come out mostly noise; `zcdp`: the plan's
/// measure is zCDP (noise scale ∝ 1/√ρ).
pub fn warnings(s: &StreamReport, range: &Declared, zcdp: bool, budget: f64) -> Vec<PlanWarning> {
    let width = range.upper - range.lower;
    let n = s.window_size as f64;
    let u = if range.unit.is_empty() {
        String::new()
    } else {
        format!(" {}", range.unit)
    };
    let mut out = Vec::new();
    for st in &s.statistics {
        let Some(hw) = st.half_width_95 else { continue };
        let (bound, why, n_needed) = match (st.name.as_str(), st.target_95) {
            (_, Some(t)) => (t, format!("its target_error ±{t}{u}"), None),
            // Time windows: n is private (counted with noise); only a
            // declared target is checked.
            _ if s.window_seconds.is_some() => continue,
            ("histogram", None) => {
                // Bins of the declared edges, expecting n / bins each.
                let bins = range.bins.max(1) as f64;
                (
                    n / bins,
                    format!("the {:.0} readings a bin expects at n = {n:.0}", n / bins),
                    Some((hw * bins).ceil()),
                )
            }
            ("mean" | "std", None) => (
                USEFUL_SHARE * width,
                format!(
                    "{:.0}% of the range [{}, {}]{u}",
                    USEFUL_SHARE * 100.0,
                    range.lower,
                    range.upper
                ),
                Some((n * hw / (USEFUL_SHARE * width)).ceil()),
            ),
            ("sum", None) => (
                USEFUL_SHARE * width * n,
                format!("{:.0}% of n × the range", USEFUL_SHARE * 100.0),
                None,
            ),
            _ => continue,
        };
        if hw <= bound * (1.0 + 1e-9) {
            continue;
        }
        let fixes = fixes(s, hw / bound, n_needed, (zcdp, budget));
        let name = label(st);
        // A histogram's half-width is in readings per bin.
        let shown = if st.name == "histogram" {
            format!("±{hw:.0} readings per bin")
        } else {
            format!("±{hw:.4}{u}")
        };
        out.push(PlanWarning {
            stream: s.name.clone(),
            statistic: name.clone(),
            half_width_95: hw,
            bound,
            message: format!(
                "stream {}: {name} {shown} (95%) exceeds {why}: it would release mostly noise; {} would meet it",
                s.name,
                fixes.join(", or ")
            ),
        });
    }
    out
}

/// What would bring a statistic's half-width down by `factor`: windows
/// of the `n_needed` readings (count windows), a larger budget (the
/// half-width scales as 1/ε, or 1/√ρ under zCDP) or fewer windows per
/// device (as W, or √W).
fn fixes(
    s: &StreamReport,
    factor: f64,
    n_needed: Option<f64>,
    (zcdp, budget): (bool, f64),
) -> Vec<String> {
    let (budget_factor, w_factor) = if zcdp {
        (factor * factor, factor * factor)
    } else {
        (factor, factor)
    };
    let w = s.max_windows_per_device as f64;
    let mut fixes = Vec::new();
    if let (Some(need), None) = (n_needed, s.window_seconds) {
        fixes.push(format!("windows of n ≥ {need:.0}"));
    }
    fixes.push(format!(
        "a budget {budget_factor:.1}× larger ({} = {:.3} per device per horizon)",
        if zcdp { "ρ" } else { "ε" },
        budget * budget_factor
    ));
    if w / w_factor >= 1.0 {
        fixes.push(format!(
            "W ≤ {:.0} windows per device per horizon (max_windows_per_device, now {w:.0})",
            (w / w_factor).floor()
        ));
    }
    fixes
}

fn label(st: &StatisticReport) -> String {
    match st.level {
        Some(q) => format!("{}({q})", st.name),
        None => st.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::report::PlanReport;
    use crate::config::Config;

    fn report(window_size: u64, w: u32, epsilon: f64) -> PlanReport {
        let text = format!(
            r#"
[kafka]
brokers = "b:9092"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = {epsilon}
horizon = "24h"
[[stream]]
name = "cabin_temp_c"
unit = "°C"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = {window_size}
max_readings_per_device = 1
max_windows_per_device = {w}
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, 0, 10, 20, 30, 40, 85]
quantiles = [0.5, 0.9]
"#
        );
        PlanReport::new(&Config::parse(&text).unwrap().validate().unwrap())
    }

    /// Issue: the shipped configuration (n = 1,000, W = 24, ε = 1 a day)
    /// planned a mean of ±44.9 °C and a histogram of ±719 per bin, and
    /// `plan` said nothing. Each is warned about with a fix that meets it.
    #[test]
    fn a_plan_of_mostly_noise_is_warned_about_with_a_fix() {
        let r = report(1000, 24, 1.0);
        let names: Vec<&str> = r.warnings.iter().map(|w| w.statistic.as_str()).collect();
        assert!(
            names.contains(&"mean") && names.contains(&"histogram"),
            "{names:?}"
        );
        let mean = r.warnings.iter().find(|w| w.statistic == "mean").unwrap();
        assert!(mean.half_width_95 > 40.0, "{}", mean.message);
        assert!((mean.bound - 0.05 * 125.0).abs() < 1e-9);
        assert!(mean.message.contains("windows of n ≥"), "{}", mean.message);
        assert!(r.to_text().contains("warnings ("), "{}", r.to_text());
        // The window size it names meets the bound.
        let need: u64 = mean
            .message
            .split("windows of n ≥ ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .and_then(|s| s.trim().parse().ok())
            .unwrap();
        let fixed = report(need, 24, 1.0);
        assert!(
            fixed.warnings.iter().all(|w| w.statistic != "mean"),
            "n = {need}: {:?}",
            fixed
                .warnings
                .iter()
                .map(|w| &w.message)
                .collect::<Vec<_>>()
        );
    }

    /// A plan with room to spare is not warned about.
    #[test]
    fn a_useful_plan_is_quiet() {
        let r = report(20_000, 4, 1.0);
        assert!(
            r.warnings.is_empty(),
            "{:?}",
            r.warnings.iter().map(|w| &w.message).collect::<Vec<_>>()
        );
    }
}
