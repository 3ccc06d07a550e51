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

/// Produce one record and wait for the broker's ack, retrying with backoff;
/// an error after the retries is fatal (nothing was committed past it).
pub(crate) async fn produce_acked(
    producer: &rdkafka::producer::FutureProducer,
    topic: &str,
    key: &[u8],
    payload: Option<&[u8]>,
    partition: Option<i32>,
    headers: rdkafka::message::OwnedHeaders,
    timestamp_ms: Option<i64>,
) -> Result<(i32, i64)> {
    let mut backoff = Duration::from_millis(100);
    for attempt in 1..=8 {
        let mut record = rdkafka::producer::FutureRecord::to(topic)
            .key(key)
            .headers(headers.clone());
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
            .send(
                record,
                rdkafka::util::Timeout::After(Duration::from_secs(30)),
            )
            .await
        {
            Ok(delivery) => return Ok((delivery.partition, delivery.offset)),
            Err((e, _)) => {
                crate::telemetry::produce_failed(topic);
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
