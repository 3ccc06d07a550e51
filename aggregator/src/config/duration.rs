//! Duration settings: humantime text (`"24h"`, `"5m"`), bounded so event-time
//! arithmetic in milliseconds cannot overflow; errors name the field.

use anyhow::{anyhow, bail, Result};
use std::time::Duration;

/// Every duration setting lies in [1 ms, 10 years]: shorter ones are below
/// the service's clock resolution, longer ones overflow millisecond
/// arithmetic on event times.
pub const MIN_DURATION: Duration = Duration::from_millis(1);
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

pub(crate) fn duration(field: &str, text: &str) -> Result<Duration> {
    let d = humantime::parse_duration(text)
        .map_err(|e| anyhow!("{field}: {text:?} is not a duration ({e}); e.g. \"24h\", \"5m\""))?;
    if d < MIN_DURATION || d > MAX_DURATION {
        bail!("{field}: {text:?} must be between 1ms and 10 years");
    }
    Ok(d)
}
