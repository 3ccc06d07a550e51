//! `fleetdp plan --report FILE`: the plan as one self-contained HTML page
//! for a privacy review — the promise in words and numbers, each stream's
//! mechanisms with links to their proofs in the manual, the accuracy
//! trade-off as inline SVG charts, and the tests that back each mechanism.
//!
//! Every number is a field of the same [`PlanReport`] `plan --format json`
//! prints, written with [`sig`]; every chart point is the stream planned
//! again with one setting changed (the plan `fleetdp plan` makes, through
//! the same accuracy functions), never a second formula. Post-
//! processing of public parameters: no data, no privacy cost.

use super::charts::{escape, label};
use super::{sig, PlanReport, StreamReport};
use crate::config::Validated;
use crate::dp::release::StreamPlan;
use std::fmt::Write;

/// Where each mechanism's sensitivity is proven (a heading of
/// docs/privacy.md, which a test resolves).
pub const PROOF: &str = "docs/privacy.md#statistics-and-sensitivities";
/// Where the running totals' noise is derived.
pub const RUNNING_PROOF: &str = "docs/privacy.md#running-totals";
/// Where the private-key selection is proven.
pub const SELECTION_PROOF: &str = "docs/privacy.md#private-keys";
/// Where the device-limit alarm's guarantee is argued.
pub const ALARM_PROOF: &str = "docs/privacy.md#the-device-limit-alarm";
/// The files whose tests back the mechanisms (each checked to exist).
pub const BACKING: [(&str, &str); 10] = [
    (
        "aggregator/dp/tests/sensitivity_bruteforce.rs",
        "brute-force sensitivity of every measurement over neighbouring windows",
    ),
    (
        "aggregator/dp/tests/samplers.rs",
        "goodness of fit of the discrete Laplace and Gaussian samplers",
    ),
    (
        "aggregator/dp/tests/audit.rs",
        "statistical audits: empirical ε within the charge",
    ),
    (
        "aggregator/dp/tests/coverage.rs",
        "the stated 95% intervals hold their truth",
    ),
    (
        "aggregator/dp/tests/groups_bruteforce.rs",
        "brute-force sensitivity of group-by: one device in at most G groups",
    ),
    (
        "aggregator/dp/tests/continual.rs",
        "running totals: the sensitivity bound by brute force over the tree, the stated noise",
    ),
    (
        "aggregator/dp/tests/keyselect.rs",
        "private key selection: a one-device key released with probability ≤ δ/G; an ε audit",
    ),
    (
        "aggregator/dp/src/alarm/tests.rs",
        "device-limit alarm: its output distribution computed exactly on neighbouring counts, within e^ε",
    ),
    (
        "aggregator/tests/stream_privacy.rs",
        "privacy over whole neighbouring streams, through the real windowing and caps",
    ),
    (
        "aggregator/tests/side_channel_add_remove.rs",
        "telemetry, output and logs identical on add-remove neighbours",
    ),
];
/// Horizons in 30 and 365 days (at least one each).
fn horizons_in(report: &PlanReport, days: u64) -> u64 {
    (days * 86_400 / report.horizon_seconds.max(1)).max(1)
}

/// The review page for the plan `report` of `v`.
pub fn review_page(report: &PlanReport, v: &Validated) -> String {
    let mut out = String::from(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>FleetDP privacy review</title><style>\
             body{font:14px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}\
             table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #bbb;padding:.2rem .5rem;text-align:left}\
             svg{background:#fafafa;border:1px solid #ddd}@media print{a{color:inherit}}</style></head><body>\
             <h1>FleetDP privacy review</h1>",
        );
    promise(report, &mut out);
    for s in &report.streams {
        let plan = v.plan.streams.iter().find(|p| p.declared_name() == s.name);
        stream_section(&mut out, report, s, plan, v);
    }
    warned(&mut out, report);
    backing(&mut out);
    out.push_str("</body></html>\n");
    out
}

/// The guarantee in words and numbers, and what composes over time.
fn promise(report: &PlanReport, out: &mut String) {
    let pure = report.measure == "pure";
    let unit = if pure { "ε" } else { "ρ" };
    let eps = report.epsilon_at_delta.unwrap_or(report.spent_per_horizon);
    let (factor, strength) = super::odds(eps);
    let protected = if report.relation == "add_remove" {
        "each device's values and whether it took part at all"
    } else {
        "each device's values (its presence and each window's size are public)"
    };
    let _ = write!(
            out,
            "<h2>The promise</h2><p>Relation <b>{rel}</b>, {measure} DP. Per device and per horizon \
             ({horizon}) the plan spends <b>{unit} = {spent}</b> of a budget of {budget}{at_delta}. \
             It protects {protected}: whatever one device does changes the odds of any published \
             outcome by a factor of at most <b>e<sup>ε</sup> ≈ {factor}</b>: {strength} \
             ({scale}).</p>",
            rel = escape(&report.relation),
            measure = escape(&report.measure),
            horizon = escape(&report.horizon),
            spent = sig(report.spent_per_horizon),
            budget = sig(report.budget_per_horizon),
            at_delta = match report.epsilon_at_delta {
                Some(e) => format!(", ε = {} at δ = {}", sig(e), sig(report.delta)),
                None => String::new(),
            },
            scale = super::ODDS_SCALE,
        );
    let (month, year) = (horizons_in(report, 30), horizons_in(report, 365));
    let over = |h: u64| {
        if pure {
            format!(
                "ε ≤ {} (basic composition)",
                sig(report.spent_per_horizon * h as f64)
            )
        } else {
            let rho = report.spent_per_horizon * h as f64;
            format!(
                "ρ = {} (zCDP adds up), ε = {} at δ = {}",
                sig(rho),
                sig(crate::dp::mechanism::zcdp_to_approx_dp(rho, report.delta)),
                sig(report.delta)
            )
        }
    };
    let _ = write!(
        out,
        "<p>Over 30 days ({month} horizons): {}. Over a year ({year} horizons): {}.</p>\
             <p>Trust boundary: the operator and the broker see the raw readings on the input \
             topic; the published releases are the only outputs protected as above. The release \
             key's holder can reproduce the noise of every release, so it is kept like a secret \
             key.</p>",
        over(month),
        over(year)
    );
}

fn stream_section(
    out: &mut String,
    report: &PlanReport,
    s: &StreamReport,
    plan: Option<&StreamPlan>,
    v: &Validated,
) {
    let windows = match (&s.window, s.window_size) {
        (Some(w), _) => format!("time windows of {}", escape(w)),
        (None, n) => format!("count windows of n = {n}"),
    };
    let _ = write!(
        out,
        "<h2>Stream {name}</h2><p>{windows}; one device contributes at most k = {k} readings a \
         window and joins at most W = {w} windows a horizon{g}. Spend: {pw} a window, {ph} a \
         horizon.</p>",
        name = escape(&s.name),
        k = s.max_readings_per_device,
        w = s.max_windows_per_device,
        g = s.groups.as_ref().map_or(String::new(), |g| format!(
            ", in at most G = {} of its {} groups",
            g.max_groups_per_device,
            g.keys.len()
        )),
        pw = sig(s.spent_per_window),
        ph = sig(s.spent_per_horizon),
    );
    out.push_str(
        "<table><tr><th>statistic</th><th>mechanism</th><th>sensitivity</th><th>scale</th>\
         <th>spend a window</th><th>spend a horizon</th><th>95% half-width</th><th>target</th>\
         <th>proof</th></tr>",
    );
    for st in &s.statistics {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td><a href=\"{PROOF}\">sensitivity</a></td></tr>",
            escape(&label(st)),
            escape(&st.mechanism),
            sig(st.sensitivity),
            sig(st.scale),
            sig(st.spent_per_window),
            sig(st.spent_per_horizon),
            half_width(st),
            match (st.target_95, st.variance_target_95) {
                (Some(t), _) => sig(t),
                (None, Some(v)) => format!("{} (variance)", sig(v)),
                (None, None) => "–".into(),
            },
        );
    }
    out.push_str("</table>");
    budget_bar(out, s);
    selection(out, s);
    running(out, s);
    alarm(out, s);
    if let Some(p) = plan {
        super::pictures::running(out, p);
        super::pictures::timeline(out, report, s, p);
        super::charts::trade_offs(out, report, s, p, v);
    }
}

/// A grouped stream's keys, and a private dimension's selection: what it
/// spends and how many devices a key needs to be released.
fn selection(out: &mut String, s: &StreamReport) {
    let Some(g) = &s.groups else { return };
    let _ = write!(
        out,
        "<p>Groups: {} key(s), a device counts in at most G = {} of them a horizon.</p>",
        g.keys.len(),
        g.max_groups_per_device
    );
    let Some(k) = &g.private_keys else { return };
    let _ = write!(
        out,
        "<p>Private keys of <code>{dim}</code> (<a href=\"{SELECTION_PROOF}\">proof</a>): a key \
         is released when its noisy count of distinct devices in a horizon reaches the \
         threshold.</p><table><tr><th>slots</th><th>spend a horizon</th><th>δ</th>\
         <th>threshold</th><th>devices for 50%</th><th>devices for 99%</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        k.max_keys,
        sig(k.spent_per_horizon),
        sig(k.delta),
        k.threshold,
        k.devices_for_50_percent,
        k.devices_for_99_percent,
        dim = escape(&k.dimension),
    );
}

/// The device-limit alarm: its spend and where one check fires.
fn alarm(out: &mut String, s: &StreamReport) {
    let Some(a) = &s.device_alarm else { return };
    let _ = write!(
        out,
        "<p>Device-limit alarm (<a href=\"{ALARM_PROOF}\">proof</a>): a DP signal that a lane \
         nears <code>limits.max_devices_per_lane</code>, kept with hidden counts.</p><table>\
         <tr><th>spend a horizon</th><th>ε an instance</th><th>aims at (devices)</th>\
         <th>a check fires ≥ 99% at</th><th>≤ 1% at</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        sig(a.spent_per_horizon),
        sig(a.epsilon_per_instance),
        a.threshold_devices,
        a.threshold_devices + a.margin_99,
        a.threshold_devices.saturating_sub(a.margin_99),
    );
}

/// A figure's 95% half-width, or a quantile's rank interval (in readings).
fn half_width(st: &super::StatisticReport) -> String {
    match (st.half_width_95, st.rank_half_width_95) {
        (Some(h), _) => sig(h),
        (None, Some(r)) => format!("{} ranks", sig(r)),
        (None, None) => "–".into(),
    }
}

/// The figures `plan` warns would come out mostly noise, as it words them.
fn warned(out: &mut String, report: &PlanReport) {
    if report.warnings.is_empty() {
        return;
    }
    out.push_str("<h2>Figures released mostly as noise</h2><ul>");
    for w in &report.warnings {
        let _ = write!(out, "<li class=\"warning\">{}</li>", escape(&w.message));
    }
    out.push_str("</ul>");
}

/// How the stream's per-window spend is split between its statistics.
fn budget_bar(out: &mut String, s: &StreamReport) {
    let total: f64 = s.statistics.iter().map(|st| st.spent_per_window).sum();
    if total <= 0.0 {
        return;
    }
    out.push_str(
        "<p>How a window's spend is split:</p><svg class=\"split\" width=\"600\" height=\"30\">",
    );
    let mut x = 0.0;
    for (i, st) in s.statistics.iter().enumerate() {
        let w = 600.0 * st.spent_per_window / total;
        let _ = write!(
            out,
            "<rect x=\"{x:.1}\" y=\"0\" width=\"{w:.1}\" height=\"30\" fill=\"hsl({} 60% 60%)\">\
             <title>{}: {}</title></rect>",
            (i * 67) % 360,
            escape(&label(st)),
            sig(st.spent_per_window)
        );
        x += w;
    }
    out.push_str("</svg>");
}

/// Running totals' noise against summing the windows and a plain tree.
fn running(out: &mut String, s: &StreamReport) {
    if s.running.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<p>Running totals (<a href=\"{RUNNING_PROOF}\">proof</a>): noise std after t windows.</p>\
         <table><tr><th>total</th><th>mechanism</th><th>spend a horizon</th><th>t</th><th>std</th>\
         <th>summing windows</th><th>plain tree</th></tr>"
    );
    for r in &s.running {
        for e in &r.error {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&r.name),
                escape(&r.mechanism),
                sig(r.spent_per_horizon),
                e.windows,
                e.std.map_or("past its lifetime".into(), sig),
                sig(e.std_summed_windows),
                e.std_plain_tree.map_or("–".into(), sig)
            );
        }
    }
    out.push_str("</table>");
}

/// The tests and audits that check each mechanism.
fn backing(out: &mut String) {
    out.push_str("<h2>What backs it</h2><ul>");
    for (file, what) in BACKING {
        let _ = write!(out, "<li><code>{file}</code>: {what}</li>");
    }
    out.push_str("</ul>");
}

#[cfg(test)]
#[path = "html_tests.rs"]
mod tests;
