//! The plan a lane's state was written under, and what changed since.
//!
//! Privacy argument: a device's loss per horizon is at most `W` windows
//! times the per-window spend, and its windows are counted per lane. The
//! count survives restarts only if the horizon's length, `W`, the spend per
//! window, the relation and the device-to-lane mapping (the input partition
//! count) are what they were when the charges were written; `k`, `n` and the
//! time windows' length change which windows exist. A change of any of them
//! within a horizon is refused ([`PlanChange`]); at a horizon boundary the
//! operator may declare it (`fleetdp run --allow-plan-change`), and the old
//! plan's charges, which belong to finished horizons, are dropped.

use crate::config::Validated;

/// The fingerprint of stream `stream` of the running plan.
pub fn fingerprint(
    v: &Validated,
    stream: usize,
    input_partitions: i32,
) -> proto::v1::PlanFingerprint {
    let s = &v.plan.streams[stream];
    let exact = |r: &num_rational::BigRational| format!("{}/{}", r.numer(), r.denom());
    proto::v1::PlanFingerprint {
        horizon_ms: v.horizon.as_millis() as i64,
        relation: v.plan.privacy.relation.to_string(),
        measure: format!("{:?}", v.plan.privacy.budget.measure).to_lowercase(),
        max_windows_per_device: s.spec.max_windows_per_device,
        max_readings_per_device: s.spec.max_readings_per_device,
        window_size: s.spec.window_size,
        window_ms: s.spec.window_ms.unwrap_or(0),
        per_window: exact(&s.per_window),
        per_horizon: exact(&v.plan.per_horizon),
        input_partitions,
    }
}

/// Settings that differ between a lane's recorded plan and the running one.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanChange {
    /// Each changed setting: (name, recorded, now).
    pub changed: Vec<(&'static str, String, String)>,
}

impl PlanChange {
    /// What changed from `recorded` to `now`; `None` if nothing did.
    pub fn between(
        recorded: &proto::v1::PlanFingerprint,
        now: &proto::v1::PlanFingerprint,
    ) -> Option<PlanChange> {
        let mut changed = Vec::new();
        let mut cmp = |name: &'static str, a: String, b: String| {
            if a != b {
                changed.push((name, a, b));
            }
        };
        cmp(
            "privacy.horizon (ms)",
            recorded.horizon_ms.to_string(),
            now.horizon_ms.to_string(),
        );
        cmp(
            "privacy.relation",
            recorded.relation.clone(),
            now.relation.clone(),
        );
        cmp(
            "privacy.measure",
            recorded.measure.clone(),
            now.measure.clone(),
        );
        cmp(
            "max_windows_per_device",
            recorded.max_windows_per_device.to_string(),
            now.max_windows_per_device.to_string(),
        );
        cmp(
            "max_readings_per_device",
            recorded.max_readings_per_device.to_string(),
            now.max_readings_per_device.to_string(),
        );
        cmp(
            "window_size",
            recorded.window_size.to_string(),
            now.window_size.to_string(),
        );
        cmp(
            "window (ms)",
            recorded.window_ms.to_string(),
            now.window_ms.to_string(),
        );
        cmp(
            "the stream's spend per window (budget, budget_share, statistics)",
            recorded.per_window.clone(),
            now.per_window.clone(),
        );
        cmp(
            "the spend per horizon (privacy budget)",
            recorded.per_horizon.clone(),
            now.per_horizon.clone(),
        );
        cmp(
            "the input topic's partition count",
            recorded.input_partitions.to_string(),
            now.input_partitions.to_string(),
        );
        (!changed.is_empty()).then_some(PlanChange { changed })
    }

    /// The settings, as `name: recorded → now` lines.
    pub fn describe(&self) -> String {
        self.changed
            .iter()
            .map(|(n, a, b)| format!("{n}: {a} → {b}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp() -> proto::v1::PlanFingerprint {
        proto::v1::PlanFingerprint {
            horizon_ms: 3_600_000,
            relation: "change-one".into(),
            measure: "pure".into(),
            max_windows_per_device: 24,
            max_readings_per_device: 1,
            window_size: 100,
            window_ms: 0,
            per_window: "1/24".into(),
            per_horizon: "1/1".into(),
            input_partitions: 4,
        }
    }

    #[test]
    fn an_unchanged_plan_is_no_change() {
        assert_eq!(PlanChange::between(&fp(), &fp()), None);
    }

    #[test]
    fn every_setting_that_matters_is_named() {
        let mut now = fp();
        now.horizon_ms = 86_400_000;
        now.input_partitions = 8;
        let c = PlanChange::between(&fp(), &now).unwrap();
        let names: Vec<&str> = c.changed.iter().map(|c| c.0).collect();
        assert_eq!(
            names,
            ["privacy.horizon (ms)", "the input topic's partition count"]
        );
        assert!(c.describe().contains("3600000 → 86400000"));
        for change in [
            |f: &mut proto::v1::PlanFingerprint| f.max_windows_per_device = 25,
            |f: &mut proto::v1::PlanFingerprint| f.max_readings_per_device = 2,
            |f: &mut proto::v1::PlanFingerprint| f.window_size = 101,
            |f: &mut proto::v1::PlanFingerprint| f.window_ms = 60_000,
            |f: &mut proto::v1::PlanFingerprint| f.per_window = "1/12".into(),
            |f: &mut proto::v1::PlanFingerprint| f.per_horizon = "2/1".into(),
            |f: &mut proto::v1::PlanFingerprint| f.relation = "add-remove".into(),
            |f: &mut proto::v1::PlanFingerprint| f.measure = "zcdp".into(),
        ] {
            let mut now = fp();
            change(&mut now);
            assert_eq!(PlanChange::between(&fp(), &now).unwrap().changed.len(), 1);
        }
    }
}
