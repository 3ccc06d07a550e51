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

use super::*;

/// Most groups one stream may be split into (lanes, metrics and releases
/// grow with it).
pub const MAX_GROUPS_PER_STREAM: usize = 1_024;
/// Longest group key (`dimension=value,…`), bytes.
pub const MAX_GROUP_KEY: usize = 256;

/// A stream's declared groups (`group_by` with public key sets).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Every group's key, e.g. `firmware=4.2`, in lane order.
    pub keys: Vec<String>,
    /// `G`: groups one device may count in per horizon.
    pub max_groups_per_device: u32,
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
                .all(|b| b.is_ascii_alphanumeric() || b"_.-=,".contains(&b));
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
    if spec.running_share > 0.0 {
        return Err(field_err(
            spec,
            "running_share",
            "running totals are not available with group_by yet (a device's running sums in G groups would need G times the budget); set it to 0",
        ));
    }
    Ok(())
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
        });
        s
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
                    let mut s = grouped(&["a"], 1);
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
        let many: Vec<String> = (0..=MAX_GROUPS_PER_STREAM)
            .map(|i| format!("k{i}"))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(plan(&p, &[grouped(&refs, 1)]).is_err());
    }
}
