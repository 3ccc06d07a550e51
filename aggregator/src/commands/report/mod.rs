//! `fleetdp plan`: what a configuration will do, per stream and statistic —
//! sensitivity, mechanism, noise scale, ε/ρ per window and per horizon, and
//! the expected 95% interval half-width in metric units, and the figures it
//! would release mostly as noise ([`PlanWarning`]).

mod advice;
mod charts;
mod html;
mod pictures;
mod text;
pub(crate) mod warnings;

pub use html::{review_page, ALARM_PROOF, BACKING, PROOF, RUNNING_PROOF};
pub use warnings::{Fix, PlanWarning, USEFUL_SHARE};

use crate::config::Validated;
use crate::dp::mechanism::{zcdp_to_approx_dp, Measure};
use crate::dp::rational;
use crate::dp::release::{StatKind, StreamPlan};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct PlanReport {
    pub relation: String,
    pub measure: String,
    /// Declared ε or ρ per device per horizon.
    pub budget_per_horizon: f64,
    /// What the plan spends per device per horizon (≤ budget).
    pub spent_per_horizon: f64,
    pub delta: f64,
    /// zCDP: the (ε, δ) equivalent of the spend.
    pub epsilon_at_delta: Option<f64>,
    /// δ the private-key selections add on top (0: none).
    pub key_selection_delta: f64,
    pub horizon_seconds: u64,
    /// `privacy.horizon` as written in the configuration.
    pub horizon: String,
    pub streams: Vec<StreamReport>,
    /// Figures this plan would release mostly as noise (`plan --strict`
    /// fails on any).
    pub warnings: Vec<PlanWarning>,
}

#[derive(Debug, Serialize)]
pub struct StreamReport {
    pub name: String,
    /// Count windows: `n` (0 with time windows).
    pub window_size: u64,
    /// Time windows: their length in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<f64>,
    /// Time windows: their length as written in the configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    pub max_readings_per_device: u32,
    pub max_windows_per_device: u32,
    pub spent_per_window: f64,
    pub spent_per_horizon: f64,
    pub statistics: Vec<StatisticReport>,
    /// Running totals (streams with `running_share > 0`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<RunningReport>,
    /// A grouped stream: its groups (every figure above is per group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsReport>,
    /// The device-limit alarm (streams with `device_alarm_share > 0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_alarm: Option<AlarmReport>,
}

/// A stream's device-limit alarm: what it spends and where it fires.
#[derive(Debug, Serialize)]
pub struct AlarmReport {
    /// ε or ρ a device spends on it per horizon (two instances a lane, in
    /// each of its `G` groups' lanes).
    pub spent_per_horizon: f64,
    /// ε of one instance (a lane, a horizon).
    pub epsilon_per_instance: f64,
    /// It aims to fire at this many devices of a horizon in a lane (90% of
    /// `limits.max_devices_per_lane`).
    pub threshold_devices: u64,
    /// One check fires with probability ≥ 99% at `threshold + margin`
    /// devices, and ≤ 1% at `threshold − margin`.
    pub margin_99: u64,
}

/// The groups of a grouped stream.
#[derive(Debug, Serialize)]
pub struct GroupsReport {
    /// Every group's key (`firmware=4.2`).
    pub keys: Vec<String>,
    /// `G`: groups one device may count in per horizon.
    pub max_groups_per_device: u32,
    /// A dimension with private keys: its selection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_keys: Option<PrivateKeysReport>,
}

/// A private-key selection: what it spends and how many devices a key
/// needs to be released.
#[derive(Debug, Serialize)]
pub struct PrivateKeysReport {
    pub dimension: String,
    /// Slots: most keys ever released.
    pub max_keys: u32,
    /// ε or ρ per horizon.
    pub spent_per_horizon: f64,
    pub delta: f64,
    /// A key is released when its noisy distinct-device count reaches this.
    pub threshold: i64,
    /// Devices a key needs to be released with probability 50% / 99%.
    pub devices_for_50_percent: u64,
    pub devices_for_99_percent: u64,
}

/// A running total's cost and error, beside what the same budget would give
/// by summing per-window releases or by a plain (un-weighted) binary tree.
#[derive(Debug, Serialize)]
pub struct RunningReport {
    pub name: String,
    pub mechanism: String,
    pub spent_per_horizon: f64,
    pub lifetime_windows: u64,
    /// Standard deviation of the running total's noise after `windows`
    /// windows (metric units; counts for histogram bins).
    pub error: Vec<RunningError>,
}

#[derive(Debug, Serialize)]
pub struct RunningError {
    pub windows: u64,
    pub std: Option<f64>,
    pub std_summed_windows: f64,
    pub std_plain_tree: Option<f64>,
}

/// The scale the demo and the review page judge `ε` on.
pub(crate) const ODDS_SCALE: &str =
    "ε ≤ 1 strong, ≤ 4 moderate, ≤ 10 weak; above that, nothing a privacy review would sign";

/// The odds factor `e^ε` to three significant digits (`7.39`, `22000`,
/// `2.65e10`) and its place on [`ODDS_SCALE`].
pub(crate) fn odds(eps: f64) -> (String, &'static str) {
    let f = eps.exp();
    let factor = if f < 1e6 {
        let unit = 10f64.powi(f.log10().floor() as i32 - 2);
        sig((f / unit).round() * unit)
    } else {
        format!("{f:.2e}")
    };
    let strength = match eps {
        e if e <= 1.0 => "strong protection",
        e if e <= 4.0 => "moderate protection",
        e if e <= 10.0 => "weak protection",
        _ => "no meaningful protection",
    };
    (factor, strength)
}

/// `x` to 6 significant digits, without trailing zeros (`24`, `2.7`,
/// `0.0123457`): a budget reads as written, not as `24.000000`.
pub(crate) fn sig(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return x.to_string();
    }
    format!("{x:.5e}").parse::<f64>().unwrap_or(x).to_string()
}

/// The windows at which `plan` states a running total's noise.
const RUNNING_AT: [u64; 3] = [1, 1_000, 1_000_000];

fn running_report(s: &StreamPlan) -> Vec<RunningReport> {
    running_at(s, &RUNNING_AT)
}

/// Each running total of `s` with its noise after each of `windows`
/// windows (the review page's chart asks for more points than `plan`).
pub(super) fn running_at(s: &StreamPlan, windows: &[u64]) -> Vec<RunningReport> {
    use crate::dp::continual::{baseline::tree_levels, RunningNoise};
    let Some(r) = &s.running else {
        return vec![];
    };
    let w = s.spec.max_windows_per_device as f64;
    let lifetime = 1u64 << r.log2_lifetime;
    r.groups
        .iter()
        .map(|g| {
            let unit = if g.name == "sum" { r.resolution } else { 1.0 };
            let b = rational::to_f64(&g.spent);
            let l = g.window_sensitivity;
            let levels = tree_levels(lifetime) as f64;
            let error = windows
                .iter()
                .map(|&t| {
                    let in_tree = t <= lifetime;
                    let nodes = t.count_ones() as f64;
                    let (summed, plain) = match g.noise {
                        // Gaussian: W windows at b/W each; the tree's
                        // sensitivity² ≤ W²·levels·L².
                        RunningNoise::Blt { .. } => (
                            (t as f64 * l * l * w / (2.0 * b)).sqrt(),
                            (nodes * w * w * levels * l * l / (2.0 * b)).sqrt(),
                        ),
                        // Laplace (variance 2λ²): λ = W·L1/b per window,
                        // W·levels·L1/b per tree node.
                        RunningNoise::Tree { .. } => (
                            (2.0 * t as f64).sqrt() * w * l / b,
                            (2.0 * nodes).sqrt() * w * levels * l / b,
                        ),
                    };
                    RunningError {
                        windows: t,
                        std: g.noise.std_after(t).map(|x| x * unit),
                        std_summed_windows: summed * unit,
                        std_plain_tree: in_tree.then_some(plain * unit),
                    }
                })
                .collect();
            RunningReport {
                name: g.name.into(),
                mechanism: g.noise.name().into(),
                spent_per_horizon: b,
                lifetime_windows: lifetime,
                error,
            }
        })
        .collect()
}

#[derive(Debug, Serialize)]
pub struct StatisticReport {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
    pub mechanism: String,
    pub sensitivity: f64,
    pub scale: f64,
    pub spent_per_window: f64,
    pub spent_per_horizon: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub half_width_95: Option<f64>,
    /// Quantiles: the 95% rank interval's half-width, in readings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_half_width_95: Option<f64>,
    /// The stream's `target_error` for this statistic, if declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_95: Option<f64>,
    /// For the std: the stream's variance target (units²), if declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variance_target_95: Option<f64>,
}

impl PlanReport {
    pub fn new(v: &Validated) -> Self {
        let plan = &v.plan;
        let b = &plan.privacy.budget;
        let spent = rational::to_f64(&plan.per_horizon);
        let streams: Vec<StreamReport> = plan
            .streams
            .iter()
            // A grouped stream once (its groups share one plan).
            .filter(|s| s.group.as_ref().is_none_or(|g| g.index == 0))
            .map(|s| stream_report(v, s))
            .collect();
        PlanReport {
            warnings: plan_warnings(v, &streams),
            relation: plan.privacy.relation.to_string(),
            measure: match b.measure {
                Measure::Pure => "pure".into(),
                Measure::Zcdp => "zcdp".into(),
            },
            budget_per_horizon: b.per_horizon,
            spent_per_horizon: spent,
            delta: b.delta,
            epsilon_at_delta: (b.measure == Measure::Zcdp)
                .then(|| zcdp_to_approx_dp(spent, b.delta)),
            key_selection_delta: v.key_selection_delta(),
            horizon_seconds: v.horizon.as_secs(),
            horizon: v.horizon_text().to_string(),
            streams,
        }
    }
}

/// A planned stream's report (a grouped stream's first group stands for
/// all of them).
fn stream_report(v: &Validated, s: &StreamPlan) -> StreamReport {
    StreamReport {
        name: s.declared_name().to_string(),
        groups: s.group.as_ref().map(|g| GroupsReport {
            keys: s
                .spec
                .groups
                .as_ref()
                .map(|x| x.keys.clone())
                .unwrap_or_default(),
            max_groups_per_device: g.max_groups_per_device,
            private_keys: private_keys_report(s),
        }),
        window_size: s.spec.window_size,
        window_seconds: s.spec.window_ms.map(|ms| ms as f64 / 1e3),
        window: v
            .config
            .streams
            .iter()
            .find(|c| c.name == s.declared_name())
            .and_then(|c| c.window.as_deref())
            .map(|w| w.trim().to_string()),
        max_readings_per_device: s.spec.max_readings_per_device,
        max_windows_per_device: s.spec.max_windows_per_device,
        spent_per_window: rational::to_f64(&s.per_window),
        spent_per_horizon: rational::to_f64(&s.per_horizon()),
        running: running_report(s),
        statistics: statistics_report(s),
        device_alarm: s.alarm.as_ref().map(|a| AlarmReport {
            spent_per_horizon: rational::to_f64(&a.spent)
                * f64::from(s.group.as_ref().map_or(1, |g| g.max_groups_per_device)),
            epsilon_per_instance: a.epsilon,
            threshold_devices: crate::dp::alarm::AlarmPlan::threshold(
                v.config.limits.max_devices_per_lane,
            ),
            margin_99: a.margin_for(0.99),
        }),
    }
}

/// A slot stream's private keys: what selecting them costs and how many
/// devices a key needs to be released.
fn private_keys_report(s: &StreamPlan) -> Option<PrivateKeysReport> {
    let sel = s.selection.as_ref()?;
    let p = s.spec.groups.as_ref()?.private.as_ref()?;
    Some(PrivateKeysReport {
        dimension: p.dimension.clone(),
        max_keys: p.max_keys,
        spent_per_horizon: rational::to_f64(&sel.spent),
        delta: p.delta,
        threshold: sel.mechanism.threshold as i64,
        devices_for_50_percent: sel.mechanism.devices_for(0.5),
        devices_for_99_percent: sel.mechanism.devices_for(0.99),
    })
}

/// Each statistic's mechanism, spend and expected 95% half-width.
fn statistics_report(s: &StreamPlan) -> Vec<StatisticReport> {
    let g = s.group.as_ref().map_or(1, |g| g.max_groups_per_device);
    // A device pays for up to G·W windows.
    let w = s.spec.max_windows_per_device as f64 * g as f64;
    let target = |kind: &dyn Fn(StatKind) -> bool| {
        s.spec
            .target_error
            .iter()
            .find(|(k, _)| kind(*k))
            .map(|t| t.1)
    };
    s.describe()
        .into_iter()
        .map(|d| StatisticReport {
            target_95: target(&|k| k.name() == d.name),
            // The std is targeted through its variance.
            variance_target_95: (d.name == "std")
                .then(|| target(&|k| k == StatKind::Variance))
                .flatten(),
            name: d.name,
            level: d.level,
            mechanism: d.mechanism,
            sensitivity: d.sensitivity,
            scale: d.scale,
            spent_per_window: d.spent,
            spent_per_horizon: d.spent * w,
            half_width_95: d.half_width,
            rank_half_width_95: d.rank_half_width,
        })
        .collect()
}

/// The figures the plan would release mostly as noise.
fn plan_warnings(v: &Validated, streams: &[StreamReport]) -> Vec<PlanWarning> {
    let b = &v.plan.privacy.budget;
    let zcdp = b.measure == Measure::Zcdp;
    streams
        .iter()
        .flat_map(|r| {
            let s = v.plan.streams.iter().find(|s| s.declared_name() == r.name);
            let unit = v.config.streams.iter().find(|c| c.name == r.name);
            let declared = s.map(|s| {
                warnings::Declared::of(
                    &s.spec,
                    unit.and_then(|c| c.unit.clone()).unwrap_or_default(),
                )
            });
            let (Some(s), Some(d)) = (s, declared) else {
                return vec![];
            };
            let replan = advice::Replan {
                privacy: &v.plan.privacy,
                spec: &s.spec,
            };
            warnings::warnings(r, &d, zcdp, &replan)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue: the demo's plan read "per device per 3600s" and budgets
    /// with six decimals ("24.000000") where the configuration says `1h`
    /// and 24.
    #[test]
    fn the_plan_reads_as_the_configuration_is_written() {
        assert_eq!(sig(24.0), "24");
        assert_eq!(sig(2.7), "2.7");
        assert_eq!(sig(24.0 * 0.2), "4.8");
        assert_eq!(sig(0.012345678), "0.0123457");
        assert_eq!(sig(0.0), "0");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml");
        let v = crate::config::Config::load(&path)
            .unwrap()
            .validate()
            .unwrap();
        let text = PlanReport::new(&v).to_text();
        let first = text.lines().next().unwrap();
        assert!(first.contains("ε = 2 per device per 24h ·"), "{first}");
        assert!(first.contains("plan spends ε = 2"), "{first}");
        assert!(text.contains("per window 0.36, per horizon 0.8"), "{text}");
    }

    /// Quantiles over every grid point state their rank interval in the
    /// plan (in readings); with adaptive candidates a wider one, which
    /// holds under every window's prior (dp `release/rank.rs`).
    #[test]
    fn the_plan_states_the_quantiles_rank_interval() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let fixed = text.replace("adaptive_quantiles = true", "adaptive_quantiles = false");
        let ranks = |config: &str| -> Vec<f64> {
            let v = crate::config::Config::parse(config)
                .unwrap()
                .validate()
                .unwrap();
            let r = PlanReport::new(&v);
            assert!(r.to_text().contains(" ranks "));
            r.streams
                .iter()
                .flat_map(|s| &s.statistics)
                .filter(|s| s.level.is_some())
                .map(|s| s.rank_half_width_95.expect("a rank interval"))
                .collect()
        };
        let (adaptive, declared) = (ranks(&text), ranks(&fixed));
        assert!(!adaptive.is_empty() && adaptive.len() == declared.len());
        for (a, d) in adaptive.iter().zip(&declared) {
            assert!(
                d.is_finite() && *d > 0.0 && a > d,
                "{adaptive:?} vs {declared:?}"
            );
        }
    }
}
