//! FleetDP: differentially private summaries of device telemetry.
//!
//! The crate is split into a pure privacy core ([`dp`], its own crate
//! `aggregator/dp`, no Kafka, tokio or I/O) and the service around it.
//!
//! # The path of a reading
//!
//! File by file (docs/DESIGN.md §2; the table of every module is §9):
//!
//! 1. `pipeline/consume.rs` receives a Kafka message; `process/`
//!    ([`Processor`]) decodes it (`ingest`), validates it, top-codes each
//!    reading to its stream's universe ([`dp::universe`]) and checks the
//!    device's partition ([`Partitioner`]);
//! 2. `window/` ([`Windower`]) checks lateness and the per-device caps
//!    (`devices.rs` holds the counts) and puts the reading in its lane's
//!    window;
//! 3. a closed window ([`ClosedWindow`]) is released by `pipeline/release.rs`:
//!    its lane's carried state stepped by `state/lane.rs`, noise and
//!    statistics from [`dp::release`], the published form from
//!    [`pipeline::build_release`], and the writes in the order [`state`]
//!    owns (charges, release, ledger);
//! 4. `pipeline/offsets.rs` commits the input offset once everything before
//!    it is acknowledged; rejected messages go through
//!    `pipeline/dead_letter.rs` first;
//! 5. [`telemetry`] counts it all, [`http`] serves `/metrics`, the probes
//!    and the status page from `status.rs`;
//! 6. [`registry`] follows the device registry topic (dimension values of
//!    grouped streams; `config/dimensions.rs` turns them into a group);
//!    [`keys`] selects the values of private dimensions that get slots;
//! 7. [`fleet`] reads the releases back from the output topic and publishes
//!    each window seq's fleet-wide combination.
//!
//! Around it: [`config`] (the TOML file and its bounds), [`kafka`] (clients,
//! topics), [`report`] (`fleetdp plan`), [`sim`] and [`demo`], [`faults`]
//! (crash points for the crash test), [`logs`] (the command's log
//! format and exit codes), [`dashboard`] (`fleetdp dashboard`).
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

/// The build: package version, git commit and build time (UTC).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FLEETDP_COMMIT"),
    ", built ",
    env!("FLEETDP_BUILT"),
    ")"
);

pub mod advise;
pub mod config;
pub mod dashboard;
pub mod demo;
pub mod faults;
pub mod fleet;
pub mod http;
pub mod kafka;
pub mod keys;
pub mod logs;
pub mod pipeline;
pub mod registry;
pub mod report;
pub mod schemas;
pub mod sim;
pub mod state;
pub mod tail;
pub mod telemetry;

mod clock;
mod devices;
mod judge;
mod partitioner;
mod process;
mod show;
mod status;
mod window;

// What the benchmarks and tests drive below the pipeline.
pub use partitioner::Partitioner;
pub use process::{decoder, Processor, PREPARE_AHEAD};
pub use status::StatusBoard;
pub use window::{
    device_key, Admission, ClosedWindow, PublishedWindow, RestoredLane, Resume, StreamRules,
    Windower, DEVICE_KEY_SCHEME, MAX_CHARGES_PER_RECORD,
};
