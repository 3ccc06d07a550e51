//! The plan a lane's state was written under, and what changed since.
//!
//! Privacy argument: a device's loss per horizon is at most `W` windows
//! times the per-window spend (times `G` groups), and its windows and
//! groups are counted per lane. The count survives restarts only if every
//! setting that places a reading in a lane, caps a device or sets a spend
//! is what it was when the charges were written: the plan identity of the
//! lane's declared stream (`config/identity.rs`, derived from the validated
//! plan) and the input partition count (a device's lane). A change of any
//! of them within a horizon is refused ([`PlanChange`]), naming each
//! changed setting; so is state of a lane whose stream is no longer
//! declared (a renamed stream, or `group_by` added or removed, would start
//! with fresh caps). At a horizon boundary the operator may declare the
//! change (`fleetdp run --allow-plan-change`), and the old plan's charges,
//! which belong to finished horizons, are dropped. State written before
//! FleetDP recorded plan identities is compared on the fields it has.

use crate::config::Validated;

/// The fingerprint of stream `stream` of the running plan, written under
/// the release key `key_id` (compared apart from the plan: `key_ids.rs`).
pub fn fingerprint(
    v: &Validated,
    stream: usize,
    input_partitions: i32,
    key_id: &str,
) -> proto::v1::PlanFingerprint {
    let s = &v.plan.streams[stream];
    let exact = |r: &num_rational::BigRational| format!("{}/{}", r.numer(), r.denom());
    let identity = v.identity(stream);
    proto::v1::PlanFingerprint {
        settings: identity.settings.clone(),
        digest: identity.digest.clone(),
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
        release_key_id: key_id.to_string(),
    }
}

/// The declared stream of a lane name (`temp[firmware=4.2]` → `temp`;
/// stream names hold no `[`).
fn declared_of(lane: &str) -> &str {
    lane.split_once('[').map_or(lane, |(d, _)| d)
}

/// Recorded lanes (of the partitions being restored) that the running plan
/// has no lane for — `planned` says which names it has — each with what
/// changed: the named settings of its declared stream where both sides
/// record them, else that the lane's stream is not declared as it was.
pub fn unplanned_lanes(
    v: &Validated,
    input_partitions: i32,
    lanes: impl IntoIterator<Item = (String, i32)>,
    planned: impl Fn(&str) -> bool,
    recorded: impl Fn(&(String, i32)) -> Option<proto::v1::PlanFingerprint>,
) -> Vec<((String, i32), PlanChange)> {
    let mut lanes: Vec<(String, i32)> = lanes.into_iter().filter(|l| !planned(&l.0)).collect();
    lanes.sort();
    lanes.dedup();
    lanes
        .into_iter()
        .map(|lane| {
            let declared = declared_of(&lane.0);
            let now = v
                .plan
                .streams
                .iter()
                .position(|s| s.declared_name() == declared)
                .map(|i| fingerprint(v, i, input_partitions, ""));
            let change = match (now, recorded(&lane)) {
                (Some(now), Some(then)) => PlanChange::between(&then, &now),
                _ => None,
            };
            let change = change.unwrap_or_else(|| PlanChange::undeclared(&lane.0));
            (lane, change)
        })
        .collect()
}

/// Settings that differ between a lane's recorded plan and the running one.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanChange {
    /// Each changed setting: (name, recorded, now).
    pub changed: Vec<(String, String, String)>,
}

impl PlanChange {
    /// What changed from `recorded` to `now`; `None` if nothing did.
    /// Both with settings (ledger entries of this FleetDP): every changed
    /// setting by name. Otherwise (charges records carry only the digest;
    /// state of earlier builds has neither) the fields both have, and the
    /// digest where both have one.
    pub fn between(
        recorded: &proto::v1::PlanFingerprint,
        now: &proto::v1::PlanFingerprint,
    ) -> Option<PlanChange> {
        let mut changed = Vec::new();
        let mut cmp = |name: &str, a: String, b: String| {
            if a != b {
                changed.push((name.to_string(), a, b));
            }
        };
        cmp(
            "the input topic's partition count",
            recorded.input_partitions.to_string(),
            now.input_partitions.to_string(),
        );
        if !recorded.settings.is_empty() && !now.settings.is_empty() {
            changed.extend(crate::config::changed_settings(
                &recorded.settings,
                &now.settings,
            ));
            return (!changed.is_empty()).then_some(PlanChange { changed });
        }
        let fields = compared_fields(recorded, now);
        for (name, a, b) in fields {
            cmp(name, a, b);
        }
        let digests = !recorded.digest.is_empty() && !now.digest.is_empty();
        if digests && recorded.digest != now.digest && changed.is_empty() {
            let short = |d: &str| d.chars().take(16).collect::<String>();
            changed.push((
                "the plan's settings (group_by, dimensions, G, statistics, …; digest)".into(),
                short(&recorded.digest),
                short(&now.digest),
            ));
        }
        (!changed.is_empty()).then_some(PlanChange { changed })
    }

    /// State of lane `lane` whose declared stream is no longer in the plan.
    pub fn undeclared(lane: &str) -> PlanChange {
        let declared = declared_of(lane);
        PlanChange {
            changed: vec![(
                format!("stream '{declared}' (lane {lane})"),
                "declared".into(),
                "not declared (renamed, removed, or its group_by changed)".into(),
            )],
        }
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

/// The fields a fingerprint recorded before settings were kept is
/// compared by, each named as an operator would look for it:
/// (name, recorded, now).
fn compared_fields(
    recorded: &proto::v1::PlanFingerprint,
    now: &proto::v1::PlanFingerprint,
) -> Vec<(&'static str, String, String)> {
    type Get = fn(&proto::v1::PlanFingerprint) -> String;
    let fields: [(&str, Get); 9] = [
        ("privacy.horizon (ms)", |f| f.horizon_ms.to_string()),
        ("privacy.relation", |f| f.relation.clone()),
        ("privacy.measure", |f| f.measure.clone()),
        ("max_windows_per_device", |f| {
            f.max_windows_per_device.to_string()
        }),
        ("max_readings_per_device", |f| {
            f.max_readings_per_device.to_string()
        }),
        ("window_size", |f| f.window_size.to_string()),
        ("window (ms)", |f| f.window_ms.to_string()),
        (
            "the stream's spend per window (budget, budget_share, statistics)",
            |f| f.per_window.clone(),
        ),
        ("the spend per horizon (privacy budget)", |f| {
            f.per_horizon.clone()
        }),
    ];
    fields
        .into_iter()
        .map(|(name, get)| (name, get(recorded), get(now)))
        .collect()
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
            ..Default::default()
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
        let names: Vec<&str> = c.changed.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            names,
            ["the input topic's partition count", "privacy.horizon (ms)"]
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

    #[test]
    fn settings_are_compared_by_name_when_both_sides_have_them() {
        let mut a = fp();
        a.settings.insert("stream.groups".into(), "null".into());
        a.digest = "aa".into();
        let mut b = fp();
        b.settings
            .insert("stream.groups.keys".into(), "[\"firmware=other\"]".into());
        b.digest = "bb".into();
        let c = PlanChange::between(&a, &b).unwrap();
        assert_eq!(c.changed.len(), 1, "{c:?}");
        assert!(c.describe().starts_with("stream.groups: null → "), "{c:?}");
    }

    #[test]
    fn a_charges_record_with_only_a_digest_is_compared_by_it() {
        let mut a = fp();
        a.digest = "aa".into();
        let mut b = fp();
        b.digest = "bb".into();
        b.settings.insert("stream.groups".into(), "null".into());
        let c = PlanChange::between(&a, &b).unwrap();
        assert!(c.describe().contains("digest"), "{c:?}");
        b.digest = "aa".into();
        assert_eq!(PlanChange::between(&a, &b), None);
        // State written before digests: the fields both have.
        a.digest.clear();
        b.digest = "bb".into();
        assert_eq!(PlanChange::between(&a, &b), None);
    }
}
