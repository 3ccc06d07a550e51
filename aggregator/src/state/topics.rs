//! What FleetDP's topics must be (docs/operations.md#topics): the settings
//! `fleetdp run --create-topics` creates them with, and the judgement of a
//! topic's settings as the cluster describes them at start.
//!
//! Privacy argument: the per-device caps survive restarts only through the
//! charges on the state topic (§6). A state topic that deletes records by
//! age or size (`cleanup.policy` without `compact`, or `compact,delete`
//! with a retention shorter than a horizon plus `max_lateness`, or any
//! `retention.bytes`) drops charges while their horizon still counts them,
//! and the devices then get fresh `W` caps: refused. What only costs
//! availability or a rebuild (replication, `min.insync.replicas`, the
//! input's retention) is a warning.

pub use crate::clients::kafka::Described;
use std::time::Duration;

/// Which of FleetDP's topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Input,
    Output,
    DeadLetters,
    State,
    /// `kafka.otlp_topic`: the releases as OpenTelemetry metrics.
    Otlp,
}

impl Role {
    /// The configuration field naming it.
    pub fn field(self) -> &'static str {
        match self {
            Role::Input => "kafka.input_topic",
            Role::Output => "kafka.output_topic",
            Role::DeadLetters => "kafka.dead_letter_topic",
            Role::State => "kafka.state_topic",
            Role::Otlp => "kafka.otlp_topic",
        }
    }
}

/// What the judgement found: refusals (no restart cures them), warnings,
/// and notes (what could not be checked).
#[derive(Debug, Default, PartialEq)]
pub struct Findings {
    pub refuse: Vec<String>,
    pub warn: Vec<String>,
    pub note: Vec<String>,
}

/// Kafka's default `retention.ms` (7 days), when a cluster does not say.
const KAFKA_DEFAULT_RETENTION_MS: i64 = 7 * 24 * 3_600_000;

/// How long the state must keep a window's charges, and the input its
/// readings for a rebuild: a horizon plus the lateness a reading may have.
fn needed_ms(horizon: Duration, max_lateness: Duration) -> i64 {
    (horizon + max_lateness).as_millis() as i64
}

/// The settings `--create-topics` gives a topic of `role` with
/// `replication` replicas.
pub fn spec(
    role: Role,
    replication: i32,
    horizon: Duration,
    max_lateness: Duration,
) -> Vec<(&'static str, String)> {
    let mut c = vec![(
        "min.insync.replicas",
        (replication - 1).clamp(1, 2).to_string(),
    )];
    match role {
        Role::State => c.push(("cleanup.policy", "compact".into())),
        Role::Input => {
            let day = 24 * 3_600_000;
            let keep = (needed_ms(horizon, max_lateness) + day).max(KAFKA_DEFAULT_RETENTION_MS);
            c.push(("retention.ms", keep.to_string()));
        }
        Role::Output | Role::Otlp => c.push(("message.timestamp.type", "CreateTime".into())),
        Role::DeadLetters => {}
    }
    c
}

fn fix(topic: &str, setting: &str) -> String {
    format!(
        "kafka-configs.sh --bootstrap-server <brokers> --alter --entity-type topics --entity-name {topic} \
         --add-config {setting} (docs/operations.md#topics)"
    )
}

/// Judge topic `topic` of `role` (`horizon` and `max_lateness` as
/// configured) into `f`.
pub fn judge(
    role: Role,
    topic: &str,
    d: &Described,
    (horizon, max_lateness): (Duration, Duration),
    f: &mut Findings,
) {
    let (field, needed) = (role.field(), needed_ms(horizon, max_lateness));
    let get = |k: &str| d.configs.get(k).map(String::as_str);
    let retention = get("retention.ms").and_then(|v| v.parse::<i64>().ok());
    if role == Role::State {
        judge_state(topic, d, needed, f);
    }
    if role == Role::Input {
        let kept = retention.unwrap_or(KAFKA_DEFAULT_RETENTION_MS);
        if kept >= 0 && kept < needed {
            f.warn.push(format!(
                "{field} {topic}: retention.ms = {kept} is shorter than privacy.horizon + limits.max_lateness \
                 ({needed} ms): after losing the state topic, replay could no longer rebuild the devices' caps; \
                 {}",
                fix(topic, &format!("retention.ms={needed}"))
            ));
        }
    }
    if d.brokers > 1 && d.replication < 2 {
        f.warn.push(format!(
            "{field} {topic}: replication factor {} on a cluster of {} brokers: losing one broker loses its \
             records (FleetDP's spec: 3, min.insync.replicas 2)",
            d.replication, d.brokers
        ));
    } else if d.replication >= 2 {
        let isr = get("min.insync.replicas").and_then(|v| v.parse::<usize>().ok());
        if let Some(isr @ 0..=1) = isr {
            f.warn.push(format!(
                "{field} {topic}: min.insync.replicas = {isr}: a record acknowledged by one broker is lost with \
                 it; {}",
                fix(topic, "min.insync.replicas=2")
            ));
        }
    }
}

/// The state topic: refused when it can delete charges a horizon still
/// counts (module doc).
fn judge_state(topic: &str, d: &Described, needed: i64, f: &mut Findings) {
    let get = |k: &str| d.configs.get(k).map(String::as_str);
    let Some(policy) = get("cleanup.policy") else {
        f.note.push(format!(
            "kafka.state_topic {topic}: the cluster does not report its cleanup.policy, which must be compact \
             (docs/operations.md#topics)"
        ));
        return;
    };
    let has = |p: &str| policy.split(',').any(|x| x.trim() == p);
    let why = "FleetDP's charges would be deleted while their horizon still counts them, and devices would \
               get fresh caps";
    if !has("compact") {
        f.refuse.push(format!(
            "kafka.state_topic {topic}: cleanup.policy = {policy}: {why}; {}",
            fix(topic, "cleanup.policy=compact")
        ));
        return;
    }
    if !has("delete") {
        return;
    }
    let retention = get("retention.ms").and_then(|v| v.parse::<i64>().ok());
    let retention = retention.unwrap_or(KAFKA_DEFAULT_RETENTION_MS);
    let bytes = get("retention.bytes").and_then(|v| v.parse::<i64>().ok());
    if let Some(b) = bytes.filter(|b| *b >= 0) {
        f.refuse.push(format!(
            "kafka.state_topic {topic}: cleanup.policy = {policy} with retention.bytes = {b}: {why}; {}",
            fix(topic, "cleanup.policy=compact")
        ));
    } else if retention >= 0 && retention < needed {
        f.refuse.push(format!(
            "kafka.state_topic {topic}: cleanup.policy = {policy} with retention.ms = {retention}, shorter than \
             privacy.horizon + limits.max_lateness ({needed} ms): {why}; {}",
            fix(topic, "cleanup.policy=compact")
        ));
    } else if retention >= 0 {
        f.warn.push(format!(
            "kafka.state_topic {topic}: cleanup.policy = {policy}: the ledger entries of lanes quiet for longer \
             than retention.ms ({retention}) are deleted, and a restore then reads the output topic whole; {}",
            fix(topic, "cleanup.policy=compact")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);
    const TIMES: (Duration, Duration) = (DAY, Duration::from_secs(3600));

    fn described(configs: &[(&str, &str)], replication: usize, brokers: usize) -> Described {
        Described {
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            replication,
            brokers,
        }
    }

    fn judged(role: Role, d: &Described) -> Findings {
        let mut f = Findings::default();
        judge(role, "t", d, TIMES, &mut f);
        f
    }

    #[test]
    fn a_state_topic_that_can_delete_charges_within_a_horizon_is_refused() {
        for configs in [
            vec![("cleanup.policy", "delete")],
            vec![("cleanup.policy", "delete"), ("retention.ms", "-1")],
            vec![
                ("cleanup.policy", "compact,delete"),
                ("retention.ms", "3600000"),
            ],
            vec![
                ("cleanup.policy", "compact,delete"),
                ("retention.bytes", "1000000"),
            ],
            // Kafka's default retention (7 days) against a 30-day horizon.
            vec![("cleanup.policy", "compact, delete")],
        ] {
            let mut f = Findings::default();
            let month = (30 * DAY, Duration::ZERO);
            judge(Role::State, "s", &described(&configs, 3, 3), month, &mut f);
            assert_eq!(f.refuse.len(), 1, "{configs:?}: {f:?}");
            assert!(f.refuse[0].contains("cleanup.policy=compact"), "{f:?}");
        }
        let ok = judged(
            Role::State,
            &described(&[("cleanup.policy", "compact")], 3, 3),
        );
        assert_eq!(ok, Findings::default());
        let long = [
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "604800000"),
        ];
        let f = judged(Role::State, &described(&long, 3, 3));
        assert!(f.refuse.is_empty() && f.warn.len() == 1, "{f:?}");
        let unknown = judged(Role::State, &described(&[], 1, 1));
        assert!(
            unknown.refuse.is_empty() && unknown.note.len() == 1,
            "{unknown:?}"
        );
    }

    #[test]
    fn replication_insync_replicas_and_input_retention_warn() {
        let f = judged(Role::Output, &described(&[], 1, 3));
        assert!(
            f.warn[0].contains("replication factor 1 on a cluster of 3"),
            "{f:?}"
        );
        // A single broker cannot replicate: not this topic's fault.
        assert_eq!(
            judged(Role::Output, &described(&[], 1, 1)),
            Findings::default()
        );
        let f = judged(
            Role::DeadLetters,
            &described(&[("min.insync.replicas", "1")], 3, 3),
        );
        assert!(f.warn[0].contains("min.insync.replicas = 1"), "{f:?}");
        let f = judged(
            Role::Input,
            &described(&[("retention.ms", "3600000")], 3, 3),
        );
        assert!(f.warn[0].contains("retention.ms = 3600000"), "{f:?}");
        let kept = [("retention.ms", "-1"), ("min.insync.replicas", "2")];
        assert_eq!(
            judged(Role::Input, &described(&kept, 3, 3)),
            Findings::default()
        );
    }

    #[test]
    fn the_created_topics_meet_the_judgement() {
        for role in [
            Role::Input,
            Role::Output,
            Role::DeadLetters,
            Role::State,
            Role::Otlp,
        ] {
            for replication in [1, 3] {
                let configs = spec(role, replication, TIMES.0, TIMES.1);
                let d = Described {
                    configs: configs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                    replication: replication as usize,
                    brokers: replication as usize,
                };
                assert_eq!(
                    judged(role, &d),
                    Findings::default(),
                    "{role:?} ×{replication}"
                );
            }
        }
    }
}
