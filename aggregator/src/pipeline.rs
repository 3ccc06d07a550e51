//! The streaming pipeline: consume readings, decode, validate, top-code,
//! bound contributions, window, release through the privacy core, publish,
//! then commit input offsets no further than the oldest open window.
//!
//! Bad input never stops it: each rejected message goes to the dead-letter
//! topic with its original bytes and a reason header before its offset can
//! be committed. Logs carry counts, offsets and latencies, never values.

use crate::config::{OutputFormat, Validated};
use crate::dp::continual::RunningState;
use crate::dp::mechanism::{zcdp_to_approx_dp, Measure};
use crate::dp::rational;
use crate::dp::release::{ReleasedStatistic, RunningValue, StatKind, StreamPlan};
use crate::dp::rng::ReleaseKey;
use crate::faults::{crash_point, CrashPoint};
use crate::kafka::{self, CONTENT_TYPE};
use crate::process::Processor;
use crate::status::StatusBoard;
use crate::telemetry::{self, budget_gauges, Counters};
use crate::window::{ClosedWindow, Windower, DEVICE_KEY_SCHEME};
use anyhow::{anyhow, Context, Result};
use ingest::{Reason, Rejection};
use prost::Message as _;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{BorrowedMessage, Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// A release as it was published, for in-process observers (the demo, tests).
#[derive(Debug, Clone)]
pub struct ReleaseEvent {
    pub release: proto::WindowRelease,
    /// The noise-free statistics. Only when [`Options::with_truth`] is set
    /// (the demo owns its data); never published anywhere.
    pub truth: Option<Vec<ReleasedStatistic>>,
}

/// How to run.
#[derive(Debug, Default)]
pub struct Options {
    pub events: Option<mpsc::UnboundedSender<ReleaseEvent>>,
    pub with_truth: bool,
}

/// The service, ready to run.
pub struct Pipeline {
    v: Arc<Validated>,
    key: ReleaseKey,
    pub counters: Arc<Counters>,
    /// Latest releases, lag and readiness, for the HTTP listener.
    pub board: Arc<StatusBoard>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The published form of a window's release.
pub fn build_release(
    v: &Validated,
    stream: &StreamPlan,
    w: &ClosedWindow,
    stats: &[ReleasedStatistic],
    running: &[RunningValue],
) -> proto::WindowRelease {
    let plan = &v.plan;
    let budget = &plan.privacy.budget;
    let per_horizon = rational::to_f64(&plan.per_horizon);
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
        guarantee: Some(proto::Guarantee {
            relation: plan.privacy.relation.to_string(),
            unit: "device".into(),
            measure: match budget.measure {
                Measure::Pure => "pure".into(),
                Measure::Zcdp => "zcdp".into(),
            },
            per_window: rational::to_f64(&stream.per_window),
            per_horizon,
            delta: budget.delta,
            epsilon_at_delta: match budget.measure {
                Measure::Pure => per_horizon,
                Measure::Zcdp => zcdp_to_approx_dp(per_horizon, budget.delta),
            },
            horizon_seconds: v.horizon.as_secs(),
            max_readings_per_device: stream.spec.max_readings_per_device,
            max_windows_per_device: stream.spec.max_windows_per_device,
        }),
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

struct Sinks {
    producer: FutureProducer,
    output_partitions: i32,
}

/// Partitions assigned and revoked by rebalances, for the loop to act on
/// before it processes the next message.
#[derive(Default)]
struct RebalanceLog {
    changed: AtomicBool,
    assigned: Mutex<Vec<i32>>,
    revoked: Mutex<Vec<i32>>,
}

struct PipelineContext {
    log: Arc<RebalanceLog>,
}

impl ClientContext for PipelineContext {}

impl ConsumerContext for PipelineContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let (list, tpl) = match rebalance {
            Rebalance::Assign(tpl) => (&self.log.assigned, *tpl),
            Rebalance::Revoke(tpl) => (&self.log.revoked, *tpl),
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "rebalance error");
                return;
            }
        };
        list.lock()
            .expect("not poisoned")
            .extend(tpl.elements().iter().map(|e| e.partition()));
        self.log.changed.store(true, Ordering::Release);
    }
}

/// Per input partition: the next offset to handle and the offset last
/// committed.
#[derive(Default)]
struct Progress {
    next_offset: BTreeMap<i32, i64>,
    committed: BTreeMap<i32, i64>,
    /// Per (stream, partition): running-total state after its last closed
    /// window (restored on assignment, dropped on revoke).
    running: BTreeMap<(usize, i32), RunningState>,
    /// Time windows: per input partition, the latest broker-assigned
    /// (LogAppendTime) message timestamp received: every message appended
    /// before it has been received, as offsets follow append order.
    appended_until: BTreeMap<i32, i64>,
}

/// Releases published but not yet acknowledged. One at a time: consuming
/// overlaps with the publish, and every release is its own produce batch
/// (tansu 0.6 was seen to keep only part of multi-record release batches in
/// a partition; one-record batches are stored correctly).
const MAX_INFLIGHT: usize = 1;

/// Time windows released per lane in one check (a lane resumed long after
/// its last release catches up over several ticks).
const MAX_CLOSE_PER_TICK: usize = 1000;

#[derive(Default)]
struct Inflight {
    tasks: tokio::task::JoinSet<Result<Released>>,
    /// Per input partition: first offsets of windows in flight (with counts).
    first_offsets: BTreeMap<i32, BTreeMap<i64, usize>>,
    /// Dead letters sent and not yet acknowledged: (partition, offset, reason).
    dead_letters: tokio::task::JoinSet<Result<(i32, i64, Reason)>>,
    /// Per input partition: offsets of those dead letters.
    dead_letter_offsets: BTreeMap<i32, std::collections::BTreeSet<i64>>,
}

impl Inflight {
    /// The first offset of `partition` that is not yet safely handled.
    fn first_offset(&self, partition: i32) -> Option<i64> {
        let release = self
            .first_offsets
            .get(&partition)
            .and_then(|m| m.keys().next().copied());
        let dead = self
            .dead_letter_offsets
            .get(&partition)
            .and_then(|m| m.first().copied());
        match (release, dead) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// An acknowledged release.
struct Released {
    partition: i32,
    /// The input offset it held back from commits, if any.
    first_offset: Option<i64>,
    padded: u64,
    started: Instant,
    release: proto::WindowRelease,
    truth: Option<Vec<ReleasedStatistic>>,
}

impl Pipeline {
    pub fn new(v: Validated, key: ReleaseKey) -> Self {
        let board = Arc::new(StatusBoard::new(v.config.http.ready_max_lag));
        Self {
            v: Arc::new(v),
            key,
            counters: Arc::new(Counters::default()),
            board,
        }
    }

    /// The validated configuration (shared with the HTTP listener).
    pub fn config(&self) -> Arc<Validated> {
        self.v.clone()
    }

    /// Every 5 s, measure each assigned partition's lag (high watermark −
    /// next offset) off the hot path, for `/readyz` and the lag gauges.
    fn spawn_lag_probe(&self, mut shutdown: watch::Receiver<bool>) -> Result<()> {
        let mut c = self.client_config();
        c.set("group.id", "fleetdp-lag-probe");
        let md: Arc<BaseConsumer> = Arc::new(c.create().context("creating the lag probe")?);
        let (board, topic) = (self.board.clone(), self.v.config.kafka.input_topic.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    _ = shutdown.changed() => return,
                }
                let (md, board, topic) = (md.clone(), board.clone(), topic.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    for (p, pos) in board.positions() {
                        // Every message appended before `asked` is below `high`.
                        let asked = now_ms();
                        if let Ok((low, high)) =
                            md.fetch_watermarks(&topic, p, Duration::from_secs(5))
                        {
                            board.set_lag(p, (high - pos.unwrap_or(low)).max(0), asked);
                        }
                    }
                })
                .await;
            }
        });
        Ok(())
    }

    fn client_config(&self) -> rdkafka::ClientConfig {
        let k = &self.v.config.kafka;
        kafka::client_config(&k.brokers, &k.properties)
    }

    /// Run until `shutdown` turns true; then finish the message in hand,
    /// commit and return.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>, opts: Options) -> Result<()> {
        let v = &self.v;
        let kc = &v.config.kafka;
        let base = self.client_config();

        // Where each (stream, partition) resumes is read from the release
        // ledger whenever partitions are assigned (see `apply_rebalance`).
        let mut processor = Processor::new(v, self.counters.clone());
        budget_gauges(v);
        self.spawn_lag_probe(shutdown.clone())?;

        let (input_partitions, output_partitions) = {
            let mut c = base.clone();
            c.set("group.id", "fleetdp-metadata");
            let md: BaseConsumer = c.create()?;
            let (input, output) = (kc.input_topic.clone(), kc.output_topic.clone());
            tokio::task::spawn_blocking(move || -> Result<(i32, i32)> {
                let t = Duration::from_secs(10);
                Ok((
                    kafka::partition_count(&md, &input, t)? as i32,
                    kafka::partition_count(&md, &output, t)? as i32,
                ))
            })
            .await??
        };
        processor.set_input_partitions(input_partitions);

        let mut pc = base.clone();
        // Releases are rare and latency matters: no linger. acks=all and one
        // request in flight keep releases in order per partition. Idempotence
        // is not needed for correctness (a retried release is bit-identical
        // and the ledger skips it), so it is left to the operator's
        // `kafka.properties`.
        pc.set("acks", "all")
            .set("linger.ms", "0")
            .set("max.in.flight.requests.per.connection", "1");
        let producer: FutureProducer = pc.create().context("creating producer")?;

        let mut cc = base.clone();
        cc.set("group.id", &kc.group_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("partition.assignment.strategy", "cooperative-sticky")
            // librdkafka pauses a partition's fetching for this long once its
            // local queue is over `queued.min.messages`; its default (1 s)
            // leaves a consumer faster than the broker idle most of the time
            // while it catches up (seen: 130 k vs 330 k readings/s on tansu).
            .set("fetch.queue.backoff.ms", "20");
        for (k, val) in &kc.consumer_properties {
            cc.set(k, val);
        }
        let log = Arc::new(RebalanceLog::default());
        let consumer: StreamConsumer<PipelineContext> = cc
            .create_with_context(PipelineContext { log: log.clone() })
            .context("creating consumer")?;
        consumer
            .subscribe(&[&kc.input_topic])
            .with_context(|| format!("subscribing to {}", kc.input_topic))?;

        let sinks = Sinks {
            producer: producer.clone(),
            output_partitions,
        };
        let mut progress = Progress::default();
        let mut inflight = Inflight::default();
        let mut last_commit = Instant::now();
        let mut handled = 0u64;
        let mut closed = Vec::new();
        tracing::info!(topic = %kc.input_topic, group = %kc.group_id, "consuming");
        let mut idle = tokio::time::interval(Duration::from_secs(1));
        idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        // A message prepared (decoded, its devices' slots being fetched) but
        // not yet applied: it is applied once the next message is prepared,
        // or as soon as no next message is ready, so it never waits for input.
        let mut staged: Option<BorrowedMessage<'_>> = None;
        // Two steps taken in several places, each borrowing the loop's state apart.
        macro_rules! apply {
            ($m:expr) => {
                self.apply_staged(
                    &sinks,
                    &mut processor,
                    &mut inflight,
                    &mut progress,
                    &mut closed,
                    $m,
                    &opts,
                )
                .await?
            };
        }
        // Time windows close on the clock, not on a reading.
        let timed = v.windows.iter().any(Option::is_some);
        macro_rules! close_due {
            () => {
                if timed {
                    let appended = &progress.appended_until;
                    processor.windower_mut().close_due(
                        now_ms(),
                        |p| {
                            let a = appended.get(&p).copied().unwrap_or(i64::MIN);
                            a.max(self.board.read_until(p))
                        },
                        MAX_CLOSE_PER_TICK,
                        &mut closed,
                    );
                    self.release_closed(&sinks, &mut inflight, &mut progress, &mut closed, &opts)
                        .await?;
                }
            };
        }
        macro_rules! commit {
            () => {{
                self.commit(
                    &consumer,
                    processor.windower(),
                    &inflight,
                    &mut progress,
                    CommitMode::Async,
                );
                last_commit = Instant::now();
            }};
        }
        loop {
            // While messages keep coming the select! below is skipped: look
            // at the stop switch and reap finished publishes every 64.
            if handled.is_multiple_of(64) {
                processor.flush_counters();
                if *shutdown.borrow() {
                    break;
                }
                while let Some(done) = inflight.tasks.try_join_next() {
                    self.finish_release(&mut inflight, done??, &opts);
                }
                while let Some(done) = inflight.dead_letters.try_join_next() {
                    self.finish_dead_letter(&mut inflight, done??);
                }
            }
            let msg = if staged.is_some() {
                // Only a message that is ready now.
                let polled = {
                    use std::future::Future as _;
                    let mut next = std::pin::pin!(consumer.recv());
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    next.as_mut().poll(&mut cx)
                };
                match polled {
                    std::task::Poll::Ready(m) => m,
                    std::task::Poll::Pending => {
                        let m = staged.take().expect("staged");
                        let released = apply!(m);
                        if released {
                            commit!();
                        }
                        continue;
                    }
                }
            } else {
                // About to wait for input: counts are exact while idle.
                processor.flush_counters();
                tokio::select! {
                    biased;
                    Some(done) = inflight.tasks.join_next(), if !inflight.tasks.is_empty() => {
                        self.finish_release(&mut inflight, done??, &opts);
                        continue;
                    }
                    Some(done) = inflight.dead_letters.join_next(), if !inflight.dead_letters.is_empty() => {
                        self.finish_dead_letter(&mut inflight, done??);
                        continue;
                    }
                    m = consumer.recv() => m,
                    _ = shutdown.changed() => break,
                    // Idle input: apply a rebalance that came without a
                    // message, release time windows that are due, commit
                    // what was acknowledged and report positions.
                    _ = idle.tick() => {
                        if log.changed.load(Ordering::Acquire) {
                            self.apply_rebalance(&log, &mut processor, &mut progress)
                                .await?;
                        }
                        close_due!();
                        commit!();
                        continue;
                    }
                }
            };
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "consumer error; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            // A rebalance may have just happened inside recv(): act on it
            // (after the message received before it) before processing a
            // message of a newly assigned partition.
            if log.changed.load(Ordering::Acquire) {
                if let Some(m) = staged.take() {
                    apply!(m);
                }
                self.apply_rebalance(&log, &mut processor, &mut progress)
                    .await?;
            }
            let prepared = processor.prepare(
                msg.partition(),
                msg.offset(),
                msg.payload().unwrap_or(&[]),
                if kc.read_content_type {
                    kafka::header(&msg, CONTENT_TYPE)
                } else {
                    None
                },
                msg.timestamp().to_millis(),
            );
            if timed {
                // Only the broker's clock orders timestamps like offsets;
                // a producer's (CreateTime) may run behind its neighbours'.
                if let rdkafka::Timestamp::LogAppendTime(t) = msg.timestamp() {
                    progress.appended_until.insert(msg.partition(), t);
                }
            }
            // The previous message is applied while this one's device slots load.
            let mut released_any = false;
            if let Some(m) = staged.take() {
                released_any = apply!(m);
            }
            match prepared {
                Ok(()) => staged = Some(msg),
                Err(rejection) => {
                    self.dead_letter(&producer, &mut inflight, &msg, &rejection)
                        .await?;
                    progress
                        .next_offset
                        .insert(msg.partition(), msg.offset() + 1);
                }
            }
            handled += 1;
            // Reading the clock per message is measurable; every 256 is enough.
            if released_any
                || (handled.is_multiple_of(256) && last_commit.elapsed() > Duration::from_secs(1))
            {
                if timed {
                    // Its readings may belong to a window about to close.
                    if let Some(m) = staged.take() {
                        apply!(m);
                    }
                    close_due!();
                }
                commit!();
            }
        }
        if let Some(m) = staged.take() {
            apply!(m);
        }
        processor.flush_counters();
        tracing::info!("shutting down: finishing releases in flight, committing, flushing");
        while let Some(done) = inflight.tasks.join_next().await {
            self.finish_release(&mut inflight, done??, &opts);
        }
        while let Some(done) = inflight.dead_letters.join_next().await {
            self.finish_dead_letter(&mut inflight, done??);
        }
        self.commit(
            &consumer,
            processor.windower(),
            &inflight,
            &mut progress,
            CommitMode::Sync,
        );
        use rdkafka::producer::Producer;
        producer
            .flush(Timeout::After(Duration::from_secs(30)))
            .context("flushing producer")?;
        Ok(())
    }

    /// Apply a prepared message ([`Processor::apply`]): dead-letter it if
    /// it is refused now, start the releases of the windows it closed, and
    /// mark it handled. Returns whether a window was released.
    #[allow(clippy::too_many_arguments)] // the loop's state, borrowed apart
    async fn apply_staged(
        &self,
        sinks: &Sinks,
        processor: &mut Processor,
        inflight: &mut Inflight,
        progress: &mut Progress,
        closed: &mut Vec<ClosedWindow>,
        msg: BorrowedMessage<'_>,
        opts: &Options,
    ) -> Result<bool> {
        if let Err(rejection) = processor.apply(closed) {
            self.dead_letter(&sinks.producer, inflight, &msg, &rejection)
                .await?;
        }
        let released_any = self
            .release_closed(sinks, inflight, progress, closed, opts)
            .await?;
        progress
            .next_offset
            .insert(msg.partition(), msg.offset() + 1);
        Ok(released_any)
    }

    /// Start the releases of closed windows, in order; returns whether
    /// there were any.
    async fn release_closed(
        &self,
        sinks: &Sinks,
        inflight: &mut Inflight,
        progress: &mut Progress,
        closed: &mut Vec<ClosedWindow>,
        opts: &Options,
    ) -> Result<bool> {
        let released_any = !closed.is_empty();
        for w in closed.drain(..) {
            // Bounded pipelining: publishes overlap with consuming.
            while inflight.tasks.len() >= MAX_INFLIGHT {
                let done = inflight.tasks.join_next().await.expect("non-empty")??;
                self.finish_release(inflight, done, opts);
            }
            self.start_release(sinks, inflight, progress, w, opts);
            // Let the release task start now: a task spawned from this
            // busy loop sits in the worker's LIFO slot, which other
            // workers cannot steal, until the loop yields.
            tokio::task::yield_now().await;
        }
        Ok(released_any)
    }

    fn commit(
        &self,
        consumer: &StreamConsumer<PipelineContext>,
        windower: &Windower,
        inflight: &Inflight,
        progress: &mut Progress,
        mode: CommitMode,
    ) {
        let topic = &self.v.config.kafka.input_topic;
        let mut tpl = TopicPartitionList::new();
        let Progress {
            next_offset,
            committed,
            ..
        } = progress;
        for (&p, &next) in next_offset.iter() {
            self.board.set_position(p, next);
            // Not past an open window, nor past a release not yet acknowledged.
            let at = inflight
                .first_offset(p)
                .map_or(windower.committable(p, next), |o| {
                    o.min(windower.committable(p, next))
                });
            if committed.get(&p) != Some(&at) {
                let _ = tpl.add_partition_offset(topic, p, Offset::Offset(at));
                committed.insert(p, at);
            }
        }
        if tpl.count() > 0 {
            let r = consumer.commit(&tpl, mode);
            crash_point(CrashPoint::AfterCommit);
            if let Err(e) = r {
                // Not fatal: a later commit covers it; a restart replays and
                // the ledger plus keyed noise make the replay harmless.
                tracing::warn!(error = %e, "offset commit failed");
                telemetry::commit_failed();
                committed.clear();
            }
        }
    }

    /// Revoked partitions: forget their open windows (they rebuild by
    /// replay). Assigned partitions: re-read the release ledger and resume
    /// each (stream, partition) after its last released window, so an
    /// instance taking over never re-numbers or re-noises a window.
    async fn apply_rebalance(
        &self,
        log: &RebalanceLog,
        processor: &mut Processor,
        progress: &mut Progress,
    ) -> Result<()> {
        if !log.changed.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let revoked = std::mem::take(&mut *log.revoked.lock().expect("not poisoned"));
        let assigned = std::mem::take(&mut *log.assigned.lock().expect("not poisoned"));
        for &p in revoked.iter().chain(&assigned) {
            processor.windower_mut().drop_partition(p);
            progress.next_offset.remove(&p);
            progress.committed.remove(&p);
            progress.running.retain(|&(_, q), _| q != p);
            progress.appended_until.remove(&p);
        }
        self.board.rebalanced(&assigned, &revoked);
        if !revoked.is_empty() {
            tracing::info!(?revoked, "partitions revoked");
        }
        if assigned.is_empty() {
            return Ok(());
        }
        let kafka::Restored {
            resume: ledger,
            charges,
            running,
        } = self.read_state(&assigned).await?;
        crash_point(CrashPoint::DuringRebalance);
        let mut resumed = 0;
        for ((stream, partition), r) in &ledger {
            if let (true, Some(i)) = (assigned.contains(partition), processor.stream_index(stream))
            {
                processor.windower_mut().resume(i, *partition, *r);
                // Only released windows count; later ones are charged again by replay.
                let windows: Vec<(u64, Vec<(u64, i64)>)> = charges
                    .get(&(stream.clone(), *partition))
                    .map(|m| {
                        m.range(..=r.last_seq)
                            .map(|(s, c)| (*s, c.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                processor
                    .windower_mut()
                    .restore_charges(i, *partition, &windows);
                if self.v.plan.streams[i].running.is_some() {
                    let lane = (stream.clone(), *partition, r.last_seq);
                    let state = match running.get(&lane) {
                        // Running totals start with this window's successor.
                        Some(b) if b.is_empty() => RunningState::default(),
                        Some(b) => serde_json::from_slice(b).with_context(|| {
                            format!("running-total state of {stream}/{partition}#{} is not readable", r.last_seq)
                        })?,
                        None => anyhow::bail!(
                            "the state topic has no record of {stream}/{partition}#{}: its running totals cannot continue \
                             without re-noising released steps (see the README's playbook: state topic lost)",
                            r.last_seq
                        ),
                    };
                    progress.running.insert((i, *partition), state);
                }
                resumed += 1;
            }
        }
        // Time windows of lanes with no ledger start at a moment no reading
        // decides: now.
        let now = now_ms();
        for &p in &assigned {
            processor.windower_mut().start_time_lanes(p, now);
        }
        tracing::info!(
            ?assigned,
            resumed,
            "partitions assigned; resumed from the release ledger"
        );
        Ok(())
    }

    /// The release ledger and the charges of `assigned`, retried with
    /// backoff while the broker is unreachable (a rebalance can land while
    /// it flaps); an error after the retries is fatal.
    async fn read_state(&self, assigned: &[i32]) -> Result<kafka::Restored> {
        let mut backoff = Duration::from_millis(500);
        let mut attempt = 1;
        loop {
            let (base, output, state, parts) = (
                self.client_config(),
                self.v.config.kafka.output_topic.clone(),
                self.v.config.kafka.state_topic(),
                assigned.to_vec(),
            );
            let r = tokio::task::spawn_blocking(move || -> Result<_> {
                kafka::restore(&base, &output, &state, &parts)
                    .context("restoring state (kafka.state_topic, kafka.output_topic)")
            })
            .await?;
            match r {
                Ok(v) => return Ok(v),
                Err(e) if attempt < 8 => {
                    tracing::warn!(error = %format!("{e:#}"), attempt, "restoring state failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn start_release(
        &self,
        sinks: &Sinks,
        inflight: &mut Inflight,
        progress: &mut Progress,
        w: ClosedWindow,
        opts: &Options,
    ) {
        let started = Instant::now();
        let stream = &self.v.plan.streams[w.stream];
        // Running totals chain window to window: stepped here, in order.
        let (running, running_state) = match &stream.running {
            Some(_) => {
                let state = progress.running.entry((w.stream, w.partition)).or_default();
                let r = stream
                    .running_step(&self.key, w.partition, w.seq, &w.values, state)
                    .unwrap_or_default();
                (
                    r,
                    serde_json::to_vec(state).expect("running state serialises"),
                )
            }
            None => (vec![], vec![]),
        };
        // An empty time window holds back no input offset.
        let holds = (!w.values.is_empty()).then_some(w.first_offset);
        if let Some(o) = holds {
            *inflight
                .first_offsets
                .entry(w.partition)
                .or_default()
                .entry(o)
                .or_default() += 1;
        }
        let key = proto::release_key(&stream.spec.name, w.partition, w.seq);
        let out_partition = w.partition.rem_euclid(sinks.output_partitions);
        let state_topic = self.v.config.kafka.state_topic();
        let producer = sinks.producer.clone();
        let topic = self.v.config.kafka.output_topic.clone();
        let (partition, first_offset, padded) = (w.partition, holds, w.padded);
        let timed = w.timed;
        let mut ledger = proto::v1::LedgerEntry {
            stream: stream.spec.name.clone(),
            partition: w.partition,
            last_seq: w.seq,
            last_offset: w.last_offset,
            reference_event_time_ms: w.reference_event_ms,
            ..Default::default()
        };
        let lane_key = format!("{}/{}", stream.spec.name, w.partition);
        let retired: Vec<String> = w
            .retired
            .iter()
            .map(|&s| proto::release_key(&stream.spec.name, w.partition, s))
            .collect();
        let (v, release_key, with_truth) = (self.v.clone(), self.key.clone(), opts.with_truth);
        // Noise and encoding (≈ 0.5 ms for 10,000 readings) on the blocking
        // pool, started now: an async task spawned from the busy consuming
        // loop would first run on the loop's own thread.
        let computed = tokio::task::spawn_blocking(move || {
            let stream = &v.plan.streams[w.stream];
            let stats = stream.release(&release_key, w.partition, w.seq, &w.values);
            let release = build_release(&v, stream, &w, &stats, &running);
            let (payload, ct) = encode_release(&release, v.config.kafka.output_format);
            let truth = with_truth.then(|| stream.truth(&w.values));
            let charges = proto::v1::WindowCharges {
                stream: stream.spec.name.clone(),
                partition: w.partition,
                window_seq: w.seq,
                device_keys: w.charges.iter().map(|c| c.0).collect(),
                horizons: w.charges.iter().map(|c| c.1).collect(),
                running_state,
                device_key_scheme: DEVICE_KEY_SCHEME.into(),
            }
            .encode_to_vec();
            (release, payload, ct, truth, charges)
        });
        inflight.tasks.spawn(async move {
            let (release, payload, ct, truth, charges) =
                computed.await.context("computing a release")?;
            let headers = OwnedHeaders::new().insert(Header {
                key: CONTENT_TYPE,
                value: Some(ct),
            });
            let kind = |k: &'static str| {
                OwnedHeaders::new().insert(Header {
                    key: kafka::RECORD_KIND,
                    value: Some(k),
                })
            };
            crash_point(CrashPoint::BeforeState);
            // The charges this release depends on are durable first.
            publish(
                &producer,
                &state_topic,
                key.as_bytes(),
                Some(&charges),
                None,
                kind(kafka::CHARGES),
                None,
            )
            .await?;
            crash_point(CrashPoint::BeforeRelease);
            (ledger.output_partition, ledger.output_offset) = publish(
                &producer,
                &topic,
                key.as_bytes(),
                Some(&payload),
                Some(out_partition),
                headers,
                // Time windows: stamped with their due moment (the
                // published release time), not when it happened to be made.
                timed.then_some(release.released_at_ms),
            )
            .await?;
            crash_point(CrashPoint::AfterRelease);
            // Bookkeeping that only saves work on restore: the ledger entry
            // (else the output topic is scanned further back) and tombstones
            // for retired charges (else they are retired again). Not awaited.
            let entry = ledger.encode_to_vec();
            let records =
                std::iter::once((lane_key.as_str(), Some(entry.as_slice()), kafka::LEDGER))
                    .chain(retired.iter().map(|k| (k.as_str(), None, kafka::CHARGES)));
            for (k, payload, what) in records {
                let mut r = FutureRecord::to(&state_topic).key(k).headers(kind(what));
                if let Some(p) = payload {
                    r = r.payload(p);
                }
                if let Err((e, _)) = producer.send_result(r) {
                    tracing::warn!(error = %e, "state bookkeeping not sent");
                }
            }
            Ok(Released {
                partition,
                first_offset,
                padded,
                started,
                release,
                truth,
            })
        });
    }

    fn finish_release(&self, inflight: &mut Inflight, done: Released, opts: &Options) {
        let latency = done.started.elapsed();
        if let (Some(m), Some(o)) = (
            inflight.first_offsets.get_mut(&done.partition),
            done.first_offset,
        ) {
            if let Some(c) = m.get_mut(&o) {
                *c -= 1;
                if *c == 0 {
                    m.remove(&o);
                }
            }
        }
        let r = &done.release;
        self.board.record_release(r);
        self.counters.window_released(&r.stream, latency);
        tracing::info!(
            stream = %r.stream,
            partition = r.partition,
            window_seq = r.window_seq,
            n = r.n,
            padded = done.padded,
            latency_ms = latency.as_secs_f64() * 1e3,
            "window released"
        );
        if let Some(tx) = &opts.events {
            let _ = tx.send(ReleaseEvent {
                release: done.release,
                truth: done.truth,
            });
        }
    }

    /// Send a message to the dead-letter topic without waiting for the ack;
    /// commits stay behind it until it is acknowledged.
    async fn dead_letter(
        &self,
        producer: &FutureProducer,
        inflight: &mut Inflight,
        msg: &BorrowedMessage<'_>,
        rejection: &Rejection,
    ) -> Result<()> {
        let kc = &self.v.config.kafka;
        let (partition, offset) = (msg.partition().to_string(), msg.offset().to_string());
        let mut headers = OwnedHeaders::new();
        if let Some(h) = msg.headers() {
            use rdkafka::message::Headers;
            for i in 0..h.count() {
                if let Some(hd) = h.try_get(i) {
                    headers = headers.insert(Header {
                        key: hd.key,
                        value: hd.value,
                    });
                }
            }
        }
        let headers = headers
            .insert(Header {
                key: "fleetdp-reason",
                value: Some(rejection.reason.as_str()),
            })
            .insert(Header {
                key: "fleetdp-detail",
                value: Some(rejection.detail.as_str()),
            })
            .insert(Header {
                key: "fleetdp-source-topic",
                value: Some(kc.input_topic.as_str()),
            })
            .insert(Header {
                key: "fleetdp-source-partition",
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: "fleetdp-source-offset",
                value: Some(offset.as_str()),
            });
        while inflight.dead_letters.len() >= kc.dead_letters_in_flight.max(1) {
            let done = inflight
                .dead_letters
                .join_next()
                .await
                .expect("non-empty")??;
            self.finish_dead_letter(inflight, done);
        }
        let mut record = FutureRecord::to(&kc.dead_letter_topic)
            .key(msg.key().unwrap_or(&[]))
            .payload(msg.payload().unwrap_or(&[]))
            .headers(headers);
        let delivery = loop {
            match producer.send_result(record) {
                Ok(d) => break d,
                Err((e, r)) => {
                    // A full queue drains as acks arrive.
                    tracing::debug!(error = %e, "dead-letter queue full; waiting");
                    record = r;
                    match inflight.dead_letters.join_next().await {
                        Some(done) => self.finish_dead_letter(inflight, done??),
                        None => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }
        };
        let (p, o, reason) = (msg.partition(), msg.offset(), rejection.reason);
        inflight.dead_letter_offsets.entry(p).or_default().insert(o);
        let topic = kc.dead_letter_topic.clone();
        inflight.dead_letters.spawn(async move {
            match delivery.await {
                Ok(Ok(_)) => Ok((p, o, reason)),
                Ok(Err((e, _))) => {
                    telemetry::produce_failed(&topic);
                    Err(anyhow!(
                        "dead-lettering {p}@{o} to {topic} failed: {e}; exiting so an orchestrator can restart"
                    ))
                }
                Err(_) => Err(anyhow!("dead-lettering {p}@{o}: the producer went away")),
            }
        });
        Ok(())
    }

    fn finish_dead_letter(&self, inflight: &mut Inflight, (p, o, reason): (i32, i64, Reason)) {
        if let Some(set) = inflight.dead_letter_offsets.get_mut(&p) {
            set.remove(&o);
        }
        self.counters.dead_lettered(reason);
    }
}

/// Produce one record and wait for the broker's ack, retrying with backoff;
/// an error after the retries is fatal (nothing was committed past it).
async fn publish(
    producer: &FutureProducer,
    topic: &str,
    key: &[u8],
    payload: Option<&[u8]>,
    partition: Option<i32>,
    headers: OwnedHeaders,
    timestamp_ms: Option<i64>,
) -> Result<(i32, i64)> {
    let mut backoff = Duration::from_millis(100);
    for attempt in 1..=8 {
        let mut record = FutureRecord::to(topic).key(key).headers(headers.clone());
        if let Some(t) = timestamp_ms {
            record = record.timestamp(t);
        }
        if let Some(p) = payload {
            record = record.payload(p);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        match producer
            .send(record, Timeout::After(Duration::from_secs(30)))
            .await
        {
            Ok(delivery) => return Ok((delivery.partition, delivery.offset)),
            Err((e, _)) => {
                telemetry::produce_failed(topic);
                tracing::warn!(topic, attempt, error = %e, "produce failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
    Err(anyhow!(
        "producing to {topic} failed after retries; exiting so an orchestrator can restart"
    ))
}
