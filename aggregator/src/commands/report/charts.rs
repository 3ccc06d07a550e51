//! The review page's trade-off charts: each figure's 95% half-width
//! against the window size (count windows) and against the budget, as
//! inline SVG on log–log axes, with this configuration marked and the
//! line each figure is judged by drawn: its `target_error`, else the
//! `--strict` bound of `warnings.rs` (count windows). Every point is the
//! stream planned again with one setting scaled ([`replanned`]); a stream
//! with targets is charted with its budget split evenly (its targets take
//! exactly what they need at any budget), its targets drawn as lines.
//!
//! Post-processing of public parameters: no data, no privacy cost.

use super::warnings::{strict_bound, Declared};
use super::{sig, PlanReport, StatisticReport, StreamReport};
use crate::config::Validated;
use crate::dp::release::{plan, PrivacySpec, StreamPlan, StreamSpec};
use std::fmt::Write;

/// Factors the window size and the budget are scaled by in the charts.
const FACTORS: [f64; 9] = [0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0];

const W: f64 = 420.0;
const H: f64 = 220.0;
const PAD: f64 = 50.0;

/// The line a figure is judged by: its `target_error`, else the bound
/// `plan --strict` flags it over (count windows), which for a histogram or
/// a sum grows with `n`.
struct Line<'a> {
    what: &'static str,
    /// Its height at an x of the chart.
    at: Box<dyn Fn(f64) -> f64 + 'a>,
    /// Its height at this configuration (named in its title).
    today: f64,
}

/// One chart: its points (x, half-width), the x of today's plan and what
/// the x axis is.
struct Chart<'a> {
    title: String,
    x_label: &'a str,
    points: Vec<(f64, f64)>,
    /// Today's setting, where the chart's curve passes through today's
    /// plan (a stream without targets).
    today: Option<f64>,
    target: Option<Line<'a>>,
}

/// Every statistic's charts for stream `s`.
pub(super) fn trade_offs(
    out: &mut String,
    report: &PlanReport,
    s: &StreamReport,
    p: &StreamPlan,
    v: &Validated,
) {
    let unit = if report.measure == "pure" { "ε" } else { "ρ" };
    let targeted = s.statistics.iter().any(|x| x.target_95.is_some());
    let split = if targeted {
        " (targets off: an even split)"
    } else {
        ""
    };
    let today = |x: f64| (!targeted).then_some(x);
    for st in s.statistics.iter().filter(|st| st.half_width_95.is_some()) {
        let by_budget = FACTORS
            .iter()
            .filter_map(|f| {
                let b = report.budget_per_horizon * f;
                replanned(v, p, st, |pr, _| pr.budget.per_horizon = b).map(|h| (b, h))
            })
            .collect();
        draw(
            out,
            &Chart {
                title: format!("{}: 95% half-width against the budget{split}", label(st)),
                x_label: unit,
                points: by_budget,
                today: today(report.budget_per_horizon),
                target: bound(st, s, p, false),
            },
        );
        if s.window_seconds.is_some() || s.window_size == 0 {
            continue;
        }
        let by_n = FACTORS
            .iter()
            .filter_map(|f| {
                let n = ((s.window_size as f64 * f).round() as u64).max(1);
                replanned(v, p, st, |_, sp| sp.window_size = n).map(|h| (n as f64, h))
            })
            .collect();
        draw(
            out,
            &Chart {
                title: format!(
                    "{}: 95% half-width against the window size{split}",
                    label(st)
                ),
                x_label: "n",
                points: by_n,
                today: today(s.window_size as f64),
                target: bound(st, s, p, true),
            },
        );
    }
}

/// The line `st` is judged by; `by_n`: the chart's x is the window size.
fn bound<'a>(
    st: &StatisticReport,
    s: &StreamReport,
    p: &StreamPlan,
    by_n: bool,
) -> Option<Line<'a>> {
    if let Some(t) = st.target_95 {
        return Some(Line {
            what: "target_error",
            at: Box::new(move |_| t),
            today: t,
        });
    }
    if s.window_seconds.is_some() {
        return None;
    }
    let (name, n) = (st.name.clone(), s.window_size as f64);
    let range = Declared::of(&p.spec, String::new());
    let today = strict_bound(&name, n, &range)?;
    Some(Line {
        what: "--strict bound",
        at: Box::new(move |x| {
            strict_bound(&name, if by_n { x } else { n }, &range).unwrap_or(today)
        }),
        today,
    })
}

/// Log-scale position of `x` in `[lo, hi]` over `len` pixels.
pub(super) fn scale(x: f64, (lo, hi): (f64, f64), len: f64) -> f64 {
    if hi <= lo {
        return len / 2.0;
    }
    (x.ln() - lo.ln()) / (hi.ln() - lo.ln()) * len
}

pub(super) fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// One SVG chart: a polyline through its points, today's plan as a dot, the
/// target as a dashed line.
fn draw(out: &mut String, c: &Chart<'_>) {
    let pts: Vec<(f64, f64)> = c
        .points
        .iter()
        .copied()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0 && y.is_finite())
        .collect();
    if pts.len() < 2 {
        return;
    }
    let xs = bounds(pts.iter().map(|p| p.0));
    let judged: Vec<f64> = c
        .target
        .iter()
        .flat_map(|t| pts.iter().map(|p| (t.at)(p.0)))
        .collect();
    let ys = bounds(pts.iter().map(|p| p.1).chain(judged.iter().copied()));
    let at = |x: f64, y: f64| {
        (
            PAD + scale(x, xs, W - 2.0 * PAD),
            H - PAD - scale(y, ys, H - 2.0 * PAD),
        )
    };
    let path = |ys: &mut dyn Iterator<Item = (f64, f64)>| -> String {
        let coords: Vec<String> = ys
            .map(|(x, y)| {
                let (a, b) = at(x, y);
                format!("{a:.1},{b:.1}")
            })
            .collect();
        coords.join(" ")
    };
    let _ = write!(
        out,
        "<figure><svg class=\"chart\" width=\"{W}\" height=\"{H}\" data-points=\"{n}\">\
         <text x=\"{PAD}\" y=\"16\" font-size=\"12\">{title}</text>\
         <polyline fill=\"none\" stroke=\"#1f6feb\" stroke-width=\"2\" points=\"{line}\"/>",
        n = pts.len(),
        title = escape(&c.title),
        line = path(&mut pts.iter().copied())
    );
    let today = c
        .today
        .and_then(|t| pts.iter().find(|p| (p.0 / t - 1.0).abs() < 1e-9));
    if let Some(&(x, y)) = today {
        let (a, b) = at(x, y);
        let _ = write!(
            out,
            "<circle class=\"today\" cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"5\" fill=\"#d73a49\">\
             <title>this configuration: ±{}</title></circle>",
            sig(y)
        );
    }
    if let Some(t) = &c.target {
        let _ = write!(
            out,
            "<polyline class=\"target\" fill=\"none\" points=\"{}\" stroke=\"#2da44e\" \
             stroke-dasharray=\"4\"><title>{} ±{}</title></polyline>",
            path(&mut pts.iter().zip(&judged).map(|(p, &y)| (p.0, y))),
            t.what,
            sig(t.today)
        );
    }
    let _ = write!(
        out,
        "<text x=\"{PAD}\" y=\"{}\" font-size=\"11\">{} {} … {} (log)</text>\
         <text x=\"4\" y=\"{}\" font-size=\"11\">± {} … {}</text></svg></figure>",
        H - 12.0,
        c.x_label,
        sig(xs.0),
        sig(xs.1),
        PAD - 10.0,
        sig(ys.0),
        sig(ys.1)
    );
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A statistic's name as the tables write it (`quantile 0.5`).
pub(super) fn label(st: &StatisticReport) -> String {
    match st.level {
        Some(q) => format!("{} {}", st.name, sig(q)),
        None => st.name.clone(),
    }
}

/// The whole plan again with one setting changed (`change` gets the
/// privacy and the spec of stream `p`; the other streams as declared, so a
/// budget split between streams is split as `plan` splits it): the
/// half-width of `st`, `None` if that plan is refused or states none. A
/// stream with `target_error` is planned without it (the even split): its
/// targets get exactly the spend they need at every budget, so the curve
/// would only repeat them.
pub(super) fn replanned(
    v: &Validated,
    p: &StreamPlan,
    st: &StatisticReport,
    change: impl Fn(&mut PrivacySpec, &mut StreamSpec),
) -> Option<f64> {
    let c = &v.config;
    let mut privacy = v.plan.privacy.clone();
    let mut specs = Vec::with_capacity(c.streams.len());
    for s in &c.streams {
        let mut spec = s
            .to_spec(v.horizon, c.privacy.horizon.trim(), &c.dimensions)
            .ok()?;
        if s.name == p.declared_name() {
            spec.target_error.clear();
            change(&mut privacy, &mut spec);
        }
        specs.push(spec);
    }
    let planned = plan(&privacy, &specs).ok()?;
    let s = planned.streams.iter().find(|s| {
        s.declared_name() == p.declared_name() && s.group.as_ref().is_none_or(|g| g.index == 0)
    })?;
    s.describe()
        .into_iter()
        .find(|d| d.name == st.name && d.level == st.level)?
        .half_width
}
