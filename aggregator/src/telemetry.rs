//! Telemetry in one place: every Prometheus metric name, the in-process
//! counters the status page and tests read, and one small function per
//! event that updates both. Nothing else in the service names a metric.
//!
//! Side channel (docs/DESIGN.md §8): every figure here is a count of
//! public events (messages, offsets, windows, dead letters), a released
//! noisy value, or a plan figure. Under add-remove the exact input counts
//! ([`EXACT_COUNT_METRICS`]) reveal presence and are operator-internal.

use ingest::Reason;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod describe;
mod names;
mod partition_gauges;

pub(crate) use describe::describe_all;
pub use names::{name, EXACT_COUNT_METRICS, METRICS};

pub use partition_gauges::render_partition_gauges;
pub(crate) use partition_gauges::{forget_partition, GaugeHandle};
use partition_gauges::{partition_gauge, partition_gauge_handle};

/// Release-latency histogram buckets (seconds), 1 ms to 10 s.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A Prometheus text exposition without the [`EXACT_COUNT_METRICS`]
/// families (their samples, `# HELP` and `# TYPE` lines) and without the
/// `process_*` ones: CPU time, memory and descriptors grow with the input's
/// volume, so they too are operator-internal under add-remove.
pub fn without_exact_counts(text: &str) -> String {
    text.lines()
        .filter(|line| {
            let name = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
                .unwrap_or(line);
            let name = name.split(['{', ' ']).next().unwrap_or("");
            !name.starts_with("process_")
                && !EXACT_COUNT_METRICS.iter().any(|m| {
                    name.strip_prefix(m)
                        .is_some_and(|rest| ["", "_bucket", "_sum", "_count"].contains(&rest))
                })
        })
        .flat_map(|l| [l, "\n"])
        .collect()
}

/// Operational counters (public figures only), mirrored to Prometheus.
#[derive(Debug, Default)]
pub struct Counters {
    pub messages: AtomicU64,
    pub bytes: AtomicU64,
    pub readings_accepted: AtomicU64,
    pub already_released: AtomicU64,
    pub dropped_window_cap: AtomicU64,
    pub dropped_horizon_cap: AtomicU64,
    /// Readings of a device past its `G` groups a horizon.
    pub dropped_group_cap: AtomicU64,
    /// Time windows: readings dropped as late, out of order or beyond a
    /// window's bound.
    pub dropped_time_window: AtomicU64,
    pub windows_released: AtomicU64,
    /// Records of the state and output topics restore skipped (foreign or
    /// undecodable).
    pub restore_skipped: AtomicU64,
    /// Readings of new devices dropped because their lane was full.
    pub dropped_device_limit: AtomicU64,
    dead_letters: [AtomicU64; Reason::ALL.len()],
}

fn reason_index(reason: Reason) -> usize {
    Reason::ALL
        .iter()
        .position(|r| *r == reason)
        .expect("known reason")
}

impl Counters {
    pub fn dead_letters(&self, reason: Reason) -> u64 {
        self.dead_letters[reason_index(reason)].load(Ordering::Relaxed)
    }

    pub fn dead_letters_total(&self) -> u64 {
        self.dead_letters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// A dead letter was acknowledged by the broker.
    pub(crate) fn dead_lettered(&self, reason: Reason) {
        self.dead_letters[reason_index(reason)].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(name::DEAD_LETTERS, "reason" => reason.as_str()).increment(1);
    }

    /// A restore skipped `n` records (see [`Counters::restore_skipped`]).
    pub(crate) fn restore_skipped(&self, n: u64) {
        if n > 0 {
            self.restore_skipped.fetch_add(n, Ordering::Relaxed);
            metrics::counter!(name::RESTORE_SKIPPED).increment(n);
        }
    }

    /// A window's release was acknowledged `latency` after it closed.
    pub(crate) fn window_released(&self, stream: &str, latency: std::time::Duration) {
        self.windows_released.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(name::WINDOWS_RELEASED, "stream" => stream.to_string()).increment(1);
        metrics::histogram!(name::RELEASE_LATENCY).record(latency.as_secs_f64());
    }
}

/// Time windows of one due moment were made after their release moment
/// (due + `limits.release_delay`) and written late, by stream.
pub(crate) fn releases_late(stream: &str, n: u64) {
    metrics::counter!(name::RELEASES_LATE, "stream" => stream.to_string()).increment(n);
}

/// An offset commit failed (a later one covers it).
pub(crate) fn commit_failed() {
    metrics::counter!(name::COMMIT_ERRORS).increment(1);
}

/// A Kafka client error that stops progress, by client and kind
/// (`kafka::error_kind`). [`register_kafka_errors`] starts the consumer's
/// and producer's series at 0: one born at 1 shows no `increase()`.
pub(crate) fn kafka_error(client: &'static str, kind: &'static str) {
    metrics::counter!(name::KAFKA_ERRORS, "client" => client, "kind" => kind).increment(1);
}

pub(crate) fn register_kafka_errors(kinds: &[&'static str]) {
    for (client, kind) in ["consumer", "producer"]
        .iter()
        .flat_map(|c| kinds.iter().map(move |k| (*c, *k)))
    {
        metrics::counter!(name::KAFKA_ERRORS, "client" => client, "kind" => kind).increment(0);
    }
}

/// A produce to `topic` failed with an error of `kind`.
pub(crate) fn produce_failed(topic: &str, kind: &'static str) {
    metrics::counter!(name::PRODUCE_ERRORS, "topic" => topic.to_string()).increment(1);
    kafka_error("producer", kind);
}

/// The lag probe measured `partition`.
pub(crate) fn lag(partition: i32, lag: i64) {
    partition_gauge(name::CONSUMER_LAG, &[], partition, lag as f64);
}

/// Before a scrape: what `/readyz` answers now, as a gauge (the one
/// readiness signal left when `hide_exact_counts` removes the lag series;
/// it says no more than `/readyz` itself), and the process metrics
/// (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`, `process_start_time_seconds`, …).
pub(crate) fn before_scrape(ready: bool) {
    static PROCESS: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    PROCESS
        .get_or_init(|| {
            let c = metrics_process::Collector::default();
            c.describe();
            c
        })
        .collect();
    metrics::gauge!(name::READY).set(if ready { 1.0 } else { 0.0 });
}

/// `x` to 12 significant digits: plan figures and released values without
/// the float dust of their arithmetic (`24 × 0.2` is `4.800000000000001`).
pub(crate) fn tidy(x: f64) -> f64 {
    if x.is_finite() {
        format!("{x:.11e}").parse().unwrap_or(x)
    } else {
        x
    }
}

/// The build, as a constant-1 gauge with labels.
pub(crate) fn build_info() {
    metrics::gauge!(
        name::BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "commit" => env!("FLEETDP_COMMIT"),
        "built" => env!("FLEETDP_BUILT")
    )
    .set(1.0);
}

/// Gauges of one released statistic component (`label`: `mean`,
/// `histogram[3]`, `running_sum`…).
pub(crate) fn release_value(
    stream: &str,
    partition: i32,
    label: &str,
    value: f64,
    half_width: Option<f64>,
) {
    let mut labels = vec![("stream", stream), ("statistic", label)];
    labels.extend(group_labels(stream));
    partition_gauge(name::RELEASE_VALUE, &labels, partition, value);
    if let Some(h) = half_width {
        partition_gauge(name::RELEASE_HALF_WIDTH, &labels, partition, h);
    }
}

/// A grouped stream's (`<stream>[<key>]`) extra labels: `declared_stream`
/// and `group` (its key), so dashboards can set groups side by side, and
/// per dimension in `group_by` order `dimension_<i>` (its name) and
/// `value_<i>` (the group's value), so a dashboard that knows no
/// dimension's name still has a variable per dimension. The key set is
/// declared (private keys: bounded by their slots), so these add one series
/// per group, not per value seen.
fn group_labels(stream: &str) -> Vec<(&'static str, &str)> {
    const DIMENSION: [&str; 4] = ["dimension_1", "dimension_2", "dimension_3", "dimension_4"];
    const VALUE: [&str; 4] = ["value_1", "value_2", "value_3", "value_4"];
    let Some((declared, key)) = stream.strip_suffix(']').and_then(|s| s.split_once('[')) else {
        return vec![];
    };
    let mut labels = vec![("declared_stream", declared), ("group", key)];
    for (i, (d, v)) in key
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .take(4)
        .enumerate()
    {
        labels.push((DIMENSION[i], d));
        labels.push((VALUE[i], v));
    }
    labels
}

/// Gauges of one fleet-wide statistic component.
pub(crate) fn fleet_value(stream: &str, label: &str, value: f64, half_width: Option<f64>) {
    let labels: Vec<metrics::Label> = [("stream", stream), ("statistic", label)]
        .into_iter()
        .chain(group_labels(stream))
        .map(|(k, v)| metrics::Label::new(k, v.to_string()))
        .collect();
    metrics::gauge!(name::FLEET_VALUE, labels.clone()).set(tidy(value));
    if let Some(h) = half_width {
        metrics::gauge!(name::FLEET_HALF_WIDTH, labels).set(tidy(h));
    }
}

/// A fleet-wide release was written (`complete`: every input partition).
pub(crate) fn fleet_released(stream: &str, complete: bool) {
    let coverage = if complete { "complete" } else { "partial" };
    metrics::counter!(name::FLEET_RELEASES, "stream" => stream.to_string(), "coverage" => coverage)
        .increment(1);
}

/// Devices held by the registry (a public table: not an input count).
pub(crate) fn registry_devices(devices: usize) {
    metrics::gauge!(name::REGISTRY_DEVICES).set(devices as f64);
}

/// A registry record not applied, by reason (`key`, `value`, `full`).
pub(crate) fn registry_rejected(reason: &'static str) {
    metrics::counter!(name::REGISTRY_REJECTED, "reason" => reason).increment(1);
}

/// A private-key value not counted: its table held
/// [`crate::engine::keys::MAX_CANDIDATE_KEYS`] values that horizon.
pub(crate) fn key_value_refused(stream: &str) {
    metrics::counter!(name::KEY_VALUES_REFUSED, "stream" => stream.to_string()).increment(1);
}

/// Window seqs waiting for partitions' releases.
pub(crate) fn fleet_pending(seqs: usize) {
    metrics::gauge!(name::FLEET_PENDING).set(seqs as f64);
}

/// Whether this instance writes the fleet records (holds input partition 0).
pub(crate) fn fleet_leader(writes: bool) {
    metrics::gauge!(name::FLEET_LEADER).set(if writes { 1.0 } else { 0.0 });
}

/// Gauges of a release's position.
pub(crate) fn release_position(stream: &str, partition: i32, window_seq: u64, at_ms: i64) {
    partition_gauge(
        name::RELEASE_WINDOW_SEQ,
        &[("stream", stream)],
        partition,
        window_seq as f64,
    );
    metrics::gauge!(name::LAST_RELEASE_TIMESTAMP, "stream" => stream.to_string())
        .set(at_ms as f64 / 1e3);
    // Release timing is public (the output topic's records).
    partition_gauge(
        name::PARTITION_LAST_RELEASE,
        &[("stream", stream)],
        partition,
        at_ms as f64 / 1e3,
    );
}

/// Before a scrape: whether each assigned partition is stalled (input
/// waiting, none handled for `http.stall_timeout`): what `/readyz` says
/// of it, per partition, so one stuck partition among many is seen.
pub(crate) fn partition_stalls(stalls: &[(i32, bool)]) {
    for &(p, stalled) in stalls {
        partition_gauge(
            name::PARTITION_STALLED,
            &[],
            p,
            if stalled { 1.0 } else { 0.0 },
        );
    }
}

/// One planned stream's budget figures, from the plan (public: the plan,
/// not the data).
pub struct BudgetFigures {
    pub stream: String,
    /// The readings' unit (a label, for dashboards: a Grafana variable).
    pub unit: String,
    pub window_size: u64,
    /// The stream's share of the budget per horizon, and what its plan
    /// spends of it per horizon.
    pub declared: f64,
    pub spent: f64,
}

/// Plan-level budget gauges per stream.
pub fn budget_gauges(streams: impl IntoIterator<Item = BudgetFigures>) {
    for s in streams {
        let stream = s.stream;
        metrics::gauge!(name::BUDGET_PER_HORIZON, "stream" => stream.clone()).set(tidy(s.declared));
        metrics::gauge!(name::WINDOW_SIZE, "stream" => stream.clone(), "unit" => s.unit)
            .set(s.window_size as f64);
        metrics::gauge!(name::BUDGET_SPENT, "stream" => stream.clone()).set(tidy(s.spent));
        metrics::gauge!(name::BUDGET_REMAINING, "stream" => stream)
            .set(tidy((s.declared - s.spent).max(0.0)));
    }
}

/// Per-stream reading counts of the consuming loop, kept locally and added
/// in bulk: an atomic add per reading waits for the reading's outstanding
/// cache misses (it is a full fence).
#[derive(Default)]
pub(crate) struct Tally {
    pub accepted: u64,
    pub already_released: u64,
    pub dropped_window_cap: u64,
    pub dropped_horizon_cap: u64,
    pub dropped_late: u64,
    pub dropped_out_of_order: u64,
    pub dropped_window_full: u64,
    pub dropped_device_limit: u64,
    pub dropped_group_cap: u64,
}

/// At most one device-limit log line per stream this often.
const DEVICE_LIMIT_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// One stream's Prometheus handles, registered once.
pub(crate) struct StreamMetrics {
    accepted: metrics::Counter,
    dropped_window_cap: metrics::Counter,
    dropped_horizon_cap: metrics::Counter,
    dropped_late: metrics::Counter,
    dropped_out_of_order: metrics::Counter,
    dropped_window_full: metrics::Counter,
    dropped_device_limit: metrics::Counter,
    dropped_group_cap: metrics::Counter,
    opened: metrics::Counter,
    stream: String,
    /// When the device limit was last logged.
    device_limit_logged: Option<std::time::Instant>,
    /// Windows opened as last reported to `opened`.
    opened_seen: u64,
    /// Per partition, this stream's lane-devices gauge (set per flush
    /// without a table lookup: a grouped stream flushes hundreds of lanes).
    lane_gauges: Vec<(i32, GaugeHandle)>,
    pub pending: Tally,
}

impl StreamMetrics {
    pub fn new(stream: &str) -> Self {
        let dropped = |reason: &'static str| metrics::counter!(name::READINGS_DROPPED, "stream" => stream.to_string(), "reason" => reason);
        Self {
            accepted: metrics::counter!(name::READINGS_ACCEPTED, "stream" => stream.to_string()),
            dropped_window_cap: dropped("per_window_cap"),
            dropped_horizon_cap: dropped("per_horizon_cap"),
            dropped_late: dropped("late"),
            dropped_out_of_order: dropped("out_of_order"),
            dropped_window_full: dropped("window_full"),
            dropped_device_limit: dropped("device_limit"),
            dropped_group_cap: dropped("group_cap"),
            stream: stream.to_string(),
            device_limit_logged: None,
            opened: metrics::counter!(name::WINDOWS_OPENED, "stream" => stream.to_string()),
            opened_seen: 0,
            lane_gauges: Vec::new(),
            pending: Tally::default(),
        }
    }

    /// The lane of this stream on `partition` counts `devices` devices.
    pub fn lane_devices(&mut self, partition: i32, devices: usize) {
        let at = self.lane_gauges.iter().position(|(p, _)| *p == partition);
        // Only this handle left: the partition was revoked and its gauge
        // removed; register it again.
        let live = at.filter(|&i| Arc::strong_count(&self.lane_gauges[i].1) > 1);
        let handle = match live {
            Some(i) => &self.lane_gauges[i].1,
            None => {
                if let Some(i) = at {
                    self.lane_gauges.swap_remove(i);
                }
                let h = partition_gauge_handle(
                    name::LANE_DEVICES,
                    &[("stream", &self.stream)],
                    partition,
                );
                self.lane_gauges.push((partition, h));
                &self.lane_gauges.last().expect("pushed").1
            }
        };
        handle.store((devices as f64).to_bits(), Ordering::Relaxed);
    }

    /// Add the pending tally to `c` and Prometheus; `opened` is the
    /// windower's count of windows opened so far.
    pub fn flush(&mut self, c: &Counters, opened: u64) {
        let t = std::mem::take(&mut self.pending);
        if t.accepted > 0 {
            c.readings_accepted.fetch_add(t.accepted, Ordering::Relaxed);
            self.accepted.increment(t.accepted);
        }
        if t.already_released > 0 {
            c.already_released
                .fetch_add(t.already_released, Ordering::Relaxed);
        }
        if t.dropped_window_cap > 0 {
            c.dropped_window_cap
                .fetch_add(t.dropped_window_cap, Ordering::Relaxed);
            self.dropped_window_cap.increment(t.dropped_window_cap);
        }
        if t.dropped_horizon_cap > 0 {
            c.dropped_horizon_cap
                .fetch_add(t.dropped_horizon_cap, Ordering::Relaxed);
            self.dropped_horizon_cap.increment(t.dropped_horizon_cap);
        }
        if t.dropped_group_cap > 0 {
            // Its own count (it was shown as per_horizon_cap): G groups,
            // not W windows.
            c.dropped_group_cap
                .fetch_add(t.dropped_group_cap, Ordering::Relaxed);
            self.dropped_group_cap.increment(t.dropped_group_cap);
        }
        for (n, counter) in [
            (t.dropped_late, &self.dropped_late),
            (t.dropped_out_of_order, &self.dropped_out_of_order),
            (t.dropped_window_full, &self.dropped_window_full),
        ] {
            if n > 0 {
                c.dropped_time_window.fetch_add(n, Ordering::Relaxed);
                counter.increment(n);
            }
        }
        if t.dropped_device_limit > 0 {
            c.dropped_device_limit
                .fetch_add(t.dropped_device_limit, Ordering::Relaxed);
            self.dropped_device_limit.increment(t.dropped_device_limit);
            let now = std::time::Instant::now();
            if self
                .device_limit_logged
                .is_none_or(|at| now.duration_since(at) >= DEVICE_LIMIT_LOG_EVERY)
            {
                self.device_limit_logged = Some(now);
                // No count in the line: under add-remove an exact count of
                // readings reveals presence (the metric is an exact count too,
                // hidden with `http.hide_exact_counts`).
                tracing::warn!(
                    stream = %self.stream,
                    "a lane of this stream counts limits.max_devices_per_lane devices: readings of \
                     further devices are dropped (reason device_limit) until its horizon is swept; \
                     raise the limit or add input partitions (see docs/configuration.md, limits)"
                );
            }
        }
        if opened != self.opened_seen {
            self.opened.increment(opened - self.opened_seen);
            self.opened_seen = opened;
        }
    }
}

/// Message counts of the consuming loop, kept locally like [`Tally`].
pub(crate) struct MessageMetrics {
    messages: metrics::Counter,
    bytes: metrics::Counter,
    pub pending_messages: u64,
    pub pending_bytes: u64,
}

impl MessageMetrics {
    pub fn new() -> Self {
        Self {
            messages: metrics::counter!(name::MESSAGES),
            bytes: metrics::counter!(name::BYTES),
            pending_messages: 0,
            pending_bytes: 0,
        }
    }

    pub fn flush(&mut self, c: &Counters) {
        if self.pending_messages > 0 {
            c.messages
                .fetch_add(self.pending_messages, Ordering::Relaxed);
            c.bytes.fetch_add(self.pending_bytes, Ordering::Relaxed);
            self.messages.increment(self.pending_messages);
            self.bytes.increment(self.pending_bytes);
            (self.pending_messages, self.pending_bytes) = (0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_streams_get_a_label_per_dimension() {
        assert_eq!(group_labels("temp"), vec![]);
        assert_eq!(
            group_labels("temp[model=a,firmware=4.2]"),
            vec![
                ("declared_stream", "temp"),
                ("group", "model=a,firmware=4.2"),
                ("dimension_1", "model"),
                ("value_1", "a"),
                ("dimension_2", "firmware"),
                ("value_2", "4.2"),
            ]
        );
    }

    #[test]
    fn exact_count_families_are_removed_whole() {
        let text = "# HELP fleetdp_messages_total Messages.\n# TYPE fleetdp_messages_total counter\nfleetdp_messages_total 12\n\
fleetdp_readings_dropped_total{stream=\"a\",reason=\"late\"} 3\n\
fleetdp_release_latency_seconds_bucket{le=\"0.1\"} 4\nfleetdp_release_latency_seconds_sum 0.2\nfleetdp_release_latency_seconds_count 4\n\
fleetdp_consumer_lag{partition=\"0\"} 7\n\
# HELP process_resident_memory_bytes Resident memory.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1e8\n\
fleetdp_ready 1\n\
# TYPE fleetdp_windows_released_total counter\nfleetdp_windows_released_total{stream=\"a\"} 5\n\
fleetdp_messages_total_other 1\n";
        assert_eq!(
            without_exact_counts(text),
            "fleetdp_ready 1\n# TYPE fleetdp_windows_released_total counter\nfleetdp_windows_released_total{stream=\"a\"} 5\nfleetdp_messages_total_other 1\n"
        );
    }

    /// A revoked partition's gauges leave `/metrics`; the others stay.
    #[test]
    fn partition_gauges_are_removed_with_their_partition() {
        let mut m = StreamMetrics::new("gauge-test");
        m.lane_devices(9_001, 5);
        m.lane_devices(9_002, 7);
        release_value("gauge-test", 9_002, "q\"x", f64::INFINITY, None);
        let text = render_partition_gauges();
        assert!(
            text.contains("# TYPE fleetdp_lane_devices gauge\n"),
            "{text}"
        );
        assert!(text.contains("fleetdp_lane_devices{stream=\"gauge-test\",partition=\"9001\"} 5\n"));
        assert!(text.contains(
            "fleetdp_release_value{stream=\"gauge-test\",statistic=\"q\\\"x\",partition=\"9002\"} +Inf\n"
        ), "{text}");
        forget_partition(9_002);
        let text = render_partition_gauges();
        assert!(text.contains("partition=\"9001\""));
        assert!(!text.contains("partition=\"9002\""), "{text}");
        assert_eq!(text.matches("# TYPE fleetdp_lane_devices gauge").count(), 1);
        // A held handle updates in place; a revoked partition assigned
        // again is registered again.
        m.lane_devices(9_001, 6);
        m.lane_devices(9_002, 8);
        let text = render_partition_gauges();
        assert!(
            text.contains("fleetdp_lane_devices{stream=\"gauge-test\",partition=\"9001\"} 6\n"),
            "{text}"
        );
        assert!(
            text.contains("fleetdp_lane_devices{stream=\"gauge-test\",partition=\"9002\"} 8\n"),
            "{text}"
        );
    }

    /// Issue: `/metrics` showed `4.800000000000001` for ε = 24 × 0.2.
    #[test]
    fn float_dust_is_rounded_away() {
        assert_eq!(tidy(24.0 * 0.2).to_string(), "4.8");
        assert_eq!(tidy(1.7504840000000002).to_string(), "1.750484");
        assert_eq!(tidy(-0.1 - 0.2).to_string(), "-0.3");
        assert_eq!(tidy(123_456_789.123_456_7), 123_456_789.123);
        assert_eq!(tidy(1e-300 * 3.0), 3e-300);
        assert!(tidy(f64::NAN).is_nan());
        assert_eq!(tidy(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert_eq!(tidy(0.0), 0.0);
    }

    #[test]
    fn the_list_is_complete_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for m in METRICS {
            assert!(m.starts_with("fleetdp_"), "{m}");
            assert!(seen.insert(*m), "{m} listed twice");
        }
        for m in EXACT_COUNT_METRICS {
            assert!(METRICS.contains(m), "{m} is not in METRICS");
        }
    }

    /// Every metric is in the metrics reference (operators read it there;
    /// its table is generated, see `describe::tests`).
    #[test]
    fn every_metric_is_documented() {
        let page =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))
                .unwrap();
        let missing: Vec<&str> = METRICS
            .iter()
            .copied()
            .filter(|m| !page.contains(&format!("`{m}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "metrics missing from docs/metrics.md: {missing:?}"
        );
    }

    /// No other source file names a metric: a new metric must come through
    /// this module (and so into [`METRICS`], which the deploy test checks
    /// dashboards and alert rules against).
    #[test]
    fn no_other_module_names_a_metric() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs")
                    && !p.ends_with("telemetry.rs")
                    && !p.ends_with("telemetry/names.rs")
                {
                    let text = std::fs::read_to_string(&p).unwrap();
                    if text.contains("\"fleetdp_") {
                        offenders.push(p.display().to_string());
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "metric names outside telemetry.rs and telemetry/names.rs: {offenders:?}"
        );
    }
}
