//! Fleet-wide releases: a task that reads the output topic (every
//! instance's partition releases), combines each window seq's partitions
//! (`combiner`, the arithmetic in [`crate::dp::release::FleetStatistic`])
//! and publishes the result on the same topic as its own record kind
//! (key `<stream>/fleet/<seq>`, header `fleetdp-record: fleet`, output
//! partition 0). docs/DESIGN.md §6. Every instance combines; only the one
//! holding input partition 0 writes (`leader`).
//!
//! Privacy: post-processing of published releases (see the combiner for
//! why no input decides which partitions are combined under add-remove).
//! The record's timestamp is the latest combined release's, so a rebuilt
//! record is bit-identical.

mod combiner;
mod leader;
mod record;

pub(crate) use combiner::{Combiner, Offered};
use leader::Gate;

pub use crate::clients::kafka::decode_fleet;
use crate::clients::kafka::{self, Quiet, CONTENT_TYPE};
use crate::config::{OutputFormat, Validated};
use crate::serve::status::StatusBoard;
use crate::state::RECORD_KIND;
use crate::state::{decode_output, OutputRecord};
pub use crate::state::{is_fleet, FLEET};
use anyhow::{Context as _, Result};
use prost::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Message as _, OwnedHeaders};
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Content type of a protobuf `FleetRelease`.
pub const FLEET_PROTOBUF: &str = "application/vnd.fleetdp.fleet+protobuf";

/// Encode a fleet release; returns (payload, content type).
pub fn encode_fleet(f: &proto::FleetRelease, format: OutputFormat) -> (Vec<u8>, &'static str) {
    match format {
        OutputFormat::Protobuf => (f.encode_to_vec(), FLEET_PROTOBUF),
        OutputFormat::Json => (
            serde_json::to_vec(f).expect("fleet releases serialise"),
            "application/json",
        ),
    }
}

/// What the fleet task needs from the pipeline.
pub(crate) struct FleetTask {
    pub v: Arc<Validated>,
    pub producer: kafka::Producer,
    pub board: Arc<StatusBoard>,
    pub input_partitions: i32,
    pub output_partitions: i32,
    pub events: Option<mpsc::UnboundedSender<proto::FleetRelease>>,
    /// True while this instance holds input partition 0 (set by the
    /// consumer's rebalance callback): it writes the fleet records.
    pub leader: watch::Receiver<bool>,
    /// Whether a release declares it replaces this instance's key.
    pub key: KeyWatch,
}

/// The fleet reader sees every instance's releases, so it is where an
/// instance learns that another has rotated away from its key
/// (state/key_ids.rs): it halts the service with the reason and stops the
/// consuming loop.
pub(crate) struct KeyWatch {
    pub ids: crate::state::KeyIds,
    pub halt: Arc<std::sync::OnceLock<String>>,
    pub stop: watch::Sender<bool>,
}

impl KeyWatch {
    /// Note the release key headers of a window release.
    fn release<M: rdkafka::message::Message>(&self, msg: &M) {
        let Some(writer) = kafka::header(msg, crate::state::KEY_ID) else {
            return;
        };
        let from = kafka::header(msg, crate::state::KEY_FROM).unwrap_or("");
        if self.ids.superseded_by(writer, from)
            && self.halt.set(self.ids.superseded_message(writer)).is_ok()
        {
            tracing::error!(
                release_key_id = %self.ids.mine,
                new_release_key_id = writer,
                "this instance's release key was replaced; releasing nothing more and stopping"
            );
            let _ = self.stop.send(true);
        }
    }
}

/// Start the task on a thread of its own (a blocking consumer); it ends
/// soon after `stop` turns true.
pub(crate) fn spawn(
    t: FleetTask,
    stop: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>> {
    let handle = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("fleet".into())
        .spawn(move || {
            if let Err(e) = run(&t, stop, &handle) {
                tracing::error!("fleet-wide releases stopped: {e:#}");
            }
        })
        .context("starting the fleet thread")
}

fn run(t: &FleetTask, mut stop: watch::Receiver<bool>, rt: &tokio::runtime::Handle) -> Result<()> {
    let k = &t.v.config.kafka;
    let topic = &k.output_topic;
    let mut c = kafka::reader_config(
        &kafka::client_config(&k.brokers, &k.properties),
        "fleetdp-fleet",
    );
    // The output topic is quiet between releases: answer a fetch soon
    // after a release lands rather than after librdkafka's 500 ms.
    c.set("fetch.wait.max.ms", "100");
    let consumer: BaseConsumer<Quiet> = c
        .create_with_context(Quiet("fleet"))
        .context("creating the fleet consumer")?;
    // Reads back the releases of seqs evicted past `fleet.max_pending`.
    let refetcher: BaseConsumer<Quiet> = c
        .create_with_context(Quiet("fleet"))
        .context("creating the fleet consumer")?;
    let (start, ends) = start_positions(&consumer, topic, t)?;
    consumer.assign(&start)?;
    // Nothing is decided before the look-back is read (combiner doc).
    let mut combiner = Combiner::new(t.v.clone(), t.input_partitions).catching_up();
    let mut catching_up = Some(Instant::now());
    let mut gate = Gate::new(t.v.fleet.max_pending);
    // A new leader's reading to the topic's end: since when, up to where.
    let mut taking: Option<(Instant, Vec<(i64, i64)>)> = None;
    let mut foreign = 0u64;
    crate::telemetry::fleet_leader(false);
    while !*stop.borrow() {
        let mut out = vec![];
        if let Some(since) = catching_up {
            if read_to(&consumer, topic, &ends) || since.elapsed() > CATCH_UP_MAX {
                out.extend(combiner.caught_up());
                catching_up = None;
            }
        }
        let mut write = follow_leadership(t, &consumer, &ends, &mut gate, &mut taking);
        if let Some(msg) = consumer.poll(Duration::from_millis(200)) {
            let msg = msg.with_context(|| format!("reading {topic}"))?;
            // A record of a later state format is not read (it may mean
            // something this build does not know): counted as foreign.
            let newer = crate::state::check_format(&msg, String::new).is_err();
            match decode_output(&msg).filter(|_| !newer) {
                // Whoever wrote it, a record of this plan's fleet streams:
                // the gate notes it, this instance's page shows it.
                Some(Ok(OutputRecord::Fleet(f))) if combiner.seen(&f) => {
                    gate.seen(&f);
                    t.board.record_fleet(&f);
                }
                Some(Ok(OutputRecord::Fleet(_))) => {}
                Some(Ok(OutputRecord::Window(r))) => {
                    t.key.release(&msg);
                    let at = Some((msg.partition(), msg.offset()));
                    let (how, done) = combiner.offer_at(r, at, Instant::now());
                    if how == Offered::Foreign {
                        foreign += 1;
                        if foreign.is_power_of_two() {
                            tracing::warn!(
                                foreign,
                                "releases of another plan or stream on {topic}: not combined"
                            );
                        }
                    }
                    out = done;
                }
                Some(Err(_)) => foreign += 1,
                None => foreign += u64::from(newer),
            }
        }
        for r in combiner.take_refetches() {
            let releases = read_back(&refetcher, topic, &r.at);
            out.extend(combiner.refetched(&r, releases));
        }
        out.extend(combiner.due(Instant::now()));
        crate::telemetry::fleet_pending(combiner.waiting());
        write.extend(out.into_iter().filter_map(|f| gate.offer(f)));
        for f in write {
            match rt.block_on(publish(t, &f, &mut stop)) {
                Ok(()) => observe(t, f),
                Err(e) if e.downcast_ref::<kafka::Stopped>().is_some() => return Ok(()),
                // Derived data: a record that cannot be written is logged
                // and counted; the window releases it combines stay.
                Err(e) => {
                    tracing::error!(stream = %f.stream, window_seq = f.window_seq, "fleet release not written: {e:#}")
                }
            }
        }
    }
    Ok(())
}

/// Follow the assignment's word on who writes (see `leader`): a new leader
/// reads the topic to the end as it stands now (`taking`), then writes the
/// held records the topic lacks (returned).
fn follow_leadership(
    t: &FleetTask,
    consumer: &BaseConsumer<Quiet>,
    starts: &[(i64, i64)],
    gate: &mut Gate,
    taking: &mut Option<(Instant, Vec<(i64, i64)>)>,
) -> Vec<proto::FleetRelease> {
    let holds_zero = *t.leader.borrow();
    let topic = &t.v.config.kafka.output_topic;
    if holds_zero && !gate.leading() && !gate.taking() {
        gate.take_over();
        let ends = match high_watermarks(consumer, topic, t.output_partitions) {
            Ok(high) => starts.iter().zip(high).map(|(s, h)| (s.0, h)).collect(),
            Err(e) => {
                tracing::warn!("fleet: {e:#}; writing after {CATCH_UP_MAX:?}");
                vec![(0, i64::MAX); starts.len()]
            }
        };
        *taking = Some((Instant::now(), ends));
    } else if !holds_zero && (gate.leading() || gate.taking()) {
        gate.step_down();
        *taking = None;
        crate::telemetry::fleet_leader(false);
        tracing::info!("fleet: input partition 0 left this instance; another writes fleet records");
    }
    let Some((since, ends)) = taking else {
        return vec![];
    };
    if !read_to(consumer, topic, ends) && since.elapsed() <= CATCH_UP_MAX {
        return vec![];
    }
    *taking = None;
    let held = gate.lead();
    crate::telemetry::fleet_leader(true);
    // How many records were held depends on how long reading the topic
    // took, not on the input: not in the info line, which the side-channel
    // test compares across neighbouring inputs.
    tracing::info!("fleet: this instance holds input partition 0 and writes fleet records");
    tracing::debug!(
        held = held.len(),
        "fleet: records held while reading the topic"
    );
    held
}

/// How long reading one release back may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The window releases at `at` (output partition, offset) of `topic`; one
/// that cannot be read in [`READ_BACK_TIMEOUT`] is left out (its seq keeps
/// the record it has).
fn read_back(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
    at: &[(i32, i64)],
) -> Vec<proto::WindowRelease> {
    let mut out = Vec::new();
    for &(p, offset) in at {
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(topic, p, Offset::Offset(offset))
            .is_err()
            || consumer.assign(&tpl).is_err()
        {
            continue;
        }
        let until = Instant::now() + READ_BACK_TIMEOUT;
        while Instant::now() < until {
            let Some(Ok(msg)) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            if msg.partition() != p || msg.offset() < offset {
                continue;
            }
            if msg.offset() == offset {
                if let Some(Ok(OutputRecord::Window(r))) = decode_output(&msg) {
                    out.push(r);
                }
            }
            break;
        }
    }
    out
}

/// Longest a restarted combiner reads its look-back before deciding (a
/// partition that cannot be read must not hold fleet records back forever).
const CATCH_UP_MAX: Duration = Duration::from_secs(60);

/// Whether the consumer has read every output partition up to `ends`.
fn read_to(consumer: &BaseConsumer<Quiet>, topic: &str, ends: &[(i64, i64)]) -> bool {
    let Ok(at) = consumer.position() else {
        return false;
    };
    ends.iter().enumerate().all(|(p, &(start, end))| {
        let pos = match at.find_partition(topic, p as i32).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => start,
        };
        pos >= end
    })
}

/// Every output partition from `fleet.lookback` ago; where the broker has
/// nothing that recent (or cannot tell), from its high watermark as read
/// now — not "the end" at some later moment, which would skip releases
/// written in between. Also each partition's (start, high watermark): the
/// look-back to read before deciding.
fn start_positions(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
    t: &FleetTask,
) -> Result<(TopicPartitionList, Vec<(i64, i64)>)> {
    let since = crate::clock::now_ms() - t.v.fleet.lookback.as_millis() as i64;
    let timeout = Duration::from_secs(10);
    let mut ask = TopicPartitionList::new();
    for p in 0..t.output_partitions {
        ask.add_partition_offset(topic, p, Offset::Offset(since))?;
    }
    // The watermarks first: whatever lands after them is read either way.
    let high = high_watermarks(consumer, topic, t.output_partitions)?;
    let found = consumer.offsets_for_times(ask, timeout);
    if let Err(e) = &found {
        tracing::warn!("fleet: cannot look back on {topic} ({e}); starting at its high watermarks");
    }
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..t.output_partitions {
        let at = match found.as_ref().ok().and_then(|f| f.find_partition(topic, p)) {
            Some(e) => match e.offset() {
                Offset::Offset(o) if o >= 0 => o.min(high[p as usize]),
                _ => high[p as usize],
            },
            None => high[p as usize],
        };
        tpl.add_partition_offset(topic, p, Offset::Offset(at))?;
        ends.push((at, high[p as usize]));
    }
    Ok((tpl, ends))
}

/// Each output partition's high watermark, as the broker states it now.
fn high_watermarks(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
    partitions: i32,
) -> Result<Vec<i64>> {
    let timeout = Duration::from_secs(10);
    (0..partitions)
        .map(|p| {
            let (_, h) = consumer
                .fetch_watermarks(topic, p, timeout)
                .with_context(|| format!("watermarks of {topic}/{p}"))?;
            Ok(h)
        })
        .collect()
}

async fn publish(
    t: &FleetTask,
    f: &proto::FleetRelease,
    stop: &mut watch::Receiver<bool>,
) -> Result<()> {
    let k = &t.v.config.kafka;
    let (payload, ct) = encode_fleet(f, k.output_format);
    let key = proto::fleet_record_key(&f.stream, f.window_seq);
    // The OpenTelemetry copy first: a crash before the native record
    // writes both again (otlp_out.rs).
    if let Some(o) = crate::runtime::otlp_out::fleet_record(&t.v, f) {
        let at = Some(f.released_at_ms);
        crate::runtime::otlp_out::write(&t.producer, &t.v, &key, &o, at, stop).await?;
    }
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: CONTENT_TYPE,
            value: Some(ct),
        })
        .insert(Header {
            key: RECORD_KIND,
            value: Some(FLEET),
        });
    kafka::produce_acked(
        &t.producer,
        kafka::Record {
            topic: &k.output_topic,
            key: key.as_bytes(),
            payload: Some(&payload),
            partition: Some(0),
            headers,
            timestamp_ms: Some(f.released_at_ms),
        },
        stop,
    )
    .await?;
    Ok(())
}

fn observe(t: &FleetTask, f: proto::FleetRelease) {
    t.board.record_fleet(&f);
    crate::telemetry::fleet_released(&f.stream, f.complete);
    tracing::info!(
        stream = %f.stream,
        window_seq = f.window_seq,
        partitions = f.partitions.len(),
        complete = f.complete,
        "fleet release"
    );
    if let Some(tx) = &t.events {
        let _ = tx.send(f);
    }
}
