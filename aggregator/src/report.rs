//! `fleetdp plan`: what a configuration will do, per stream and statistic —
//! sensitivity, mechanism, noise scale, ε/ρ per window and per horizon, and
//! the expected 95% interval half-width in metric units.

use crate::config::Validated;
use crate::dp::mechanism::{zcdp_to_approx_dp, Measure};
use crate::dp::rational;
use serde::Serialize;
use std::fmt::Write;

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
    pub horizon_seconds: u64,
    pub streams: Vec<StreamReport>,
}

#[derive(Debug, Serialize)]
pub struct StreamReport {
    pub name: String,
    pub window_size: u64,
    pub max_readings_per_device: u32,
    pub max_windows_per_device: u32,
    pub spent_per_window: f64,
    pub spent_per_horizon: f64,
    pub statistics: Vec<StatisticReport>,
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
}

impl PlanReport {
    pub fn new(v: &Validated) -> Self {
        let plan = &v.plan;
        let b = &plan.privacy.budget;
        let spent = rational::to_f64(&plan.per_horizon);
        let streams = plan
            .streams
            .iter()
            .map(|s| {
                let w = s.spec.max_windows_per_device as f64;
                StreamReport {
                    name: s.spec.name.clone(),
                    window_size: s.spec.window_size,
                    max_readings_per_device: s.spec.max_readings_per_device,
                    max_windows_per_device: s.spec.max_windows_per_device,
                    spent_per_window: rational::to_f64(&s.per_window),
                    spent_per_horizon: rational::to_f64(&s.per_window) * w,
                    statistics: s
                        .describe()
                        .into_iter()
                        .map(|d| StatisticReport {
                            name: d.name,
                            level: d.level,
                            mechanism: d.mechanism,
                            sensitivity: d.sensitivity,
                            scale: d.scale,
                            spent_per_window: d.spent,
                            spent_per_horizon: d.spent * w,
                            half_width_95: d.half_width,
                        })
                        .collect(),
                }
            })
            .collect();
        PlanReport {
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
            horizon_seconds: v.horizon.as_secs(),
            streams,
        }
    }

    /// A human-readable table.
    pub fn to_text(&self) -> String {
        let unit = if self.measure == "pure" { "ε" } else { "ρ" };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "relation {} · {} DP · budget {unit} = {} per device per {}s · plan spends {unit} = {:.6}{}",
            self.relation,
            self.measure,
            self.budget_per_horizon,
            self.horizon_seconds,
            self.spent_per_horizon,
            self.epsilon_at_delta
                .map(|e| format!(" (≈ ε = {e:.4} at δ = {})", self.delta))
                .unwrap_or_default()
        );
        for s in &self.streams {
            let _ = writeln!(
                out,
                "\nstream {}: n = {}, k = {}, W = {}; {unit} per window {:.6}, per horizon {:.6}",
                s.name,
                s.window_size,
                s.max_readings_per_device,
                s.max_windows_per_device,
                s.spent_per_window,
                s.spent_per_horizon
            );
            let _ = writeln!(
                out,
                "  {:<14} {:<18} {:>12} {:>12} {:>12} {:>12} {:>12}",
                "statistic",
                "mechanism",
                "sensitivity",
                "scale",
                format!("{unit}/window"),
                format!("{unit}/horizon"),
                "95% ± "
            );
            for st in &s.statistics {
                let name = match st.level {
                    Some(q) => format!("{}({q})", st.name),
                    None => st.name.clone(),
                };
                let hw = st
                    .half_width_95
                    .map(|h| format!("{h:.4}"))
                    .unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    out,
                    "  {:<14} {:<18} {:>12.4} {:>12.4} {:>12.6} {:>12.6} {:>12}",
                    name,
                    st.mechanism,
                    st.sensitivity,
                    st.scale,
                    st.spent_per_window,
                    st.spent_per_horizon,
                    hw
                );
            }
        }
        out
    }
}
