//! Gauges labelled by input partition, which must go when the partition is
//! revoked (the `metrics` recorder cannot remove a series): a table shared
//! by the consuming loop, the release tasks and the lag probe, rendered on
//! `/metrics` after the recorder's text.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Key: (metric, rendered labels); value: the partition and the gauge (an
/// f64's bits, [`GaugeHandle`]); rendered by [`render_partition_gauges`].
type PartitionGauges = dashmap::DashMap<(&'static str, String), (i32, Arc<AtomicU64>)>;

/// A partition gauge's value, as held by the table and its writer.
pub(crate) type GaugeHandle = Arc<AtomicU64>;

fn table() -> &'static PartitionGauges {
    static TABLE: std::sync::OnceLock<PartitionGauges> = std::sync::OnceLock::new();
    TABLE.get_or_init(Default::default)
}

pub(super) fn partition_gauge(
    metric: &'static str,
    labels: &[(&str, &str)],
    partition: i32,
    value: f64,
) {
    partition_gauge_handle(metric, labels, partition).store(value.to_bits(), Ordering::Relaxed);
}

/// The value cell of a partition gauge, registered if new (or again, after
/// its partition was revoked: a handle the table no longer holds is
/// replaced by its holder, see [`super::StreamMetrics::lane_devices`]).
pub(super) fn partition_gauge_handle(
    metric: &'static str,
    labels: &[(&str, &str)],
    partition: i32,
) -> GaugeHandle {
    use std::fmt::Write;
    let mut rendered = String::new();
    for (k, v) in labels {
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(rendered, "{k}=\"{v}\",");
    }
    let _ = write!(rendered, "partition=\"{partition}\"");
    table()
        .entry((metric, rendered))
        .or_insert_with(|| (partition, Arc::default()))
        .1
        .clone()
}

/// Remove every gauge of `partition` (revoked).
pub(crate) fn forget_partition(partition: i32) {
    table().retain(|_, v| v.0 != partition);
}

/// The partition-labelled gauges in Prometheus' text format, by metric.
pub fn render_partition_gauges() -> String {
    use std::fmt::Write;
    let mut rows: Vec<(&'static str, String, f64)> = table()
        .iter()
        .map(|e| {
            let v = f64::from_bits(e.value().1.load(Ordering::Relaxed));
            (e.key().0, e.key().1.clone(), v)
        })
        .collect();
    rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut out = String::new();
    let mut last = "";
    for (metric, labels, value) in rows {
        if metric != last {
            let _ = writeln!(out, "# HELP {metric} {}", super::describe::help(metric));
            let _ = writeln!(out, "# TYPE {metric} gauge");
            last = metric;
        }
        let value = match value {
            v if v == f64::INFINITY => "+Inf".to_string(),
            v if v == f64::NEG_INFINITY => "-Inf".to_string(),
            v => super::tidy(v).to_string(),
        };
        let _ = writeln!(out, "{metric}{{{labels}}} {value}");
    }
    out
}
