//! Past a poisoned record batch (`kafka.undecodable = "skip"`).
//!
//! A batch the consumer cannot decompress stops its partition: librdkafka
//! reports the error without naming the partition and fetches the batch
//! again for ever. A probe consumer of FleetDP's own (it reads by
//! assignment and never commits) finds which assigned partition fails at
//! the position the loop reached, then the first offset after it from
//! which that partition reads again, one offset at a time: the broker
//! returns a batch whole from any offset inside it, so every offset probed
//! before that one lies in an undecodable batch, and no readable record is
//! passed over. The loop then moves its consumer there and records the
//! range as one dead letter (`dead_letter.rs`).

use super::Pipeline;
use crate::clients::kafka::{self, Quiet};
use anyhow::{bail, Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Offsets one skip may pass over (one fetch each); a longer undecodable
/// range stops the partition as `kafka.undecodable = "stop"` does.
pub(crate) const MAX_SKIPPED_OFFSETS: i64 = 100_000;

/// How long one probe waits for a record or an error.
const PROBE_WAIT: Duration = Duration::from_secs(5);
/// How long looking for the end of one undecodable range may take in all
/// (each offset is one fetch; a slow broker must not hold the partition
/// for hours): past it the range is not skipped and the partition stays
/// stopped, as with `"stop"`.
pub(crate) const MAX_PROBE_TIME: Duration = Duration::from_secs(600);

/// A skipped range: offsets `start..end` of `partition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Poisoned {
    pub partition: i32,
    pub start: i64,
    pub end: i64,
}

/// What a fetch from an offset gives first.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// A record, at this offset.
    Record(i64),
    /// The decompression error.
    Undecodable,
    /// Nothing within [`PROBE_WAIT`].
    Nothing,
}

/// The loop's side of it: the probe, made when first needed, and per
/// partition the end of the last range skipped since it was assigned (an
/// error queued before the skip is not a new one).
#[derive(Default)]
pub(super) struct Skipper {
    probe: Option<Arc<Probe>>,
    skipped_to: BTreeMap<i32, i64>,
}

impl Skipper {
    /// `partition` was revoked or assigned again: it is read anew.
    pub fn forget(&mut self, partition: i32) {
        self.skipped_to.remove(&partition);
    }

    /// Find the partition an undecodable batch stops and the range it
    /// spans, and move `consumer` past it. `None`: none was found (the
    /// caller waits and retries as for any consumer error).
    pub async fn skip<C: ConsumerContext>(
        &mut self,
        p: &Pipeline,
        consumer: &(impl Consumer<C> + Sync),
    ) -> Result<Option<Poisoned>> {
        let kc = &p.v.config.kafka;
        let probe = match &self.probe {
            Some(probe) => probe.clone(),
            None => {
                let mut base = p.client_config();
                for (k, v) in &kc.consumer_properties {
                    base.set(k, v);
                }
                let probe = Arc::new(Probe::new(&base, &kc.group_id, &kc.input_topic)?);
                self.probe.insert(probe).clone()
            }
        };
        let positions = consumer.position().unwrap_or_default();
        let parts: Vec<(i32, Option<i64>)> = positions
            .elements_for_topic(&kc.input_topic)
            .iter()
            .map(|e| {
                let at = match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                };
                (
                    e.partition(),
                    at.max(self.skipped_to.get(&e.partition()).copied()),
                )
            })
            .collect();
        let skipped = match tokio::task::spawn_blocking(move || probe.find(&parts)).await? {
            Ok(Some(skipped)) => skipped,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::warn!(error = %e, "the undecodable batch was not skipped");
                return Ok(None);
            }
        };
        let part = skipped.partition;
        consumer
            .seek(
                &kc.input_topic,
                part,
                Offset::Offset(skipped.end),
                Duration::from_secs(10),
            )
            .with_context(|| format!("moving partition {part} past its undecodable offsets"))?;
        tracing::warn!(
            partition = part,
            first = skipped.start,
            end = skipped.end,
            "skipped undecodable offsets (kafka.undecodable = \"skip\"); recorded as a dead letter"
        );
        self.skipped_to.insert(part, skipped.end);
        Ok(Some(skipped))
    }
}

/// The probe consumer.
pub(super) struct Probe {
    consumer: BaseConsumer<Quiet>,
    topic: String,
}

impl Probe {
    /// A consumer reading `topic` as the input consumer does (`base` with
    /// the consumer's properties), in `group` only to read its committed
    /// offsets: it never joins the group nor commits.
    pub fn new(base: &ClientConfig, group: &str, topic: &str) -> Result<Self> {
        let mut c = kafka::reader_config(base, group);
        c.remove("group.instance.id")
            // A refetch after the error is what is being measured.
            .set("fetch.error.backoff.ms", "10")
            .set("fetch.wait.max.ms", "100");
        let consumer = c
            .create_with_context(Quiet("undecodable_probe"))
            .context("creating the undecodable-batch probe")?;
        Ok(Self {
            consumer,
            topic: topic.to_string(),
        })
    }

    /// Of the assigned `partitions` (with the loop's position, if it has
    /// read one; else the group's committed offset, else the earliest),
    /// the first whose next fetch is undecodable, and the range to skip.
    /// `None`: every partition reads (the error was for a position left).
    pub fn find(&self, partitions: &[(i32, Option<i64>)]) -> Result<Option<Poisoned>> {
        for &(p, position) in partitions {
            let (low, high) = self
                .consumer
                .fetch_watermarks(&self.topic, p, Duration::from_secs(10))
                .with_context(|| format!("reading partition {p}'s watermarks"))?;
            // Nothing read or committed yet: the consumer starts at the
            // earliest offset (`auto.offset.reset`).
            let start = position.or_else(|| self.committed(p)).unwrap_or(low);
            if start >= high || self.first(p, start)? != First::Undecodable {
                continue;
            }
            let end = self.end(p, start, high)?;
            return Ok(Some(Poisoned {
                partition: p,
                start,
                end,
            }));
        }
        Ok(None)
    }

    /// The group's committed offset of `partition`, if any.
    fn committed(&self, partition: i32) -> Option<i64> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, partition);
        let got = self
            .consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .ok()?;
        match got.find_partition(&self.topic, partition)?.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        }
    }

    /// The first offset after `start` (undecodable) that reads, probing
    /// one offset at a time up to the high watermark `high`.
    fn end(&self, partition: i32, start: i64, high: i64) -> Result<i64> {
        let began = Instant::now();
        let mut at = start + 1;
        while at < high {
            if at - start > MAX_SKIPPED_OFFSETS {
                bail!(
                    "partition {partition}: more than {MAX_SKIPPED_OFFSETS} undecodable offsets from {start} on; not skipped (docs/troubleshooting.md)"
                );
            }
            if began.elapsed() > MAX_PROBE_TIME {
                bail!(
                    "partition {partition}: undecodable offsets from {start} on still not past after {} s \
                     ({} probed); not skipped (docs/troubleshooting.md)",
                    MAX_PROBE_TIME.as_secs(),
                    at - start
                );
            }
            if (at - start) % 1000 == 0 {
                tracing::info!(
                    partition,
                    start,
                    at,
                    seconds = began.elapsed().as_secs(),
                    "still looking for the end of an undecodable batch"
                );
            }
            if self.first(partition, at)? != First::Undecodable {
                return Ok(at);
            }
            at += 1;
        }
        Ok(high)
    }

    /// What fetching `partition` from `offset` gives first.
    fn first(&self, partition: i32, offset: i64) -> Result<First> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Offset(offset))?;
        self.consumer.assign(&tpl)?;
        let deadline = Instant::now() + PROBE_WAIT;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.consumer.poll(left.min(Duration::from_millis(200))) {
                Some(Ok(m)) if m.partition() == partition && m.offset() >= offset => {
                    return Ok(First::Record(m.offset()));
                }
                Some(Err(e)) if kafka::error_kind(&e).0 == "decompression" => {
                    return Ok(First::Undecodable);
                }
                _ => {}
            }
        }
        Ok(First::Nothing)
    }
}
