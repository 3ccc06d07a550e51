//! The review page's other pictures: each running total's noise over 1 to
//! 10⁶ windows beside summing the windows and a plain tree (the rows
//! `plan` states, at more points, from the same function), and one
//! device's timeline over a horizon: the windows it can join and what
//! each costs, adding up to the stream's spend per horizon.
//!
//! Post-processing of public parameters: no data, no privacy cost.

use super::charts::{bounds, escape, scale};
use super::{running_at, sig, PlanReport, StreamReport};
use crate::dp::rational;
use crate::dp::release::StreamPlan;
use std::fmt::Write;

const W: f64 = 560.0;
const H: f64 = 240.0;
const PAD: f64 = 56.0;

/// Most windows the timeline draws one by one; past it, its line alone.
const CELLS: u64 = 200;

/// One named line of a picture.
struct Series {
    name: String,
    colour: &'static str,
    points: Vec<(f64, f64)>,
}

/// A picture of `series` (log–log, else linear), each a polyline with
/// its name as its title; `extra` is drawn under them (pixel space).
fn plot(out: &mut String, class: &str, title: &str, log: bool, series: &[Series], extra: &str) {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (xs, ys) = if log {
        (bounds(all().map(|p| p.0)), bounds(all().map(|p| p.1)))
    } else {
        let max = |f: fn(&(f64, f64)) -> f64| all().map(f).fold(0.0, f64::max);
        ((0.0, max(|p| p.0)), (0.0, max(|p| p.1)))
    };
    let to = |v: f64, (lo, hi): (f64, f64), len: f64| match log {
        true => scale(v, (lo, hi), len),
        false if hi > lo => (v - lo) / (hi - lo) * len,
        false => len / 2.0,
    };
    let _ = write!(
        out,
        "<figure><svg class=\"picture {class}\" width=\"{W}\" height=\"{H}\">\
         <text x=\"{PAD}\" y=\"16\" font-size=\"12\">{}</text>{extra}",
        escape(title)
    );
    for s in series.iter().filter(|s| s.points.len() >= 2) {
        let line: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| {
                let a = PAD + to(x, xs, W - 2.0 * PAD);
                let b = H - PAD - to(y, ys, H - 2.0 * PAD);
                format!("{a:.1},{b:.1}")
            })
            .collect();
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\">\
             <title>{}</title></polyline>",
            s.colour,
            line.join(" "),
            escape(&s.name)
        );
    }
    let names: Vec<String> = series
        .iter()
        .map(|s| format!("<tspan fill=\"{}\">{}</tspan>", s.colour, escape(&s.name)))
        .collect();
    let _ = write!(
        out,
        "<text x=\"{PAD}\" y=\"{}\" font-size=\"11\">{} … {}{}</text>\
         <text x=\"4\" y=\"{}\" font-size=\"11\">{} … {}</text>\
         <text x=\"{PAD}\" y=\"32\" font-size=\"11\">{}</text></svg></figure>",
        H - 12.0,
        sig(xs.0),
        sig(xs.1),
        if log { " (log)" } else { "" },
        PAD - 10.0,
        sig(ys.0),
        sig(ys.1),
        names.join(" · ")
    );
}

/// Each running total's noise std after 1 to 10⁶ windows: its mechanism,
/// summing the windows' releases, and a plain tree, for the same budget.
pub(super) fn running(out: &mut String, p: &StreamPlan) {
    let at: Vec<u64> = (0..=6).map(|e| 10u64.pow(e)).collect();
    for r in running_at(p, &at) {
        let series = |name: String, colour, f: &dyn Fn(usize) -> Option<f64>| Series {
            name,
            colour,
            points: (0..at.len())
                .filter_map(|i| f(i).map(|y| (at[i] as f64, y)))
                .collect(),
        };
        let lines = [
            series(r.mechanism.clone(), "#1f6feb", &|i| r.error[i].std),
            series("summing windows".into(), "#d73a49", &|i| {
                Some(r.error[i].std_summed_windows)
            }),
            series("plain tree".into(), "#8250df", &|i| {
                r.error[i].std_plain_tree
            }),
        ];
        plot(
            out,
            "running",
            &format!(
                "running {}: noise std after t windows (lifetime {})",
                r.name, r.lifetime_windows
            ),
            true,
            &lines,
            "",
        );
    }
}

/// One device's horizon: the fixed per-horizon charges (running totals,
/// the device-limit alarm, key selection; `StreamPlan::horizon_parts`)
/// and `G ×` the window spend for each window it joins, up
/// to `W`; later windows of the horizon drop its readings and cost nothing.
pub(super) fn timeline(out: &mut String, report: &PlanReport, s: &StreamReport, p: &StreamPlan) {
    let unit = if report.measure == "pure" { "ε" } else { "ρ" };
    let (fixed, step) = p.horizon_parts();
    let (fixed, step) = (rational::to_f64(&fixed), rational::to_f64(&step));
    let w = u64::from(s.max_windows_per_device);
    // Time windows: the horizon's windows; count windows: W and a few more.
    let (windows, of) = match s.window_seconds {
        Some(len) if len > 0.0 => {
            let n = (report.horizon_seconds as f64 / len).ceil().max(1.0) as u64;
            (n, format!("of the horizon's {n} windows"))
        }
        _ => (w + (w / 4).max(2), "windows of its partition".to_string()),
    };
    let joined = w.min(windows);
    let total = fixed + step * joined as f64;
    let mut points = vec![(0.0, fixed)];
    let every = (joined / CELLS).max(1);
    points.extend(
        (1..=joined)
            .filter(|j| j % every == 0 || *j == joined)
            .map(|j| (j as f64, fixed + step * j as f64)),
    );
    if windows > joined {
        points.push((windows as f64, total));
    }
    let mut cells = String::new();
    if windows <= CELLS {
        let cell = (W - 2.0 * PAD) / windows as f64;
        for j in 0..windows {
            let (fill, what) = match j < joined {
                true => (
                    "#cfe2ff",
                    format!("window {}: joins, {unit} {}", j + 1, sig(step)),
                ),
                false => (
                    "#eee",
                    format!("window {}: W reached, dropped, costs 0", j + 1),
                ),
            };
            let _ = write!(
                cells,
                "<rect class=\"window\" x=\"{:.1}\" y=\"{}\" width=\"{:.1}\" height=\"10\" \
                 fill=\"{fill}\" stroke=\"#fff\"><title>{what}</title></rect>",
                PAD + cell * j as f64,
                H - PAD + 6.0,
                cell
            );
        }
    }
    let name = format!("{unit} spent: {} after {joined} {of}", sig(total));
    let title = format!(
        "One device's horizon: each window it joins costs {unit} {}{}",
        sig(step),
        if fixed > 0.0 {
            format!(", after {} once a horizon", sig(fixed))
        } else {
            String::new()
        }
    );
    let series = [Series {
        name,
        colour: "#1f6feb",
        points,
    }];
    plot(out, "timeline", &title, false, &series, &cells);
}
