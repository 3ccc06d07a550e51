//! Every metric name the service exports ([`name`], the one list), and
//! which of them count the input exactly ([`EXACT_COUNT_METRICS`], hidden
//! with `http.hide_exact_counts`).

/// Metric names (the one list; dashboards and alert rules are tested
/// against [`METRICS`]).
pub mod name {
    pub const MESSAGES: &str = "fleetdp_messages_total";
    pub const BYTES: &str = "fleetdp_bytes_total";
    pub const READINGS_ACCEPTED: &str = "fleetdp_readings_accepted_total";
    pub const READINGS_DROPPED: &str = "fleetdp_readings_dropped_total";
    pub const WINDOWS_OPENED: &str = "fleetdp_windows_opened_total";
    pub const WINDOWS_RELEASED: &str = "fleetdp_windows_released_total";
    pub const DEAD_LETTERS: &str = "fleetdp_dead_letters_total";
    pub const CONSUMER_LAG: &str = "fleetdp_consumer_lag";
    pub const RELEASE_LATENCY: &str = "fleetdp_release_latency_seconds";
    pub const RELEASE_WINDOW_SEQ: &str = "fleetdp_release_window_seq";
    pub const LAST_RELEASE_TIMESTAMP: &str = "fleetdp_last_release_timestamp_seconds";
    pub const RELEASE_VALUE: &str = "fleetdp_release_value";
    pub const RELEASE_HALF_WIDTH: &str = "fleetdp_release_half_width";
    pub const BUDGET_PER_HORIZON: &str = "fleetdp_budget_per_horizon";
    pub const BUDGET_SPENT: &str = "fleetdp_budget_spent_per_horizon";
    pub const BUDGET_REMAINING: &str = "fleetdp_budget_remaining_per_horizon";
    pub const WINDOW_SIZE: &str = "fleetdp_window_size";
    pub const BUILD_INFO: &str = "fleetdp_build_info";
    pub const COMMIT_ERRORS: &str = "fleetdp_commit_errors_total";
    pub const PRODUCE_ERRORS: &str = "fleetdp_produce_errors_total";
    pub const RESTORE_SKIPPED: &str = "fleetdp_restore_skipped_records_total";
    pub const RELEASES_LATE: &str = "fleetdp_releases_late_total";
    pub const LANE_DEVICES: &str = "fleetdp_lane_devices";
    pub const DEVICE_ALARM: &str = "fleetdp_device_limit_alarm";
    pub const FLEET_RELEASES: &str = "fleetdp_fleet_releases_total";
    pub const FLEET_PENDING: &str = "fleetdp_fleet_pending";
    pub const FLEET_LEADER: &str = "fleetdp_fleet_leader";
    pub const FLEET_VALUE: &str = "fleetdp_fleet_release_value";
    pub const FLEET_HALF_WIDTH: &str = "fleetdp_fleet_release_half_width";
    pub const REGISTRY_DEVICES: &str = "fleetdp_registry_devices";
    pub const REGISTRY_REJECTED: &str = "fleetdp_registry_rejected_total";
    pub const KEY_VALUES_REFUSED: &str = "fleetdp_key_values_refused_total";
    pub const KAFKA_ERRORS: &str = "fleetdp_kafka_errors_total";
    pub const READY: &str = "fleetdp_ready";
    pub const PARTITION_STALLED: &str = "fleetdp_partition_stalled";
    pub const PARTITION_LAST_RELEASE: &str = "fleetdp_partition_last_release_timestamp_seconds";
}

/// Every metric the service exports.
pub const METRICS: &[&str] = &[
    name::MESSAGES,
    name::BYTES,
    name::READINGS_ACCEPTED,
    name::READINGS_DROPPED,
    name::WINDOWS_OPENED,
    name::WINDOWS_RELEASED,
    name::DEAD_LETTERS,
    name::CONSUMER_LAG,
    name::RELEASE_LATENCY,
    name::RELEASE_WINDOW_SEQ,
    name::LAST_RELEASE_TIMESTAMP,
    name::RELEASE_VALUE,
    name::RELEASE_HALF_WIDTH,
    name::BUDGET_PER_HORIZON,
    name::BUDGET_SPENT,
    name::BUDGET_REMAINING,
    name::WINDOW_SIZE,
    name::BUILD_INFO,
    name::COMMIT_ERRORS,
    name::PRODUCE_ERRORS,
    name::RESTORE_SKIPPED,
    name::RELEASES_LATE,
    name::LANE_DEVICES,
    name::DEVICE_ALARM,
    name::FLEET_RELEASES,
    name::FLEET_PENDING,
    name::FLEET_LEADER,
    name::FLEET_VALUE,
    name::FLEET_HALF_WIDTH,
    name::REGISTRY_DEVICES,
    name::REGISTRY_REJECTED,
    name::KEY_VALUES_REFUSED,
    name::KAFKA_ERRORS,
    name::READY,
    name::PARTITION_STALLED,
    name::PARTITION_LAST_RELEASE,
];

/// Metric families that count the input exactly (per message, reading,
/// dead letter or lag): operator-internal under add-remove, where they
/// reveal presence; left out of `/metrics` with `http.hide_exact_counts`.
pub const EXACT_COUNT_METRICS: &[&str] = &[
    name::MESSAGES,
    name::BYTES,
    name::READINGS_ACCEPTED,
    name::READINGS_DROPPED,
    name::WINDOWS_OPENED,
    name::DEAD_LETTERS,
    name::CONSUMER_LAG,
    name::RELEASE_LATENCY,
    // Whether making a release outlasted the delay depends on its size.
    name::RELEASES_LATE,
    name::LANE_DEVICES,
    // How many seqs wait depends on how far partitions lag (input volume).
    name::FLEET_PENDING,
    name::KEY_VALUES_REFUSED,
];
