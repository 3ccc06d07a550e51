//! The commands besides `fleetdp run`: `plan` (`report`), `advise`,
//! `dashboard`, `demo` (with the simulated fleet, `sim`), `simulate`,
//! `tail` (and the release text the demo and tail print, `show`, with
//! `judge` for when a figure is useful), and the log format and exit codes
//! every command shares (`logs`).

pub mod advise;
pub mod dashboard;
pub mod demo;
pub(crate) mod judge;
pub mod logs;
pub mod report;
pub(crate) mod show;
pub mod sim;
pub mod tail;
