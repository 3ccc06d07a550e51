//! Every integration test of `fleetdp`, in one test binary: each file
//! beside this one is a module of it, sharing one build of the harness
//! and one link (46 binaries took minutes to build; docs/testing.md).
//! Run one file's tests with its module name as the filter:
//! `cargo test --release -p fleetdp --test integration flat_map::`.

mod harness;

mod add_remove;
mod audit_add_remove;
mod browser;
mod build_deps;
mod compression;
mod config_files;
mod config_property;
mod coverage_fleet_e2e;
mod crash;
mod demo;
mod demo_documents;
mod deploy;
mod device_alarm;
mod docs;
mod flat_map;
mod fleet_restart;
mod golden;
mod groups;
mod hardening;
mod http_surface;
mod key_rotation;
mod keys;
mod layout;
mod logs;
mod mapped_input;
mod otlp;
mod otlp_out;
mod otlp_privacy;
mod outage;
mod pipeline;
mod plan_change;
mod plan_identity;
mod private_keys;
mod prometheus;
mod python_consumer;
mod readme_commands;
mod registry;
mod resume;
mod sasl;
mod schema_registry;
mod side_channel;
mod side_channel_add_remove;
mod state_records;
mod stream_privacy;
mod surfaces;
mod tail;
mod tls;
mod topics;
