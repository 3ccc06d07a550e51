//! The per-message work of the pipeline, with no Kafka in it: decode,
//! validate, top-code, check lateness, bound contributions and window. The
//! pipeline wraps it with I/O; the benchmarks drive it directly.

use crate::config::Validated;
use crate::dp::universe::TopCoder;
use crate::partitioner::Partitioner;
use crate::pipeline::{stream_rules, Counters};
use crate::window::{Admission, ClosedWindow, FastMap, Windower};
use ingest::{Decoder, Limits, Reason, Rejection};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Prometheus handles of one stream, registered once (no per-reading
/// allocation).
struct StreamMetrics {
    accepted: metrics::Counter,
    dropped_window_cap: metrics::Counter,
    dropped_horizon_cap: metrics::Counter,
    opened: metrics::Counter,
    /// Windows opened as last reported to `opened`.
    opened_seen: u64,
}

/// Message-by-message processing state.
pub struct Processor {
    decoder: Decoder,
    names: FastMap<String, usize>,
    coders: Vec<TopCoder>,
    windower: Windower,
    counters: Arc<Counters>,
    metrics: Vec<StreamMetrics>,
    messages: metrics::Counter,
    bytes: metrics::Counter,
    units: Vec<(usize, i64)>,
    partitioner: Partitioner,
    /// Partition count of the input topic (for the partition check).
    input_partitions: Option<i32>,
}

impl Processor {
    pub fn new(v: &Validated, counters: Arc<Counters>) -> Self {
        let names: FastMap<String, usize> = v
            .plan
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| (s.spec.name.clone(), i))
            .collect();
        // In plan order: a reading's `stream_index` is its stream's index here.
        let decoder = Decoder::new(
            v.plan.streams.iter().map(|s| s.spec.name.clone()),
            v.config.kafka.input_format,
            Limits {
                max_message_bytes: v.config.limits.max_message_bytes,
                max_readings_per_message: v.config.limits.max_readings_per_message,
                ..Limits::default()
            },
        );
        let metrics = v
            .plan
            .streams
            .iter()
            .map(|s| {
                let name = s.spec.name.clone();
                StreamMetrics {
                    accepted: metrics::counter!("fleetdp_readings_accepted_total", "stream" => name.clone()),
                    dropped_window_cap: metrics::counter!("fleetdp_readings_dropped_total", "stream" => name.clone(), "reason" => "per_window_cap"),
                    dropped_horizon_cap: metrics::counter!("fleetdp_readings_dropped_total", "stream" => name.clone(), "reason" => "per_horizon_cap"),
                    opened: metrics::counter!("fleetdp_windows_opened_total", "stream" => name),
                    opened_seen: 0,
                }
            })
            .collect();
        Self {
            decoder,
            coders: v.plan.streams.iter().map(|s| s.top_coder()).collect(),
            windower: Windower::new(
                stream_rules(v),
                v.horizon.as_millis() as i64,
                v.max_lateness.as_millis() as i64,
            ),
            names,
            counters,
            metrics,
            messages: metrics::counter!("fleetdp_messages_total"),
            bytes: metrics::counter!("fleetdp_bytes_total"),
            units: Vec::new(),
            partitioner: v.config.kafka.input_partitioner,
            input_partitions: None,
        }
    }

    /// The input topic's partition count; until it is set, the partition
    /// of readings is not checked.
    pub fn set_input_partitions(&mut self, partitions: i32) {
        self.input_partitions = (partitions > 0).then_some(partitions);
    }

    pub fn windower(&self) -> &Windower {
        &self.windower
    }

    pub fn windower_mut(&mut self) -> &mut Windower {
        &mut self.windower
    }

    /// Index of a declared stream.
    pub fn stream_index(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// Process one message; closed windows are appended to `closed`. A
    /// message is accepted whole or rejected whole (then nothing of it is
    /// applied and the caller dead-letters it).
    pub fn process(
        &mut self,
        partition: i32,
        offset: i64,
        payload: &[u8],
        content_type: Option<&str>,
        closed: &mut Vec<ClosedWindow>,
    ) -> Result<(), Rejection> {
        self.counters.messages.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        self.messages.increment(1);
        self.bytes.increment(payload.len() as u64);
        let readings = self.decoder.decode(payload, content_type)?;
        self.units.clear();
        for (i, r) in readings.iter().enumerate() {
            let s = r.stream_index;
            let t = self.coders[s].top_code(r.value).map_err(|_| {
                Rejection::new(
                    Reason::NotFinite,
                    format!("reading {i}: value is NaN or infinite"),
                )
            })?;
            if let Some(n) = self.input_partitions {
                match self.partitioner.partition(r.device_id.as_bytes(), n) {
                    Some(p) if p != partition => {
                        return Err(Rejection::new(
                            Reason::WrongPartition,
                            format!(
                                "reading {i}: its device belongs on partition {p}, not {partition}"
                            ),
                        ))
                    }
                    _ => {}
                }
            }
            if self
                .windower
                .is_too_old(s, partition, offset, r.event_time_ms)
            {
                return Err(Rejection::new(
                    Reason::TooOld,
                    format!("reading {i}: event time is older than the allowed lateness"),
                ));
            }
            self.units.push((s, t.units));
        }
        for (r, &(s, u)) in readings.iter().zip(&self.units) {
            let a = self.windower.admit(
                s,
                partition,
                offset,
                &r.device_id,
                u,
                r.event_time_ms,
                closed,
            );
            let (c, m) = (&self.counters, &mut self.metrics[s]);
            match a {
                Admission::Accepted => {
                    c.readings_accepted.fetch_add(1, Ordering::Relaxed);
                    m.accepted.increment(1);
                    let opened = self.windower.windows_opened(s);
                    if opened != m.opened_seen {
                        m.opened.increment(opened - m.opened_seen);
                        m.opened_seen = opened;
                    }
                }
                Admission::AlreadyReleased => {
                    c.already_released.fetch_add(1, Ordering::Relaxed);
                }
                Admission::DroppedWindowCap => {
                    c.dropped_window_cap.fetch_add(1, Ordering::Relaxed);
                    m.dropped_window_cap.increment(1);
                }
                Admission::DroppedHorizonCap => {
                    c.dropped_horizon_cap.fetch_add(1, Ordering::Relaxed);
                    m.dropped_horizon_cap.increment(1);
                }
            }
        }
        Ok(())
    }
}
