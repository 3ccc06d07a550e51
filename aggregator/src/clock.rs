//! The wall clock, in the milliseconds since the epoch that Kafka timestamps
//! and event times use.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
