//! Following the device registry topic into its table (`crate::engine::registry`): every partition from its beginning up to the
//! high watermarks read at start (the service waits for that), then live,
//! on a thread of its own (a blocking consumer), until the service stops.

use crate::clients::kafka::{self, Quiet, READ_STALL};
use crate::engine::registry::Registry;
use anyhow::{anyhow, Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Start following `topic` into `registry`; the returned receiver answers
/// once the topic has been read up to its high watermarks at start (or
/// with the error that stopped it).
pub(crate) fn spawn(
    config: &rdkafka::ClientConfig,
    topic: &str,
    registry: Arc<Registry>,
    stop: watch::Receiver<bool>,
) -> Result<(std::thread::JoinHandle<()>, oneshot::Receiver<Result<()>>)> {
    let mut c = kafka::reader_config(config, "fleetdp-registry");
    c.set("fetch.wait.max.ms", "100");
    let consumer: BaseConsumer<Quiet> = c
        .create_with_context(Quiet("registry"))
        .context("creating the registry consumer")?;
    let (tx, rx) = oneshot::channel();
    let topic = topic.to_string();
    let handle = std::thread::Builder::new()
        .name("registry".into())
        .spawn(move || {
            let mut tx = Some(tx);
            let r = run(&consumer, &topic, &registry, &stop, &mut tx);
            match (r, tx.take()) {
                (Err(e), Some(tx)) => {
                    let _ = tx.send(Err(e));
                }
                (Err(e), None) => {
                    tracing::error!("device registry ({topic}) no longer followed: {e:#}")
                }
                (Ok(()), _) => {}
            }
        })
        .context("starting the registry thread")?;
    Ok((handle, rx))
}

fn run(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
    registry: &Registry,
    stop: &watch::Receiver<bool>,
    loaded: &mut Option<oneshot::Sender<Result<()>>>,
) -> Result<()> {
    let parts = kafka::partition_count(consumer, topic, Duration::from_secs(10))
        .with_context(|| format!("registry.topic ({topic})"))?;
    let mut tpl = TopicPartitionList::new();
    let mut remaining = HashMap::new();
    for p in 0..parts as i32 {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .with_context(|| format!("watermarks of {topic}/{p}"))?;
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        if high > low {
            remaining.insert(p, high);
        }
    }
    consumer.assign(&tpl)?;
    let started = Instant::now();
    let mut moved = Instant::now();
    let mut rejected = 0u64;
    while !*stop.borrow() {
        if loaded.is_some() && remaining.is_empty() {
            tracing::info!(
                devices = registry.len(),
                records = registry.applied(),
                rejected,
                seconds = started.elapsed().as_secs_f64(),
                "device registry loaded"
            );
            let _ = loaded.take().expect("checked").send(Ok(()));
        }
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            if loaded.is_some() {
                if kafka::drop_passed(consumer, topic, &mut remaining) {
                    moved = Instant::now();
                }
                if moved.elapsed() > READ_STALL {
                    return Err(anyhow!(
                        "reading the device registry {topic}: no progress for {} s",
                        READ_STALL.as_secs()
                    ));
                }
            }
            continue;
        };
        let msg = msg.with_context(|| format!("reading {topic}"))?;
        moved = Instant::now();
        if remaining
            .get(&msg.partition())
            .is_some_and(|&h| msg.offset() + 1 >= h)
        {
            remaining.remove(&msg.partition());
        }
        if let Err(why) = registry.apply(msg.key(), msg.payload()) {
            rejected += 1;
            crate::telemetry::registry_rejected(why.as_str());
            if rejected.is_power_of_two() {
                tracing::warn!(
                    partition = msg.partition(),
                    offset = msg.offset(),
                    reason = why.as_str(),
                    "device registry record not applied (see fleetdp_registry_rejected_total)"
                );
            }
        }
        crate::telemetry::registry_devices(registry.len());
    }
    Ok(())
}
