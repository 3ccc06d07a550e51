//! `fleetdp plan`'s human-readable form: the plan's budget line, then per
//! stream its windows and caps, its groups and private keys, a table of
//! its statistics and its running totals' error, then the warnings.

use super::{sig, GroupsReport, PlanReport, RunningReport, StatisticReport, StreamReport};
use std::fmt::Write;

impl PlanReport {
    /// A human-readable table.
    pub fn to_text(&self) -> String {
        let unit = if self.measure == "pure" { "ε" } else { "ρ" };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "relation {} · {} DP · budget {unit} = {} per device per {} · plan spends {unit} = {}{}{}",
            self.relation,
            self.measure,
            sig(self.budget_per_horizon),
            self.horizon,
            sig(self.spent_per_horizon),
            self.epsilon_at_delta
                .map(|e| format!(" (≈ ε = {} at δ = {:e})", sig(e), self.delta))
                .unwrap_or_default(),
            if self.key_selection_delta > 0.0 {
                format!(" + δ = {:e} for private key selection", self.key_selection_delta)
            } else {
                String::new()
            }
        );
        for s in &self.streams {
            stream_text(&mut out, s, unit);
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(
                out,
                "\nwarnings ({} figure(s) mostly noise; `plan --strict` fails on them):",
                self.warnings.len()
            );
            for w in &self.warnings {
                let _ = writeln!(out, "  {}", w.message);
            }
        }
        out
    }
}

/// One stream: its line, groups, statistics and running totals.
fn stream_text(out: &mut String, s: &StreamReport, unit: &str) {
    let _ = writeln!(
        out,
        "\nstream {}: {}, k = {}, W = {}; {unit} per window {}, per horizon {}",
        s.name,
        match &s.window {
            Some(t) => format!("time windows of {t} (size private, counted with noise)"),
            None => format!("n = {}", s.window_size),
        },
        s.max_readings_per_device,
        s.max_windows_per_device,
        sig(s.spent_per_window),
        sig(s.spent_per_horizon)
    );
    if let Some(g) = &s.groups {
        groups_text(out, g, unit);
    }
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
        statistic_row(out, st);
    }
    for r in &s.running {
        running_text(out, r, unit);
    }
    if let Some(a) = &s.device_alarm {
        let _ = writeln!(
            out,
            "  device-limit alarm: {unit} = {} per horizon (ε = {} per lane and horizon); fires once a lane counts about {} devices \
             of a horizon (90% of limits.max_devices_per_lane): a check at {} fires with ≥ 99% probability, at {} with ≤ 1%",
            sig(a.spent_per_horizon),
            sig(a.epsilon_per_instance),
            a.threshold_devices,
            a.threshold_devices + a.margin_99,
            a.threshold_devices.saturating_sub(a.margin_99)
        );
    }
}

/// A grouped stream's groups and, if any, its private keys.
fn groups_text(out: &mut String, g: &GroupsReport, unit: &str) {
    let _ = writeln!(
        out,
        "  per group, {} groups ({}); a device counts in at most G = {} per horizon, so it pays for G·W windows",
        g.keys.len(),
        g.keys.join(", "),
        g.max_groups_per_device
    );
    if let Some(k) = &g.private_keys {
        let _ = writeln!(
            out,
            "  private keys of {}: at most {} released (#1…#{}, bound when selected); selection {unit} = {} per horizon, δ = {:e}; \
             a key needs {} devices in a horizon (on its partition) to be released with 50% probability, {} with 99% (noisy count ≥ {}); \
             released from two horizons after its selection",
            k.dimension,
            k.max_keys,
            k.max_keys,
            sig(k.spent_per_horizon),
            k.delta,
            k.devices_for_50_percent,
            k.devices_for_99_percent,
            k.threshold
        );
    }
}

/// A statistic's row of the table.
fn statistic_row(out: &mut String, st: &StatisticReport) {
    let name = match st.level {
        Some(q) => format!("{}({q})", st.name),
        None => st.name.clone(),
    };
    let hw = st
        .half_width_95
        .map(|h| format!("{h:.4}"))
        .or(st.rank_half_width_95.map(|r| format!("ranks {r:.1}")))
        .unwrap_or_else(|| "-".into());
    let hw = match (st.target_95, st.variance_target_95) {
        (Some(t), _) => format!("{hw} (target {t})"),
        (None, Some(t)) => format!("{hw} (variance target {t})"),
        (None, None) => hw,
    };
    let _ = writeln!(
        out,
        "  {:<14} {:<18} {:>12.4} {:>12.4} {:>12.6} {:>12.6} {:>12}",
        name, st.mechanism, st.sensitivity, st.scale, st.spent_per_window, st.spent_per_horizon, hw
    );
}

/// A running total's noise after so many windows, beside the sum of
/// per-window releases and a plain binary tree.
fn running_text(out: &mut String, r: &RunningReport, unit: &str) {
    let _ = writeln!(
        out,
        "  running {} ({}, {unit}/horizon {}, tuned for {} windows): std of the noise after",
        r.name,
        r.mechanism,
        sig(r.spent_per_horizon),
        r.lifetime_windows
    );
    let _ = writeln!(
        out,
        "    {:>10} {:>14} {:>22} {:>18}",
        "windows", "this", "summed per-window", "plain tree"
    );
    let f = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.4}"));
    for e in &r.error {
        let _ = writeln!(
            out,
            "    {:>10} {:>14} {:>22.4} {:>18}",
            e.windows,
            f(e.std),
            e.std_summed_windows,
            f(e.std_plain_tree)
        );
    }
}
