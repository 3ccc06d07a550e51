//! The service's TOML configuration: Kafka, privacy budget, HTTP listener,
//! input limits and the declared streams. Validated at start; every error
//! names the field and the rule broken.

use crate::dp::accountant::Budget;
use crate::dp::mechanism::Measure;
use crate::dp::relation::Relation;
use crate::dp::release::{plan, Plan, PrivacySpec};
use anyhow::{anyhow, bail, Context, Result};
use ingest::Format;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod dimensions;
mod duration;
mod files;
mod fleet;
mod identity;
mod input;
mod limits;
pub mod otlp;
mod properties;
mod refused;
mod release_key;
mod secrets;
pub mod security;
mod stream;
#[cfg(test)]
mod tests;
mod undecodable;

pub(crate) use duration::duration;
pub use duration::{MAX_DURATION, MIN_DURATION};
pub use files::MAX_CONFIG_BYTES;
pub use fleet::{Fleet, FleetConfig, MAX_FLEET_DURATION, MAX_PENDING};
pub(crate) use identity::changed as changed_settings;
pub use identity::PlanIdentity;
pub use input::InputConfig;
pub use limits::{LimitsConfig, MAX_DEVICES_PER_LANE, MAX_MESSAGE_BYTES, MAX_READINGS_PER_MESSAGE};
pub use otlp::OtlpEncoding;
pub use refused::{configuration, Configuration};
pub(crate) use secrets::redact_logged;
pub use secrets::{Expanded, MAX_SECRET_BYTES};
pub use stream::StreamConfig;
pub use undecodable::Undecodable;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub privacy: PrivacyConfig,
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub fleet: FleetConfig,
    /// A fleet's own JSON documents (absent: FleetDP's reading format).
    #[serde(default)]
    pub input: Option<InputConfig>,
    /// OpenTelemetry metrics: where the readings are (`otlp.rs`).
    #[serde(default)]
    pub otlp: Option<otlp::OtlpConfig>,
    /// The dimensions streams may `group_by`: public key sets or private keys.
    #[serde(default)]
    pub dimensions: BTreeMap<String, dimensions::Dimension>,
    /// The device registry topic (dimension values per device).
    #[serde(default)]
    pub registry: Option<dimensions::RegistryConfig>,
    #[serde(rename = "stream")]
    pub streams: Vec<StreamConfig>,
    /// Values expanded from `${ENV}` / `${file:…}` (`secrets`), blanked
    /// wherever the configuration is shown ([`Config::shown`]).
    #[serde(skip)]
    pub secrets: secrets::Expanded,
}

/// `Debug` shows the names of extra client properties, never their values
/// (SASL passwords and keys live there).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub brokers: String,
    pub input_topic: String,
    pub output_topic: String,
    pub dead_letter_topic: String,
    /// Internal state (per-device window charges), replayed on assignment;
    /// default `<output_topic>.state`.
    #[serde(default)]
    pub state_topic: Option<String>,
    #[serde(default = "default_group")]
    pub group_id: String,
    /// The producers' partitioner: each reading's device id must map to the
    /// partition it arrived on ("murmur2", the Java default; "crc32",
    /// librdkafka's default; "none" to skip the check).
    #[serde(default)]
    pub input_partitioner: crate::clients::partitioner::Partitioner,
    /// Format of input messages without a content-type header.
    #[serde(default = "default_format")]
    pub input_format: Format,
    /// `none`, or `confluent`: messages in Schema Registry wire format.
    #[serde(default)]
    pub input_framing: ingest::Framing,
    /// Read each message's `content-type` header (default). `false` decodes
    /// every message as `input_format` without parsing headers, which saves
    /// about a microsecond per message when all producers agree on one format.
    #[serde(default = "yes")]
    pub read_content_type: bool,
    /// Releases as protobuf `WindowRelease` (default) or JSON.
    #[serde(default)]
    pub output_format: OutputFormat,
    /// Every release written again as OpenTelemetry metrics, to this topic
    /// in `otlp_encoding` (`otlp.rs`).
    #[serde(default)]
    pub otlp_topic: Option<String>,
    #[serde(default)]
    pub otlp_encoding: Option<otlp::OtlpEncoding>,
    /// Dead letters sent ahead of their acknowledgement (commits stay behind
    /// the oldest). 1 (default) sends them one at a time, which tansu 0.6
    /// needs (it loses records of multi-record batches); on Apache Kafka
    /// raise it (e.g. 10000) so a flood of bad input does not throttle the
    /// service to one dead letter per round trip.
    #[serde(default = "one_in_flight")]
    pub dead_letters_in_flight: usize,
    /// A record batch the consumer cannot decompress: `stop` (default) or
    /// `skip` (recorded as a dead letter).
    #[serde(default)]
    pub undecodable: Undecodable,
    /// TLS and SASL (`[kafka.security]`), merged into `properties` by
    /// [`Config::validate`].
    #[serde(default)]
    pub security: Option<security::SecurityConfig>,
    /// Extra librdkafka properties for every client.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Extra librdkafka properties for the consumer only.
    #[serde(default)]
    pub consumer_properties: BTreeMap<String, String>,
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: &BTreeMap<String, String>| -> Vec<String> {
            m.keys().map(|k| format!("{k}=<redacted>")).collect()
        };
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("input_topic", &self.input_topic)
            .field("output_topic", &self.output_topic)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("state_topic", &self.state_topic)
            .field("group_id", &self.group_id)
            .field("input_partitioner", &self.input_partitioner)
            .field("input_format", &self.input_format)
            .field("input_framing", &self.input_framing)
            .field("read_content_type", &self.read_content_type)
            .field("output_format", &self.output_format)
            .field("otlp_topic", &self.otlp_topic)
            .field("otlp_encoding", &self.otlp_encoding)
            .field("dead_letters_in_flight", &self.dead_letters_in_flight)
            .field("undecodable", &self.undecodable)
            .field("security", &self.security)
            .field("properties", &names(&self.properties))
            .field("consumer_properties", &names(&self.consumer_properties))
            .finish()
    }
}

impl KafkaConfig {
    /// The state topic's name.
    pub fn state_topic(&self) -> String {
        self.state_topic
            .clone()
            .unwrap_or_else(|| format!("{}.state", self.output_topic))
    }

    /// The topics and group named, and four different topics: returns the
    /// input, output, dead-letter and state topics.
    fn check(&self) -> Result<[String; 4]> {
        nonempty("kafka.brokers", &self.brokers)?;
        nonempty("kafka.input_topic", &self.input_topic)?;
        nonempty("kafka.output_topic", &self.output_topic)?;
        nonempty("kafka.dead_letter_topic", &self.dead_letter_topic)?;
        nonempty("kafka.group_id", &self.group_id)?;
        let topics = [
            self.input_topic.clone(),
            self.output_topic.clone(),
            self.dead_letter_topic.clone(),
            self.state_topic(),
        ];
        for (i, a) in topics.iter().enumerate() {
            if topics[i + 1..].contains(a) {
                bail!("kafka: input_topic, output_topic, dead_letter_topic and state_topic must be four different topics ({a} twice)");
            }
        }
        otlp::check_output(self.otlp_topic.as_deref(), self.otlp_encoding, &topics)?;
        if !(1..=1_000_000).contains(&self.dead_letters_in_flight) {
            bail!("kafka.dead_letters_in_flight: must be in [1, 1000000]");
        }
        Ok(topics)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    #[default]
    Protobuf,
    Json,
}

fn yes() -> bool {
    true
}

fn one_in_flight() -> usize {
    1
}

fn default_group() -> String {
    "fleetdp".into()
}
fn default_format() -> Format {
    Format::Protobuf
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    #[serde(default = "default_relation")]
    pub relation: Relation,
    #[serde(default = "default_measure")]
    pub measure: Measure,
    /// ε per device per horizon (measure = "pure").
    pub epsilon_per_device: Option<f64>,
    /// ρ per device per horizon (measure = "zcdp").
    pub rho_per_device: Option<f64>,
    /// δ for reporting zCDP as (ε, δ).
    pub delta: Option<f64>,
    /// Horizon, e.g. "24h".
    pub horizon: String,
    /// File holding the release key (64 hex digits).
    pub key_file: Option<PathBuf>,
    /// Environment variable holding the release key (64 hex digits).
    pub key_env: Option<String>,
    /// A declared key rotation: the id of the key this one replaces
    /// (`release_key.rs`).
    pub rotate_from: Option<String>,
}

fn default_relation() -> Relation {
    Relation::ChangeOne
}
fn default_measure() -> Measure {
    Measure::Pure
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address of the HTTP listener (/metrics, /healthz, /readyz, the
    /// status page); empty disables it.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// `/readyz` fails while an assigned partition is more than this many
    /// messages behind its high watermark.
    #[serde(default = "default_ready_max_lag")]
    pub ready_max_lag: i64,
    /// Leave out of `/metrics` every figure that counts input exactly
    /// (messages, bytes, readings accepted or dropped, dead letters, lag,
    /// windows opened, release latency) and the `process_*` metrics (which
    /// follow the input's volume): under add-remove those reveal
    /// presence, so set this where the listener is reachable by anyone who
    /// must not learn it. `/api/status` never shows them under add-remove.
    #[serde(default)]
    pub hide_exact_counts: bool,
    /// `/healthz` and `/readyz` fail once the consuming loop has not moved
    /// for this long (it moves at least every second when healthy, idle
    /// or not).
    #[serde(default = "default_stall_timeout")]
    pub stall_timeout: String,
    /// A second listener serving only `/healthz` and `/readyz`, with its
    /// own connection slots (empty: the probes are on `listen` only).
    #[serde(default)]
    pub probe_listen: String,
}

fn default_stall_timeout() -> String {
    "2m".into()
}

fn default_ready_max_lag() -> i64 {
    100_000
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            ready_max_lag: default_ready_max_lag(),
            hide_exact_counts: false,
            stall_timeout: default_stall_timeout(),
            probe_listen: String::new(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:9898".into()
}

/// A validated configuration with its calibrated plan.
#[derive(Debug, Clone)]
pub struct Validated {
    pub config: Config,
    pub plan: Plan,
    pub horizon: Duration,
    pub max_lateness: Duration,
    pub max_clock_skew: Duration,
    /// `http.stall_timeout`.
    pub stall_timeout: Duration,
    /// `[fleet]`.
    pub fleet: Fleet,
    /// `[input]`, if declared.
    pub mapping: Option<ingest::Mapping>,
    /// `[otlp]`, if declared.
    pub otlp: Option<ingest::OtlpMapping>,
    /// `[input]`'s Protobuf message, if declared.
    pub described: Option<ingest::Described>,
    /// The fleet's Avro record (`[input] avro_schema`).
    pub avro: Option<ingest::AvroSchema>,
    /// Where framed Avro messages' schemas are fetched (`[input]
    /// schema_registry_url`).
    pub schema_registry: Option<crate::clients::schemas::SchemaRegistry>,
    /// Per declared stream (config order): how its readings find their
    /// group, if it has `group_by`.
    pub groupings: Vec<Option<dimensions::Grouping>>,
    /// Per declared stream: its plan identity (what its state is written
    /// under; see `identity.rs`).
    pub identities: BTreeMap<String, std::sync::Arc<PlanIdentity>>,
}

impl Validated {
    /// `privacy.horizon` as the configuration writes it (`"24h"`, not
    /// `"1day"`): messages and reports quote the operator's own words.
    pub fn horizon_text(&self) -> &str {
        self.config.privacy.horizon.trim()
    }

    /// The `unit` of the declared stream `declared` (`""` if none).
    pub fn unit_of(&self, declared: &str) -> String {
        let c = self.config.streams.iter().find(|c| c.name == declared);
        c.and_then(|c| c.unit.clone()).unwrap_or_default()
    }

    /// The plan identity of planned stream `stream` (its declared stream's).
    pub fn identity(&self, stream: usize) -> &PlanIdentity {
        &self.identities[self.plan.streams[stream].declared_name()]
    }

    /// The dimensions some stream groups by, with their declared values
    /// (`None`: private keys, kept as raw values) — what the registry keeps.
    pub fn grouped_dimensions(&self) -> Vec<(String, Option<Vec<String>>)> {
        let mut d: Vec<String> = self
            .groupings
            .iter()
            .flatten()
            .flat_map(|g| g.dimensions().map(str::to_string))
            .collect();
        d.sort();
        d.dedup();
        d.into_iter()
            .map(|n| {
                let values = self
                    .config
                    .dimensions
                    .get(&n)
                    .and_then(|d| d.public_values().map(<[String]>::to_vec));
                (n, values)
            })
            .collect()
    }

    /// The δ the plan's private-key selections add (0 without any).
    pub fn key_selection_delta(&self) -> f64 {
        self.plan
            .streams
            .iter()
            .filter(|s| s.group.as_ref().is_none_or(|g| g.index == 0))
            .filter_map(|s| s.selection.as_ref().map(|sel| sel.mechanism.delta))
            .sum()
    }

    /// The guarantee a stream's releases carry (its partitions' and its
    /// fleet-wide releases').
    pub fn guarantee(&self, stream: &crate::dp::release::StreamPlan) -> proto::Guarantee {
        use crate::dp::mechanism::zcdp_to_approx_dp;
        use crate::dp::rational::to_f64;
        let plan = &self.plan;
        let budget = &plan.privacy.budget;
        let per_horizon = to_f64(&plan.per_horizon);
        proto::Guarantee {
            relation: plan.privacy.relation.to_string(),
            unit: "device".into(),
            measure: match budget.measure {
                Measure::Pure => "pure".into(),
                Measure::Zcdp => "zcdp".into(),
            },
            per_window: to_f64(&stream.per_window),
            per_horizon,
            // Private keys add their selections' δ (each stream's once per
            // horizon; partitions compose in parallel).
            delta: budget.delta + self.key_selection_delta(),
            epsilon_at_delta: match budget.measure {
                Measure::Pure => per_horizon,
                Measure::Zcdp => zcdp_to_approx_dp(per_horizon, budget.delta),
            },
            horizon_seconds: self.horizon.as_secs(),
            max_readings_per_device: stream.spec.max_readings_per_device,
            max_windows_per_device: stream.spec.max_windows_per_device,
            max_groups_per_device: stream.group.as_ref().map_or(1, |g| g.max_groups_per_device),
        }
    }
}

fn nonempty(field: &str, v: &str) -> Result<()> {
    if v.trim().is_empty() {
        bail!("{field}: must not be empty");
    }
    Ok(())
}

impl Config {
    /// Parse TOML text (errors name the line and field), then expand
    /// `${ENV}` and `${file:/path}` in its strings (`secrets`).
    pub fn parse(text: &str) -> Result<Config> {
        if !text.contains("${") {
            return toml::from_str(text).map_err(|e| anyhow!("configuration: {e}"));
        }
        // Expanded before the typed parse, so a `${…}` may stand for any
        // string value, the named choices (`protocol`, `relation`,
        // `measure`, `input_format`, …) included.
        let mut value: toml::Value =
            toml::from_str(text).map_err(|e| anyhow!("configuration: {e}"))?;
        let mut seen = secrets::Expanded::default();
        secrets::expand(&mut value, "", &mut seen)?;
        let mut config: Config = value
            .try_into()
            .map_err(|e| anyhow!("configuration (after expanding ${{…}}): {e}"))?;
        secrets::remember(&seen);
        config.secrets = seen;
        Ok(config)
    }

    /// The configuration as logged at start: client property values and
    /// secret settings hidden, every expanded `${…}` value blanked.
    pub fn shown(&self) -> String {
        self.secrets.redact(&format!("{self:?}"))
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = files::read_text("configuration", path, MAX_CONFIG_BYTES)
            .with_context(|| format!("reading config {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// The budget as the accountant sees it.
    pub fn budget(&self) -> Result<Budget> {
        let p = &self.privacy;
        Ok(match p.measure {
            Measure::Pure => {
                if p.rho_per_device.is_some() {
                    bail!("privacy.rho_per_device: given with measure = \"pure\"; use epsilon_per_device");
                }
                Budget {
                    measure: Measure::Pure,
                    per_horizon: p.epsilon_per_device.ok_or_else(|| {
                        anyhow!("privacy.epsilon_per_device: required when measure = \"pure\"")
                    })?,
                    delta: 0.0,
                }
            }
            Measure::Zcdp => {
                if p.epsilon_per_device.is_some() {
                    bail!("privacy.epsilon_per_device: given with measure = \"zcdp\"; use rho_per_device and delta");
                }
                Budget {
                    measure: Measure::Zcdp,
                    per_horizon: p.rho_per_device.ok_or_else(|| {
                        anyhow!("privacy.rho_per_device: required when measure = \"zcdp\"")
                    })?,
                    delta: p.delta.ok_or_else(|| {
                        anyhow!("privacy.delta: required when measure = \"zcdp\"")
                    })?,
                }
            }
        })
    }

    /// `[input]`'s mapping and `[otlp]`'s, each checked.
    fn mappings(
        &self,
        declared: &[String],
    ) -> Result<(Option<ingest::Mapping>, Option<ingest::OtlpMapping>)> {
        let mapping = self
            .input
            .as_ref()
            .map(|i| i.mapping(declared))
            .transpose()?;
        let o = otlp::mapping(
            self.otlp.as_ref(),
            self.kafka.input_format,
            self.input.is_some(),
            declared,
        )?;
        Ok((mapping, o))
    }

    /// Validate everything and calibrate the plan.
    pub fn validate(mut self) -> Result<Validated> {
        properties::merge(
            self.kafka.security.as_ref(),
            &mut self.kafka.properties,
            &mut self.kafka.consumer_properties,
        )?;
        let topics = self.kafka.check()?;
        if self.http.ready_max_lag < 0 {
            bail!("http.ready_max_lag: must be ≥ 0");
        }
        if self.streams.is_empty() {
            bail!("stream: declare at least one [[stream]]");
        }
        self.limits.check()?;
        self.rotate_from()?;
        let horizon = duration("privacy.horizon", &self.privacy.horizon)?;
        let max_lateness = duration("limits.max_lateness", &self.limits.max_lateness)?;
        let max_clock_skew = duration("limits.max_clock_skew", &self.limits.max_clock_skew)?;
        let stall_timeout = duration("http.stall_timeout", &self.http.stall_timeout)?;
        if stall_timeout < Duration::from_secs(2) {
            bail!("http.stall_timeout: {:?} is shorter than the loop's 1 s heartbeat allows; use at least 2s", self.http.stall_timeout);
        }
        let fleet = self.fleet.validate()?;
        let declared: Vec<String> = self.streams.iter().map(|s| s.name.clone()).collect();
        let (mapping, otlp) = self.mappings(&declared)?;
        let input::Sources {
            described,
            avro,
            schema_registry,
        } = input::sources(self.input.as_ref(), &self.kafka)?;
        let privacy = PrivacySpec {
            relation: self.privacy.relation,
            budget: self.budget()?,
        };
        dimensions::validate(&self.dimensions)?;
        let specs = self
            .streams
            .iter()
            .map(|s| s.to_spec(horizon, self.privacy.horizon.trim(), &self.dimensions))
            .collect::<Result<Vec<_>>>()?;
        let groupings = self
            .streams
            .iter()
            .map(|s| s.grouping(&self.dimensions))
            .collect::<Result<Vec<_>>>()?;
        if let Some(r) = &self.registry {
            let others: Vec<&String> = topics.iter().chain(&self.kafka.otlp_topic).collect();
            r.validate(&others, groupings.iter().any(Option::is_some))?;
        }
        dimensions::check_private_timing(
            &groupings,
            &self.streams,
            max_lateness + max_clock_skew,
            (horizon, self.privacy.horizon.trim()),
        )?;
        let plan = plan(&privacy, &specs).map_err(|e| anyhow!("{e}"))?;
        let registry_topic = self.registry.as_ref().map(|r| r.topic.as_str());
        let identities = identity::of_streams(&plan, &privacy, &specs, horizon, registry_topic);
        Ok(Validated {
            config: self,
            plan,
            horizon,
            max_lateness,
            max_clock_skew,
            stall_timeout,
            fleet,
            mapping,
            otlp,
            described,
            avro,
            schema_registry,
            groupings,
            identities,
        })
    }
}
