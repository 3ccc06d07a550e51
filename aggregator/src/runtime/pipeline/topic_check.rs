//! The topics at start: created to FleetDP's spec when asked
//! (`fleetdp run --create-topics N --replication-factor R`), and each
//! existing one's settings checked against it before anything is consumed
//! (`state/topics.rs` judges; this reads the cluster and reports). A state
//! topic that can delete charges is refused (exit 78); the rest warns. The
//! check runs beside the consuming loop, so a cluster slow to describe (or
//! one that cannot, like librdkafka's mock) delays nothing; a refusal halts
//! the service before its first release is written.

use crate::clients::kafka;
use crate::config::Validated;
use crate::state::topics::{judge, spec, Findings, Role};
use anyhow::{bail, Result};
use rdkafka::ClientConfig;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;

/// Most partitions `--create-topics` creates a topic with.
pub const MAX_CREATE_PARTITIONS: i32 = 10_000;
/// Most replicas `--replication-factor` asks for.
pub const MAX_REPLICATION: i32 = 32;

/// How long the cluster may take to describe the topics at start.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The topics, by role: four, and the OTLP topic where one is named.
fn topics(v: &Validated) -> Vec<(Role, String)> {
    let k = &v.config.kafka;
    let mut all = vec![
        (Role::Input, k.input_topic.clone()),
        (Role::Output, k.output_topic.clone()),
        (Role::DeadLetters, k.dead_letter_topic.clone()),
        (Role::State, k.state_topic()),
    ];
    all.extend(k.otlp_topic.clone().map(|t| (Role::Otlp, t)));
    all
}

/// Create the topics that do not exist: `partitions` each (the dead-letter
/// topic one), `replication` replicas, the settings of the spec.
pub async fn create_topics(v: &Validated, partitions: i32, replication: i32) -> Result<()> {
    if !(1..=MAX_CREATE_PARTITIONS).contains(&partitions) {
        bail!("--create-topics: {partitions} partitions is out of bounds (from 1 to {MAX_CREATE_PARTITIONS})");
    }
    if !(1..=MAX_REPLICATION).contains(&replication) {
        bail!("--replication-factor: {replication} replicas is out of bounds (from 1 to {MAX_REPLICATION})");
    }
    let k = &v.config.kafka;
    let base = kafka::client_config(&k.brokers, &k.properties);
    let all = topics(v);
    let specs: Vec<kafka::NewTopicSpec> = all
        .iter()
        .map(|(role, name)| kafka::NewTopicSpec {
            name,
            partitions: if *role == Role::DeadLetters {
                1
            } else {
                partitions
            },
            replication,
            configs: spec(*role, replication, v.horizon, v.max_lateness),
        })
        .collect();
    kafka::create_topics(&base, &specs).await
}

/// Check the topics beside the loop: a refusal is set as the service's
/// `halt` reason and stops the loop.
pub(super) fn spawn(
    v: Arc<Validated>,
    base: ClientConfig,
    halt: Arc<OnceLock<String>>,
    stop: watch::Sender<bool>,
) {
    tokio::spawn(async move {
        if let Err(why) = check(&v, &base).await {
            tracing::error!("{why}");
            if halt.set(why).is_ok() {
                let _ = stop.send(true);
            }
        }
    });
}

/// Judge every topic's settings (module doc): log the warnings and notes;
/// `Err` with the refusal of what can drop charges. A cluster that does
/// not answer is warned about, not refused.
async fn check(v: &Validated, base: &ClientConfig) -> Result<(), String> {
    let all = topics(v);
    let names: Vec<String> = all.iter().map(|t| t.1.clone()).collect();
    let described = match kafka::describe_topics(base, &names, DESCRIBE_TIMEOUT).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(
                error = %format!("{e:#}"),
                "could not read the topics' settings; they are not checked (docs/operations.md#topics)"
            );
            return Ok(());
        }
    };
    let mut f = Findings::default();
    for ((role, name), d) in all.iter().zip(&described) {
        judge(*role, name, d, (v.horizon, v.max_lateness), &mut f);
    }
    if described.first().is_some_and(|d| d.brokers == 1) {
        tracing::info!(
            "a single-broker cluster: no topic is replicated (fine for local setups only)"
        );
    }
    for n in &f.note {
        tracing::info!("{n}");
    }
    for w in &f.warn {
        tracing::warn!("{w}");
    }
    match f.refuse.is_empty() {
        true => Ok(()),
        false => Err(f.refuse.join("; ")),
    }
}
