//! A declared stream's plan identity: every setting that decides which lane
//! a reading lands in, how many windows or groups a device may touch, or
//! what a window spends, as named canonical values and one digest.
//!
//! Privacy argument: a device's loss per horizon is bounded by the spend
//! per window times `W` windows per lane times `G` groups, summed over the
//! plan's streams, and the caps that enforce it are restored per lane name
//! from the state topic. The bound survives a restart only if the lane
//! names, the caps and the spends are the ones the state was written under:
//! a `group_by` added mid-horizon renames every lane (`temp` becomes
//! `temp[firmware=…]`), so no charge would be found and every device would
//! spend its budget again. The identity is derived from the validated plan
//! itself, never from a hand-kept list of fields: the whole privacy spec and
//! horizon, the plan's total spend and its declared streams (a renamed or
//! added stream starts with fresh caps), the stream's whole declaration
//! ([`StreamSpec`], serialised, so a field added to it later counts
//! without anyone remembering to add it here) and its spend per window, and
//! the registry topic of a grouped stream. Left out, on purpose: settings
//! that can only refuse a reading, never place or charge it differently
//! (lateness, clock skew, size limits), how messages are decoded, Kafka
//! and HTTP settings, a stream's `unit`, and the [`FREE_CHOICES`] among its
//! declaration, which only change how a window's spend is used (each
//! window spends what it spent before, in the same lane). See
//! docs/DESIGN.md §6.

use crate::dp::release::{Plan, PrivacySpec, StreamSpec};
use num_rational::BigRational;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Declaration fields that neither place a reading nor change a spend:
/// `adaptive_quantiles` weighs a window's quantile candidates by the lane's
/// earlier releases, at the same spend (dp `release/adaptive.rs`), so
/// turning it on or off mid-horizon keeps every cap and charge; and since
/// restore resumes after the last window published, no window is released
/// again under the other setting. (A state that recorded one is not
/// compared on it: a setting only one side names is not a change.)
pub(crate) const FREE_CHOICES: &[&str] = &["stream.adaptive_quantiles"];

/// Values longer than this are recorded as their digest.
const MAX_VALUE_CHARS: usize = 96;

/// A declared stream's plan identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanIdentity {
    /// Setting (a dotted path: `stream.max_windows_per_device`) → its
    /// canonical JSON, or `blake3:<hex> (<n> chars)` for a long one.
    pub settings: BTreeMap<String, String>,
    /// BLAKE3 of every setting's full value, hex.
    pub digest: String,
}

/// What the identity of one declared stream is derived from.
pub(crate) struct Inputs<'a> {
    pub privacy: &'a PrivacySpec,
    pub horizon_ms: u128,
    pub per_horizon: &'a BigRational,
    /// Every declared stream's name, in config order.
    pub declared: &'a [String],
    /// The stream's declaration.
    pub spec: &'a StreamSpec,
    /// Its planned streams' spends per window (one per group).
    pub per_window: Vec<&'a BigRational>,
    /// The registry topic, for a grouped stream.
    pub registry_topic: Option<&'a str>,
}

/// Each declared stream's identity in `plan` (by name).
pub(super) fn of_streams(
    plan: &Plan,
    privacy: &PrivacySpec,
    specs: &[StreamSpec],
    horizon: std::time::Duration,
    registry_topic: Option<&str>,
) -> BTreeMap<String, Arc<PlanIdentity>> {
    let declared: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    specs
        .iter()
        .map(|spec| {
            let per_window = plan
                .streams
                .iter()
                .filter(|s| s.declared_name() == spec.name)
                .map(|s| &s.per_window)
                .collect();
            let identity = PlanIdentity::new(Inputs {
                privacy,
                horizon_ms: horizon.as_millis(),
                per_horizon: &plan.per_horizon,
                declared: &declared,
                spec,
                per_window,
                registry_topic,
            });
            (spec.name.clone(), Arc::new(identity))
        })
        .collect()
}

impl PlanIdentity {
    pub(crate) fn new(i: Inputs<'_>) -> PlanIdentity {
        let mut full = BTreeMap::new();
        flatten("privacy", &to_value(i.privacy), &mut full);
        full.insert("privacy.horizon_ms".into(), i.horizon_ms.to_string());
        full.insert("plan.per_horizon".into(), exact_text(i.per_horizon));
        full.insert("plan.streams".into(), to_value(i.declared).to_string());
        flatten("stream", &to_value(i.spec), &mut full);
        full.retain(|k, _| !FREE_CHOICES.contains(&k.as_str()));
        let mut spends: Vec<String> = i.per_window.iter().map(|r| exact_text(r)).collect();
        spends.sort();
        spends.dedup();
        full.insert("stream.per_window".into(), spends.join(" "));
        if i.spec.groups.is_some() {
            let topic = i.registry_topic.map_or(Value::Null, Value::from);
            full.insert("registry.topic".into(), topic.to_string());
        }
        let mut hasher = blake3::Hasher::new();
        for (k, v) in &full {
            // Lengths first: no two maps hash alike by shifting text.
            for part in [k, v] {
                hasher.update(&(part.len() as u64).to_le_bytes());
                hasher.update(part.as_bytes());
            }
        }
        let digest = hasher.finalize().to_hex().to_string();
        let settings = full
            .into_iter()
            .map(|(k, v)| {
                let shown = if v.chars().count() > MAX_VALUE_CHARS {
                    let d = blake3::hash(v.as_bytes()).to_hex();
                    format!("blake3:{} ({} chars)", &d[..16], v.chars().count())
                } else {
                    v
                };
                (k, shown)
            })
            .collect();
        PlanIdentity { settings, digest }
    }
}

fn exact_text(r: &BigRational) -> String {
    format!("{}/{}", r.numer(), r.denom())
}

fn to_value<T: serde::Serialize + ?Sized>(t: &T) -> Value {
    // Plan types hold numbers, strings, lists and maps with string keys:
    // serialising them cannot fail.
    serde_json::to_value(t).expect("plan types serialise to JSON")
}

/// Objects become dotted paths; everything else (lists included) is one
/// setting, its compact JSON.
fn flatten(path: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                flatten(&format!("{path}.{k}"), x, out);
            }
        }
        _ => {
            out.insert(path.to_string(), v.to_string());
        }
    }
}

/// Settings that differ between `recorded` and `now`, as (name, recorded,
/// now). A setting only `now` names, with no recorded setting above or
/// below it in the path, was added to FleetDP after the state was written:
/// it is not compared (its digest is, once both sides name it). One named by
/// only one side where the other names its parent or children (`stream.groups`
/// `null` against `stream.groups.keys`) is a change of the parent.
pub(crate) fn changed(
    recorded: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<(String, String, String)> {
    let related = |m: &BTreeMap<String, String>, k: &str| {
        m.keys().any(|o| {
            o.len() != k.len()
                && (o.starts_with(&format!("{k}.")) || k.starts_with(&format!("{o}.")))
        })
    };
    // A change below a changed parent is reported once, at the parent.
    let parent = |k: &str| -> String {
        let mut p = k.to_string();
        for (o, _) in recorded.iter().chain(now.iter()) {
            if k.starts_with(&format!("{o}.")) && o.len() < p.len() {
                p = o.clone();
            }
        }
        p
    };
    let shown = |m: &BTreeMap<String, String>, k: &str| {
        m.get(k).cloned().unwrap_or_else(|| {
            let under: Vec<&str> = m
                .keys()
                .filter(|o| o.starts_with(&format!("{k}.")))
                .map(|o| &o[k.len() + 1..])
                .collect();
            if under.is_empty() {
                "(not set)".into()
            } else {
                format!("{{{}}}", under.join(", "))
            }
        })
    };
    let mut out: Vec<(String, String, String)> = Vec::new();
    let keys: std::collections::BTreeSet<&String> = recorded.keys().chain(now.keys()).collect();
    for k in keys {
        let name = match (recorded.get(k), now.get(k)) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(_), Some(_)) => k.clone(),
            (None, _) if !related(recorded, k) => continue,
            (_, None) if !related(now, k) => continue,
            _ => parent(k),
        };
        if !out.iter().any(|(n, _, _)| *n == name) {
            out.push((name.clone(), shown(recorded, &name), shown(now, &name)));
        }
    }
    readable(out)
}

/// Exact spends (`n/d`, dozens of digits) shown as decimals; a derived
/// spend (`plan.*`, `stream.per_window`) that reads the same both ways is
/// left out beside a declared setting that changed, which explains it
/// (changing only `running_share` listed `plan.per_horizon: 50 → 50` in
/// 25-digit fractions).
fn readable(out: Vec<(String, String, String)>) -> Vec<(String, String, String)> {
    let derived = |n: &str| n.starts_with("plan.") || n == "stream.per_window";
    let declared_changed = out.iter().any(|(n, _, _)| !derived(n));
    out.into_iter()
        .filter_map(|(n, a, b)| {
            let (da, db) = (decimal(&a), decimal(&b));
            match (da, db) {
                (Some(da), Some(db)) if da == db && declared_changed && derived(&n) => None,
                (Some(da), Some(db)) if da != db => Some((n, da, db)),
                _ => Some((n, a, b)),
            }
        })
        .collect()
}

/// `n/d` (or space-separated ones) as decimals of 12 significant digits.
fn decimal(v: &str) -> Option<String> {
    let parts: Option<Vec<String>> = v
        .split(' ')
        .map(|x| {
            let r: BigRational = x.parse().ok()?;
            let f = crate::dp::rational::to_f64(&r);
            Some(crate::telemetry::tidy(f).to_string())
        })
        .collect();
    parts.map(|p| p.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equal_settings_are_no_change() {
        let a = m(&[("stream.w", "1"), ("stream.groups", "null")]);
        assert!(changed(&a, &a).is_empty());
    }

    #[test]
    fn a_changed_value_is_named() {
        let a = m(&[("stream.w", "1"), ("stream.k", "1")]);
        let b = m(&[("stream.w", "2"), ("stream.k", "1")]);
        assert_eq!(
            changed(&a, &b),
            vec![("stream.w".into(), "1".into(), "2".into())]
        );
    }

    #[test]
    fn a_group_by_added_is_a_change_of_the_parent() {
        let a = m(&[("stream.w", "1"), ("stream.groups", "null")]);
        let b = m(&[
            ("stream.w", "1"),
            ("stream.groups.keys", "[\"firmware=4.1\"]"),
            ("stream.groups.max_groups_per_device", "1"),
        ]);
        let c = changed(&a, &b);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].0, "stream.groups");
        assert_eq!(c[0].1, "null");
        assert!(c[0].2.contains("keys"), "{c:?}");
        // And back.
        assert_eq!(changed(&b, &a)[0].0, "stream.groups");
    }

    /// A state written when `adaptive_quantiles` was part of the identity
    /// is not a plan change now that it is not.
    #[test]
    fn a_free_choice_recorded_before_is_not_compared() {
        let a = m(&[("stream.w", "1"), ("stream.adaptive_quantiles", "false")]);
        let b = m(&[("stream.w", "1")]);
        assert!(changed(&a, &b).is_empty());
        assert_eq!(FREE_CHOICES, ["stream.adaptive_quantiles"]);
    }

    /// Issue: exact spends read as decimals, and a derived spend
    /// that reads the same is not listed beside the setting that moved it.
    #[test]
    fn spends_read_as_decimals_and_only_where_they_differ() {
        let a = m(&[
            ("stream.running_share", "0.2"),
            (
                "plan.per_horizon",
                "50000000000000000000000001/1000000000000000000000000",
            ),
        ]);
        let b = m(&[
            ("stream.running_share", "0.3"),
            (
                "plan.per_horizon",
                "50000000000000000000000003/1000000000000000000000000",
            ),
        ]);
        assert_eq!(
            changed(&a, &b),
            vec![("stream.running_share".into(), "0.2".into(), "0.3".into())]
        );
        let a = m(&[("plan.per_horizon", "1/3")]);
        let b = m(&[("plan.per_horizon", "1/4")]);
        let c = changed(&a, &b);
        assert_eq!(c.len(), 1);
        assert!(c[0].1.starts_with("0.33333") && c[0].2 == "0.25", "{c:?}");
    }

    #[test]
    fn a_setting_the_state_predates_is_not_compared() {
        let a = m(&[("stream.w", "1")]);
        let b = m(&[("stream.w", "1"), ("stream.new_field", "7")]);
        assert!(changed(&a, &b).is_empty());
    }
}
