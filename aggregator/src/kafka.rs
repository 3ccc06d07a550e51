//! Kafka plumbing shared by the service, the simulator, the demo and the
//! tests: client configuration, topic creation and metadata, reading a
//! topic to its end, and producing with retries. What the state topic's
//! records mean is the [`crate::state`] module's.

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

/// A record for [`produce_acked`].
pub(crate) struct Record<'a> {
    pub topic: &'a str,
    pub key: &'a [u8],
    /// `None`: a tombstone.
    pub payload: Option<&'a [u8]>,
    pub partition: Option<i32>,
    pub headers: rdkafka::message::OwnedHeaders,
    pub timestamp_ms: Option<i64>,
}

/// [`produce_acked`] gave up because the service is stopping: nothing is
/// lost (what was not acknowledged is replayed on restart).
#[derive(Debug, thiserror::Error)]
#[error("stopped while retrying a produce to {0}")]
pub(crate) struct Stopped(pub String);

/// Produce one record and wait for the broker's ack, retrying transient
/// errors with backoff until `stop` turns true; a record too large for the
/// producer or the broker is not retried. An error is fatal to the caller
/// (nothing was committed past it).
pub(crate) async fn produce_acked(
    producer: &rdkafka::producer::FutureProducer,
    r: Record<'_>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(i32, i64)> {
    let topic = r.topic;
    let mut backoff = Duration::from_millis(100);
    for attempt in 1..=8 {
        let mut record = rdkafka::producer::FutureRecord::to(topic)
            .key(r.key)
            .headers(r.headers.clone());
        if let Some(t) = r.timestamp_ms {
            record = record.timestamp(t);
        }
        if let Some(p) = r.payload {
            record = record.payload(p);
        }
        if let Some(p) = r.partition {
            record = record.partition(p);
        }
        let e = match producer
            .send(
                record,
                rdkafka::util::Timeout::After(Duration::from_secs(30)),
            )
            .await
        {
            Ok(delivery) => return Ok((delivery.partition, delivery.offset)),
            Err((e, _)) => e,
        };
        crate::telemetry::produce_failed(topic);
        if matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::MessageSizeTooLarge
                    | RDKafkaErrorCode::InvalidMessageSize
                    | RDKafkaErrorCode::MessageBatchTooLarge
            )
        ) {
            return Err(anyhow!(
                "producing a record of {} bytes to {topic}: {e}; it is larger than the producer's \
                 message.max.bytes or the topic's max.message.bytes allows (raise them, see the README's limits)",
                r.payload.map_or(0, <[u8]>::len)
            ));
        }
        tracing::warn!(topic, attempt, error = %e, "produce failed; retrying");
        if *stop.borrow() {
            return Err(Stopped(topic.to_string()).into());
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return Err(Stopped(topic.to_string()).into()),
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    Err(anyhow!(
        "producing to {topic} failed after retries; exiting so an orchestrator can restart"
    ))
}
