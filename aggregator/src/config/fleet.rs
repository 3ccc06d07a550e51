//! `[fleet]`: fleet-wide releases, combined from the partitions' releases of
//! each window seq (docs/DESIGN.md §6). Every setting is bounded here.

use anyhow::{bail, Result};
use serde::Deserialize;
use std::time::Duration;

/// The `[fleet]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// Publish fleet-wide releases (default true). In a group of several
    /// instances every one combines the same releases into the same
    /// records (a duplicate is bit-identical); set it on one to save work.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Count windows (change-one): once a seq's first partition release is
    /// this old, its fleet release is published with the partitions it has
    /// (`complete = false`), superseded when the rest arrive. Time windows
    /// (add-remove) never publish on a timer (its timing would depend on
    /// the input); only [`Self::max_pending`] cuts a wait short.
    #[serde(default = "default_max_wait")]
    pub max_wait: String,
    /// At start, the output topic's releases this far back are read again,
    /// so a restart completes seqs it was waiting for.
    #[serde(default = "default_lookback")]
    pub lookback: String,
    /// Most window seqs waiting for partitions at once (all streams); past
    /// it the oldest is published with the partitions it has.
    #[serde(default = "default_max_pending")]
    pub max_pending: usize,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_wait: default_max_wait(),
            lookback: default_lookback(),
            max_pending: default_max_pending(),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_max_wait() -> String {
    "1m".into()
}
fn default_lookback() -> String {
    "10m".into()
}
fn default_max_pending() -> usize {
    10_000
}

/// Largest `fleet.max_pending` (each waiting seq keeps its partitions'
/// releases, a few kB each).
pub const MAX_PENDING: usize = 1_000_000;
/// Longest `fleet.max_wait` and `fleet.lookback`.
pub const MAX_FLEET_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// `[fleet]` validated.
#[derive(Debug, Clone, Copy)]
pub struct Fleet {
    pub enabled: bool,
    pub max_wait: Duration,
    pub lookback: Duration,
    pub max_pending: usize,
}

impl FleetConfig {
    pub(crate) fn validate(&self) -> Result<Fleet> {
        let max_wait = super::duration("fleet.max_wait", &self.max_wait)?;
        let lookback = super::duration("fleet.lookback", &self.lookback)?;
        for (field, d) in [("fleet.max_wait", max_wait), ("fleet.lookback", lookback)] {
            if d > MAX_FLEET_DURATION {
                bail!("{field}: must be at most 7 days");
            }
        }
        if !(1..=MAX_PENDING).contains(&self.max_pending) {
            bail!(
                "fleet.max_pending: must be in [1, {MAX_PENDING}], got {}",
                self.max_pending
            );
        }
        Ok(Fleet {
            enabled: self.enabled,
            max_wait,
            lookback,
            max_pending: self.max_pending,
        })
    }
}
