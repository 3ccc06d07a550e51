//! Releases as text for a terminal: one line per window (each statistic
//! with its 95% interval, and the true value where the caller has it: the
//! demo owns its data), plus a line for the running totals. Used by
//! `fleetdp demo` and `fleetdp tail`.

use crate::dp::release::ReleasedStatistic;

fn stat(r: &proto::Statistic, truth: Option<&ReleasedStatistic>) -> String {
    let name = match r.level {
        Some(q) => format!("p{}", (q * 100.0).round()),
        None => r.name.clone(),
    };
    if r.name == "histogram" {
        let v: Vec<String> = r.values.iter().map(|x| format!("{x:.0}")).collect();
        let t: Vec<String> = truth
            .map(|t| t.values.iter().map(|x| format!("{x:.0}")).collect())
            .unwrap_or_default();
        return format!("hist [{}] (true [{}])", v.join(" "), t.join(" "));
    }
    let v = r.values.first().copied().unwrap_or(f64::NAN);
    let hw = r
        .half_width
        .map(|h| format!(" ± {h:.2}"))
        .unwrap_or_default();
    let t = truth
        .and_then(|t| t.values.first())
        .map(|x| format!(" (true {x:.2})"))
        .unwrap_or_default();
    format!("{name} {v:.2}{hw}{t}")
}

/// A release as text, after `at` (a time or an elapsed time).
pub(crate) fn release(
    at: &str,
    r: &proto::WindowRelease,
    truth: Option<&[ReleasedStatistic]>,
) -> String {
    let stats: Vec<String> = r
        .statistics
        .iter()
        .enumerate()
        .map(|(i, s)| stat(s, truth.and_then(|t| t.get(i))))
        .collect();
    let mut out = format!(
        "{at} {:<13} p{} #{:<3} n={} {}",
        r.stream,
        r.partition,
        r.window_seq,
        r.n,
        stats.join(" · ")
    );
    // The running mean since the start (post-processing of the running
    // sum), beside the summed windows and the combination of both.
    if let Some(sum) = r.running.iter().find(|t| t.name == "sum") {
        let count = sum.count.max(1) as f64;
        let mut line = format!(
            "running mean over {} windows: {:.2} ± {:.2} (1 std)",
            sum.windows,
            sum.values[0] / count,
            sum.std / count
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
