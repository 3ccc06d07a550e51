//! FleetDP's topics are checked, not assumed, through the binary and the
//! broker (which stores and describes topic settings): a state topic that
//! can delete charges within a horizon is refused (exit 78, naming the
//! fix); an input whose retention cannot rebuild the state warns; and
//! `--create-topics N --replication-factor R` creates every topic to the
//! spec of docs/operations.md#topics.

use crate::harness;

use harness::child::Service;
use harness::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const PRIVACY: &str = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
const STREAM: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"count\"]";

fn admin(broker: &Broker) -> AdminClient<rdkafka::client::DefaultClientContext> {
    broker.client().create().unwrap()
}

/// Create `topic` with one partition and `configs`.
async fn create(broker: &Broker, topic: &str, configs: &[(&str, &str)]) {
    let t = configs.iter().fold(
        NewTopic::new(topic, 1, TopicReplication::Fixed(1)),
        |t, (k, v)| t.set(k, v),
    );
    for r in admin(broker)
        .create_topics(&[t], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
}

/// The settings the broker reports for `topic`.
async fn described(broker: &Broker, topic: &str) -> HashMap<String, String> {
    let r = admin(broker)
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .unwrap();
    let resource = r.into_iter().next().unwrap().unwrap();
    resource
        .entries
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect()
}

/// The topics of `t`, the state topic with `state` settings and the input
/// with `input` ones.
async fn topics(broker: &Broker, t: &Topics, state: &[(&str, &str)], input: &[(&str, &str)]) {
    create(broker, &t.input, input).await;
    create(broker, &t.output, &[]).await;
    create(broker, &t.dlq, &[]).await;
    create(broker, &t.state, state).await;
}

#[test]
fn a_state_topic_that_deletes_charges_within_a_horizon_is_refused() {
    let broker = Broker::start();
    if !broker.is_external() {
        return eprintln!("skipped: the in-process mock describes no topic settings");
    }
    let rt = runtime();
    rt.block_on(async {
        for state in [
            &[("cleanup.policy", "delete"), ("retention.ms", "3600000")][..],
            &[
                ("cleanup.policy", "compact,delete"),
                ("retention.ms", "3600000"),
            ][..],
        ] {
            let t = Topics::new("topics-state");
            topics(&broker, &t, state, &[]).await;
            let mut s = Service::start(&broker, &t, PRIVACY, "", STREAM);
            let status = s.exited_within(WAIT).await;
            let log = s.log();
            assert_eq!(status.and_then(|s| s.code()), Some(78), "{state:?}: {log}");
            for needle in [
                format!(
                    "kafka.state_topic {}: cleanup.policy = {}",
                    t.state, state[0].1
                ),
                "devices would get fresh caps".to_string(),
                format!(
                    "--entity-name {} --add-config cleanup.policy=compact",
                    t.state
                ),
            ] {
                assert!(log.contains(&needle), "{needle:?} not in: {log}");
            }
            assert!(
                read_all(&broker, &t.output).is_empty(),
                "released before refusing"
            );
        }
    });
}

#[test]
fn a_short_input_retention_warns_and_a_compacted_state_topic_runs() {
    let broker = Broker::start();
    if !broker.is_external() {
        return eprintln!("skipped: the in-process mock describes no topic settings");
    }
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("topics-input");
        let compact = [("cleanup.policy", "compact")];
        topics(&broker, &t, &compact, &[("retention.ms", "60000")]).await;
        let s = Service::start(&broker, &t, PRIVACY, "", STREAM);
        assert!(s.ready_within(WAIT).await, "never ready: {}", s.log());
        let warned = wait_until(WAIT, || s.log().contains("retention.ms = 60000 is shorter")).await;
        let log = s.log();
        assert!(warned, "{log}");
        let line = log
            .lines()
            .find(|l| l.contains("retention.ms = 60000"))
            .unwrap();
        assert!(line.contains("WARN") && line.contains(&t.input), "{line}");
        assert!(
            !log.contains("kafka.state_topic"),
            "the compacted state topic was questioned: {log}"
        );
    });
}

#[test]
fn create_topics_makes_every_topic_to_the_spec() {
    let broker = Broker::start();
    if !broker.is_external() {
        return eprintln!("skipped: the in-process mock describes no topic settings");
    }
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("topics-create");
        let args = ["--create-topics", "2", "--replication-factor", "1"];
        let key = fleetdp::dp::rng::ReleaseKey::ephemeral().to_hex();
        let s = Service::start_env(&broker, &t, [PRIVACY, "", STREAM], ("", &key), (&[], &args));
        assert!(s.ready_within(WAIT).await, "never ready: {}", s.log());
        let state = described(&broker, &t.state).await;
        assert_eq!(
            state.get("cleanup.policy").map(String::as_str),
            Some("compact"),
            "{state:?}"
        );
        let input = described(&broker, &t.input).await;
        let kept: i64 = input["retention.ms"].parse().unwrap();
        assert!(
            kept >= 25 * 3_600_000,
            "input retention {kept} < horizon + max_lateness"
        );
        for topic in [&t.input, &t.output, &t.dlq, &t.state] {
            let c = described(&broker, topic).await;
            assert_eq!(
                c.get("min.insync.replicas").map(String::as_str),
                Some("1"),
                "{topic}: {c:?}"
            );
        }
        let output = described(&broker, &t.output).await;
        assert_eq!(output["message.timestamp.type"], "CreateTime");
        assert!(
            !s.log().contains(" WARN "),
            "warnings on topics made to the spec: {}",
            s.log()
        );
    });

    // Bounds: refused on the command line (exit 2), naming the flag.
    for (args, flag) in [
        (&["--create-topics", "0"][..], "--create-topics"),
        (
            &["--create-topics", "2", "--replication-factor", "33"][..],
            "--replication-factor",
        ),
        (&["--replication-factor", "3"][..], "--create-topics"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["run", "--config", "/nonexistent.toml"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
