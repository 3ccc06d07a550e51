//! The simulated fleet's device registry: each device's model, region and
//! firmware as the JSON rows of a registry topic (key = device id), and a
//! firmware rollout mid-run (4.2 goes from a fifth of the fleet to three
//! fifths) whose changed rows the producer publishes as they happen.

use super::Fleet;
use anyhow::{Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

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
pub async fn produce_rows(
    config: &ClientConfig,
    topic: &str,
    rows: &[(String, Vec<u8>)],
) -> Result<()> {
    let producer: FutureProducer = config
        .clone()
        .set("linger.ms", "5")
        .set("partitioner", "murmur2_random")
        .create()
        .context("creating the registry producer")?;
    let sends: Vec<_> = rows
        .iter()
        .map(|(k, v)| {
            producer.send(
                FutureRecord::to(topic).key(k).payload(v),
                Duration::from_secs(30),
            )
        })
        .collect();
    for s in sends {
        s.await
            .map_err(|(e, _)| anyhow::anyhow!("producing to {topic}: {e}"))?;
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
}
