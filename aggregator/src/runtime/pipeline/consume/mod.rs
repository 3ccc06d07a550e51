//! The consuming loop: one message at a time, each prepared
//! [`PREPARE_AHEAD`] messages before it is applied (so its devices' slots
//! load meanwhile); windows that close are released in order; offsets are
//! committed by the rule in [`super::offsets`]; rebalances are acted on
//! before the next message of a partition is handled.

mod step;

use super::assign::Restoring;
use super::dead_letter::DeadLetters;
use super::offsets::Offsets;
use super::poisoned::Skipper;
use super::rebalance::{self, Events};
use super::release::{Closing, Releases};
use super::{now_ms, Options, Pipeline};
use crate::clients::kafka::Producer;
use crate::clients::kafka::{self, Stopped};
use crate::config::Undecodable;
use crate::engine::process::{Processor, PREPARE_AHEAD};
use crate::engine::window::ClosedWindow;
use crate::faults::{crash_point, CrashPoint};
use crate::telemetry;
use anyhow::{Context as _, Result};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Time windows released per lane in one check (a lane resumed long after
/// its last release catches up over several ticks).
const MAX_CLOSE_PER_TICK: usize = 1000;

pub(crate) type InputConsumer = StreamConsumer<rebalance::Context>;

/// The loop's state. The consumer is not in it: a message borrowed from
/// the consumer is held across calls that change this state.
pub(crate) struct Consuming<'a> {
    p: &'a Pipeline,
    opts: Options,
    producer: Producer,
    output_partitions: i32,
    /// Partitions of the input topic (recorded in the plan fingerprint).
    input_partitions: i32,
    processor: Processor,
    events: Events,
    offsets: Offsets,
    /// Time windows: per input partition, the latest broker-assigned
    /// (LogAppendTime) message timestamp received: every message appended
    /// before it has been received, as offsets follow append order.
    appended_until: BTreeMap<i32, i64>,
    /// Windows being released, and what their lanes carry.
    releases: Releases<'a>,
    dead_letters: DeadLetters<'a>,
    closed: Vec<ClosedWindow>,
    /// Turns true when the service is asked to stop (retries end).
    stop: watch::Receiver<bool>,
    last_commit: Instant,
    /// Whether any stream has time windows (they close on the clock).
    timed: bool,
    /// Rate limit of consumer-error log lines, per kind.
    error_log: kafka::LogLimiter,
    /// The way past undecodable batches (`kafka.undecodable = "skip"`).
    skipper: Skipper,
}

impl<'a> Consuming<'a> {
    pub fn new(
        p: &'a Pipeline,
        opts: Options,
        producer: Producer,
        (input_partitions, output_partitions): (i32, i32),
        processor: Processor,
        events: Events,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let partitions = (input_partitions, output_partitions);
        Self {
            timed: p.v.plan.streams.iter().any(|s| s.spec.window_ms.is_some()),
            releases: Releases::new(p, &opts, producer.clone(), partitions, stop.clone()),
            dead_letters: DeadLetters::new(p, producer.clone()),
            p,
            opts,
            producer,
            output_partitions,
            input_partitions,
            processor,
            events,
            offsets: Offsets::default(),
            appended_until: BTreeMap::new(),
            closed: Vec::new(),
            stop,
            last_commit: Instant::now(),
            error_log: kafka::LogLimiter::default(),
            skipper: Skipper::default(),
        }
    }

    /// Run until `shutdown` turns true; then finish the message in hand,
    /// wait for what is in flight, commit and flush.
    pub async fn run(
        mut self,
        consumer: &InputConsumer,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let read_content_type = self.p.v.config.kafka.read_content_type;
        let mut handled = 0u64;
        let mut idle = idle_tick();
        // Messages prepared (decoded, their devices' slots being fetched)
        // but not yet applied, oldest first: the oldest is applied once
        // `PREPARE_AHEAD` later ones are prepared, or as soon as no next
        // message is ready, so none waits for input. Messages are handled
        // in offset order: a message refused at prepare is dead-lettered
        // after every one prepared before it is applied.
        let mut staged: VecDeque<BorrowedMessage<'_>> = VecDeque::with_capacity(PREPARE_AHEAD);
        loop {
            // While messages keep coming the wait for input is skipped:
            // look at the stop switch and reap finished publishes every 64.
            if handled.is_multiple_of(64) && self.busy_tick(&shutdown)? {
                break;
            }
            let msg = if !staged.is_empty() {
                match kafka::ready_now(consumer) {
                    Some(m) => m,
                    None => {
                        let m = staged.pop_front().expect("staged");
                        if self.apply_staged(m).await? {
                            self.commit(consumer, CommitMode::Async);
                        }
                        continue;
                    }
                }
            } else {
                match self.wait(consumer, &mut shutdown, &mut idle).await? {
                    Waited::Message(m) => m,
                    Waited::Again => continue,
                    Waited::Stop => break,
                }
            };
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    self.consumer_error(consumer, &mut staged, &e).await?;
                    continue;
                }
            };
            // A rebalance may have just happened inside recv(): act on it
            // (after the message received before it) before processing a
            // message of a newly assigned partition.
            if self.events.pending() && self.rebalance_now(&mut staged).await? {
                break;
            }
            // Most messages are prepared and handled without a step that
            // waits: the loop enters no future of its own for them.
            let prepared = match self.p.v.schema_registry {
                None => self.prepare_now(&msg, read_content_type),
                Some(_) => match self.prepare(&msg, read_content_type).await? {
                    Some(prepared) => prepared,
                    None => break,
                },
            };
            // The private keys it selected, written before anything they
            // route can be released.
            if self.processor.may_update_keys() {
                self.write_key_updates().await?;
            }
            // An earlier message is applied while this one's device slots load.
            let released_any = match prepared {
                Ok(()) if staged.len() < PREPARE_AHEAD => {
                    staged.push_back(msg);
                    false
                }
                Ok(()) => {
                    let m = staged.pop_front().expect("staged");
                    let released_any = match self.apply_quietly(&m) {
                        None => false,
                        Some(applied) => self.applied_aloud(m, applied).await?,
                    };
                    staged.push_back(msg);
                    released_any
                }
                Err(rejection) => self.refused(msg, rejection, &mut staged).await?,
            };
            handled += 1;
            // Reading the clock per message is measurable; every 256 is enough.
            if released_any
                || (handled.is_multiple_of(256)
                    && self.last_commit.elapsed() > Duration::from_secs(1))
            {
                self.commit_now(consumer, &mut staged).await?;
            }
        }
        self.apply_all(&mut staged).await?;
        self.finish(consumer).await
    }

    /// Wait for input, the loop's one wait: counts are flushed first (exact
    /// while idle), and waiting is alive (the idle tick comes back every
    /// second). Meanwhile finished publishes are reaped; on the idle tick a
    /// rebalance that came without a message is applied, time windows due
    /// are released and what was acknowledged is committed.
    async fn wait<'c>(
        &mut self,
        consumer: &'c InputConsumer,
        shutdown: &mut watch::Receiver<bool>,
        idle: &mut tokio::time::Interval,
    ) -> Result<Waited<'c>> {
        self.p.board.beat(now_ms());
        self.processor.flush_counters();
        tokio::select! {
            biased;
            Some(done) = self.releases.next(), if !self.releases.is_empty() => {
                self.releases.done(done, &mut self.offsets)?;
                Ok(Waited::Again)
            }
            Some(done) = self.dead_letters.next(), if !self.dead_letters.is_empty() => {
                self.dead_letters.done(done, &mut self.offsets)?;
                Ok(Waited::Again)
            }
            m = consumer.recv() => Ok(Waited::Message(m)),
            _ = shutdown.changed() => Ok(Waited::Stop),
            _ = idle.tick() => {
                if stopped(self.apply_rebalance().await)? {
                    return Ok(Waited::Stop);
                }
                self.close_due().await?;
                self.commit(consumer, CommitMode::Async);
                Ok(Waited::Again)
            }
        }
    }

    /// A rebalance that happened inside `recv()`, acted on after every
    /// message received before it is applied. Returns whether the service
    /// is stopping.
    async fn rebalance_now(&mut self, staged: &mut VecDeque<BorrowedMessage<'_>>) -> Result<bool> {
        self.apply_all(staged).await?;
        stopped(self.apply_rebalance().await)
    }

    /// A consumer error: counted by kind, logged once per kind and
    /// interval with the setting to check (`/readyz` turns red if input
    /// waits behind it for `http.stall_timeout`); then a pause before the
    /// next try. An undecodable batch is skipped under
    /// `kafka.undecodable = "skip"` (`poisoned.rs`).
    async fn consumer_error(
        &mut self,
        consumer: &InputConsumer,
        staged: &mut VecDeque<BorrowedMessage<'_>>,
        e: &rdkafka::error::KafkaError,
    ) -> Result<()> {
        let (kind, check) = kafka::error_kind(e);
        telemetry::kafka_error("consumer", kind);
        if kind == "decompression" && self.p.v.config.kafka.undecodable == Undecodable::Skip {
            self.apply_all(staged).await?;
            if let Some(s) = self.skipper.skip(self.p, consumer).await? {
                self.dead_letters.send_skipped(s, &mut self.offsets).await?;
                self.offsets.handled(s.partition, s.end - 1);
                self.p.board.set_position(s.partition, s.end);
                return Ok(());
            }
        }
        self.p.board.consumer_error((kind, check));
        if let Some(held) = self.error_log.admit(kind, Instant::now()) {
            tracing::warn!(error = %e, kind, check, held_back = held, "consumer error; retrying");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(())
    }

    /// Stopping: finish the releases and dead letters in flight, commit
    /// and flush.
    async fn finish(&mut self, consumer: &InputConsumer) -> Result<()> {
        self.processor.flush_counters();
        tracing::info!("shutting down: finishing releases in flight, committing, flushing");
        while let Some(done) = self.releases.next().await {
            self.releases.done(done, &mut self.offsets)?;
        }
        while let Some(done) = self.dead_letters.next().await {
            self.dead_letters.done(done, &mut self.offsets)?;
        }
        // Asynchronous: leaving the group waits for outstanding commits,
        // and that wait is bounded (`close`, CONSUMER_CLOSE_TIMEOUT). A
        // synchronous commit waited forever for a coordinator that did not
        // answer after a broker outage (seen on tansu), and the stop hung.
        self.commit(consumer, CommitMode::Async);
        use rdkafka::producer::Producer;
        self.producer
            .flush(Timeout::After(Duration::from_secs(30)))
            .context("flushing producer")?;
        Ok(())
    }

    /// Apply the rebalance events received so far (none: nothing to do):
    /// revoked partitions forget their open windows (they rebuild by
    /// replay) and carried state; assigned partitions are restored
    /// ([`Restoring`]) and installed before their first message.
    async fn apply_rebalance(&mut self) -> Result<()> {
        let Some(changes) = self.events.take() else {
            return Ok(());
        };
        for &p in &changes.dropped {
            self.processor.drop_partition(p);
            self.offsets.forget(p);
            self.releases.lanes().drop_partition(p);
            self.releases.alarms().drop_partition(p);
            self.appended_until.remove(&p);
            self.skipper.forget(p);
            telemetry::forget_partition(p);
        }
        self.p.board.rebalanced(&changes.assigned, &changes.revoked);
        if !changes.revoked.is_empty() {
            tracing::info!(revoked = ?changes.revoked, "partitions revoked");
        }
        let assigned = changes.assigned;
        if assigned.is_empty() {
            return Ok(());
        }
        self.p.board.restoring(Some("starting".into()));
        let a = self.restoring().restore(&assigned).await?;
        self.p.board.restoring(None);
        let resumed = a.lanes.len();
        for r in a.lanes {
            let (i, partition) = r.lane;
            self.processor.windower_mut().resume(i, partition, r.resume);
            self.releases.lanes().install(r.lane, r.carried);
            self.processor.install_restored(i, partition, r.devices);
        }
        for ((stream, partition), b) in a.keys {
            self.processor.restore_keys(&stream, partition, b);
        }
        self.restoring().retire_dropped(&a.dropped).await?;
        // Time windows of lanes with no ledger start at a moment no reading
        // decides: now.
        let now = now_ms();
        for &p in &assigned {
            self.processor.windower_mut().start_time_lanes(p, now);
        }
        tracing::info!(
            ?assigned,
            resumed,
            "partitions assigned; resumed from the release ledger"
        );
        Ok(())
    }

    /// The restoring step's view of the loop.
    fn restoring(&self) -> Restoring<'_> {
        Restoring {
            p: self.p,
            processor: &self.processor,
            producer: &self.producer,
            stop: &self.stop,
            input_partitions: self.input_partitions,
            allow_plan_change: self.opts.allow_plan_change,
        }
    }

    /// Every 64 messages while busy: the loop is alive, counts flushed,
    /// finished publishes reaped. Returns whether the service is stopping.
    fn busy_tick(&mut self, shutdown: &watch::Receiver<bool>) -> Result<bool> {
        self.p.board.beat(now_ms());
        self.processor.flush_counters_busy();
        if *shutdown.borrow() {
            return Ok(true);
        }
        self.reap()?;
        Ok(false)
    }

    /// Commit after a release or a second: time windows due are released
    /// first, with every prepared message applied (their readings may
    /// belong to a window about to close).
    async fn commit_now(
        &mut self,
        consumer: &InputConsumer,
        staged: &mut VecDeque<BorrowedMessage<'_>>,
    ) -> Result<()> {
        if self.timed {
            self.apply_all(staged).await?;
            self.close_due().await?;
        }
        self.commit(consumer, CommitMode::Async);
        Ok(())
    }

    /// Finish what was acknowledged, without waiting.
    fn reap(&mut self) -> Result<()> {
        while let Some(done) = self.releases.try_next() {
            self.releases.done(done, &mut self.offsets)?;
        }
        while let Some(done) = self.dead_letters.try_next() {
            self.dead_letters.done(done, &mut self.offsets)?;
        }
        Ok(())
    }

    /// Apply every prepared message, oldest first; returns whether a window
    /// was released.
    async fn apply_all(&mut self, staged: &mut VecDeque<BorrowedMessage<'_>>) -> Result<bool> {
        let mut released_any = false;
        while let Some(m) = staged.pop_front() {
            released_any |= self.apply_staged(m).await?;
        }
        Ok(released_any)
    }

    /// Time windows close on the clock, not on a reading: release those due.
    async fn close_due(&mut self) -> Result<()> {
        if !self.timed {
            return Ok(());
        }
        let (appended, board) = (&self.appended_until, &self.p.board);
        let outputs = self.output_partitions;
        self.processor.windower_mut().close_due(
            now_ms(),
            |p| {
                let a = appended.get(&p).copied().unwrap_or(i64::MIN);
                a.max(board.read_until(p))
            },
            // Releases go to output partition `p mod outputs` (Releases).
            |p| p.rem_euclid(outputs),
            MAX_CLOSE_PER_TICK,
            &mut self.closed,
        );
        self.release_closed().await?;
        Ok(())
    }

    /// Start the releases of closed windows, in order; returns whether
    /// there were any. Time windows of one due moment (one window end)
    /// go together: they are written together at the same moment.
    async fn release_closed(&mut self) -> Result<bool> {
        let released_any = !self.closed.is_empty();
        let closed = std::mem::take(&mut self.closed);
        let mut group: Vec<Closing> = Vec::new();
        for w in closed {
            let joins = group
                .last()
                .is_some_and(|(g, _)| g.timed && w.timed && g.last_event_ms == w.last_event_ms);
            if !joins && !group.is_empty() {
                let ws = std::mem::take(&mut group);
                self.releases.release(ws, &mut self.offsets).await?;
            }
            let bound = self.processor.bound_value(w.stream, w.partition);
            group.push((w, bound));
        }
        if !group.is_empty() {
            self.releases.release(group, &mut self.offsets).await?;
        }
        Ok(released_any)
    }

    /// Commit what the offset rule allows ([`Offsets::due`]).
    fn commit(&mut self, consumer: &InputConsumer, mode: CommitMode) {
        self.last_commit = Instant::now();
        for (p, next) in self.offsets.positions() {
            self.p.board.set_position(p, next);
        }
        if self.events.take_commit_failure() {
            self.offsets.commit_failed();
        }
        let windower = self.processor.windower();
        let due = self.offsets.due(|p, next| windower.committable(p, next));
        if due.is_empty() {
            return;
        }
        let topic = &self.p.v.config.kafka.input_topic;
        let mut tpl = TopicPartitionList::new();
        for (p, at) in due {
            let _ = tpl.add_partition_offset(topic, p, Offset::Offset(at));
        }
        let r = consumer.commit(&tpl, mode);
        crash_point(CrashPoint::AfterCommit);
        if let Err(e) = r {
            // Not fatal: a later commit covers it; a restart replays and
            // the ledger plus keyed noise make the replay harmless.
            tracing::warn!(error = %e, "offset commit failed");
            telemetry::commit_failed();
            self.offsets.commit_failed();
        }
    }
}

/// The idle tick of [`Consuming::wait`]: every second while input is idle.
fn idle_tick() -> tokio::time::Interval {
    let mut idle = tokio::time::interval(Duration::from_secs(1));
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    idle
}

/// What waiting for input ([`Consuming::wait`]) came back with.
enum Waited<'c> {
    Message(rdkafka::error::KafkaResult<BorrowedMessage<'c>>),
    /// Something else was done: look again.
    Again,
    Stop,
}

/// Whether a step gave up because the service is stopping (an error otherwise).
fn stopped(r: Result<()>) -> Result<bool> {
    match r {
        Ok(()) => Ok(false),
        Err(e) if e.downcast_ref::<Stopped>().is_some() => {
            tracing::warn!(
                "stopping while restoring partitions; they are restored by whoever gets them"
            );
            Ok(true)
        }
        Err(e) => Err(e),
    }
}
