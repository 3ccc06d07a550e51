//! Topic administration: creating topics (with their settings) and reading
//! back what the cluster says of them (settings, replication, brokers).
//! What those mean for FleetDP is `state/topics.rs`'s to judge.

use super::Quiet;
use anyhow::{anyhow, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use std::collections::HashMap;
use std::time::Duration;

/// Create topics that do not exist yet (demo and tests; production topics are
/// the operator's); those named in `compacted` keep the latest record per key.
pub async fn ensure_topics(
    config: &ClientConfig,
    topics: &[(&str, i32)],
    compacted: &[&str],
) -> Result<()> {
    let specs: Vec<NewTopicSpec> = topics
        .iter()
        .map(|&(name, partitions)| NewTopicSpec {
            name,
            partitions,
            replication: 1,
            configs: match compacted.contains(&name) {
                true => vec![("cleanup.policy", "compact".to_string())],
                false => vec![],
            },
        })
        .collect();
    create_topics(config, &specs).await
}

/// A topic's configuration value `name` as the cluster reports it (`None`:
/// not reported, e.g. left at the broker's default).
pub async fn topic_config(
    config: &ClientConfig,
    topic: &str,
    name: &str,
) -> Result<Option<String>> {
    let admin: AdminClient<Quiet> = config
        .create_with_context(Quiet("admin"))
        .context("creating admin client")?;
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .describe_configs(&[rdkafka::admin::ResourceSpecifier::Topic(topic)], &opts)
        .await
        .with_context(|| format!("describing topic {topic}"))?;
    for r in results {
        let resource = r.map_err(|e| anyhow!("describing topic {topic}: {e}"))?;
        if let Some(entry) = resource.get(name) {
            return Ok(entry.value.clone());
        }
    }
    Ok(None)
}

/// A topic to create: its name, partitions, replicas and settings.
pub struct NewTopicSpec<'a> {
    pub name: &'a str,
    pub partitions: i32,
    pub replication: i32,
    pub configs: Vec<(&'static str, String)>,
}

/// Create the topics that do not exist yet, each as `specs` says; existing
/// ones are left as they are (the checks at start judge them).
pub async fn create_topics(config: &ClientConfig, specs: &[NewTopicSpec<'_>]) -> Result<()> {
    let admin: AdminClient<Quiet> = config
        .create_with_context(Quiet("admin"))
        .context("creating admin client")?;
    let new: Vec<NewTopic> = specs
        .iter()
        .map(|s| {
            let t = NewTopic::new(s.name, s.partitions, TopicReplication::Fixed(s.replication));
            s.configs.iter().fold(t, |t, (k, v)| t.set(k, v))
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

/// A topic as the cluster describes it.
#[derive(Debug, Clone, Default)]
pub struct Described {
    /// The settings the cluster reports (a broker may leave defaults out).
    pub configs: HashMap<String, String>,
    /// The fewest replicas of any of its partitions.
    pub replication: usize,
    /// Brokers in the cluster.
    pub brokers: usize,
}

/// What the cluster says of each of `topics` (in order), within `timeout`.
pub async fn describe_topics(
    config: &ClientConfig,
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<Described>> {
    let mut c = config.clone();
    c.set("group.id", "fleetdp-metadata");
    let names = topics.to_vec();
    let shapes = tokio::task::spawn_blocking(move || -> Result<Vec<(usize, usize)>> {
        let md: BaseConsumer<Quiet> = c.create_with_context(Quiet("metadata"))?;
        let m = md
            .fetch_metadata(None, timeout)
            .context("fetching the cluster's metadata")?;
        let replicas = |name: &str| {
            let t = m.topics().iter().find(|t| t.name() == name);
            t.and_then(|t| t.partitions().iter().map(|p| p.replicas().len()).min())
                .unwrap_or(0)
        };
        Ok(names
            .iter()
            .map(|n| (replicas(n), m.brokers().len()))
            .collect())
    })
    .await??;
    let admin: AdminClient<Quiet> = config
        .create_with_context(Quiet("admin"))
        .context("creating admin client")?;
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    let asked: Vec<ResourceSpecifier> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results = admin
        .describe_configs(&asked, &opts)
        .await
        .context("describing topics")?;
    let mut out = Vec::new();
    for ((r, topic), (replication, brokers)) in results.into_iter().zip(topics).zip(shapes) {
        let resource = r.map_err(|e| anyhow!("describing topic {topic}: {e}"))?;
        let configs = resource
            .entries
            .into_iter()
            .filter_map(|e| Some((e.name, e.value?)))
            .collect();
        out.push(Described {
            configs,
            replication,
            brokers,
        });
    }
    Ok(out)
}
