//! The streaming pipeline: consume readings, decode, validate, top-code,
//! bound contributions, window, release through the privacy core, publish,
//! then commit input offsets no further than the oldest open window.
//!
//! Bad input never stops it: each rejected message goes to the dead-letter
//! topic with its original bytes and a reason header before its offset can
//! be committed. Logs carry counts, offsets and latencies, never values.
//!
//! Files by role: this one sets up the clients; `consume` is the consuming
//! loop (`consume/step.rs`: one message's steps); `offsets` the commit
//! rule; `rebalance` the ordered rebalance events and `assign` acting on
//! them (restoring lanes); `release` the release owner (stepping a window's
//! lane, building, encoding and publishing its release through
//! [`crate::state`]'s write protocol); `dead_letter` the dead-letter owner;
//! `poisoned` the way past an undecodable record batch; `topic_check` the
//! topics' creation and settings at start. Only `consume` and `assign` see
//! the loop's state; the owners are handed what they need.

mod alarm;
mod assign;
mod consume;
mod dead_letter;
mod offsets;
mod poisoned;
mod rebalance;
mod release;
mod topic_check;

pub use crate::clock::now_ms;

pub use dead_letter::TRUNCATED_PAYLOAD as TRUNCATED_DEAD_LETTER_BYTES;
pub use release::{build_release, encode_release};
pub use topic_check::{create_topics, MAX_CREATE_PARTITIONS, MAX_REPLICATION};

use crate::clients::kafka;
use crate::config::Validated;
use crate::dp::release::ReleasedStatistic;
use crate::dp::rng::ReleaseKey;
use crate::engine::process::Processor;
use crate::engine::registry::Registry;
use crate::serve::status::StatusBoard;
use crate::telemetry::{budget_gauges, BudgetFigures, Counters};
use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::ClientConfig;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// A release as it was published, for in-process observers (the demo, tests).
#[derive(Debug, Clone)]
pub struct ReleaseEvent {
    pub release: proto::WindowRelease,
    /// The noise-free statistics. Only when [`Options::with_truth`] is set
    /// (the demo owns its data); never published anywhere.
    pub truth: Option<Vec<ReleasedStatistic>>,
    /// The window's values (grid units), with the truth only: the demo
    /// computes the fleet-wide truth from them.
    pub values: Option<Vec<i64>>,
}

/// How to run.
#[derive(Debug, Default)]
pub struct Options {
    pub events: Option<mpsc::UnboundedSender<ReleaseEvent>>,
    /// Fleet-wide releases as they are written (`fleet.enabled`).
    pub fleet_events: Option<mpsc::UnboundedSender<proto::FleetRelease>>,
    pub with_truth: bool,
    /// Accept state written under another plan (`--allow-plan-change`): the
    /// operator declares the change happens at a horizon boundary, so the
    /// old plan's charges are dropped (docs/DESIGN.md §6).
    pub allow_plan_change: bool,
    /// Skip reading the topics' settings at start (`topic_check.rs`): the
    /// demo's in-process mock cluster answers no DescribeConfigs.
    pub skip_topic_check: bool,
}

/// The service, ready to run.
pub struct Pipeline {
    v: Arc<Validated>,
    key: ReleaseKey,
    /// The key's id and the one it replaces, as the state records them.
    key_ids: crate::state::KeyIds,
    /// Set, with the reason, once a task beside the loop finds what this
    /// instance must not go on with: its release key replaced
    /// (state/key_ids.rs), a state topic that deletes charges
    /// (`topic_check.rs`). Nothing more is released and the service stops
    /// with the reason as a configuration error (exit 78).
    halt: Arc<std::sync::OnceLock<String>>,
    pub counters: Arc<Counters>,
    /// Latest releases, lag and readiness, for the HTTP listener.
    pub board: Arc<StatusBoard>,
}

/// Default `message.timeout.ms` of the service's producer.
pub const MESSAGE_TIMEOUT_MS: &str = "30000";

/// The consumer's `max.poll.interval.ms` (30 min; `kafka.consumer_properties`
/// may set it).
pub const MAX_POLL_INTERVAL_MS: &str = "1800000";

impl Pipeline {
    pub fn new(v: Validated, key: ReleaseKey) -> Self {
        let hide = v.plan.privacy.relation == crate::dp::relation::Relation::AddRemove
            || v.config.http.hide_exact_counts;
        let board = Arc::new(
            StatusBoard::new(v.config.http.ready_max_lag, v.stall_timeout)
                .hiding_exact_counts(hide),
        );
        let key_ids = crate::state::KeyIds {
            mine: key.id(),
            // Checked by validate(): a malformed id never gets this far.
            rotated_from: v.config.rotate_from().ok().flatten(),
        };
        Self {
            v: Arc::new(v),
            key,
            key_ids,
            halt: Arc::default(),
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
        let md: Arc<BaseConsumer<kafka::Quiet>> = Arc::new(
            c.create_with_context(kafka::Quiet("lag_probe"))
                .context("creating the lag probe")?,
        );
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
                            board.set_lag(p, (high - pos.unwrap_or(low)).max(0), high, asked);
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

    /// Check every topic now, not when first used (a missing dead-letter
    /// or state topic would otherwise surface mid-stream); returns the
    /// input and output topics' partition counts.
    async fn check_topics(&self, base: &ClientConfig) -> Result<(i32, i32)> {
        let kc = &self.v.config.kafka;
        let mut c = base.clone();
        c.set("group.id", "fleetdp-metadata");
        let md: BaseConsumer<kafka::Quiet> = c.create_with_context(kafka::Quiet("metadata"))?;
        let topics = [
            ("kafka.input_topic", kc.input_topic.clone()),
            ("kafka.output_topic", kc.output_topic.clone()),
            ("kafka.dead_letter_topic", kc.dead_letter_topic.clone()),
            ("kafka.state_topic", kc.state_topic()),
        ];
        let brokers = kc.brokers.clone();
        tokio::task::spawn_blocking(move || -> Result<(i32, i32)> {
            let t = Duration::from_secs(10);
            let mut counts = Vec::new();
            for (field, topic) in &topics {
                counts.push(
                    kafka::partition_count(&md, topic, t)
                        .map_err(|e| kafka::explain_startup(field, topic, &brokers, e))?
                        as i32,
                );
            }
            Ok((counts[0], counts[1]))
        })
        .await?
    }

    /// The producer of releases, dead letters and state records.
    fn release_producer(&self, base: &ClientConfig) -> Result<kafka::Producer> {
        let mut pc = base.clone();
        // Releases are rare and latency matters: no linger. acks=all and one
        // request in flight keep releases in order per partition. Idempotence
        // is not needed for correctness (a retried release is bit-identical
        // and the ledger skips it), so it is left to the operator's
        // `kafka.properties`.
        pc.set("request.required.acks", "all")
            .set("queue.buffering.max.ms", "0")
            .set("max.in.flight.requests.per.connection", "1");
        // A produce that cannot be delivered fails within this bound (the
        // librdkafka default, 300 s per attempt, kept a broker outage from
        // surfacing for tens of minutes); `kafka.properties` may set it.
        if !self
            .v
            .config
            .kafka
            .properties
            .contains_key("message.timeout.ms")
        {
            pc.set("message.timeout.ms", MESSAGE_TIMEOUT_MS);
        }
        pc.create_with_context(kafka::Quiet("producer"))
            .context("creating producer")
    }

    /// The input topic's consumer, subscribed, and the rebalance events it
    /// reports (`leader` follows whether it holds input partition 0).
    fn input_consumer(
        &self,
        base: &ClientConfig,
        leader: watch::Sender<bool>,
    ) -> Result<(StreamConsumer<rebalance::Context>, rebalance::Events)> {
        let kc = &self.v.config.kafka;
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
            .set("fetch.queue.backoff.ms", "20")
            // Restoring a newly assigned partition's state runs between two
            // polls; librdkafka's default (5 min) would make a long restore
            // leave the group and start over. A wedged loop is caught by
            // the liveness probe (`http.stall_timeout`) instead.
            .set("max.poll.interval.ms", MAX_POLL_INTERVAL_MS);
        for (k, val) in &kc.consumer_properties {
            cc.set(k, val);
        }
        let (context, events) = rebalance::channel(leader);
        let consumer: StreamConsumer<rebalance::Context> = cc
            .create_with_context(context)
            .context("creating consumer")?;
        consumer
            .subscribe(&[&kc.input_topic])
            .with_context(|| format!("subscribing to {}", kc.input_topic))?;
        Ok((consumer, events))
    }

    /// Run until `shutdown` turns true; then finish the message in hand,
    /// commit and return.
    pub async fn run(&self, shutdown: watch::Receiver<bool>, mut opts: Options) -> Result<()> {
        let v = &self.v;
        let kc = &v.config.kafka;
        let base = self.client_config();
        crate::telemetry::register_kafka_errors(&kafka::ERROR_KINDS);

        // Where each (stream, partition) resumes is read from the release
        // ledger whenever partitions are assigned (see `consume`).
        let mut processor =
            Processor::new(v, self.counters.clone()).with_release_key(self.key.clone());
        publish_budgets(v);
        self.spawn_lag_probe(shutdown.clone())?;

        // Every topic is checked now, not when first used: a missing
        // dead-letter or state topic would otherwise surface mid-stream.
        let (input_partitions, output_partitions) = self.check_topics(&base).await?;
        processor.set_input_partitions(input_partitions);
        self.check_output_timestamps(&base).await;

        let producer = self.release_producer(&base)?;

        // The fleet thread stops with the service, or when the consuming
        // loop ends on an error. The loop stops with the service, or when
        // the fleet thread sees this instance's key replaced.
        let (fleet_stop, fleet_stopped) = watch::channel(false);
        let (loop_stop, loop_stopped) = watch::channel(false);
        let forward = forward_stop(shutdown.clone(), [fleet_stop.clone(), loop_stop.clone()]);
        let registry = match &v.config.registry {
            Some(r) => {
                let (handle, table) = self
                    .load_registry(&base, r, fleet_stopped.clone(), shutdown.clone())
                    .await?;
                processor = processor.with_registry(table);
                Some(handle)
            }
            None => None,
        };
        // Whether the group's consumer holds input partition 0 (the fleet
        // writer's role): the rebalance callback sets it.
        let (leader, holds_zero) = watch::channel(false);
        let fleet = match v.fleet.enabled {
            true => Some(crate::runtime::fleet::spawn(
                crate::runtime::fleet::FleetTask {
                    v: v.clone(),
                    producer: producer.clone(),
                    board: self.board.clone(),
                    input_partitions,
                    output_partitions,
                    events: opts.fleet_events.take(),
                    leader: holds_zero,
                    key: crate::runtime::fleet::KeyWatch {
                        ids: self.key_ids.clone(),
                        halt: self.halt.clone(),
                        stop: loop_stop.clone(),
                    },
                },
                fleet_stopped,
            )?),
            false => None,
        };

        if !opts.skip_topic_check {
            topic_check::spawn(v.clone(), base.clone(), self.halt.clone(), loop_stop);
        }
        let (consumer, events) = self.input_consumer(&base, leader)?;
        tracing::info!(topic = %kc.input_topic, group = %kc.group_id, "consuming");
        let result = consume::Consuming::new(
            self,
            opts,
            producer,
            (input_partitions, output_partitions),
            processor,
            events,
            loop_stopped.clone(),
        )
        .run(&consumer, loop_stopped)
        .await;
        close(consumer).await;
        let _ = fleet_stop.send(true);
        forward.abort();
        for t in fleet.into_iter().chain(registry) {
            // They poll every 200 ms.
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        self.halted_or(result)
    }

    /// The loop's `result`, unless a task beside it halted the service
    /// ([`Pipeline::halt`]): no restart cures that (exit 78).
    fn halted_or(&self, result: Result<()>) -> Result<()> {
        match self.halt.get() {
            Some(why) => Err(crate::config::configuration(anyhow::Error::msg(
                why.clone(),
            ))),
            None => result,
        }
    }

    /// Under add-remove, an output topic that stamps records with the
    /// broker's clock (`message.timestamp.type = LogAppendTime`) publishes
    /// when each release arrived, which varies with how long it took to
    /// make (and so, a little, with its contents); FleetDP's own record
    /// timestamps are the windows' due moments. Warn, naming the fix
    /// (docs/DESIGN.md §8). A cluster that does not answer is not an error.
    async fn check_output_timestamps(&self, base: &rdkafka::ClientConfig) {
        if self.v.plan.privacy.relation != crate::dp::relation::Relation::AddRemove {
            return;
        }
        let topic = &self.v.config.kafka.output_topic;
        match kafka::topic_config(base, topic, "message.timestamp.type").await {
            Ok(Some(t)) if t == "LogAppendTime" => tracing::warn!(
                topic = %topic,
                "kafka.output_topic stamps records with the broker's clock \
                 (message.timestamp.type=LogAppendTime): its timestamps show when each release \
                 arrived, which can depend on a window's contents under add-remove; set the topic's \
                 message.timestamp.type to CreateTime (FleetDP stamps each release with its \
                 window's due moment)"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "could not read the output topic's timestamp type")
            }
        }
    }

    /// Start following the device registry and wait until it is read up
    /// to where it stood at start (no reading is grouped before).
    async fn load_registry(
        &self,
        base: &rdkafka::ClientConfig,
        r: &crate::config::dimensions::RegistryConfig,
        stop: watch::Receiver<bool>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(std::thread::JoinHandle<()>, Arc<Registry>)> {
        let table = Arc::new(Registry::new(self.v.grouped_dimensions(), r.max_devices));
        let (handle, loaded) = crate::runtime::follow::spawn(base, &r.topic, table.clone(), stop)?;
        tracing::info!(topic = %r.topic, "reading the device registry");
        tokio::select! {
            done = loaded => done
                .map_err(|_| anyhow::anyhow!("the registry thread ended while loading"))?
                .with_context(|| format!("registry.topic ({})", r.topic))?,
            _ = shutdown.wait_for(|s| *s) => anyhow::bail!("stopped while loading the device registry"),
        }
        Ok((handle, table))
    }
}

/// How long leaving the consumer group may take at the end of a run.
pub const CONSUMER_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Leave the group (librdkafka's close, in the consumer's drop), waiting at
/// most [`CONSUMER_CLOSE_TIMEOUT`]: close waits for the coordinator, which
/// may never answer after a broker outage (seen on tansu), and a stop must
/// not hang on it. Past the bound the close goes on in a detached thread
/// and the broker expires the session.
async fn close(consumer: StreamConsumer<rebalance::Context>) {
    let (done, closed) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("consumer-close".into())
        .spawn(move || {
            drop(consumer);
            let _ = done.send(());
        });
    if spawned.is_err() {
        tracing::warn!(
            "could not start a thread to leave the consumer group; the broker expires the session"
        );
        return;
    }
    if tokio::time::timeout(CONSUMER_CLOSE_TIMEOUT, closed)
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = CONSUMER_CLOSE_TIMEOUT.as_secs(),
            "leaving the consumer group did not finish; the broker expires the session"
        );
    }
}

/// Each stream's budget per horizon, declared and spent, as gauges.
fn publish_budgets(v: &Validated) {
    let budget = v.plan.privacy.budget.per_horizon;
    budget_gauges(v.plan.streams.iter().map(|s| BudgetFigures {
        stream: s.spec.name.clone(),
        unit: v.unit_of(s.declared_name()),
        window_size: s.spec.window_size,
        declared: budget * s.spec.budget_share,
        spent: crate::dp::rational::to_f64(&s.per_horizon()),
    }));
}

/// Turn every one of `to` true once `shutdown` does (or its sender is gone).
fn forward_stop<const N: usize>(
    mut shutdown: watch::Receiver<bool>,
    to: [watch::Sender<bool>; N],
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        for t in to {
            let _ = t.send(true);
        }
    })
}
