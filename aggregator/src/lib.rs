//! FleetDP: differentially private summaries of device telemetry.
//!
//! The crate is split into a pure privacy core ([`dp`]) that knows nothing of
//! Kafka, tokio or I/O, and the service around it.

/// The privacy core, its own crate (`aggregator/dp`, no Kafka, tokio or I/O).
pub use fleetdp_dp as dp;

pub mod config;

/// The build: package version, git commit and build time (UTC).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FLEETDP_COMMIT"),
    ", built ",
    env!("FLEETDP_BUILT"),
    ")"
);
pub mod demo;
mod devices;
pub mod faults;
pub mod http;
pub mod kafka;
pub mod partitioner;
pub mod pipeline;
pub mod process;
pub mod report;
pub mod sim;
pub mod state;
pub mod status;
pub mod telemetry;
pub mod window;
