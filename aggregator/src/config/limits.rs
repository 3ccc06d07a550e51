//! `[limits]`: the sizes, counts and durations the service holds itself
//! to, each bounded and checked at start (docs/configuration.md).

use super::duration::duration;
use anyhow::{bail, Result};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default = "default_max_bytes")]
    pub max_message_bytes: usize,
    #[serde(default = "default_max_readings")]
    pub max_readings_per_message: usize,
    /// Count windows: readings whose event time is this much older than the
    /// latest event time of the lane's closed windows are dead-lettered as
    /// too old. Time windows: how long after its end a window waits for
    /// late readings before it is released.
    #[serde(default = "default_lateness")]
    pub max_lateness: String,
    /// A reading whose event time is more than this ahead of its Kafka
    /// message timestamp (or before 1970) is dead-lettered (`future`).
    #[serde(default = "default_skew")]
    pub max_clock_skew: String,
    /// Most devices one (stream, input partition) counts at a time; readings
    /// of further devices are dropped (`device_limit`) until a horizon ends.
    /// Each counted device takes 20–50 bytes.
    #[serde(default = "default_max_devices")]
    pub max_devices_per_lane: usize,
    /// Time windows: a release is written this long after its window's
    /// due moment, whatever its making took, so that its arrival time
    /// tells nothing of the readings (docs/operations.md).
    #[serde(default = "default_release_delay")]
    pub release_delay: String,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: default_max_bytes(),
            max_readings_per_message: default_max_readings(),
            max_lateness: default_lateness(),
            max_clock_skew: default_skew(),
            max_devices_per_lane: default_max_devices(),
            release_delay: default_release_delay(),
        }
    }
}

fn default_max_bytes() -> usize {
    1 << 20
}
fn default_max_readings() -> usize {
    10_000
}
fn default_max_devices() -> usize {
    10_000_000
}
/// The largest `limits.max_devices_per_lane` (60 GB of counts per lane).
pub const MAX_DEVICES_PER_LANE: usize = 1_000_000_000;
/// The largest `limits.max_message_bytes` (256 MiB; Kafka's own default
/// is 1 MB): a message is held whole while it is decoded.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;
/// The largest `limits.max_readings_per_message`: a message's readings are
/// staged together (≈ 200 bytes each while decoded).
pub const MAX_READINGS_PER_MESSAGE: usize = 1_000_000;
fn default_lateness() -> String {
    "1h".into()
}
fn default_skew() -> String {
    "5m".into()
}
fn default_release_delay() -> String {
    "10s".into()
}
/// The longest `limits.release_delay`.
pub const MAX_RELEASE_DELAY: Duration = Duration::from_secs(3600);

impl LimitsConfig {
    /// The counts in range (the durations are checked where they are
    /// parsed, with the rest of the configuration's).
    pub(super) fn check(&self) -> Result<()> {
        let bounded = [
            (
                "max_message_bytes",
                self.max_message_bytes,
                MAX_MESSAGE_BYTES,
            ),
            (
                "max_devices_per_lane",
                self.max_devices_per_lane,
                MAX_DEVICES_PER_LANE,
            ),
            (
                "max_readings_per_message",
                self.max_readings_per_message,
                MAX_READINGS_PER_MESSAGE,
            ),
        ];
        for (name, v, max) in bounded {
            if !(1..=max).contains(&v) {
                bail!("limits.{name}: must be in [1, {max}], got {v}");
            }
        }
        if self.release_delay()? > MAX_RELEASE_DELAY {
            bail!(
                "limits.release_delay: {:?} is longer than 1h",
                self.release_delay
            );
        }
        Ok(())
    }

    /// `release_delay` as a duration (the field named if it is not one).
    pub fn release_delay(&self) -> Result<Duration> {
        duration("limits.release_delay", &self.release_delay)
    }
}
