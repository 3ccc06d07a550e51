//! Kafka plumbing shared by the service, the simulator, the demo and the
//! tests: client configuration, topic creation, and restoring where each
//! (stream, partition) resumes from the state topic's ledger entries and
//! the output topic.

use crate::window::Resume;
use anyhow::{anyhow, Context, Result};
use prost::Message as _;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Header naming a payload's encoding.
pub const CONTENT_TYPE: &str = "content-type";

/// A base client configuration: brokers plus extra properties.
pub fn client_config(brokers: &str, properties: &BTreeMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    for (k, v) in properties {
        c.set(k, v);
    }
    c
}

/// Value of a header, if present and UTF-8.
pub fn header<'a, M: Message>(msg: &'a M, name: &str) -> Option<&'a str> {
    let h = msg.headers()?;
    (0..h.count())
        .filter_map(|i| h.try_get(i))
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value?).ok())
}

/// Create topics that do not exist yet (demo and tests; production topics are
/// the operator's); those named in `compacted` keep the latest record per key.
pub async fn ensure_topics(
    config: &ClientConfig,
    topics: &[(&str, i32)],
    compacted: &[&str],
) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        config.create().context("creating admin client")?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|(name, parts)| {
            let t = NewTopic::new(name, *parts, TopicReplication::Fixed(1));
            if compacted.contains(name) {
                t.set("cleanup.policy", "compact")
            } else {
                t
            }
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for r in admin
        .create_topics(&new, &opts)
        .await
        .context("creating topics")?
    {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(anyhow!("creating topic {t}: {e}")),
        }
    }
    Ok(())
}

/// Partition count of a topic, or an error naming it when it does not exist.
pub fn partition_count(consumer: &BaseConsumer, topic: &str, timeout: Duration) -> Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .with_context(|| format!("fetching metadata of topic {topic}"))?;
        let n = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map(|t| t.partitions().len())
            .unwrap_or(0);
        if n > 0 {
            return Ok(n);
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "topic {topic} does not exist (or has no partitions)"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A release as recorded in the ledger.
pub fn decode_release(payload: &[u8], content_type: Option<&str>) -> Result<proto::WindowRelease> {
    if content_type.is_some_and(|c| c.starts_with("application/json")) {
        Ok(serde_json::from_slice::<proto::WindowRelease>(payload)?)
    } else {
        Ok(proto::WindowRelease::decode(payload)?)
    }
}

/// Header telling the state topic's record kinds apart.
pub const RECORD_KIND: &str = "fleetdp-record";
/// [`RECORD_KIND`] of a window's charges (or their tombstone).
pub const CHARGES: &str = "charges";
/// [`RECORD_KIND`] of a ledger entry.
pub const LEDGER: &str = "ledger";

/// Read a topic up to its current high watermarks, each partition from
/// `start(partition, low watermark)` (`None`: skip it), calling `f` on every
/// message. Blocking; call from a blocking context.
pub fn read_topic(
    config: &ClientConfig,
    topic: &str,
    start: impl Fn(i32, i64) -> Option<i64>,
    mut f: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> Result<()>,
) -> Result<()> {
    let mut c = config.clone();
    c.set("group.id", "fleetdp-topic-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        // As for the pipeline's consumer: no 1 s pauses when the local queue fills.
        .set("fetch.queue.backoff.ms", "20");
    let consumer: BaseConsumer = c.create().context("creating topic reader")?;
    let parts = partition_count(&consumer, topic, Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    let mut remaining = HashMap::new();
    for p in 0..parts as i32 {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .with_context(|| format!("watermarks of {topic}/{p}"))?;
        if let Some(from) = start(p, low).map(|o| o.max(low)) {
            if high > from {
                tpl.add_partition_offset(topic, p, Offset::Offset(from))?;
                remaining.insert(p, high);
            }
        }
    }
    if remaining.is_empty() {
        return Ok(());
    }
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !remaining.is_empty() {
        if Instant::now() > deadline {
            return Err(anyhow!("timed out reading {topic}"));
        }
        let Some(msg) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let msg = msg.with_context(|| format!("reading {topic}"))?;
        f(&msg)?;
        if remaining
            .get(&msg.partition())
            .is_some_and(|&h| msg.offset() + 1 >= h)
        {
            remaining.remove(&msg.partition());
        }
    }
    Ok(())
}

/// Charges recorded in the state topic for the given input partitions:
/// per (stream, partition), `(seq, [(device key, horizon)])` by seq.
pub type Charges = HashMap<(String, i32), BTreeMap<u64, Vec<(u64, i64)>>>;

/// What a newly assigned partition restores.
#[derive(Debug, Default)]
pub struct Restored {
    /// Per (stream, input partition): where it resumes.
    pub resume: HashMap<(String, i32), Resume>,
    /// The live charges of the assigned partitions.
    pub charges: Charges,
    /// Running-total state recorded with each live window (empty: none).
    pub running: HashMap<(String, i32, u64), Vec<u8>>,
}

/// Restore the state of input `partitions`: the ledger entries and live
/// window charges from the (compacted) state topic, then the output topic
/// from the oldest recorded release onwards (all of it for an output
/// partition with no entry), for releases acknowledged after their entry
/// was written. Each (stream, partition) resumes after the end of its
/// contiguous run of released seqs; a gap is re-released from replay and
/// what follows repeats bit for bit (keyed noise).
pub fn restore(
    config: &ClientConfig,
    output_topic: &str,
    state_topic: &str,
    partitions: &[i32],
) -> Result<Restored> {
    let mut entries: HashMap<(String, i32), proto::v1::LedgerEntry> = HashMap::new();
    let mut charges: Charges = HashMap::new();
    let mut running = HashMap::new();
    read_topic(
        config,
        state_topic,
        |_, low| Some(low),
        |msg| {
            let at = || {
                format!(
                    "state at {state_topic}/{}@{}",
                    msg.partition(),
                    msg.offset()
                )
            };
            if header(msg, RECORD_KIND) == Some(LEDGER) {
                let Some(payload) = msg.payload() else {
                    return Ok(());
                };
                let e = proto::v1::LedgerEntry::decode(payload)
                    .with_context(|| format!("{} is not a ledger entry", at()))?;
                let lane = (e.stream.clone(), e.partition);
                if entries
                    .get(&lane)
                    .is_none_or(|old| old.last_seq <= e.last_seq)
                {
                    entries.insert(lane, e);
                }
                return Ok(());
            }
            let Some(key) = msg.key().and_then(|k| std::str::from_utf8(k).ok()) else {
                return Ok(());
            };
            let Some((stream, partition, seq)) = proto::parse_release_key(key) else {
                return Err(anyhow!("{}: key {key:?} is not stream/partition/seq", at()));
            };
            if !partitions.contains(&partition) {
                return Ok(());
            }
            let lane = charges.entry((stream.clone(), partition)).or_default();
            match msg.payload() {
                // A tombstone: the window's charges are retired.
                None => {
                    lane.remove(&seq);
                    running.remove(&(stream, partition, seq));
                }
                Some(payload) => {
                    let c = proto::v1::WindowCharges::decode(payload)
                        .with_context(|| format!("{} is not decodable", at()))?;
                    if c.device_key_scheme != crate::window::DEVICE_KEY_SCHEME {
                        return Err(anyhow!(
                            "{}: charges keyed by device-key scheme {:?}, this build uses {:?}; \
                             they cannot be matched to devices (see the README's playbook: state topic lost)",
                            at(),
                            c.device_key_scheme,
                            crate::window::DEVICE_KEY_SCHEME
                        ));
                    }
                    if c.device_keys.len() != c.horizons.len() {
                        return Err(anyhow!(
                            "{}: device keys and horizons differ in length",
                            at()
                        ));
                    }
                    lane.insert(seq, c.device_keys.into_iter().zip(c.horizons).collect());
                    running.insert((stream, partition, seq), c.running_state);
                }
            }
            Ok(())
        },
    )?;

    // Releases after the recorded ones.
    let mut from: HashMap<i32, i64> = HashMap::new();
    for e in entries.values() {
        let o = from.entry(e.output_partition).or_insert(i64::MAX);
        *o = (*o).min(e.output_offset + 1);
    }
    let mut seen: HashMap<(String, i32), BTreeMap<u64, (i64, i64)>> = HashMap::new();
    read_topic(
        config,
        output_topic,
        |p, low| Some(from.get(&p).copied().unwrap_or(low)),
        |msg| {
            if let Some(payload) = msg.payload() {
                let r = decode_release(payload, header(msg, CONTENT_TYPE)).with_context(|| {
                    format!(
                        "release at {output_topic}/{}@{} is not decodable",
                        msg.partition(),
                        msg.offset()
                    )
                })?;
                seen.entry((r.stream.clone(), r.partition))
                    .or_default()
                    .insert(r.window_seq, (r.last_offset, r.last_event_time_ms));
            }
            Ok(())
        },
    )?;

    let mut resume: HashMap<(String, i32), Resume> = entries
        .iter()
        .map(|(lane, e)| {
            (
                lane.clone(),
                Resume {
                    last_seq: e.last_seq,
                    last_offset: e.last_offset,
                    reference_event_ms: e.reference_event_time_ms,
                },
            )
        })
        .collect();
    for (lane, seqs) in seen {
        let mut cur = resume.get(&lane).copied();
        for (seq, (last_offset, last_event)) in seqs {
            cur = match cur {
                // Already covered by the ledger entry.
                Some(c) if seq <= c.last_seq => Some(c),
                Some(c) if seq == c.last_seq + 1 => Some(Resume {
                    last_seq: seq,
                    last_offset,
                    reference_event_ms: c.reference_event_ms.max(last_event),
                }),
                // A gap: resume before it.
                Some(_) => break,
                None => Some(Resume {
                    last_seq: seq,
                    last_offset,
                    reference_event_ms: last_event,
                }),
            };
        }
        if let Some(c) = cur {
            resume.insert(lane, c);
        }
    }
    resume.retain(|(_, p), _| partitions.contains(p));
    Ok(Restored {
        resume,
        charges,
        running,
    })
}

/// Produce a simulated fleet's messages to `topic` at `rate` messages per
/// second (0: as fast as possible) until `limit` messages, `duration` or
/// shutdown; reports progress through `on_progress(sent)`. Returns how many
/// were sent (all delivered: the producer is flushed).
#[allow(clippy::too_many_arguments)] // each knob is a plain CLI option
pub async fn produce_fleet(
    config: &ClientConfig,
    topic: &str,
    fleet: &mut crate::sim::Fleet,
    rate: f64,
    limit: Option<u64>,
    duration: Option<Duration>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut on_progress: impl FnMut(u64),
) -> Result<u64> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let mut pc = config.clone();
    // Devices are placed as Kafka's Java clients place them (the service's
    // default `kafka.input_partitioner = "murmur2"`).
    pc.set("linger.ms", "5")
        .set("partitioner", "murmur2_random")
        .set("queue.buffering.max.messages", "1000000");
    let producer: ThreadedProducer<DefaultProducerContext> =
        pc.create().context("creating producer")?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut last_report = Instant::now();
    let tick = Duration::from_millis(10);
    loop {
        if *shutdown.borrow()
            || limit.is_some_and(|l| sent >= l)
            || duration.is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
        // Messages due by now at the requested rate.
        let due = if rate > 0.0 {
            ((started.elapsed().as_secs_f64() + tick.as_secs_f64()) * rate) as u64
        } else {
            sent + 10_000
        };
        let due = limit.map_or(due, |l| due.min(l));
        while sent < due {
            let m = fleet.next_message();
            let headers = OwnedHeaders::new().insert(Header {
                key: CONTENT_TYPE,
                value: Some(m.content_type),
            });
            let mut record = BaseRecord::to(topic)
                .key(&m.key)
                .payload(&m.payload)
                .headers(headers);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((
                        rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                        r,
                    )) => {
                        record = r;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Err((e, _)) => return Err(anyhow!("producing to {topic}: {e}")),
                }
            }
            sent += 1;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            on_progress(sent);
            last_report = Instant::now();
        }
        if rate > 0.0 {
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.changed() => {}
            }
        } else {
            tokio::task::yield_now().await;
        }
    }
    let p = producer;
    tokio::task::spawn_blocking(move || p.flush(Duration::from_secs(60)))
        .await?
        .context("flushing the simulator's producer")?;
    on_progress(sent);
    Ok(sent)
}
