//! Kafka plumbing shared by the service, the simulator, the demo and the
//! tests: client configuration, topic creation and metadata, reading a
//! topic to its end, and producing with retries. What the state topic's
//! records mean is the [`crate::state`] module's.

use anyhow::{anyhow, Context, Result};
use prost::Message as _;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

mod admin;
pub use admin::{
    create_topics, describe_topics, ensure_topics, topic_config, Described, NewTopicSpec,
};

/// How often one kind of librdkafka log line may be written (per level and
/// facility); the rest are counted and reported with the next one. A broker
/// outage used to log ≈ 100 identical ERROR lines in 50 ms.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Kinds of log lines tracked at once (more share one slot).
const LOG_KINDS: usize = 256;

/// Rate limiting of librdkafka's log lines: whether a line of `kind` may be
/// written at `now`, and how many of its kind were held back before it.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
    last: HashMap<String, (Instant, u64)>,
}

impl LogLimiter {
    pub fn admit(&mut self, kind: &str, now: Instant) -> Option<u64> {
        let key = if self.last.len() >= LOG_KINDS && !self.last.contains_key(kind) {
            "other"
        } else {
            kind
        };
        match self.last.get_mut(key) {
            Some((at, held)) if now.duration_since(*at) < LOG_EVERY => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                *at = now;
                Some(std::mem::take(held))
            }
            None => {
                self.last.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// Every kind [`error_kind`] names (the `kind` label of
/// `fleetdp_kafka_errors_total`).
pub(crate) const ERROR_KINDS: [&str; 7] = [
    "authentication",
    "tls",
    "authorization",
    "unknown_topic",
    "transport",
    "decompression",
    "other",
];

/// The setting to check after a decompression error, and the way past a
/// batch no setting can fix (`kafka.undecodable`).
const UNDECODABLE: &str = "the producers' compression.type; a batch that cannot be decompressed stops its partition until kafka.undecodable = \"skip\" passes it (docs/troubleshooting.md)";

/// What kind of client error stops progress, for the metric, the log line
/// and `/readyz`: `(kind, the setting to check)`.
pub fn error_kind(e: &rdkafka::error::KafkaError) -> (&'static str, &'static str) {
    use RDKafkaErrorCode as C;
    let text = e.to_string();
    match e.rdkafka_error_code() {
        Some(C::Authentication | C::SaslAuthenticationFailed) => (
            "authentication",
            "kafka.security (sasl_mechanism, username, password, oauthbearer)",
        ),
        Some(C::SSL) => (
            "tls",
            "kafka.security (protocol, ca_file, cert_file, key_file, verify_hostname)",
        ),
        Some(
            C::TopicAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::ClusterAuthorizationFailed,
        ) => (
            "authorization",
            "the cluster's ACLs for FleetDP's principal (topics and kafka.group_id)",
        ),
        Some(C::UnknownTopic | C::UnknownTopicOrPartition) => (
            "unknown_topic",
            "kafka.input_topic (or create it: fleetdp run --create-topics N)",
        ),
        Some(C::BrokerTransportFailure | C::AllBrokersDown | C::Resolve) => {
            ("transport", "kafka.brokers and kafka.security.protocol")
        }
        Some(C::BadCompression) => ("decompression", UNDECODABLE),
        _ if text.contains("ecompress") || text.contains("ompression") => {
            ("decompression", UNDECODABLE)
        }
        _ => ("other", "the error text"),
    }
}

/// A failure to read `topic`'s metadata at start (`field` names it),
/// explained by the setting to check: an unreachable cluster points at
/// `kafka.brokers` and `kafka.security`, not at the topic; a missing topic
/// suggests `--create-topics`.
pub fn explain_startup(field: &str, topic: &str, brokers: &str, e: anyhow::Error) -> anyhow::Error {
    let kafka = e
        .chain()
        .find_map(|c| c.downcast_ref::<rdkafka::error::KafkaError>());
    match kafka.map(error_kind) {
        Some(("transport", _)) | Some(("other", _)) => anyhow!(
            "kafka.brokers ({brokers}): no broker answered while reading {field} ({topic}): {e:#}; \
             check kafka.brokers and kafka.security (protocol, ca_file, credentials)"
        ),
        Some(("unknown_topic", _)) => anyhow!(
            "{field} ({topic}) does not exist; create it (local setups: fleetdp run --create-topics N)"
        ),
        Some((kind, check)) => anyhow!(
            "{field} ({topic}): {kind} error while reading its metadata: {e:#}; check {check}"
        ),
        None if e.to_string().contains("does not exist") => anyhow!(
            "{field} ({topic}) does not exist; create it (local setups: fleetdp run --create-topics N)"
        ),
        None => e.context(format!("{field} ({topic})")),
    }
}

/// Write a librdkafka log line through the limiter (one per process).
pub(crate) fn quiet_log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    static LIMITER: std::sync::OnceLock<std::sync::Mutex<LogLimiter>> = std::sync::OnceLock::new();
    let kind = format!("{level:?}/{facility}");
    let held = LIMITER
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .admit(&kind, Instant::now());
    let Some(held) = held else {
        return;
    };
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", facility, held_back = held, "{message}")
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", facility, held_back = held, "{message}")
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", facility, held_back = held, "{message}")
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", facility, held_back = held, "{message}")
        }
    }
}

/// A client context whose log lines go through [`quiet_log`] and whose
/// client-level errors (transport, TLS, authentication: what a producer or
/// admin client reports outside any one request) are counted in
/// `fleetdp_kafka_errors_total` under the client's role, e.g. `producer`.
/// Consumers get their errors from `poll` instead, where their callers
/// count them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quiet(pub(crate) &'static str);

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        quiet_log(level, fac, log_message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::telemetry::kafka_error(self.0, error_kind(&error).0);
        quiet_log(RDKafkaLogLevel::Error, &format!("{error}"), reason);
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

/// The service's producer.
pub(crate) type Producer = rdkafka::producer::FutureProducer<Quiet>;

/// Header naming a payload's encoding.
pub const CONTENT_TYPE: &str = "content-type";

/// A base client configuration: brokers plus extra properties.
pub fn client_config(brokers: &str, properties: &BTreeMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("metadata.broker.list", brokers);
    for (k, v) in properties {
        c.set(k, v);
    }
    c
}

/// A consumer configuration for reading a topic by assignment: its own
/// `group` (never committed to), no auto-commit, no end-of-partition events.
pub(crate) fn reader_config(base: &ClientConfig, group: &str) -> ClientConfig {
    let mut c = base.clone();
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    c
}

/// The consumer's next message if one is ready now (never waits, sets no
/// timer): the consuming loop receives this way while input keeps coming,
/// and the pipeline bench's null consumer receives as the loop does.
pub fn ready_now<C: rdkafka::consumer::ConsumerContext + 'static>(
    consumer: &rdkafka::consumer::StreamConsumer<C>,
) -> Option<rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'_>>> {
    use std::future::Future as _;
    let mut next = std::pin::pin!(consumer.recv());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match next.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(m) => Some(m),
        std::task::Poll::Pending => None,
    }
}

/// Value of a header, if present and UTF-8.
pub fn header<'a, M: Message>(msg: &'a M, name: &str) -> Option<&'a str> {
    let h = msg.headers()?;
    (0..h.count())
        .filter_map(|i| h.try_get(i))
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value?).ok())
}

/// Partition count of a topic, or an error naming it when it does not exist.
pub fn partition_count<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<usize> {
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

/// A fleet-wide release ([`crate::runtime::fleet`]) by its content type.
pub fn decode_fleet(payload: &[u8], content_type: Option<&str>) -> Result<proto::FleetRelease> {
    if content_type.is_some_and(|c| c.starts_with("application/json")) {
        Ok(serde_json::from_slice(payload)?)
    } else {
        Ok(proto::FleetRelease::decode(payload)?)
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

/// How long a topic read may go without progress (a message, or the read
/// position moving) before it fails.
pub(crate) const READ_STALL: Duration = Duration::from_secs(60);

/// How far a topic read is: (topic, messages read, offsets to read in all —
/// an upper bound, compaction leaves holes), about once a second and at
/// the end.
pub type ReadProgress<'a> = &'a (dyn Fn(&str, u64, u64) + Sync);

/// Remove from `remaining` (partition → high watermark to reach) every
/// partition the consumer's position has passed — offsets that hold no
/// message (compacted away, control records) end a partition too; true if
/// one was removed.
pub(crate) fn drop_passed<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    remaining: &mut HashMap<i32, i64>,
) -> bool {
    let before = remaining.len();
    if let Ok(at) = consumer.position() {
        for e in at.elements_for_topic(topic) {
            if let (Offset::Offset(o), Some(&h)) = (e.offset(), remaining.get(&e.partition())) {
                if o >= h {
                    remaining.remove(&e.partition());
                }
            }
        }
    }
    remaining.len() < before
}

/// Read a topic up to its current high watermarks, each partition from
/// `start(partition, low watermark)` (`None`: skip it), calling `f` on every
/// message. Fails after `READ_STALL` without progress (however long the
/// whole read takes), and with `Stopped` soon after `stop` turns true.
/// Blocking; call from a blocking context.
pub fn read_topic(
    config: &ClientConfig,
    topic: &str,
    start: impl Fn(i32, i64) -> Option<i64>,
    stop: &tokio::sync::watch::Receiver<bool>,
    progress: ReadProgress<'_>,
    mut f: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> Result<()>,
) -> Result<()> {
    let mut c = reader_config(config, "fleetdp-topic-reader");
    // As for the pipeline's consumer: no 1 s pauses when the local queue fills.
    c.set("fetch.queue.backoff.ms", "20");
    let consumer: BaseConsumer<Quiet> = c
        .create_with_context(Quiet("reader"))
        .context("creating topic reader")?;
    let parts = partition_count(&consumer, topic, Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    let mut remaining = HashMap::new();
    let mut expected = 0u64;
    for p in 0..parts as i32 {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .with_context(|| format!("watermarks of {topic}/{p}"))?;
        if let Some(from) = start(p, low).map(|o| o.max(low)) {
            if high > from {
                tpl.add_partition_offset(topic, p, Offset::Offset(from))?;
                remaining.insert(p, high);
                expected += (high - from) as u64;
            }
        }
    }
    if remaining.is_empty() {
        return Ok(());
    }
    consumer.assign(&tpl)?;
    let (mut read, mut reported) = (0u64, Instant::now());
    progress(topic, 0, expected);
    let mut moved = Instant::now();
    while !remaining.is_empty() {
        if reported.elapsed() >= Duration::from_secs(1) {
            progress(topic, read, expected);
            reported = Instant::now();
        }
        if *stop.borrow() {
            return Err(Stopped(topic.to_string()).into());
        }
        let Some(msg) = consumer.poll(Duration::from_millis(500)) else {
            // Offsets that hold no message (compacted away, control
            // records) end a partition too once the position passes them.
            if drop_passed(&consumer, topic, &mut remaining) {
                moved = Instant::now();
            } else if moved.elapsed() > READ_STALL {
                return Err(anyhow!(
                    "reading {topic}: no progress for {} s ({} partitions unfinished)",
                    READ_STALL.as_secs(),
                    remaining.len()
                ));
            }
            continue;
        };
        let msg = msg.with_context(|| format!("reading {topic}"))?;
        moved = Instant::now();
        read += 1;
        f(&msg)?;
        if remaining
            .get(&msg.partition())
            .is_some_and(|&h| msg.offset() + 1 >= h)
        {
            remaining.remove(&msg.partition());
        }
    }
    progress(topic, read, expected);
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
    producer: &Producer,
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
        crate::telemetry::produce_failed(topic, error_kind(&e).0);
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
                 message.max.bytes or the topic's max.message.bytes allows (raise them, see docs/configuration.md, limits)",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_one_kind_is_one_line_then_a_count() {
        let mut l = LogLimiter::default();
        let t0 = Instant::now();
        assert_eq!(l.admit("Error/FAIL", t0), Some(0));
        for i in 1..100 {
            assert_eq!(
                l.admit("Error/FAIL", t0 + Duration::from_micros(500 * i)),
                None
            );
        }
        // Another kind is not held back by it.
        assert_eq!(l.admit("Warning/REQTMOUT", t0), Some(0));
        // After the interval the next line reports what was held back.
        assert_eq!(l.admit("Error/FAIL", t0 + LOG_EVERY), Some(99));
        assert_eq!(l.admit("Error/FAIL", t0 + LOG_EVERY * 2), Some(0));
    }

    #[test]
    fn the_kinds_tracked_are_bounded() {
        let mut l = LogLimiter::default();
        let t0 = Instant::now();
        for i in 0..10 * LOG_KINDS {
            l.admit(&format!("Error/{i}"), t0);
        }
        assert!(l.last.len() <= LOG_KINDS + 1);
    }

    /// Issue: only the consumer's errors were counted; a producer that
    /// could not authenticate or reach the cluster moved no metric. Client
    /// errors are counted under the client's role and kind, produce
    /// failures by kind too, and the series start at 0.
    #[test]
    fn producer_and_admin_errors_are_counted_by_client_and_kind() {
        use rdkafka::error::KafkaError as K;
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            crate::telemetry::register_kafka_errors(&ERROR_KINDS);
            Quiet("producer").error(K::Global(RDKafkaErrorCode::SSL), "handshake failed");
            Quiet("admin").error(K::Global(RDKafkaErrorCode::AllBrokersDown), "all down");
            let refused = K::MessageProduction(RDKafkaErrorCode::TopicAuthorizationFailed);
            crate::telemetry::produce_failed("out", error_kind(&refused).0);
        });
        let text = handle.render();
        let (errors, produce) = (
            crate::telemetry::name::KAFKA_ERRORS,
            crate::telemetry::name::PRODUCE_ERRORS,
        );
        for line in [
            format!(r#"{errors}{{client="producer",kind="tls"}} 1"#),
            format!(r#"{errors}{{client="admin",kind="transport"}} 1"#),
            format!(r#"{errors}{{client="producer",kind="authorization"}} 1"#),
            format!(r#"{errors}{{client="consumer",kind="decompression"}} 0"#),
            format!(r#"{produce}{{topic="out"}} 1"#),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    /// Every kind an error is counted under is one the metric starts at 0
    /// with (an unregistered kind would be born at 1 and missed by the
    /// alert's `increase()`).
    #[test]
    fn every_error_kind_is_registered_at_start() {
        use rdkafka::error::KafkaError as K;
        use RDKafkaErrorCode as C;
        let codes = [
            C::Authentication,
            C::SaslAuthenticationFailed,
            C::SSL,
            C::TopicAuthorizationFailed,
            C::GroupAuthorizationFailed,
            C::ClusterAuthorizationFailed,
            C::UnknownTopic,
            C::UnknownTopicOrPartition,
            C::BrokerTransportFailure,
            C::AllBrokersDown,
            C::Resolve,
            C::BadCompression,
            C::MessageSizeTooLarge,
            C::RequestTimedOut,
        ];
        let mut seen = std::collections::BTreeSet::new();
        for c in codes {
            for e in [K::MessageConsumption(c), K::Global(c), K::MetadataFetch(c)] {
                let (kind, check) = error_kind(&e);
                assert!(ERROR_KINDS.contains(&kind), "{c:?} → {kind}");
                assert!(!check.is_empty());
                seen.insert(kind);
            }
        }
        assert_eq!(seen.len(), ERROR_KINDS.len(), "{seen:?}");
    }

    /// Issue: an unreachable broker was reported as `kafka.input_topic
    /// (readings): fetching metadata … BrokerTransportFailure`, and a
    /// missing topic did not suggest `--create-topics`.
    #[test]
    fn startup_errors_name_the_setting_to_check() {
        let down = anyhow::Error::new(rdkafka::error::KafkaError::MetadataFetch(
            RDKafkaErrorCode::BrokerTransportFailure,
        ))
        .context("fetching metadata of topic readings");
        let e = explain_startup("kafka.input_topic", "readings", "b:9092", down).to_string();
        assert!(
            e.starts_with("kafka.brokers (b:9092): no broker answered"),
            "{e}"
        );
        assert!(e.contains("kafka.security"), "{e}");
        let auth = anyhow::Error::new(rdkafka::error::KafkaError::MetadataFetch(
            RDKafkaErrorCode::SaslAuthenticationFailed,
        ));
        let e = explain_startup("kafka.input_topic", "readings", "b:9092", auth).to_string();
        assert!(
            e.contains("authentication") && e.contains("kafka.security"),
            "{e}"
        );
        let missing = anyhow!("topic readings does not exist (or has no partitions)");
        let e = explain_startup("kafka.input_topic", "readings", "b:9092", missing).to_string();
        assert!(
            e.contains("kafka.input_topic (readings) does not exist")
                && e.contains("--create-topics"),
            "{e}"
        );
    }
}
