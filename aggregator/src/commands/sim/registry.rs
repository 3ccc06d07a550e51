//! The simulated fleet's device registry: each device's model, region and
//! firmware as the JSON rows of a registry topic (key = device id), and a
//! firmware rollout mid-run (4.2 goes from a fifth of the fleet to three
//! fifths) whose changed rows the producer publishes as they happen.

use super::Fleet;
use anyhow::{Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;

/// Whether device `i` runs 4.2, before or after the rollout.
pub(super) fn on_4_2(i: usize, rolled_out: bool) -> bool {
    i % 5 < if rolled_out { 3 } else { 1 }
}

fn row(i: usize, on_4_2: bool) -> Vec<u8> {
    let model = ["m1", "m2", "m3"][i % 3];
    let region = ["eu", "us", "apac"][(i / 3) % 3];
    let firmware = if on_4_2 { "4.2" } else { "4.1" };
    serde_json::to_vec(&serde_json::json!({
        "model": model,
        "region": region,
        "firmware": firmware,
    }))
    .expect("json")
}

impl Fleet {
    /// Every device's registry row now: (key, JSON value).
    pub fn registry_rows(&self) -> Vec<(String, Vec<u8>)> {
        self.devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), row(i, d.on_4_2)))
            .collect()
    }

    /// Rows changed since the last call (the rollout's).
    pub fn take_registry_updates(&mut self) -> Vec<(String, Vec<u8>)> {
        std::mem::take(&mut self.updates)
    }

    pub(super) fn roll_out(&mut self) {
        for (i, d) in self.devices.iter_mut().enumerate() {
            let now = on_4_2(i, true);
            if now != d.on_4_2 {
                d.on_4_2 = now;
                self.updates.push((d.id.clone(), row(i, now)));
            }
        }
    }
}

/// Publish registry rows (keyed by device id) and wait for every ack.
///
/// Every row is enqueued before any ack is awaited (rdkafka's `send` is
/// lazy: awaiting each in turn sent one row per `linger.ms`, ≈ 5.5 ms a
/// row, so the demo's 20,000-device registry took 110 s to start); a full
/// local queue is drained by waiting for the oldest sends first.
pub async fn produce_rows(
    config: &ClientConfig,
    topic: &str,
    rows: &[(String, Vec<u8>)],
) -> Result<()> {
    let mut config = config.clone();
    if config.get("linger.ms").is_none() {
        config.set("queue.buffering.max.ms", "5");
    }
    let producer: FutureProducer = config
        .set("partitioner", "murmur2_random")
        .create()
        .context("creating the registry producer")?;
    let mut pending = std::collections::VecDeque::new();
    let acked = |r: rdkafka::producer::DeliveryFuture| async move {
        match r.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, _))) => Err(anyhow::anyhow!("producing to {topic}: {e}")),
            Err(_) => Err(anyhow::anyhow!(
                "producing to {topic}: the producer was dropped"
            )),
        }
    };
    for (k, v) in rows {
        let mut record = FutureRecord::to(topic).key(k).payload(v);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    pending.push_back(delivery);
                    break;
                }
                Err((e, r))
                    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull)
                        && !pending.is_empty() =>
                {
                    record = r;
                    acked(pending.pop_front().expect("not empty")).await?;
                }
                Err((e, _)) => anyhow::bail!("producing to {topic}: {e}"),
            }
        }
    }
    for delivery in pending {
        acked(delivery).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{FleetSpec, Signal};
    use super::*;

    /// The rollout moves two fifths of the fleet to 4.2 at its round, says
    /// so in registry updates, and their batteries drop.
    #[test]
    fn the_rollout_moves_devices_and_their_batteries() {
        let mut f = Fleet::new(FleetSpec {
            devices: 50,
            signals: vec![Signal::BatteryVolts],
            bad_fraction: 0.0,
            outlier_fraction: 0.0,
            rollout_round: Some(2),
            ..FleetSpec::default()
        });
        let on = |rows: &[(String, Vec<u8>)]| {
            rows.iter()
                .filter(|(_, v)| String::from_utf8_lossy(v).contains("\"4.2\""))
                .count()
        };
        assert_eq!(on(&f.registry_rows()), 10);
        let mean_of = |f: &mut Fleet, dev: usize| {
            let mut sum = 0.0;
            for _ in 0..50 {
                let m = f.next_message();
                if m.key == format!("dev-{dev:06}") {
                    sum += m.reading.unwrap().1;
                }
            }
            sum
        };
        let before = mean_of(&mut f, 1);
        assert!(f.take_registry_updates().is_empty());
        mean_of(&mut f, 1); // round 1 → 2: the rollout
        let updates = f.take_registry_updates();
        assert_eq!((updates.len(), on(&f.registry_rows())), (20, 30));
        let after = mean_of(&mut f, 1);
        assert!(
            (before - after - FIRMWARE_DRAIN).abs() < 0.3,
            "{before} → {after}"
        );
    }

    use super::super::FIRMWARE_4_2_DRAIN as FIRMWARE_DRAIN;

    /// Every row is enqueued before any ack is awaited: with a linger of
    /// five minutes and batches of 20, 20 rows go out as one full batch at
    /// once, where awaiting each send in turn waited out the linger per row
    /// (the guard below is a hang detector, 5× under one linger).
    #[test]
    fn rows_are_sent_together_not_one_linger_each() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
        mock.create_topic("devices", 1, 1).unwrap();
        let mut config = ClientConfig::new();
        config
            .set("metadata.broker.list", mock.bootstrap_servers())
            .set("queue.buffering.max.ms", "300000")
            .set("message.timeout.ms", "600000")
            .set("batch.num.messages", "20");
        let rows: Vec<(String, Vec<u8>)> = (0..20)
            .map(|i| (format!("dev-{i}"), row(i, false)))
            .collect();
        let sent = rt.block_on(async {
            let guard = std::time::Duration::from_secs(60);
            tokio::time::timeout(guard, produce_rows(&config, "devices", &rows)).await
        });
        assert!(
            matches!(sent, Ok(Ok(()))),
            "the rows were not sent as one batch: {sent:?}"
        );
    }
}
