//! The per-message core, with no Kafka, tokio or I/O: a message decoded,
//! validated, top-coded and routed to its planned stream (`process`, with
//! the device `registry`'s table and the private `keys`), then windowed
//! under the per-device caps (`window`, over the `devices` tables). The
//! pipeline drives it message by message; the benchmarks drive it
//! directly.

pub(crate) mod devices;
pub mod keys;
pub(crate) mod process;
pub mod registry;
pub(crate) mod window;
