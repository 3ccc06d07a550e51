//! The Kafka runtime: the pipeline (setup, the consuming loop, rebalances
//! and restoring, releases, dead letters, offsets), the fleet-wide
//! releases read back from the output topic, and the device registry's
//! follower, and the releases' OpenTelemetry encoding. It moves records between Kafka and the engine and the
//! durable protocol (`crate::state`).

pub mod fleet;
pub(crate) mod follow;
pub mod otlp_out;
pub mod pipeline;
