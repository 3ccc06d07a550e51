//! A window's release: the published form ([`build_release`]), its
//! encoding, and the release owner ([`Releases`]): it steps the window's
//! lane, computes its noise and writes it through the durable protocol
//! ([`crate::state::write_charges`], then [`crate::state::write_release`])
//! in a task; then, once acknowledged, tells the observers (status board,
//! metrics, events).
//!
//! Release timing (docs/DESIGN.md §8): a time window's release is written
//! at its due moment plus `limits.release_delay`, not when it happens to
//! be ready. How long making it takes depends on the readings (their
//! number; one charges record per 40,000 devices), and under add-remove a
//! consumer timing arrivals must not learn that. The windows one due
//! moment closes are made and their charges written in one task, then
//! their releases are written back to back at that moment. One made after
//! it is written at once and counted (`fleetdp_releases_late_total`).

use super::alarm::Alarms;
use super::offsets::Offsets;
use super::{now_ms, Options, Pipeline, ReleaseEvent};
use crate::clients::kafka::{Producer, Stopped};
use crate::config::{OutputFormat, Validated};
use crate::dp::release::{ReleasedStatistic, RunningValue, StatKind, StreamPlan};
use crate::engine::window::ClosedWindow;
use crate::state::{self, Lanes, ReleaseRecord, Step, WindowRecords};
use anyhow::{Context as _, Result};
use prost::Message as _;
use std::time::Instant;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// An acknowledged release.
pub(super) struct Released {
    partition: i32,
    /// The input offset it held back from commits, if any.
    first_offset: Option<i64>,
    padded: u64,
    started: Instant,
    release: proto::WindowRelease,
    truth: Option<Vec<ReleasedStatistic>>,
    values: Option<Vec<i64>>,
}

/// The published form of a window's release.
pub fn build_release(
    v: &Validated,
    stream: &StreamPlan,
    w: &ClosedWindow,
    stats: &[ReleasedStatistic],
    running: &[RunningValue],
) -> proto::WindowRelease {
    let statistics = stats
        .iter()
        .map(|s| proto::Statistic {
            name: s.name.clone(),
            values: s.values.clone(),
            level: s.level,
            mechanism: s.mechanism.clone(),
            sensitivity: s.sensitivity,
            scale: s.scale,
            spent: s.spent,
            half_width: s.half_width,
            rank_half_width: s.rank_half_width,
            bin_edges: if s.name == StatKind::Histogram.name() {
                stream.spec.histogram_edges.clone()
            } else {
                vec![]
            },
        })
        .collect();
    let public = w.published(v.max_lateness.as_millis() as i64);
    proto::WindowRelease {
        stream: stream.spec.name.clone(),
        partition: w.partition,
        window_seq: w.seq,
        first_offset: public.first_offset,
        last_offset: public.last_offset,
        first_event_time_ms: public.first_event_ms,
        last_event_time_ms: public.last_event_ms,
        n: public.n,
        padded: public.padded,
        statistics,
        guarantee: Some(v.guarantee(stream)),
        group: crate::config::dimensions::group_map(stream),
        // Set by the caller, which holds the window's key and track.
        moments: None,
        released_at_ms: public.released_at_ms.unwrap_or_else(now_ms),
        running: running
            .iter()
            .map(|r| proto::v1::RunningTotal {
                name: r.name.into(),
                windows: r.windows,
                count: r.count,
                values: r.values.clone(),
                std: r.std,
                mechanism: r.mechanism.into(),
                spent: r.spent,
                bin_edges: if r.name == "histogram" {
                    stream.spec.histogram_edges.clone()
                } else {
                    vec![]
                },
                summed: r.summed.map(|s| s.0),
                summed_std: r
                    .summed
                    .map(|s| s.1)
                    .or(r.summed_bins.as_ref().map(|s| s.1)),
                combined: r.combined.map(|c| c.0),
                combined_std: r
                    .combined
                    .map(|c| c.1)
                    .or(r.combined_bins.as_ref().map(|c| c.1)),
                summed_bins: r.summed_bins.clone().map(|s| s.0).unwrap_or_default(),
                combined_bins: r.combined_bins.clone().map(|c| c.0).unwrap_or_default(),
            })
            .collect(),
    }
}

/// Encode a release for the output topic; returns (payload, content type).
pub fn encode_release(r: &proto::WindowRelease, format: OutputFormat) -> (Vec<u8>, &'static str) {
    match format {
        OutputFormat::Protobuf => (
            r.encode_to_vec(),
            "application/vnd.fleetdp.release+protobuf",
        ),
        OutputFormat::Json => (
            serde_json::to_vec(r).expect("releases serialise"),
            "application/json",
        ),
    }
}

/// Releases published but not yet acknowledged. One at a time: consuming
/// overlaps with the publish, and every release is its own produce batch
/// (tansu 0.6 was seen to keep only part of multi-record release batches in
/// a partition; one-record batches are stored correctly).
const MAX_INFLIGHT: usize = 1;

/// A release task's outcome.
pub(super) type Done = Result<Result<Vec<Released>>, tokio::task::JoinError>;

/// A closed window to release, with the key its slot of private keys is
/// bound to.
pub(super) type Closing = (ClosedWindow, Option<(String, String)>);

/// What the loop knows of a release being made.
struct Meta {
    partition: i32,
    out_partition: i32,
    /// The input offset it holds back from commits, if any.
    holds: Option<i64>,
    padded: u64,
    started: Instant,
}

/// A release being made: its noise and encoding on the blocking pool.
struct Made {
    meta: Meta,
    computed: tokio::task::JoinHandle<Computed>,
}

/// A release made, ready to write.
struct Computed {
    release: proto::WindowRelease,
    payload: Vec<u8>,
    content_type: &'static str,
    truth: Option<Vec<ReleasedStatistic>>,
    values: Option<Vec<i64>>,
    records: WindowRecords,
    timed: bool,
    /// Its OpenTelemetry record, where `kafka.otlp_topic` is set.
    otlp: Option<(Vec<u8>, &'static str)>,
}

/// Wait until the wall clock reads `at_ms` (ms since the epoch); returns
/// whether that moment had already passed. Gives up when the service is
/// asked to stop ([`Stopped`]: the release is replayed on restart).
async fn wait_until_ms(at_ms: i64, stop: &mut watch::Receiver<bool>) -> Result<bool> {
    let left = at_ms.saturating_sub(now_ms());
    if left <= 0 {
        return Ok(left < 0);
    }
    tokio::select! {
        _ = tokio::time::sleep(std::time::Duration::from_millis(left as u64)) => Ok(false),
        _ = stop.wait_for(|s| *s) => Err(Stopped("the output topic".into()).into()),
    }
}

/// The release owner: steps each window's lane in window order, computes
/// its noise and writes it through the durable protocol in a task (at most
/// [`MAX_INFLIGHT`]), and tells the observers once it is acknowledged.
pub(super) struct Releases<'a> {
    p: &'a Pipeline,
    tasks: JoinSet<Result<Vec<Released>>>,
    lanes: Lanes,
    producer: Producer,
    stop: watch::Receiver<bool>,
    /// Partitions of the input topic (in the plan fingerprint) and of the
    /// output topic.
    partitions: (i32, i32),
    with_truth: bool,
    events: Option<mpsc::UnboundedSender<ReleaseEvent>>,
    alarms: Alarms,
}

impl<'a> Releases<'a> {
    pub fn new(
        p: &'a Pipeline,
        opts: &Options,
        producer: Producer,
        partitions: (i32, i32),
        stop: watch::Receiver<bool>,
    ) -> Self {
        Self {
            p,
            tasks: JoinSet::new(),
            lanes: Lanes::default(),
            producer,
            stop,
            partitions,
            with_truth: opts.with_truth,
            events: opts.events.clone(),
            alarms: Alarms::default(),
        }
    }

    /// The lanes' carried state (restored on assignment, dropped on revoke).
    pub fn lanes(&mut self) -> &mut Lanes {
        &mut self.lanes
    }

    /// The lanes' device-limit alarms (forgotten on revoke).
    pub fn alarms(&mut self) -> &mut Alarms {
        &mut self.alarms
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The next release task to end (`None`: none in flight).
    pub async fn next(&mut self) -> Option<Done> {
        self.tasks.join_next().await
    }

    /// A release task that has ended, without waiting.
    pub fn try_next(&mut self) -> Option<Done> {
        self.tasks.try_join_next()
    }

    /// Release closed windows once a task is free: their lanes are
    /// stepped here, in order; noise, encoding and the writes run in one
    /// task. Time windows come in groups of one due moment: their charges
    /// are written first, then their releases together at the due moment
    /// plus `limits.release_delay` (module doc).
    pub async fn release(&mut self, ws: Vec<Closing>, offsets: &mut Offsets) -> Result<()> {
        // Bounded pipelining: publishes overlap with consuming.
        while self.tasks.len() >= MAX_INFLIGHT {
            let done = self.tasks.join_next().await.expect("non-empty");
            self.done(done, offsets)?;
        }
        self.start(ws, offsets);
        // Let the release task start now: a task spawned from the busy
        // consuming loop sits in the worker's LIFO slot, which other
        // workers cannot steal, until the loop yields.
        tokio::task::yield_now().await;
        Ok(())
    }

    fn start(&mut self, ws: Vec<Closing>, offsets: &mut Offsets) {
        let v = self.p.v.clone();
        // Time windows: written at a moment no reading decides.
        let delay = v.config.limits.release_delay().unwrap_or_default();
        let not_before = ws.first().filter(|(w, _)| w.timed).map(|(w, _)| {
            let due = w
                .published(v.max_lateness.as_millis() as i64)
                .released_at_ms;
            due.unwrap_or_else(now_ms)
                .saturating_add(delay.as_millis() as i64)
        });
        let made: Vec<Made> = ws
            .into_iter()
            .map(|(w, bound)| self.make(w, bound, offsets))
            .collect();
        let (producer, mut stop) = (self.producer.clone(), self.stop.clone());
        let (key_ids, halt) = (self.p.key_ids.clone(), self.p.halt.clone());
        self.tasks.spawn(async move {
            let state_topic = v.config.kafka.state_topic();
            let mut ready = Vec::with_capacity(made.len());
            for m in made {
                let c = m.computed.await.context("computing a release")?;
                state::write_charges(&producer, &state_topic, &c.records, &mut stop).await?;
                ready.push((m.meta, c));
            }
            if let Some(at) = not_before {
                let late = wait_until_ms(at, &mut stop).await?;
                if late {
                    let stream = ready.first().map_or("", |(_, c)| c.release.stream.as_str());
                    crate::telemetry::releases_late(stream, ready.len() as u64);
                }
            }
            let kc = &v.config.kafka;
            let mut out = Vec::with_capacity(ready.len());
            for (meta, c) in ready {
                // Halted (another instance rotated away from this key: a
                // window released now could also be released under the new
                // one; or a state topic that deletes charges).
                if let Some(why) = halt.get() {
                    return Err(crate::config::configuration(anyhow::Error::msg(
                        why.clone(),
                    )));
                }
                let record = ReleaseRecord {
                    topic: &kc.output_topic,
                    partition: meta.out_partition,
                    payload: &c.payload,
                    content_type: c.content_type,
                    // Time windows: stamped with their due moment (the
                    // published release time), not when it happened to be made.
                    timestamp_ms: c.timed.then_some(c.release.released_at_ms),
                    key: &key_ids,
                };
                if let Some(o) = &c.otlp {
                    let key = &c.records.record_key;
                    let at = record.timestamp_ms;
                    crate::runtime::otlp_out::write(&producer, &v, key, o, at, &mut stop).await?;
                }
                state::write_release(&producer, &state_topic, c.records, record, &mut stop).await?;
                out.push(Released {
                    partition: meta.partition,
                    first_offset: meta.holds,
                    padded: meta.padded,
                    started: meta.started,
                    release: c.release,
                    truth: c.truth,
                    values: c.values,
                });
            }
            Ok(out)
        });
    }

    /// Step a window's lane (here, in order) and start computing its noise
    /// and encoding on the blocking pool.
    fn make(
        &mut self,
        w: ClosedWindow,
        bound: Option<(String, String)>,
        offsets: &mut Offsets,
    ) -> Made {
        let started = Instant::now();
        let v = self.p.v.clone();
        let stream = &v.plan.streams[w.stream];
        // Running totals and adaptive quantile candidates chain window to
        // window: stepped here, in order.
        let Step {
            running,
            track,
            choices,
            record: lane,
        } = self.lanes.step(stream, &self.p.key, &w);
        self.alarms.check(&v, &self.p.key, &w);
        // An empty time window holds back no input offset.
        let holds = (!w.values.is_empty()).then_some(w.first_offset);
        if let Some(o) = holds {
            offsets.release_sent(w.partition, o);
        }
        let (input_partitions, output_partitions) = self.partitions;
        let meta = Meta {
            partition: w.partition,
            out_partition: w.partition.rem_euclid(output_partitions),
            holds,
            padded: w.padded,
            started,
        };
        let (release_key, with_truth) = (self.p.key.clone(), self.with_truth);
        let key_id = self.p.key_ids.mine.clone();
        // Noise and encoding (≈ 0.5 ms for 10,000 readings) on the blocking
        // pool, started now: an async task spawned from the busy consuming
        // loop would first run on the loop's own thread.
        let computed = tokio::task::spawn_blocking(move || {
            let stream = &v.plan.streams[w.stream];
            let (stats, moments) = stream.release_with_moments(
                &release_key,
                w.partition,
                w.seq,
                &w.values,
                &track,
                choices.as_ref(),
            );
            let mut release = build_release(&v, stream, &w, &stats, &running);
            // The raw moments, for the fleet-wide intervals.
            release.moments = moments.map(|m| proto::v1::RawMoments {
                count: m.count,
                centred_sum: m.centred_sum,
                centred_sum_sq: m.centred_sum_sq,
                boundary: m.boundary,
                sum: m.sum,
            });
            // A slot of private keys publishes the key it is bound to.
            if let Some((dimension, value)) = bound {
                release.group.insert(dimension, value);
            }
            let (payload, content_type) = encode_release(&release, v.config.kafka.output_format);
            let otlp = crate::runtime::otlp_out::window_record(&v, &release);
            let plan = state::fingerprint(&v, w.stream, input_partitions, &key_id);
            Computed {
                truth: with_truth.then(|| stream.truth(&w.values)),
                values: with_truth.then(|| w.values.clone()),
                records: WindowRecords::new(&stream.spec.name, &w, lane, &plan),
                timed: w.timed,
                otlp,
                release,
                payload,
                content_type,
            }
        });
        Made { meta, computed }
    }

    /// A release task ended: acknowledged, given up because the service is
    /// stopping (replayed on restart), or failed (fatal).
    pub fn done(&mut self, done: Done, offsets: &mut Offsets) -> Result<()> {
        match done? {
            Ok(released) => {
                for r in released {
                    self.finish(r, offsets);
                }
            }
            Err(e) if e.downcast_ref::<Stopped>().is_some() => {
                tracing::warn!(
                    "stopping before a release was acknowledged; it is replayed on restart"
                )
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// A release was acknowledged: let its input offset be committed and
    /// tell the observers.
    fn finish(&mut self, done: Released, offsets: &mut Offsets) {
        let latency = done.started.elapsed();
        if let Some(o) = done.first_offset {
            offsets.release_acked(done.partition, o);
        }
        let r = &done.release;
        self.p.board.record_release(r);
        self.p.counters.window_released(&r.stream, latency);
        tracing::info!(
            stream = %r.stream,
            partition = r.partition,
            window_seq = r.window_seq,
            n = r.n,
            padded = done.padded,
            // Whole microseconds: no float dust (1.7504840000000002).
            latency_ms = latency.as_micros() as f64 / 1e3,
            "window released"
        );
        if let Some(tx) = &self.events {
            let _ = tx.send(ReleaseEvent {
                release: done.release,
                truth: done.truth,
                values: done.values,
            });
        }
    }
}
