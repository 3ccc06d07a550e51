//! Whether a plan releases useful figures: a statistic whose 95% interval
//! is wide against the stream's declared range (or, for a histogram, whose
//! per-bin noise exceeds the count a bin expects) is mostly noise, and
//! `fleetdp plan` says so with what would fix it; `plan --strict` fails on
//! it. Post-processing of the plan: no data, no privacy cost.
//!
//! The fixes are found by planning the stream again with each change
//! (`advice.rs`), so each one, applied as printed, removes its warning.
//! Under add-remove a window's size is private, so a statistic without a
//! declared `target_error` cannot be judged and is warned about as such.

use super::advice::Replan;
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
    /// The half-width above which the statistic is flagged (none where it
    /// cannot be judged without a declared target).
    pub bound: Option<f64>,
    pub message: String,
    /// Each change that alone meets the bound, as the setting to write:
    /// planned again with it, the warning is gone.
    pub fixes: Vec<Fix>,
}

/// One setting's value that meets a warning's bound.
#[derive(Debug, Clone, Serialize)]
pub struct Fix {
    /// `window_size`, `max_windows_per_device` (the stream's) or
    /// `epsilon_per_device` / `rho_per_device` (`[privacy]`).
    pub setting: String,
    pub value: f64,
}

/// What [`warnings`] needs of a stream's declaration.
pub struct Declared {
    pub lower: f64,
    pub upper: f64,
    pub unit: String,
    /// Histogram bins (between the declared edges).
    pub bins: usize,
}

impl Declared {
    /// The range and bins a planned stream declares (`unit` as written).
    pub(super) fn of(spec: &crate::dp::release::StreamSpec, unit: String) -> Self {
        Self {
            lower: spec.lower,
            upper: spec.upper,
            unit,
            bins: spec.histogram_edges.len().saturating_sub(1),
        }
    }
}

/// The half-width `plan --strict` flags a figure of count windows of `n`
/// over when no `target_error` is declared: 5% of the range for a mean or
/// std, the `n / bins` readings a bin expects for a histogram, 5% of
/// `n ×` the range for a sum; `None` where nothing public judges it. The
/// one rule the warnings and the review page's charts both draw.
pub(super) fn strict_bound(statistic: &str, n: f64, range: &Declared) -> Option<f64> {
    let width = range.upper - range.lower;
    match statistic {
        "histogram" => Some(n / range.bins.max(1) as f64),
        "mean" | "std" => Some(USEFUL_SHARE * width),
        "sum" => Some(USEFUL_SHARE * width * n),
        _ => None,
    }
}

/// The statistics of `s` that come out mostly noise, each with the
/// changes that fix it ([`Replan`]); `zcdp`: the plan's measure is zCDP.
pub(super) fn warnings(
    s: &StreamReport,
    range: &Declared,
    zcdp: bool,
    replan: &Replan<'_>,
) -> Vec<PlanWarning> {
    let n = s.window_size as f64;
    let u = if range.unit.is_empty() {
        String::new()
    } else {
        format!(" {}", range.unit)
    };
    let mut out = Vec::new();
    for st in &s.statistics {
        let Some(hw) = st.half_width_95 else { continue };
        let name = label(st);
        // A histogram's half-width is in readings per bin.
        let shown = if st.name == "histogram" {
            format!("±{hw:.0} readings per bin")
        } else {
            format!("±{hw:.4}{u}")
        };
        let (bound, why) = match (st.name.as_str(), st.target_95) {
            (_, Some(t)) => (t, format!("its target_error ±{t}{u}")),
            // Time windows: how many readings a window holds is private, so
            // a noisy count (or bin, or sum) has nothing public to be judged
            // against but a declared target.
            _ if s.window_seconds.is_some() => {
                out.push(unjudged(s, st, &shown));
                continue;
            }
            (name, None) => {
                let Some(b) = strict_bound(name, n, range) else {
                    continue;
                };
                let why = match name {
                    "histogram" => format!("the {b:.0} readings a bin expects at n = {n:.0}"),
                    "sum" => format!("{:.0}% of n × the range", USEFUL_SHARE * 100.0),
                    _ => format!(
                        "{:.0}% of the range [{}, {}]{u}",
                        USEFUL_SHARE * 100.0,
                        range.lower,
                        range.upper
                    ),
                };
                (b, why)
            }
        };
        if hw <= bound * (1.0 + 1e-9) {
            continue;
        }
        let stat = (st.name.as_str(), st.level, hw, bound);
        let fixes = fixes(s, replan, stat, zcdp, range);
        let said: Vec<String> = fixes.iter().map(|f| said(f, s, replan)).collect();
        out.push(PlanWarning {
            stream: s.name.clone(),
            statistic: name.clone(),
            half_width_95: hw,
            bound: Some(bound),
            message: format!(
                "stream {}: {name} {shown} (95%) exceeds {why}: it would release mostly noise; {}",
                s.name,
                if said.is_empty() {
                    "no window size up to 10⁷, budget up to 10⁶× or smaller W meets it alone"
                        .to_string()
                } else {
                    format!("{} would meet it", said.join(", or "))
                }
            ),
            fixes,
        });
    }
    out
}

/// An add-remove figure without a target: nothing public to judge it by.
fn unjudged(s: &StreamReport, st: &StatisticReport, shown: &str) -> PlanWarning {
    let name = label(st);
    PlanWarning {
        stream: s.name.clone(),
        statistic: name.clone(),
        half_width_95: st.half_width_95.unwrap_or(f64::NAN),
        bound: None,
        message: format!(
            "stream {}: {name} {shown} (95%) per window cannot be judged: under add-remove a window's \
             size is private; declare target_error = {{ {} = … }} (the most noise a window's {name} may carry)",
            s.name, st.name
        ),
        fixes: vec![],
    }
}

/// Each single change that meets the bound: a window size (count
/// windows), a budget, fewer windows per device.
fn fixes(
    s: &StreamReport,
    replan: &Replan<'_>,
    stat: (&str, Option<f64>, f64, f64),
    zcdp: bool,
    range: &Declared,
) -> Vec<Fix> {
    let mut out = Vec::new();
    let (name, level, hw, bound) = stat;
    // The bound at another n: a histogram's grows with it (n / bins), a
    // sum's too (a share of n × the range); a target's does not.
    let targeted = s
        .statistics
        .iter()
        .any(|x| x.name == name && x.level == level && x.target_95.is_some());
    let bound_at = |n: u64| match targeted {
        true => bound,
        false => strict_bound(name, n as f64, range).unwrap_or(bound),
    };
    if s.window_seconds.is_none() {
        if let Some(n) = replan.window_size((name, level, hw), bound_at) {
            out.push(Fix {
                setting: "window_size".into(),
                value: n as f64,
            });
        }
    }
    if let Some(b) = replan.budget(stat) {
        let setting = if zcdp {
            "rho_per_device"
        } else {
            "epsilon_per_device"
        };
        out.push(Fix {
            setting: setting.into(),
            value: b,
        });
    }
    if let Some(w) = replan.windows(stat) {
        out.push(Fix {
            setting: "max_windows_per_device".into(),
            value: f64::from(w),
        });
    }
    out
}

/// A fix in words.
fn said(f: &Fix, s: &StreamReport, replan: &Replan<'_>) -> String {
    match f.setting.as_str() {
        "window_size" => format!("windows of n ≥ {}", f.value),
        "max_windows_per_device" => format!(
            "W ≤ {} windows per device per horizon (max_windows_per_device, now {})",
            f.value, s.max_windows_per_device
        ),
        setting => format!(
            "{} = {} per device per horizon (privacy.{setting}, now {})",
            if setting == "rho_per_device" {
                "ρ"
            } else {
                "ε"
            },
            f.value,
            super::sig(replan.privacy.budget.per_horizon)
        ),
    }
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
        assert!((mean.bound.unwrap() - 0.05 * 125.0).abs() < 1e-9);
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

    /// Apply `fix` to a configuration's text (its stream's or privacy's
    /// line, which the text must hold).
    fn applied(text: &str, fix: &super::Fix) -> String {
        let key = format!("{} = ", fix.setting);
        let at = text.find(&key).unwrap_or_else(|| panic!("{key} in {text}"));
        let end = at + text[at..].find('\n').unwrap();
        let value = if fix.setting.ends_with("_device") && !fix.setting.starts_with("max_") {
            format!("{}", fix.value)
        } else {
            format!("{}", fix.value as u64)
        };
        format!("{}{key}{value}{}", &text[..at], &text[end..])
    }

    fn plan_of(text: &str) -> PlanReport {
        PlanReport::new(&Config::parse(text).unwrap().validate().unwrap())
    }

    /// Issue: every suggestion, applied as printed, removes its
    /// warning — for a std of ±50 on [0, 100] (all three suggestions used
    /// to still warn), a mean whose suggested ε was printed rounded down,
    /// histograms, and zCDP — re-planned with each suggestion in turn.
    #[test]
    fn every_suggestion_applied_removes_its_warning() {
        let base = |measure: &str, stats: &str, n: u64, w: u32| {
            format!(
                "[kafka]\nbrokers = \"b:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\ndead_letter_topic = \"dlq\"\n\
                 [privacy]\n{measure}\nhorizon = \"24h\"\n\
                 [[stream]]\nname = \"s\"\nlower = 0.0\nupper = 100.0\nresolution = 0.01\nwindow_size = {n}\n\
                 max_readings_per_device = 1\nmax_windows_per_device = {w}\nstatistics = {stats}\n{}",
                if stats.contains("histogram") {
                    "histogram_edges = [0, 25, 50, 75, 100]\n"
                } else {
                    ""
                }
            )
        };
        let cases = [
            base("epsilon_per_device = 1.0", "[\"std\"]", 20, 4),
            base("epsilon_per_device = 1.0", "[\"mean\"]", 20, 4),
            base(
                "epsilon_per_device = 0.3",
                "[\"mean\", \"std\", \"histogram\"]",
                100,
                24,
            ),
            base(
                "measure = \"zcdp\"\nrho_per_device = 0.05\ndelta = 1e-6",
                "[\"mean\", \"std\", \"histogram\"]",
                50,
                12,
            ),
        ];
        let mut checked = 0;
        for text in cases {
            let r = plan_of(&text);
            assert!(!r.warnings.is_empty(), "{text}: nothing to fix");
            for w in &r.warnings {
                assert!(!w.fixes.is_empty(), "{}", w.message);
                for fix in &w.fixes {
                    let fixed = plan_of(&applied(&text, fix));
                    assert!(
                        fixed.warnings.iter().all(|x| x.statistic != w.statistic),
                        "{fix:?} from \"{}\" still warns: {:?}",
                        w.message,
                        fixed
                            .warnings
                            .iter()
                            .map(|x| &x.message)
                            .collect::<Vec<_>>()
                    );
                    // Printed as it is applied.
                    let shown = if fix.setting.starts_with("max_") || fix.setting == "window_size" {
                        format!("{}", fix.value as u64)
                    } else {
                        format!("{}", fix.value)
                    };
                    assert!(w.message.contains(&shown), "{shown} not in {}", w.message);
                    checked += 1;
                }
            }
        }
        assert!(checked >= 12, "{checked} suggestions checked");
    }

    /// Issue: an add-remove count of ±345,108 per window passed
    /// `--strict`; without a declared target an add-remove figure cannot
    /// be judged and is warned about; with one it is judged against it.
    #[test]
    fn add_remove_figures_are_judged() {
        let text = |target: &str| {
            format!(
                "[kafka]\nbrokers = \"b:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\ndead_letter_topic = \"dlq\"\n\
                 [privacy]\nrelation = \"add-remove\"\nepsilon_per_device = 0.01\nhorizon = \"24h\"\n\
                 [[stream]]\nname = \"s\"\nlower = 0.0\nupper = 100.0\nresolution = 0.1\nwindow = \"5m\"\n\
                 max_readings_per_device = 1\nmax_windows_per_device = 288\nstatistics = [\"count\", \"mean\"]\n{target}"
            )
        };
        let r = plan_of(&text(""));
        let count = r
            .warnings
            .iter()
            .find(|w| w.statistic == "count")
            .expect("count judged");
        assert!(
            count.bound.is_none() && count.message.contains("target_error"),
            "{}",
            count.message
        );
        let r = plan_of(&text("target_error = { count = 1e9 }\n"));
        assert!(
            r.warnings.iter().all(|w| w.statistic != "count"),
            "{:?}",
            r.warnings
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
