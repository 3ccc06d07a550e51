//! `# HELP` text and type of every metric family, registered with the
//! recorder at install so each family on `/metrics` says what it counts
//! (the partition-labelled gauges, rendered apart, read it from here too).

use super::name;

/// What kind of series a family is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// `(family, kind, help)` for every family of [`super::METRICS`].
pub(crate) const FAMILIES: &[(&str, Kind, &str)] = &[
    (name::MESSAGES, Kind::Counter, "Input messages read (each handled once: released into a window, dropped or dead-lettered)."),
    (name::BYTES, Kind::Counter, "Bytes of input message payloads read."),
    (name::READINGS_ACCEPTED, Kind::Counter, "Readings admitted into a window, by stream."),
    (name::READINGS_DROPPED, Kind::Counter, "Readings not admitted, by stream and reason (per_window_cap, per_horizon_cap: the device spent its windows of the horizon, group_cap, late, out_of_order, window_full, device_limit)."),
    (name::WINDOWS_OPENED, Kind::Counter, "Windows opened, by stream."),
    (name::WINDOWS_RELEASED, Kind::Counter, "Windows released (acknowledged by the broker), by stream."),
    (name::DEAD_LETTERS, Kind::Counter, "Messages written to the dead-letter topic, by reason."),
    (name::CONSUMER_LAG, Kind::Gauge, "Messages between the pipeline's position and the high watermark, by input partition."),
    (name::RELEASE_LATENCY, Kind::Histogram, "Seconds from a window's close to the broker's acknowledgement of its release."),
    (name::RELEASE_WINDOW_SEQ, Kind::Gauge, "Sequence number of the last window released, by stream and input partition."),
    (name::LAST_RELEASE_TIMESTAMP, Kind::Gauge, "Unix time (seconds) of the last release, by stream."),
    (name::PARTITION_LAST_RELEASE, Kind::Gauge, "Unix time (seconds) of the last release, by stream and input partition (release timing is public)."),
    (name::PARTITION_STALLED, Kind::Gauge, "1 while an assigned input partition has input waiting and none handled for http.stall_timeout (what /readyz says of it), else 0; by input partition."),
    (name::RELEASE_VALUE, Kind::Gauge, "Last released (noisy) value of a statistic, by stream, statistic and input partition."),
    (name::RELEASE_HALF_WIDTH, Kind::Gauge, "Half-width of the 95% interval of the last released value, in the stream's unit."),
    (name::BUDGET_PER_HORIZON, Kind::Gauge, "Privacy budget declared for the stream per device per horizon (epsilon, or rho under zCDP)."),
    (name::BUDGET_SPENT, Kind::Gauge, "Budget the stream's plan spends per device per horizon (a device in max_windows_per_device windows)."),
    (name::BUDGET_REMAINING, Kind::Gauge, "Declared budget the plan leaves unspent per device per horizon."),
    (name::WINDOW_SIZE, Kind::Gauge, "Readings per window (public), by stream, with the stream's unit as a label."),
    (name::BUILD_INFO, Kind::Gauge, "Constant 1, labelled with the build's version, commit and date."),
    (name::COMMIT_ERRORS, Kind::Counter, "Offset commits that failed (a later commit covers them)."),
    (name::PRODUCE_ERRORS, Kind::Counter, "Records the producer failed to write, by topic."),
    (name::RESTORE_SKIPPED, Kind::Counter, "Records of the state or output topic skipped on restore (not FleetDP's, or undecodable)."),
    (name::RELEASES_LATE, Kind::Counter, "Time-window releases written after their due moment plus limits.release_delay (making them took longer), by stream."),
    (name::LANE_DEVICES, Kind::Gauge, "Devices a lane counts this horizon, against limits.max_devices_per_lane."),
    (name::DEVICE_ALARM, Kind::Gauge, "1 once a lane's device-limit alarm (a DP answer, kept under hide_exact_counts) found it near limits.max_devices_per_lane this horizon, else 0; streams with device_alarm_share."),
    (name::FLEET_RELEASES, Kind::Counter, "Fleet-wide releases written, by stream and coverage (complete or partial)."),
    (name::FLEET_PENDING, Kind::Gauge, "Window seqs waiting for partitions' releases before a fleet-wide release."),
    (name::FLEET_LEADER, Kind::Gauge, "1 while this instance writes the fleet-wide releases (it holds input partition 0), else 0; one instance of a group at a time."),
    (name::FLEET_VALUE, Kind::Gauge, "Last fleet-wide released (noisy) value, by stream and statistic."),
    (name::FLEET_HALF_WIDTH, Kind::Gauge, "Half-width of the 95% interval of the last fleet-wide value."),
    (name::REGISTRY_DEVICES, Kind::Gauge, "Devices held by the device registry."),
    (name::REGISTRY_REJECTED, Kind::Counter, "Registry records not applied, by reason (key, value, full)."),
    (name::KEY_VALUES_REFUSED, Kind::Counter, "Private-key values not counted for selection (the horizon's table was full), by stream."),
    (name::KAFKA_ERRORS, Kind::Counter, "Kafka client errors that stop progress, by client and kind."),
    (name::READY, Kind::Gauge, "1 while /readyz answers ready, else 0 (lag over http.ready_max_lag, a stall, restoring, no partition)."),
];

/// The help text of `family` (empty if unknown).
pub(crate) fn help(family: &str) -> &'static str {
    FAMILIES
        .iter()
        .find(|(n, _, _)| *n == family)
        .map_or("", |(_, _, h)| h)
}

/// Register every family's help with the installed recorder.
pub(crate) fn describe_all() {
    for &(n, kind, help) in FAMILIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(n, help),
            Kind::Gauge => metrics::describe_gauge!(n, help),
            Kind::Histogram => metrics::describe_histogram!(n, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics reference's table, one row per family in [`FAMILIES`]
    /// order: name, type, whether `hide_exact_counts` leaves it out, help.
    fn reference_table() -> String {
        let mut out = String::from(
            "| metric | type | with `hide_exact_counts` | what it says |\n|---|---|---|---|\n",
        );
        for &(n, kind, help) in FAMILIES {
            let kind = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let hidden = if super::super::EXACT_COUNT_METRICS.contains(&n) {
                "left out"
            } else {
                "kept"
            };
            out.push_str(&format!("| `{n}` | {kind} | {hidden} | {help} |\n"));
        }
        out
    }

    /// `docs/metrics.md` holds the table generated from [`FAMILIES`]
    /// between its markers, so the reference cannot drift from what
    /// `/metrics` serves. `FLEETDP_BLESS=1` rewrites it.
    #[test]
    fn the_metrics_reference_is_generated_from_here() {
        const START: &str = "<!-- generated from aggregator/src/telemetry/describe.rs -->\n";
        const END: &str = "<!-- end of generated table -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        let page = std::fs::read_to_string(path).unwrap();
        let from = page
            .find(START)
            .expect("docs/metrics.md has the start marker")
            + START.len();
        let to = from + page[from..].find(END).expect("and the end marker");
        let table = reference_table();
        if std::env::var_os("FLEETDP_BLESS").is_some() {
            let updated = format!("{}{table}{}", &page[..from], &page[to..]);
            std::fs::write(path, updated).unwrap();
            return;
        }
        assert_eq!(
            page[from..to],
            table,
            "docs/metrics.md is out of date: FLEETDP_BLESS=1 cargo test -p fleetdp --lib the_metrics_reference"
        );
    }

    /// Every exported family has one help line, and nothing else does.
    #[test]
    fn every_family_has_help_text() {
        for m in super::super::METRICS {
            let n = FAMILIES.iter().filter(|(f, _, _)| f == m).count();
            assert_eq!(n, 1, "{m}: {n} entries in FAMILIES");
            assert!(help(m).ends_with('.') && help(m).len() > 20, "{m}");
        }
        assert_eq!(FAMILIES.len(), super::super::METRICS.len());
    }

    /// Partition-labelled gauges, rendered outside the recorder, carry
    /// their help line before their type line.
    #[test]
    fn partition_gauges_render_their_help() {
        super::super::lag(9_100, 3);
        let text = super::super::render_partition_gauges();
        assert!(
            text.contains(&format!(
                "# HELP {0} {1}\n# TYPE {0} gauge\n",
                name::CONSUMER_LAG,
                help(name::CONSUMER_LAG)
            )),
            "{text}"
        );
        super::super::forget_partition(9_100);
    }
}
