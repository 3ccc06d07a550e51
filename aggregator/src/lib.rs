//! FleetDP: differentially private summaries of device telemetry.
//!
//! The crate is split into a pure privacy core ([`dp`], its own crate
//! `aggregator/dp`, no Kafka, tokio or I/O) and the service around it.
//!
//! # Folders by role
//!
//! Each folder is one role, and a folder names only folders below it
//! (docs/DESIGN.md §9, checked by `tests/layout.rs`): `telemetry`, `clock`
//! and `faults` at the bottom; [`clients`] (Kafka, the Schema Registry,
//! partitioners); [`config`] (the TOML file and its bounds); [`engine`]
//! (per message, no Kafka: process, route, window) and [`serve`] (HTTP,
//! the status board); [`state`] (the durable protocol); [`runtime`] (the
//! Kafka side: the pipeline, fleet-wide releases, the registry follower);
//! [`commands`] (plan, advise, dashboard, demo, simulate, tail). The public
//! modules are also re-exported at the crate root under their own names.
//!
//! # The path of a reading
//!
//! Thirteen files, in the order a reading meets them (two returns: to the
//! processor to apply it, to the loop to commit it):
//!
//! 1. `runtime/pipeline/consume/mod.rs`: the loop receives a Kafka message
//!    and prepares it (`consume/step.rs`), two messages before applying it;
//! 2. `engine/process/mod.rs` ([`Processor::prepare`]): decodes it,
//!    top-codes each reading to its stream's universe ([`dp::universe`]),
//!    checks the device's partition and stages the readings;
//! 3. `ingest/src/decoder.rs`: format, framing, limits and validation;
//! 4. `engine/process/router.rs`: the reading's planned stream (its group,
//!    from labels or the registry's replica; its private key's slot);
//! 5. back in `engine/process/mod.rs` ([`Processor::apply`]): each staged
//!    reading is offered to the windower;
//! 6. `engine/window/mod.rs` ([`Windower`]): the reading's lane;
//! 7. `engine/window/admit.rs`: its window or why none (replay, lateness),
//!    the caps (`k`, `W`, `G`) and the charge;
//! 8. `engine/devices.rs`: the device's counts in its lane;
//! 9. `engine/window/lane.rs`: a full or due window closes
//!    ([`ClosedWindow`]);
//! 10. `runtime/pipeline/release.rs`: the release owner steps the lane and
//!     builds the published form ([`runtime::pipeline::build_release`]);
//! 11. `state/lane.rs`: what the lane carries to its next window;
//! 12. `aggregator/dp/src/release/window.rs`: noise and statistics
//!     ([`dp::release`]);
//! 13. `state/mod.rs`: the writes in their order (charges, release, ledger);
//! 14. back in `runtime/pipeline/consume/`, `runtime/pipeline/offsets.rs`:
//!     the input offset is committed once everything before it is
//!     acknowledged (rejected messages are dead-lettered first);
//!
//! and `telemetry.rs` counts it all, `serve/http.rs` serves it (fifteen in
//! all).
//!
//! # Glossary
//!
//! - **lane**: one (stream, input partition); windows, caps and seqs are per lane.
//! - **window seq**: a window's number in its lane (count windows: 0, 1, 2…;
//!   time windows: `⌊event time / length⌋`).
//! - **charge**: "device `d` holds readings of horizon `h` in window `s`"; at
//!   most `W` per device and horizon.
//! - **ledger entry**: per lane, the last released window (state topic).
//! - **horizon**: the accounting period; a device's loss is bounded per horizon.
//! - **release key**: the secret that keys all noise (a replay repeats it).

/// The privacy core, its own crate (`aggregator/dp`, no Kafka, tokio or I/O).
pub use fleetdp_dp as dp;

/// The build: package version, git commit, build time (UTC) and the
/// state format it writes (`state::STATE_FORMAT`, checked by a test).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FLEETDP_COMMIT"),
    ", built ",
    env!("FLEETDP_BUILT"),
    "; state format 2)"
);

pub mod clients;
pub mod commands;
pub mod config;
pub mod engine;
pub mod faults;
pub mod runtime;
pub mod serve;
pub mod state;
pub mod telemetry;

mod clock;

// The public modules under their own names (what users, tests and
// benchmarks import); code in this crate names them by their folders.
pub use clients::{kafka, schemas};
pub use commands::{advise, dashboard, demo, logs, report, sim, tail};
pub use engine::{keys, registry};
pub use runtime::{fleet, pipeline};
pub use serve::http;

// What the benchmarks and tests drive below the pipeline.
pub use clients::partitioner::Partitioner;
pub use engine::process::{decoder, Processor, PREPARE_AHEAD};
pub use engine::window::{
    device_key, Admission, ClosedWindow, PublishedWindow, RestoredLane, Resume, StreamRules,
    Windower, DEVICE_KEY_SCHEME, MAX_CHARGES_PER_RECORD,
};
pub use serve::status::StatusBoard;
