//! A grouped stream's plan: one calibrated stream per group of a public key
//! set, all with the base stream's parameters and noise, named
//! `<stream>[<key>]` so every group has its own windows, release keys and
//! keyed noise.
//!
//! Privacy argument (docs/DESIGN.md §4, group-by): the windows bound a
//! device to its first `G` groups per horizon and `W` windows and `k`
//! readings per group ([`crate::groups`]), so over a horizon it touches at
//! most `G·W` windows of the stream: the accountant charges the base
//! stream `G·W·per_window` once ([`crate::accountant::StreamClaim`]), not
//! once per group — parallel composition across the groups a device is not
//! in. The key set is declared, so every group is released (empty ones too)
//! and which groups exist reveals nothing.
//!
//! A dimension with private keys ([`PrivateKeys`]) is planned as
//! `max_keys` slots (`<dimension>=#1`…) and `other`: the service binds a
//! slot to a key once the key clears the DP key selection
//! ([`crate::keyselect`], calibrated here with its own share of the
//! stream's budget, spent once per horizon and not per group: the
//! selection's noise already covers a device's `G` keys). Which slots are
//! bound is then a post-processing of that selection.

use super::*;
use crate::keyselect::KeySelection;
use crate::rational::{self, exact};
use num_rational::BigRational;

/// Most groups one stream may be split into (lanes, metrics and releases
/// grow with it).
pub const MAX_GROUPS_PER_STREAM: usize = 1_024;
/// Longest group key (`dimension=value,…`), bytes.
pub const MAX_GROUP_KEY: usize = 256;

/// A stream's declared groups (`group_by` with public key sets).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupSpec {
    /// Every group's key, e.g. `firmware=4.2`, in lane order.
    pub keys: Vec<String>,
    /// `G`: groups one device may count in per horizon.
    pub max_groups_per_device: u32,
    /// A dimension whose keys are learnt from the data.
    pub private: Option<PrivateKeys>,
}

/// A dimension with private keys: keys are released only once a DP key
/// selection over the distinct devices seen with them in a horizon picks
/// them; `keys` then holds its slots (`<dimension>=#<i>`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PrivateKeys {
    pub dimension: String,
    /// Slots: at most this many keys are ever released.
    pub max_keys: u32,
    /// Share of the stream's budget spent on the selection, per horizon.
    pub share: f64,
    /// δ of the selection (all of one device's keys together).
    pub delta: f64,
}

/// Most slots of a private dimension.
pub const MAX_PRIVATE_KEYS: u32 = 64;

/// A slot's value in group keys: `#1`, `#2`, … (`#` is never part of a
/// declared value).
pub fn slot_value(i: u32) -> String {
    format!("#{}", i + 1)
}

/// Which group of which declared stream a planned stream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOf {
    /// The declared stream's name.
    pub base: String,
    /// The group's key.
    pub key: String,
    /// Position of the group in its stream's key list.
    pub index: u32,
    /// `G`.
    pub max_groups_per_device: u32,
}

impl GroupOf {
    /// The group's (dimension, value) pairs, from its key
    /// (`model=a,firmware=4.2`).
    pub fn values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.key.split(',').filter_map(|kv| kv.split_once('='))
    }
}

/// A grouped stream's planned name.
pub fn group_stream_name(base: &str, key: &str) -> String {
    format!("{base}[{key}]")
}

/// `G` of a spec (1 without groups).
pub(super) fn groups_per_device(spec: &StreamSpec) -> u32 {
    spec.groups.as_ref().map_or(1, |g| g.max_groups_per_device)
}

/// Check a spec's groups.
pub(super) fn validate_groups(spec: &StreamSpec) -> Result<(), PlanError> {
    let Some(g) = &spec.groups else {
        return Ok(());
    };
    if g.keys.is_empty() || g.keys.len() > MAX_GROUPS_PER_STREAM {
        return Err(field_err(
            spec,
            "group_by",
            format!(
                "{} groups; allowed 1 to {MAX_GROUPS_PER_STREAM}",
                g.keys.len()
            ),
        ));
    }
    for (i, k) in g.keys.iter().enumerate() {
        let ok = !k.is_empty()
            && k.len() <= MAX_GROUP_KEY
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-=,#".contains(&b));
        if !ok || g.keys[..i].contains(k) {
            return Err(field_err(
                spec,
                "group_by",
                format!("group key {k:?}: 1 to {MAX_GROUP_KEY} characters of A-Z, a-z, 0-9, '_', '.', '-', '=', ',', each once"),
            ));
        }
    }
    let max = crate::groups::MAX_GROUPS_PER_DEVICE;
    if !(1..=max).contains(&g.max_groups_per_device) {
        return Err(field_err(
            spec,
            "max_groups_per_device",
            format!("must be in [1, {max}], got {}", g.max_groups_per_device),
        ));
    }
    if let Some(p) = &g.private {
        if !(1..=MAX_PRIVATE_KEYS).contains(&p.max_keys) {
            return Err(field_err(
                spec,
                "max_keys",
                format!("must be in [1, {MAX_PRIVATE_KEYS}], got {}", p.max_keys),
            ));
        }
        if !(p.share.is_finite() && p.share > 0.0 && p.share < 1.0) {
            return Err(field_err(
                spec,
                "key_selection_share",
                format!("must be in (0, 1), got {}", p.share),
            ));
        }
        if !(p.delta > 0.0 && p.delta < 0.5) {
            return Err(field_err(
                spec,
                "key_selection_delta",
                format!("must be in (0, 0.5), got {}", p.delta),
            ));
        }
    }
    if spec.running_share > 0.0 && g.private.is_some() {
        return Err(field_err(
            spec,
            "running_share",
            "running totals are not available with private keys (a slot names another key after each selection, so its total would mix keys); set it to 0",
        ));
    }
    Ok(())
}

/// Share of a stream's budget its key selection takes (0: no private keys).
pub(super) fn selection_share(spec: &StreamSpec) -> f64 {
    spec.groups
        .as_ref()
        .and_then(|g| g.private.as_ref())
        .map_or(0.0, |p| p.share)
}

/// A stream's key selection and what it spends per horizon (`None`:
/// no private keys).
pub(super) fn key_selection(
    privacy: &PrivacySpec,
    spec: &StreamSpec,
) -> Result<Option<(KeySelection, BigRational)>, PlanError> {
    let Some(g) = &spec.groups else {
        return Ok(None);
    };
    let Some(p) = &g.private else {
        return Ok(None);
    };
    let budget = exact(privacy.budget.per_horizon)
        * rational::decimal(spec.budget_share)
        * rational::decimal(p.share);
    let b = rational::to_f64(&budget);
    let floor = match privacy.budget.measure {
        crate::mechanism::Measure::Pure => MIN_MEASUREMENT_EPSILON,
        crate::mechanism::Measure::Zcdp => MIN_MEASUREMENT_RHO,
    };
    if b < floor {
        return Err(field_err(
            spec,
            "key_selection_share",
            format!("the selection would get {b:e} per horizon, below the floor {floor:e}: raise it or the budget"),
        ));
    }
    let s = KeySelection::calibrate(privacy.budget.measure, g.max_groups_per_device, b, p.delta)
        .map_err(|e| field_err(spec, "key_selection_share", e.to_string()))?;
    // The noise is calibrated to at most `b` (its scale rounded up).
    Ok(Some((s, budget)))
}

/// The planned streams of one declared stream: itself, or one per group.
pub(super) fn expand(base: StreamPlan) -> Vec<StreamPlan> {
    let Some(g) = base.spec.groups.clone() else {
        return vec![base];
    };
    g.keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut s = base.clone();
            s.spec.name = group_stream_name(&base.spec.name, key);
            s.group = Some(GroupOf {
                base: base.spec.name.clone(),
                key: key.clone(),
                index: i as u32,
                max_groups_per_device: g.max_groups_per_device,
            });
            s.selection = base.selection.clone();
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{privacy, spec};
    use super::*;
    use crate::mechanism::Measure;
    use crate::rational;
    use crate::relation::Relation;

    fn grouped(keys: &[&str], g: u32) -> StreamSpec {
        let mut s = spec();
        s.groups = Some(GroupSpec {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            max_groups_per_device: g,
            private: None,
        });
        s
    }

    /// Private keys: the selection gets `key_selection_share` of the
    /// stream's budget once per horizon (not per group), the windows the
    /// rest, and the whole stays within the budget; hand-computed.
    #[test]
    fn key_selection_takes_its_share_once_per_horizon() {
        let p = privacy(Measure::Pure, Relation::ChangeOne);
        let keys = ["fw=#1", "fw=#2", "fw=other"];
        let mut s = grouped(&keys, 2);
        s.groups.as_mut().unwrap().private = Some(PrivateKeys {
            dimension: "fw".into(),
            max_keys: 2,
            share: 0.25,
            delta: 1e-6,
        });
        let public = plan(&p, &[grouped(&keys, 2)]).unwrap();
        let private = plan(&p, &[s]).unwrap();
        let total = p.budget.per_horizon;
        let w = public.streams[0].spec.max_windows_per_device as f64;
        for (a, b) in public.streams.iter().zip(&private.streams) {
            // Windows get 3/4 of what they got without selection.
            let ratio = rational::to_f64(&b.per_window) / rational::to_f64(&a.per_window);
            assert!((ratio - 0.75).abs() < 1e-9, "{ratio}");
            let sel = b
                .selection
                .as_ref()
                .map(|s| &s.mechanism)
                .expect("every slot carries the selection");
            assert_eq!(sel.groups_per_device, 2);
            // Discrete Laplace scale G/ε_sel = 2/(total/4).
            match sel.noise() {
                crate::mechanism::Noise::Laplace(d) => {
                    assert!((d.scale_f64() - 2.0 / (total * 0.25)).abs() < 1e-9)
                }
                n => panic!("{n:?}"),
            }
        }
        // G·W·per_window + ε/4, once.
        let windows = rational::to_f64(&private.streams[0].per_window) * w * 2.0;
        let got = rational::to_f64(&private.per_horizon);
        assert!((got - (windows + total * 0.25)).abs() < 1e-9, "{got}");
        assert!(got <= total + 1e-12);
        // Public keys carry no selection.
        assert!(public.streams.iter().all(|s| s.selection.is_none()));
    }

    /// One planned stream per group, named `<stream>[<key>]`, each with the
    /// per-window spend of the ungrouped stream divided by `G` — not by the
    /// number of groups — and the same per-horizon total.
    #[test]
    fn groups_share_one_claim_scaled_by_g_not_by_their_number() {
        for measure in [Measure::Pure, Measure::Zcdp] {
            let p = privacy(measure, Relation::ChangeOne);
            let flat = plan(&p, &[spec()]).unwrap();
            for (keys, g) in [(vec!["fw=1", "fw=2", "fw=other"], 1), (vec!["a", "b"], 2)] {
                let planned = plan(&p, &[grouped(&keys, g)]).unwrap();
                assert_eq!(planned.streams.len(), keys.len());
                for (i, s) in planned.streams.iter().enumerate() {
                    assert_eq!(s.spec.name, format!("cabin_temp_c[{}]", keys[i]));
                    let of = s.group.as_ref().unwrap();
                    assert_eq!((of.base.as_str(), of.index), ("cabin_temp_c", i as u32));
                    let ratio = rational::to_f64(&flat.streams[0].per_window)
                        / rational::to_f64(&s.per_window);
                    assert!((ratio - g as f64).abs() < 1e-9, "{measure:?} {ratio}");
                }
                // G·W·per_window, whatever the number of groups.
                assert!(planned.per_horizon <= flat.per_horizon);
                let expect = rational::to_f64(&planned.streams[0].per_window) * 24.0 * g as f64;
                assert!((rational::to_f64(&planned.per_horizon) - expect).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn bad_groups_are_refused_naming_the_field() {
        let p = privacy(Measure::Pure, Relation::ChangeOne);
        for (s, field) in [
            (grouped(&[], 1), "group_by"),
            (grouped(&["a", "a"], 1), "group_by"),
            (grouped(&["a/b"], 1), "group_by"),
            (grouped(&["a"], 0), "max_groups_per_device"),
            (grouped(&["a"], 1_001), "max_groups_per_device"),
            (
                {
                    // Running totals of private keys' slots would mix keys.
                    let mut s = grouped(&["fw=#1", "fw=other"], 1);
                    s.groups.as_mut().unwrap().private = Some(PrivateKeys {
                        dimension: "fw".into(),
                        max_keys: 1,
                        share: 0.1,
                        delta: 1e-6,
                    });
                    s.running_share = 0.5;
                    s
                },
                "running_share",
            ),
        ] {
            match plan(&p, &[s]) {
                Err(PlanError::Field { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        for (max_keys, share, delta, field) in [
            (0, 0.1, 1e-6, "max_keys"),
            (MAX_PRIVATE_KEYS + 1, 0.1, 1e-6, "max_keys"),
            (2, 0.0, 1e-6, "key_selection_share"),
            (2, 1.0, 1e-6, "key_selection_share"),
            (2, f64::NAN, 1e-6, "key_selection_share"),
            (2, 0.1, 0.0, "key_selection_delta"),
            (2, 0.1, 0.5, "key_selection_delta"),
            (2, 1e-300, 1e-6, "key_selection_share"),
        ] {
            let mut s = grouped(&["fw=#1", "fw=other"], 1);
            s.groups.as_mut().unwrap().private = Some(PrivateKeys {
                dimension: "fw".into(),
                max_keys,
                share,
                delta,
            });
            match plan(&p, &[s]) {
                Err(PlanError::Field { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let many: Vec<String> = (0..=MAX_GROUPS_PER_STREAM)
            .map(|i| format!("k{i}"))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(plan(&p, &[grouped(&refs, 1)]).is_err());
    }

    /// Public keys with running totals: every group carries them, each
    /// with a `G`-th of the running share, and `G` groups' windows and
    /// totals together spend the stream's budget exactly (hand-computed:
    /// ε = 1, running share 1/4, G = 2 → 1/8 per group's totals).
    #[test]
    fn grouped_running_totals_take_a_gth_of_the_share_each() {
        for measure in [Measure::Pure, Measure::Zcdp] {
            let p = privacy(measure, Relation::ChangeOne);
            let mut s = grouped(&["fw=a", "fw=b", "fw=c"], 2);
            s.running_share = 0.25;
            let planned = plan(&p, &[s]).unwrap();
            assert_eq!(planned.streams.len(), 3);
            for g in &planned.streams {
                let running = g.running.as_ref().expect("each group has running totals");
                let budget = rational::decimal(p.budget.per_horizon);
                assert_eq!(running.spent(), &budget / rational::int(8), "{measure:?}");
                assert!(
                    g.per_horizon() <= budget,
                    "{measure:?}: {}",
                    g.per_horizon()
                );
            }
        }
    }
}
