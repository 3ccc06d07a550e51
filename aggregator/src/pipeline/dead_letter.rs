//! The dead-letter topic: a rejected message goes there with its original
//! key, bytes and headers plus headers naming the reason, the detail and
//! where it came from; its input offset is not committed before the
//! broker acknowledges it.

use super::consume::Consuming;
use crate::telemetry;
use anyhow::{anyhow, Result};
use ingest::{Reason, Rejection};
use rdkafka::message::{BorrowedMessage, Header, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use std::time::Duration;

impl Consuming<'_> {
    /// Send a message to the dead-letter topic without waiting for the ack;
    /// commits stay behind it until it is acknowledged.
    pub(super) async fn dead_letter(
        &mut self,
        msg: &BorrowedMessage<'_>,
        rejection: &Rejection,
    ) -> Result<()> {
        let v = self.p.v.clone();
        let kc = &v.config.kafka;
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
        while self.dead_letters.len() >= kc.dead_letters_in_flight.max(1) {
            let done = self.dead_letters.join_next().await.expect("non-empty")??;
            self.finish_dead_letter(done);
        }
        let mut record = FutureRecord::to(&kc.dead_letter_topic)
            .key(msg.key().unwrap_or(&[]))
            .payload(msg.payload().unwrap_or(&[]))
            .headers(headers);
        let delivery = loop {
            match self.producer.send_result(record) {
                Ok(d) => break d,
                Err((e, r)) => {
                    // A full queue drains as acks arrive.
                    tracing::debug!(error = %e, "dead-letter queue full; waiting");
                    record = r;
                    match self.dead_letters.join_next().await {
                        Some(done) => self.finish_dead_letter(done??),
                        None => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }
        };
        let (p, o, reason) = (msg.partition(), msg.offset(), rejection.reason);
        self.offsets.dead_letter_sent(p, o);
        let topic = kc.dead_letter_topic.clone();
        self.dead_letters.spawn(async move {
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

    pub(super) fn finish_dead_letter(&mut self, (p, o, reason): (i32, i64, Reason)) {
        self.offsets.dead_letter_acked(p, o);
        self.p.counters.dead_lettered(reason);
    }
}
