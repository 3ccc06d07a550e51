//! One summary line per performance target (issue-tracked in
//! docs/performance.md): the figure this run measured, the target and the
//! verdict, each line starting `TARGET` so a run's verdicts can be grepped.

/// Print `what`'s figure beside its target and whether this run met it.
pub fn line(what: &str, figure: &str, target: &str, met: bool) {
    let verdict = if met { "met" } else { "MISSED" };
    println!("TARGET {what}: {figure} (target {target}): {verdict}");
}
