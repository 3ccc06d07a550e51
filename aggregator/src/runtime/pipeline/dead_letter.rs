//! The dead-letter topic: a rejected message goes there with its original
//! key, bytes and headers plus headers naming the reason, the detail and
//! where it came from; its input offset is not committed before the
//! broker acknowledges it.
//!
//! A dead letter the producer or the broker refuses as too large is sent
//! again smaller, never retried as it is (that used to wedge the service):
//! first without the original headers and with only the first
//! [`TRUNCATED_PAYLOAD`] bytes, then with no payload at all; both carry
//! `fleetdp-truncated` and `fleetdp-original-size`. Only a full local queue
//! is waited out; any other produce error stops the service with the topic
//! and the error named (nothing is committed past the message).

use super::offsets::Offsets;
use super::Pipeline;
use crate::clients::kafka::{self, Producer};
use crate::telemetry;
use anyhow::{anyhow, bail, Result};
use ingest::{Reason, Rejection};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;
use tokio::task::JoinSet;

/// Payload bytes a truncated dead letter keeps.
pub const TRUNCATED_PAYLOAD: usize = 64 * 1024;

/// Key bytes a dead letter keeps (a key is normally a device id).
const MAX_KEY: usize = 1024;

/// Detail bytes a dead letter's `fleetdp-detail` header keeps.
const MAX_DETAIL: usize = 1024;

/// How much of the rejected message a dead letter carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Its headers, key and payload as they were.
    Whole,
    /// Its key and the first [`TRUNCATED_PAYLOAD`] bytes.
    Truncated,
    /// Its key only (the payload was too large even truncated).
    HeadersOnly,
}

/// Whether a produce error means "this record is too large".
fn too_large(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::MessageBatchTooLarge
        )
    )
}

fn queue_full(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
    )
}

/// The end of `s` at most `max` bytes in, on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The headers FleetDP adds (owned: a headers-only resend happens in the
/// delivery task).
fn fleetdp_headers(
    base: OwnedHeaders,
    rejection: &Rejection,
    source: (&str, i32, i64),
    form: Form,
    original_size: usize,
) -> OwnedHeaders {
    let (partition, offset, size) = (
        source.1.to_string(),
        source.2.to_string(),
        original_size.to_string(),
    );
    let (reason, detail) = (
        rejection.reason.as_str(),
        clip(&rejection.detail, MAX_DETAIL),
    );
    let pairs = [
        ("fleetdp-reason", reason),
        ("fleetdp-detail", detail),
        ("fleetdp-source-topic", source.0),
        ("fleetdp-source-partition", partition.as_str()),
        ("fleetdp-source-offset", offset.as_str()),
        // The same in Kafka Connect's dead-letter context headers, which
        // Connect-style DLQ consumers and UIs read.
        ("__connect.errors.topic", source.0),
        ("__connect.errors.partition", partition.as_str()),
        ("__connect.errors.offset", offset.as_str()),
        ("__connect.errors.connector.name", "fleetdp"),
        ("__connect.errors.exception.class.name", reason),
        ("__connect.errors.exception.message", detail),
    ];
    let mut h = pairs.into_iter().fold(base, |h, (key, value)| {
        h.insert(Header {
            key,
            value: Some(value),
        })
    });
    if form != Form::Whole {
        h = h
            .insert(Header {
                key: "fleetdp-truncated",
                value: Some(match form {
                    Form::Truncated => "payload",
                    _ => "all",
                }),
            })
            .insert(Header {
                key: "fleetdp-original-size",
                value: Some(size.as_str()),
            });
    }
    h
}

/// A dead letter's outcome: the message it stood for, or why it failed.
pub(super) type Done = Result<Result<(i32, i64, Reason)>, tokio::task::JoinError>;

/// The dead-letter owner: sends rejected messages without waiting for
/// their acks (at most `kafka.dead_letters_in_flight`), holding their
/// input offsets back from commits until they are acknowledged.
pub(super) struct DeadLetters<'a> {
    p: &'a Pipeline,
    producer: Producer,
    tasks: JoinSet<Result<(i32, i64, Reason)>>,
}

impl<'a> DeadLetters<'a> {
    pub fn new(p: &'a Pipeline, producer: Producer) -> Self {
        Self {
            p,
            producer,
            tasks: JoinSet::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The next dead letter to end (`None`: none in flight).
    pub async fn next(&mut self) -> Option<Done> {
        self.tasks.join_next().await
    }

    /// A dead letter that has ended, without waiting.
    pub fn try_next(&mut self) -> Option<Done> {
        self.tasks.try_join_next()
    }

    /// Send a message to the dead-letter topic without waiting for the ack;
    /// commits stay behind it until it is acknowledged.
    pub async fn send(
        &mut self,
        msg: &BorrowedMessage<'_>,
        rejection: &Rejection,
        offsets: &mut Offsets,
    ) -> Result<()> {
        let v = self.p.v.clone();
        let kc = &v.config.kafka;
        while self.tasks.len() >= kc.dead_letters_in_flight.max(1) {
            let done = self.tasks.join_next().await.expect("non-empty");
            self.done(done, offsets)?;
        }
        let source = (kc.input_topic.as_str(), msg.partition(), msg.offset());
        let (delivery, form) = self
            .produce(msg, rejection, source, &kc.dead_letter_topic, offsets)
            .await?;
        let (p, o, reason) = (msg.partition(), msg.offset(), rejection.reason);
        offsets.dead_letter_sent(p, o);
        // Sent again with headers only if the broker refuses it as too large.
        let size = msg.payload().map_or(0, <[u8]>::len);
        let fallback = (form != Form::HeadersOnly).then(|| {
            let headers = OwnedHeaders::new();
            let headers = fleetdp_headers(headers, rejection, source, Form::HeadersOnly, size);
            (short_key(msg).to_vec(), headers)
        });
        let (producer, topic) = (self.producer.clone(), kc.dead_letter_topic.clone());
        self.tasks.spawn(async move {
            let e = match delivery.await {
                Ok(Ok(_)) => return Ok((p, o, reason)),
                Ok(Err((e, _))) => e,
                Err(_) => bail!("dead-lettering {p}@{o}: the producer went away"),
            };
            match fallback {
                Some((key, headers)) if too_large(&e) => {
                    tracing::warn!(
                        partition = p,
                        offset = o,
                        "the broker refused a dead letter as too large; sending its headers only"
                    );
                    resend(&producer, &topic, &key, headers, (p, o)).await?;
                    Ok((p, o, reason))
                }
                _ => {
                    telemetry::produce_failed(&topic, kafka::error_kind(&e).0);
                    Err(anyhow!(
                        "dead-lettering {p}@{o} to {topic} failed: {e}; exiting so an orchestrator can restart"
                    ))
                }
            }
        });
        Ok(())
    }

    /// Record a skipped undecodable range (`poisoned.rs`) as one dead
    /// letter without key or payload, its headers naming the range
    /// (`fleetdp-source-offset` its first offset, `fleetdp-source-end-offset`
    /// the first one after it); commits stay behind its first offset until
    /// it is acknowledged.
    pub async fn send_skipped(
        &mut self,
        skipped: super::poisoned::Poisoned,
        offsets: &mut Offsets,
    ) -> Result<()> {
        let v = self.p.v.clone();
        let kc = &v.config.kafka;
        let (p, o) = (skipped.partition, skipped.start);
        let rejection = Rejection {
            reason: Reason::UndecodableBatch,
            detail: format!(
                "offsets {}..{} of partition {p} could not be decompressed and were skipped (kafka.undecodable = \"skip\")",
                skipped.start, skipped.end
            ),
        };
        let end = skipped.end.to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: "fleetdp-source-end-offset",
            value: Some(end.as_str()),
        });
        let headers = fleetdp_headers(headers, &rejection, (&kc.input_topic, p, o), Form::Whole, 0);
        let (producer, topic) = (self.producer.clone(), kc.dead_letter_topic.clone());
        offsets.dead_letter_sent(p, o);
        self.tasks.spawn(async move {
            let record = FutureRecord::<[u8], [u8]>::to(&topic).headers(headers);
            match producer.send(record, rdkafka::util::Timeout::Never).await {
                Ok(_) => Ok((p, o, Reason::UndecodableBatch)),
                Err((e, _)) => {
                    telemetry::produce_failed(&topic, kafka::error_kind(&e).0);
                    Err(anyhow!(
                        "dead-lettering the skipped offsets {p}@{o} to {topic} failed: {e}; exiting (nothing was committed past them)"
                    ))
                }
            }
        });
        Ok(())
    }

    /// Hand `msg`'s dead letter to the producer: whole, or smaller each
    /// time the producer refuses it as too large; a full queue is waited
    /// out (acks drain it). Returns its delivery and the form it went in.
    async fn produce(
        &mut self,
        msg: &BorrowedMessage<'_>,
        rejection: &Rejection,
        source: (&str, i32, i64),
        topic: &str,
        offsets: &mut Offsets,
    ) -> Result<(rdkafka::producer::DeliveryFuture, Form)> {
        let payload = msg.payload().unwrap_or(&[]);
        let mut form = Form::Whole;
        loop {
            let body = match form {
                Form::Whole => payload,
                Form::Truncated => &payload[..payload.len().min(TRUNCATED_PAYLOAD)],
                Form::HeadersOnly => &[],
            };
            let headers = match form {
                Form::Whole => original_headers(msg),
                _ => OwnedHeaders::new(),
            };
            let record = FutureRecord::to(topic)
                .key(if form == Form::Whole {
                    msg.key().unwrap_or(&[])
                } else {
                    short_key(msg)
                })
                .payload(body)
                .headers(fleetdp_headers(
                    headers,
                    rejection,
                    source,
                    form,
                    payload.len(),
                ));
            match self.producer.send_result(record) {
                Ok(d) => return Ok((d, form)),
                // A full queue drains as acks arrive.
                Err((e, _)) if queue_full(&e) => {
                    tracing::debug!("dead-letter queue full; waiting");
                    match self.tasks.join_next().await {
                        Some(done) => self.done(done, offsets)?,
                        None => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
                Err((e, _)) if too_large(&e) && form != Form::HeadersOnly => {
                    tracing::warn!(
                        partition = source.1,
                        offset = source.2,
                        size = payload.len(),
                        "dead letter too large for the producer; sending it truncated"
                    );
                    form = match form {
                        Form::Whole => Form::Truncated,
                        _ => Form::HeadersOnly,
                    };
                }
                Err((e, _)) => {
                    telemetry::produce_failed(topic, kafka::error_kind(&e).0);
                    bail!(
                        "dead-lettering {}@{} to kafka.dead_letter_topic {topic}: {e}; exiting (nothing was committed past it)",
                        source.1,
                        source.2,
                    );
                }
            }
        }
    }

    /// A dead letter ended: acknowledged (its offset may be committed), or
    /// failed (fatal).
    pub fn done(&self, done: Done, offsets: &mut Offsets) -> Result<()> {
        let (p, o, reason) = done??;
        offsets.dead_letter_acked(p, o);
        self.p.counters.dead_lettered(reason);
        Ok(())
    }
}

/// A message's key as a shortened dead letter carries it (at most
/// [`MAX_KEY`] bytes).
fn short_key<'a>(msg: &'a BorrowedMessage<'_>) -> &'a [u8] {
    let key = msg.key().unwrap_or(&[]);
    &key[..key.len().min(MAX_KEY)]
}

/// A message's own headers, as a whole dead letter carries them.
fn original_headers(msg: &BorrowedMessage<'_>) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new();
    if let Some(h) = msg.headers() {
        for hd in (0..h.count()).filter_map(|i| h.try_get(i)) {
            headers = headers.insert(Header {
                key: hd.key,
                value: hd.value,
            });
        }
    }
    headers
}

/// Send a headers-only dead letter and wait for its ack.
async fn resend(
    producer: &Producer,
    topic: &str,
    key: &[u8],
    headers: OwnedHeaders,
    (p, o): (i32, i64),
) -> Result<()> {
    let record = FutureRecord::to(topic)
        .key(key)
        .payload(&[] as &[u8])
        .headers(headers);
    producer
        .send(record, rdkafka::util::Timeout::Never)
        .await
        .map(|_| ())
        .map_err(|(e, _)| {
            telemetry::produce_failed(topic, kafka::error_kind(&e).0);
            anyhow!(
                "dead-lettering {p}@{o} to {topic} failed even without its payload: {e}; exiting"
            )
        })
}
