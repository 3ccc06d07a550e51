//! When the demo calls a released figure useful: its error against the
//! truth is within the stream's declared `target_error` for that statistic,
//! or, without one, within the bound `fleetdp plan` warns at — 5% of the
//! stream's range `[lower, upper]` for a mean, std or quantile, the count a
//! bin expects (n / bins) for a histogram bin. Not "within 10% of the
//! truth": a battery's p10 off by 1 V is within 10% of 12 V, yet larger
//! than any effect a fleet would look for. Post-processing of releases and
//! of the demo's own truth: no privacy cost.

use crate::commands::report::warnings::USEFUL_SHARE;
use crate::config::Validated;
use crate::dp::release::StatKind;
use std::collections::BTreeMap;

/// What a stream declares that bounds a useful figure's error.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tolerance {
    width: f64,
    bins: usize,
    targets: Vec<(StatKind, f64)>,
}

impl Tolerance {
    fn target(&self, kind: StatKind) -> Option<f64> {
        self.targets
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, t)| *t)
    }

    /// The largest error a useful figure of statistic `name` (a release's
    /// statistic name) may have, for a release of `n` readings over
    /// `partitions` partitions (a fleet-wide bin sums their noise).
    pub(crate) fn bound(&self, name: &str, n: u64, partitions: usize) -> f64 {
        let range = USEFUL_SHARE * self.width;
        let p = partitions.max(1) as f64;
        match name {
            "mean" => self.target(StatKind::Mean).unwrap_or(range),
            "std" | "quantile" => range,
            "variance" => self
                .target(StatKind::Variance)
                .unwrap_or(range * self.width / 2.0),
            "sum" => self
                .target(StatKind::Sum)
                .map_or(range * n as f64, |t| t * p.sqrt()),
            "count" => self
                .target(StatKind::Count)
                .map_or(f64::INFINITY, |t| t * p.sqrt()),
            "clamped" => self.target(StatKind::Clamped).unwrap_or(USEFUL_SHARE),
            "histogram" => match self.target(StatKind::Histogram) {
                Some(t) => t * p.sqrt(),
                None => n as f64 / self.bins.max(1) as f64,
            },
            _ => range,
        }
    }

    /// The bound as text, in the stream's terms.
    pub(crate) fn describe(&self, name: &str, n: u64, partitions: usize, unit: &str) -> String {
        let b = self.bound(name, n, partitions);
        let declared = match name {
            "mean" => self.target(StatKind::Mean).is_some(),
            "histogram" => self.target(StatKind::Histogram).is_some(),
            _ => false,
        };
        let why = if declared { "target" } else { "plan's bound" };
        match name {
            "histogram" => format!("±{b:.0} per bin ({why})"),
            "clamped" => format!("±{b:.3} ({why})"),
            _ if unit.is_empty() => format!("±{b:.3} ({why})"),
            _ => format!("±{b:.3} {unit} ({why})"),
        }
    }
}

/// Every planned stream's tolerance (a group's stream shares its declared
/// stream's).
pub(crate) fn tolerances(v: &Validated) -> BTreeMap<String, Tolerance> {
    v.plan
        .streams
        .iter()
        .map(|s| {
            let spec = &s.spec;
            (
                spec.name.clone(),
                Tolerance {
                    width: spec.upper - spec.lower,
                    bins: spec.histogram_edges.len().saturating_sub(1),
                    targets: spec.target_error.clone(),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn battery() -> Tolerance {
        Tolerance {
            width: 5.0,
            bins: 0,
            targets: vec![(StatKind::Mean, 0.2)],
        }
    }

    /// A battery p10 off by 1 V is within 10% of 12.6 V but far outside
    /// 5% of the range [10, 15] V; the mean is held to its target.
    #[test]
    fn figures_are_judged_by_range_or_target() {
        let b = battery();
        assert!((b.bound("quantile", 400, 1) - 0.25).abs() < 1e-12);
        assert!(1.0 > b.bound("quantile", 400, 1));
        assert_eq!(b.bound("mean", 400, 1), 0.2);
        let cabin = Tolerance {
            width: 80.0,
            bins: 6,
            targets: vec![(StatKind::Histogram, 20.0)],
        };
        assert_eq!(cabin.bound("histogram", 1000, 1), 20.0);
        assert!((cabin.bound("histogram", 2000, 4) - 40.0).abs() < 1e-9);
        let untargeted = Tolerance {
            width: 200.0,
            bins: 5,
            targets: vec![],
        };
        assert_eq!(untargeted.bound("histogram", 1000, 1), 200.0);
        assert_eq!(untargeted.bound("std", 1000, 1), 10.0);
        assert!(b
            .describe("quantile", 400, 1, "V")
            .contains("±0.250 V (plan's bound)"));
        assert!(b.describe("mean", 400, 1, "V").contains("(target)"));
    }
}
