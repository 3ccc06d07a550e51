//! A `[[stream]]` block as the operator writes it, and its translation into
//! the privacy core's [`StreamSpec`] (durations parsed and bounded here, so
//! the core sees only numbers).

use super::dimensions::{Dimension, Grouping};
use super::duration;
use crate::dp::release::{GroupSpec, PrivateKeys, StatKind, StreamSpec};
use anyhow::{bail, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// One `[[stream]]` (see docs/configuration.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    pub name: String,
    pub lower: f64,
    pub upper: f64,
    pub resolution: f64,
    /// Count windows (change-one): `n`, public.
    #[serde(default)]
    pub window_size: u64,
    /// Time windows (add-remove): their length, e.g. "5m"; must divide the horizon.
    #[serde(default)]
    pub window: Option<String>,
    /// `k`.
    #[serde(default = "one")]
    pub max_readings_per_device: u32,
    /// `W` per horizon.
    #[serde(default = "one")]
    pub max_windows_per_device: u32,
    #[serde(default = "full_share")]
    pub budget_share: f64,
    pub statistics: Vec<StatKind>,
    #[serde(default)]
    pub histogram_edges: Vec<f64>,
    #[serde(default)]
    pub quantiles: Vec<f64>,
    #[serde(default)]
    pub quantile_candidates: Option<Vec<f64>>,
    /// Weigh each window's quantile candidates by the lane's recent
    /// releases (bands and an escape grid favoured; dp `adaptive.rs`).
    /// Unset: on wherever the stream releases quantiles.
    #[serde(default)]
    pub adaptive_quantiles: Option<bool>,
    /// Release all quantile levels by one joint selection (change-one).
    #[serde(default)]
    pub joint_quantiles: bool,
    /// Accuracy targets per statistic (95% half-width): the budget split
    /// that meets them, or a refusal naming the one that cannot be met.
    #[serde(default)]
    pub target_error: std::collections::HashMap<StatKind, f64>,
    /// Count windows: pad and close a window after this much event time.
    #[serde(default)]
    pub window_timeout: Option<String>,
    #[serde(default)]
    pub running_share: f64,
    #[serde(default = "default_running_lifetime")]
    pub running_lifetime: u64,
    /// Share of this stream's budget for the device-limit alarm (a DP
    /// signal that a lane nears `limits.max_devices_per_lane`, kept under
    /// `http.hide_exact_counts`); 0: none.
    #[serde(default)]
    pub device_alarm_share: f64,
    /// The readings' unit, for people (status page axes, `fleetdp tail`).
    #[serde(default)]
    pub unit: Option<String>,
    /// Release per group: dimensions of `[dimensions]` (e.g. `["firmware"]`).
    #[serde(default)]
    pub group_by: Vec<String>,
    /// `G`: groups of this stream one device may count in per horizon.
    #[serde(default)]
    pub max_groups_per_device: Option<u32>,
    /// Private keys: share of this stream's budget spent selecting keys
    /// (default 0.1).
    #[serde(default)]
    pub key_selection_share: Option<f64>,
    /// Private keys: δ of the selection (default 10⁻⁶).
    #[serde(default)]
    pub key_selection_delta: Option<f64>,
}

/// `key_selection_share` unless declared.
pub const DEFAULT_KEY_SELECTION_SHARE: f64 = 0.1;
/// `key_selection_delta` unless declared.
pub const DEFAULT_KEY_SELECTION_DELTA: f64 = 1e-6;

/// Longest `unit` (characters).
pub const MAX_UNIT_CHARS: usize = 16;

fn one() -> u32 {
    1
}

fn full_share() -> f64 {
    1.0
}

fn default_running_lifetime() -> u64 {
    1 << 24
}

impl StreamConfig {
    /// The core's spec: durations parsed (errors name the stream and the
    /// field), time windows checked to divide `horizon` (`horizon_text`
    /// as the configuration writes it, for the message).
    pub fn to_spec(
        &self,
        horizon: Duration,
        horizon_text: &str,
        dimensions: &BTreeMap<String, Dimension>,
    ) -> Result<StreamSpec> {
        let field = |f: &str| format!("stream '{}': {f}", self.name);
        let groups = self.group_spec(dimensions)?;
        if let Some(u) = &self.unit {
            if u.chars().count() > MAX_UNIT_CHARS || u.chars().any(char::is_control) {
                bail!(
                    "{}: at most {MAX_UNIT_CHARS} printable characters, got {u:?}",
                    field("unit")
                );
            }
        }
        let window_timeout_ms = self
            .window_timeout
            .as_deref()
            .map(|t| duration(&field("window_timeout"), t).map(|d| d.as_millis() as u64))
            .transpose()?;
        let window_ms = match self.window.as_deref() {
            None => None,
            Some(t) => {
                let d = duration(&field("window"), t)?;
                if !horizon.as_millis().is_multiple_of(d.as_millis()) {
                    bail!(
                        "{}: {t:?} must be a whole number of milliseconds that divides privacy.horizon \
                         ({horizon_text:?}), so that no window straddles a horizon boundary",
                        field("window")
                    );
                }
                Some(d.as_millis() as u64)
            }
        };
        Ok(StreamSpec {
            name: self.name.clone(),
            lower: self.lower,
            upper: self.upper,
            resolution: self.resolution,
            window_size: self.window_size,
            window_ms,
            max_readings_per_device: self.max_readings_per_device,
            max_windows_per_device: self.max_windows_per_device,
            budget_share: self.budget_share,
            statistics: self.statistics.clone(),
            histogram_edges: self.histogram_edges.clone(),
            quantiles: self.quantiles.clone(),
            quantile_candidates: self.quantile_candidates.clone(),
            adaptive_quantiles: self
                .adaptive_quantiles
                .unwrap_or(self.statistics.contains(&StatKind::Quantiles)),
            joint_quantiles: self.joint_quantiles,
            target_error: {
                let mut t: Vec<(StatKind, f64)> =
                    self.target_error.iter().map(|(k, v)| (*k, *v)).collect();
                t.sort_by_key(|(k, _)| k.name());
                t
            },
            window_timeout_ms,
            running_share: self.running_share,
            running_lifetime: self.running_lifetime,
            device_alarm_share: self.device_alarm_share,
            groups,
        })
    }

    /// The stream's groups (`None`: not grouped), with its private keys'
    /// selection where a `group_by` dimension has private keys; the
    /// key-selection and group-cap settings are refused without them.
    fn group_spec(&self, dimensions: &BTreeMap<String, Dimension>) -> Result<Option<GroupSpec>> {
        let field = |f: &str| format!("stream '{}': {f}", self.name);
        let grouping = self.grouping(dimensions)?;
        let private = grouping.as_ref().and_then(|g| {
            g.private_dimension()
                .map(|i| (g.dimension(i).to_string(), g.slots()))
        });
        if private.is_none() {
            for (f, set) in [
                ("key_selection_share", self.key_selection_share.is_some()),
                ("key_selection_delta", self.key_selection_delta.is_some()),
            ] {
                if set {
                    bail!(
                        "{}: only with a group_by dimension that has private keys",
                        field(f)
                    );
                }
            }
        }
        Ok(match (grouping, self.max_groups_per_device) {
            (None, Some(_)) => bail!(
                "{}: only with group_by (a stream without groups is one group)",
                field("max_groups_per_device")
            ),
            (None, None) => None,
            (Some(g), max) => Some(GroupSpec {
                keys: g.keys(),
                max_groups_per_device: max.unwrap_or(1),
                private: private.map(|(dimension, slots)| PrivateKeys {
                    dimension,
                    max_keys: slots as u32,
                    share: self
                        .key_selection_share
                        .unwrap_or(DEFAULT_KEY_SELECTION_SHARE),
                    delta: self
                        .key_selection_delta
                        .unwrap_or(DEFAULT_KEY_SELECTION_DELTA),
                }),
            }),
        })
    }

    /// How this stream finds a reading's group (`None`: not grouped).
    pub fn grouping(&self, dimensions: &BTreeMap<String, Dimension>) -> Result<Option<Grouping>> {
        if self.group_by.is_empty() {
            return Ok(None);
        }
        Grouping::new(&self.name, &self.group_by, dimensions).map(Some)
    }
}
