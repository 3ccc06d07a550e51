//! `[dimensions]` (public key sets, or private keys) and a stream's
//! `group_by`: the group keys a grouped stream is planned with, and
//! [`Grouping`], which finds a reading's group from its labels or the
//! device registry.
//!
//! Every dimension gets an implicit `other` value for devices whose value
//! is missing or not declared, so no reading is lost and the key set stays
//! the declared one: which groups are released never depends on the data.
//! A dimension with private keys is planned as `max_keys` slots (`#1`…)
//! and `other`; the service binds a slot to a key only once the key clears
//! the DP key selection (`crate::engine::keys`), so which slots carry which key is
//! a post-processing of that selection (docs/DESIGN.md §4).

use anyhow::{bail, Result};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[registry]`: the device registry topic (see docs/group-by.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// A compacted topic keyed by device id; values are JSON objects of
    /// the device's dimension values.
    pub topic: String,
    /// Most devices held (≈ 60 bytes each with three dimensions); records of further devices
    /// are refused and counted (`fleetdp_registry_rejected_total{reason="full"}`).
    #[serde(default = "default_max_devices")]
    pub max_devices: usize,
}

fn default_max_devices() -> usize {
    10_000_000
}

/// The largest `registry.max_devices`.
pub const MAX_REGISTRY_DEVICES: usize = 1_000_000_000;

impl RegistryConfig {
    /// Check the table; `topics` are the service's other topics.
    pub fn validate(&self, topics: &[&String], grouped: bool) -> Result<()> {
        if self.topic.trim().is_empty() {
            bail!("registry.topic: must not be empty");
        }
        if topics.contains(&&self.topic) {
            bail!(
                "registry.topic: {} is already one of the service's kafka topics",
                self.topic
            );
        }
        if !(1..=MAX_REGISTRY_DEVICES).contains(&self.max_devices) {
            bail!(
                "registry.max_devices: must be in [1, {MAX_REGISTRY_DEVICES}], got {}",
                self.max_devices
            );
        }
        if !grouped {
            bail!("registry: no [[stream]] has group_by, so the registry would not be used; remove [registry] or group a stream");
        }
        Ok(())
    }
}

/// A `[dimensions]` entry: a public key set (`firmware = ["4.1", "4.2"]`)
/// or private keys (`firmware = { private = true, max_keys = 8 }`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    untagged,
    expecting = "a list of public values (e.g. [\"4.1\", \"4.2\"]) or private keys ({ private = true, max_keys = 8 })"
)]
pub enum Dimension {
    Public(Vec<String>),
    Private(PrivateDimension),
}

/// `{ private = true, max_keys = N }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateDimension {
    pub private: bool,
    /// Most keys ever released (slots); further selected keys stay in `other`.
    pub max_keys: u32,
}

impl Dimension {
    /// Declared values (a private dimension: none).
    pub fn public_values(&self) -> Option<&[String]> {
        match self {
            Dimension::Public(v) => Some(v),
            Dimension::Private(_) => None,
        }
    }
}

/// Most dimensions one stream may group by.
pub const MAX_GROUP_BY: usize = 4;
/// Most declared values per dimension (`other` comes on top).
pub const MAX_DIMENSION_VALUES: usize = 1_000;
/// Longest dimension name or value (bytes).
pub const MAX_LABEL_BYTES: usize = 64;
/// The value of devices whose value is missing or not declared.
pub const OTHER: &str = "other";

/// Names and values: what a key is made of (`=` and `,` separate them).
fn check_label(field: &str, what: &str, v: &str) -> Result<()> {
    if v.is_empty()
        || v.len() > MAX_LABEL_BYTES
        || !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        bail!("{field}: {what} {v:?} must be 1 to {MAX_LABEL_BYTES} characters of A-Z, a-z, 0-9, '_', '.', '-'");
    }
    Ok(())
}

/// A planned stream's group as published (`group` of a release): empty
/// for a stream without groups.
pub fn group_map(s: &crate::dp::release::StreamPlan) -> std::collections::HashMap<String, String> {
    s.group
        .iter()
        .flat_map(|g| g.values())
        .map(|(d, v)| (d.to_string(), v.to_string()))
        .collect()
}

/// Check `[dimensions]`.
pub fn validate(dims: &BTreeMap<String, Dimension>) -> Result<()> {
    for (name, d) in dims {
        let field = format!("dimensions.{name}");
        check_label(&field, "name", name)?;
        let values = match d {
            Dimension::Public(values) => values,
            Dimension::Private(p) => {
                if !p.private {
                    bail!("{field}: private = false; declare public keys as a list instead");
                }
                let max = crate::dp::release::MAX_PRIVATE_KEYS;
                if !(1..=max).contains(&p.max_keys) {
                    bail!(
                        "{field}.max_keys: must be in [1, {max}], got {}",
                        p.max_keys
                    );
                }
                continue;
            }
        };
        if values.is_empty() || values.len() > MAX_DIMENSION_VALUES {
            bail!("{field}: declare 1 to {MAX_DIMENSION_VALUES} values");
        }
        for (i, v) in values.iter().enumerate() {
            check_label(&field, "value", v)?;
            if v == OTHER {
                bail!("{field}: \"{OTHER}\" is implicit (devices without a declared value); remove it");
            }
            if values[..i].contains(v) {
                bail!("{field}: {v:?} declared twice");
            }
        }
    }
    Ok(())
}

/// A horizon's selected private keys route from two horizons on, so every
/// reading of those must be stamped after the selection moment
/// (`crate::engine::keys`): `max_lateness + max_clock_skew ≤ horizon`.
pub fn check_private_timing(
    groupings: &[Option<Grouping>],
    streams: &[super::StreamConfig],
    lateness_and_skew: std::time::Duration,
    (horizon, horizon_text): (std::time::Duration, &str),
) -> Result<()> {
    let private = groupings
        .iter()
        .zip(streams)
        .find(|(g, _)| g.as_ref().is_some_and(|g| g.private_dimension().is_some()));
    if let Some((_, s)) = private {
        if lateness_and_skew > horizon {
            bail!(
                "stream '{}': group_by with private keys needs limits.max_lateness + limits.max_clock_skew \
                 ({}) at most privacy.horizon ({horizon_text:?})",
                s.name,
                humantime::format_duration(lateness_and_skew)
            );
        }
    }
    Ok(())
}

/// How one grouped stream finds a reading's group.
#[derive(Debug, Clone, PartialEq)]
pub struct Grouping {
    /// Per dimension (most significant first): its name and declared
    /// values (a private dimension: its slots `#1`…); a value's position
    /// is its digit, `other` the last digit.
    dims: Vec<(String, Vec<String>)>,
    /// The dimension with private keys, if any (at most one).
    private: Option<usize>,
    /// Per dimension, each declared value's digit (a reading's group is
    /// found per reading: a dimension may declare 1,000 values).
    digits: Vec<std::collections::HashMap<String, usize, foldhash::fast::RandomState>>,
}

impl Grouping {
    /// The grouping of a stream's `group_by` over `[dimensions]`.
    pub fn new(
        stream: &str,
        group_by: &[String],
        dims: &BTreeMap<String, Dimension>,
    ) -> Result<Grouping> {
        let field = format!("stream '{stream}': group_by");
        if group_by.is_empty() || group_by.len() > MAX_GROUP_BY {
            bail!("{field}: 1 to {MAX_GROUP_BY} dimensions");
        }
        let mut out = Vec::new();
        let mut private = None;
        let mut groups = 1usize;
        for (i, d) in group_by.iter().enumerate() {
            if group_by[..i].contains(d) {
                bail!("{field}: {d:?} twice");
            }
            let values = match dims.get(d) {
                None => bail!(
                    "{field}: {d:?} is not declared in [dimensions] (e.g. {d} = [\"a\", \"b\"])"
                ),
                Some(Dimension::Public(values)) => values.clone(),
                Some(Dimension::Private(p)) => {
                    if private.is_some() {
                        bail!("{field}: at most one dimension with private keys per stream");
                    }
                    private = Some(i);
                    (0..p.max_keys)
                        .map(crate::dp::release::slot_value)
                        .collect()
                }
            };
            groups = groups.saturating_mul(values.len() + 1);
            out.push((d.clone(), values));
        }
        let max = crate::dp::release::MAX_GROUPS_PER_STREAM;
        if groups > max {
            bail!("{field}: {groups} groups (every combination of values, each dimension with \"{OTHER}\"); at most {max}");
        }
        let digits = out
            .iter()
            .enumerate()
            .map(|(i, (_, values))| {
                let public = (private != Some(i)).then_some(values);
                public
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(d, v)| (v.clone(), d))
                    .collect()
            })
            .collect();
        Ok(Grouping {
            dims: out,
            private,
            digits,
        })
    }

    /// The dimension with private keys (its index), if any.
    pub fn private_dimension(&self) -> Option<usize> {
        self.private
    }

    /// Slots of the private dimension (0 without one).
    pub fn slots(&self) -> usize {
        self.private.map_or(0, |i| self.dims[i].1.len())
    }

    /// The dimensions' names.
    pub fn dimensions(&self) -> impl Iterator<Item = &str> {
        self.dims.iter().map(|(d, _)| d.as_str())
    }

    /// Dimension `i`'s name.
    pub fn dimension(&self, i: usize) -> &str {
        &self.dims[i].0
    }

    /// How many values dimension `i` declares (its `other` digit).
    pub fn declared_values(&self, i: usize) -> usize {
        self.dims[i].1.len()
    }

    /// Dimension `i`'s value of digit `d` (`d` below
    /// [`Grouping::declared_values`]).
    pub fn declared_value(&self, i: usize, d: usize) -> &str {
        &self.dims[i].1[d]
    }

    /// Every group's key (`firmware=4.2`, `model=a,region=eu`), by index.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = vec![String::new()];
        for (d, values) in &self.dims {
            let vals: Vec<&str> = values.iter().map(String::as_str).chain([OTHER]).collect();
            keys = keys
                .iter()
                .flat_map(|k| {
                    vals.iter().map(move |v| {
                        if k.is_empty() {
                            format!("{d}={v}")
                        } else {
                            format!("{k},{d}={v}")
                        }
                    })
                })
                .collect();
        }
        keys
    }

    /// The group index of a device whose dimension values `value_of` gives
    /// (`None` or an undeclared value: `other`).
    pub fn index<'a>(&self, value_of: impl Fn(&str) -> Option<&'a str>) -> u32 {
        self.index_digits(|i| value_of(&self.dims[i].0).and_then(|v| self.digit(i, v)))
    }

    /// The group index from each dimension's digit (`digit(i)`: the
    /// position of the device's value among dimension `i`'s declared
    /// values; `None`: `other`).
    pub fn index_digits(&self, digit: impl Fn(usize) -> Option<usize>) -> u32 {
        let mut index = 0usize;
        for (i, (_, values)) in self.dims.iter().enumerate() {
            let d = digit(i)
                .filter(|&d| d < values.len())
                .unwrap_or(values.len());
            index = index * (values.len() + 1) + d;
        }
        index as u32
    }

    /// Dimension `i`'s digit in group `index` (`other`: the last digit).
    pub fn digit_of(&self, index: u32, i: usize) -> usize {
        let below: usize = self.dims[i + 1..]
            .iter()
            .map(|(_, v)| v.len() + 1)
            .product();
        (index as usize / below) % (self.dims[i].1.len() + 1)
    }

    /// Dimension `i`'s digit for `value` (`None`: not declared; a private
    /// dimension's digits are its bound slots, `crate::engine::keys`).
    pub fn digit(&self, i: usize, value: &str) -> Option<usize> {
        self.digits[i].get(value).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(v: &[&str]) -> Dimension {
        Dimension::Public(v.iter().map(|s| s.to_string()).collect())
    }

    fn dims() -> BTreeMap<String, Dimension> {
        BTreeMap::from([
            ("model".to_string(), public(&["a", "b"])),
            ("firmware".to_string(), public(&["4.1"])),
        ])
    }

    #[test]
    fn keys_and_indices_agree() {
        let g = Grouping::new("s", &["model".into(), "firmware".into()], &dims()).unwrap();
        let keys = g.keys();
        assert_eq!(
            keys,
            [
                "model=a,firmware=4.1",
                "model=a,firmware=other",
                "model=b,firmware=4.1",
                "model=b,firmware=other",
                "model=other,firmware=4.1",
                "model=other,firmware=other"
            ]
        );
        let labels = |m: &'static str, f: &'static str| {
            move |d: &str| match d {
                "model" => Some(m),
                "firmware" => Some(f),
                _ => None,
            }
        };
        assert_eq!(
            keys[g.index(labels("b", "4.1")) as usize],
            "model=b,firmware=4.1"
        );
        assert_eq!(
            keys[g.index(labels("z", "4.1")) as usize],
            "model=other,firmware=4.1"
        );
        assert_eq!(
            keys[g.index(|_| None) as usize],
            "model=other,firmware=other"
        );
    }

    /// A private dimension is planned as its slots and `other`; its raw
    /// values never map to a digit here (slots are bound by the service).
    #[test]
    fn private_dimensions_plan_slots() {
        let mut d = dims();
        d.insert(
            "firmware".into(),
            Dimension::Private(PrivateDimension {
                private: true,
                max_keys: 2,
            }),
        );
        let g = Grouping::new("s", &["model".into(), "firmware".into()], &d).unwrap();
        assert_eq!(g.private_dimension(), Some(1));
        assert_eq!(g.slots(), 2);
        assert_eq!(
            g.keys()[..3],
            [
                "model=a,firmware=#1",
                "model=a,firmware=#2",
                "model=a,firmware=other"
            ]
        );
        assert_eq!(g.digit(1, "#1"), None);
        for (i, k) in g.keys().iter().enumerate() {
            let slot = g.digit_of(i as u32, 1);
            assert!(
                k.ends_with(&format!(
                    "firmware={}",
                    if slot == 2 {
                        "other".into()
                    } else {
                        format!("#{}", slot + 1)
                    }
                )),
                "{k}"
            );
            assert_eq!(g.digit_of(i as u32, 0), i / 3);
        }
        assert_eq!(g.digit(0, "b"), Some(1));
        let parsed: BTreeMap<String, Dimension> =
            toml::from_str("fw = { private = true, max_keys = 3 }\nm = [\"x\"]").unwrap();
        assert_eq!(
            parsed["fw"],
            Dimension::Private(PrivateDimension {
                private: true,
                max_keys: 3
            })
        );
        let e = toml::from_str::<BTreeMap<String, Dimension>>("fw = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("private = true"), "{e}");
    }

    #[test]
    fn bad_declarations_name_the_field() {
        for (d, v) in [
            ("fw", vec![]),
            ("fw", vec!["other"]),
            ("fw", vec!["a", "a"]),
            ("f w", vec!["a"]),
            ("fw", vec!["a,b"]),
        ] {
            let m = BTreeMap::from([(d.to_string(), public(&v))]);
            let e = validate(&m).unwrap_err().to_string();
            assert!(e.contains("dimensions."), "{e}");
        }
        for (private, max_keys) in [(false, 4), (true, 0), (true, 65)] {
            let m = BTreeMap::from([(
                "fw".to_string(),
                Dimension::Private(PrivateDimension { private, max_keys }),
            )]);
            let e = validate(&m).unwrap_err().to_string();
            assert!(e.contains("dimensions.fw"), "{e}");
        }
        let two = BTreeMap::from([
            (
                "a".to_string(),
                Dimension::Private(PrivateDimension {
                    private: true,
                    max_keys: 2,
                }),
            ),
            (
                "b".to_string(),
                Dimension::Private(PrivateDimension {
                    private: true,
                    max_keys: 2,
                }),
            ),
        ]);
        let e = Grouping::new("s", &["a".into(), "b".into()], &two)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most one dimension with private keys"), "{e}");
        let e = Grouping::new("s", &["nope".into()], &dims())
            .unwrap_err()
            .to_string();
        assert!(e.contains("group_by") && e.contains("nope"), "{e}");
        let big = BTreeMap::from([
            (
                "a".to_string(),
                Dimension::Public((0..40).map(|i| format!("v{i}")).collect()),
            ),
            (
                "b".to_string(),
                Dimension::Public((0..40).map(|i| format!("v{i}")).collect()),
            ),
        ]);
        let e = Grouping::new("s", &["a".into(), "b".into()], &big)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1681 groups"), "{e}");
    }
}
