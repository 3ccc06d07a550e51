//! The consuming loop's steps for one message: prepare it (its writer's
//! schema fetched first when framed), apply it, dead-letter it when
//! refused. Each step that never waits is a plain function, so the loop
//! enters a future of its own only for a message that must wait: one
//! refused, one that closed a window, one whose private keys or schema
//! must be written or fetched first.

use super::Consuming;
use crate::clients::kafka::{self, CONTENT_TYPE};
use crate::state;
use anyhow::Result;
use rdkafka::message::{BorrowedMessage, Message};
use std::collections::VecDeque;

impl Consuming<'_> {
    /// Prepare a received framed message whose writer's schema may have to
    /// be fetched first (`None`: the service stopped while fetching), then
    /// as [`Consuming::prepare_now`].
    pub(super) async fn prepare(
        &mut self,
        msg: &BorrowedMessage<'_>,
        read_content_type: bool,
    ) -> Result<Option<Result<(), ingest::Rejection>>> {
        // A framed Avro message's writer's schema, fetched once.
        if let Some(registry) = &self.p.v.schema_registry {
            let content_type = content_type(msg, read_content_type);
            let payload = msg.payload().unwrap_or(&[]);
            let decoder = self.processor.decoder_mut();
            if !registry
                .ensure(decoder, payload, content_type, &mut self.stop.clone())
                .await
            {
                return Ok(None);
            }
        }
        Ok(Some(self.prepare_now(msg, read_content_type)))
    }

    /// Prepare a received message
    /// ([`crate::engine::process::Processor::prepare`]) and note its broker
    /// timestamp for time windows. The private keys it selected are then
    /// written ([`Consuming::write_key_updates`]) before anything they
    /// route can be released.
    pub(super) fn prepare_now(
        &mut self,
        msg: &BorrowedMessage<'_>,
        read_content_type: bool,
    ) -> Result<(), ingest::Rejection> {
        let prepared = self.processor.prepare(
            msg.partition(),
            msg.offset(),
            msg.payload().unwrap_or(&[]),
            content_type(msg, read_content_type),
            msg.timestamp().to_millis(),
        );
        if self.timed {
            // Only the broker's clock orders timestamps like offsets;
            // a producer's (CreateTime) may run behind its neighbours'.
            if let rdkafka::Timestamp::LogAppendTime(t) = msg.timestamp() {
                self.appended_until.insert(msg.partition(), t);
            }
        }
        prepared
    }

    /// Write the private-key bindings that changed since the last call
    /// (none without private keys: nothing waits then).
    pub(super) async fn write_key_updates(&mut self) -> Result<()> {
        let updates = self.processor.take_key_updates();
        if updates.is_empty() {
            return Ok(());
        }
        let topic = self.p.v.config.kafka.state_topic();
        for (stream, partition, bindings) in updates {
            let record = state::KeysRecord {
                stream,
                partition,
                bindings,
            };
            state::write_keys(&self.producer, &topic, &record, &mut self.stop.clone()).await?;
        }
        Ok(())
    }

    /// A message refused at prepare: dead-lettered after every message
    /// prepared before it is applied. Returns whether a window was released.
    pub(super) async fn refused(
        &mut self,
        msg: BorrowedMessage<'_>,
        rejection: ingest::Rejection,
        staged: &mut VecDeque<BorrowedMessage<'_>>,
    ) -> Result<bool> {
        let released_any = self.apply_all(staged).await?;
        self.dead_letters
            .send(&msg, &rejection, &mut self.offsets)
            .await?;
        self.offsets.handled(msg.partition(), msg.offset());
        Ok(released_any)
    }

    /// Apply a prepared message
    /// ([`crate::engine::process::Processor::apply`]): dead-letter it if it
    /// is refused now, start the releases of the windows it closed, and
    /// mark it handled. Returns whether a window was released.
    pub(super) async fn apply_staged(&mut self, msg: BorrowedMessage<'_>) -> Result<bool> {
        match self.apply_quietly(&msg) {
            None => Ok(false),
            Some(applied) => self.applied_aloud(msg, applied).await,
        }
    }

    /// [`Consuming::apply_staged`]'s first step, which never waits: a
    /// message accepted that closed no window (most) is handled here
    /// (`None`); otherwise its outcome, for [`Consuming::applied_aloud`].
    pub(super) fn apply_quietly(
        &mut self,
        msg: &BorrowedMessage<'_>,
    ) -> Option<Result<(), ingest::Rejection>> {
        let applied = self.processor.apply(&mut self.closed);
        if applied.is_ok() && self.closed.is_empty() {
            self.offsets.handled(msg.partition(), msg.offset());
            return None;
        }
        Some(applied)
    }

    /// [`Consuming::apply_staged`]'s second step: dead-letter a message
    /// refused now, release the windows it closed, mark it handled.
    pub(super) async fn applied_aloud(
        &mut self,
        msg: BorrowedMessage<'_>,
        applied: Result<(), ingest::Rejection>,
    ) -> Result<bool> {
        if let Err(rejection) = applied {
            self.dead_letters
                .send(&msg, &rejection, &mut self.offsets)
                .await?;
        }
        let released_any = self.release_closed().await?;
        self.offsets.handled(msg.partition(), msg.offset());
        Ok(released_any)
    }
}

/// The message's content type, when the configuration reads it.
fn content_type<'m>(msg: &'m BorrowedMessage<'_>, read: bool) -> Option<&'m str> {
    if read {
        kafka::header(msg, CONTENT_TYPE)
    } else {
        None
    }
}
