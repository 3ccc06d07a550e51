//! The service's TOML configuration: Kafka, privacy budget, HTTP listener,
//! input limits and the declared streams. Validated at start; every error
//! names the field and the rule broken.

use crate::dp::accountant::Budget;
use crate::dp::mechanism::Measure;
use crate::dp::relation::Relation;
use crate::dp::release::{plan, Plan, PrivacySpec, StreamSpec};
use crate::dp::rng::ReleaseKey;
use anyhow::{anyhow, bail, Context, Result};
use ingest::Format;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    #[serde(rename = "stream")]
    pub streams: Vec<StreamSpec>,
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
    pub input_partitioner: crate::partitioner::Partitioner,
    /// Format of input messages without a content-type header.
    #[serde(default = "default_format")]
    pub input_format: Format,
    /// Read each message's `content-type` header (default). `false` decodes
    /// every message as `input_format` without parsing headers, which saves
    /// about a microsecond per message when all producers agree on one format.
    #[serde(default = "yes")]
    pub read_content_type: bool,
    /// Releases as protobuf `WindowRelease` (default) or JSON.
    #[serde(default)]
    pub output_format: OutputFormat,
    /// Dead letters sent ahead of their acknowledgement (commits stay behind
    /// the oldest). 1 (default) sends them one at a time, which tansu 0.6
    /// needs (it loses records of multi-record batches); on Apache Kafka
    /// raise it (e.g. 10000) so a flood of bad input does not throttle the
    /// service to one dead letter per round trip.
    #[serde(default = "one_in_flight")]
    pub dead_letters_in_flight: usize,
    /// Extra librdkafka properties for every client (e.g. security settings).
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
            .field("read_content_type", &self.read_content_type)
            .field("output_format", &self.output_format)
            .field("dead_letters_in_flight", &self.dead_letters_in_flight)
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
    /// windows opened, release latency): under add-remove those reveal
    /// presence, so set this where the listener is reachable by anyone who
    /// must not learn it. `/api/status` never shows them under add-remove.
    #[serde(default)]
    pub hide_exact_counts: bool,
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
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:9898".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default = "default_max_bytes")]
    pub max_message_bytes: usize,
    #[serde(default = "default_max_readings")]
    pub max_readings_per_message: usize,
    /// Count windows: readings whose event time is this much older than the
    /// latest event time of the lane's closed windows are dead-lettered as
    /// too old. Time windows: how long after its end a window waits for
    /// late readings before it is released.
    #[serde(default = "default_lateness")]
    pub max_lateness: String,
    /// A reading whose event time is more than this ahead of its Kafka
    /// message timestamp (or before 1970) is dead-lettered (`future`).
    #[serde(default = "default_skew")]
    pub max_clock_skew: String,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: default_max_bytes(),
            max_readings_per_message: default_max_readings(),
            max_lateness: default_lateness(),
            max_clock_skew: default_skew(),
        }
    }
}

fn default_max_bytes() -> usize {
    1 << 20
}
fn default_max_readings() -> usize {
    10_000
}
fn default_lateness() -> String {
    "1h".into()
}
fn default_skew() -> String {
    "5m".into()
}

/// A validated configuration with its calibrated plan.
#[derive(Debug, Clone)]
pub struct Validated {
    pub config: Config,
    pub plan: Plan,
    pub horizon: Duration,
    pub max_lateness: Duration,
    /// Per stream (same order as `plan.streams`): window timeout, if any.
    pub window_timeouts: Vec<Option<Duration>>,
    /// Per stream: the time windows' length (add-remove), if any.
    pub windows: Vec<Option<Duration>>,
    pub max_clock_skew: Duration,
}

/// Every duration setting lies in [1 ms, 10 years]: shorter ones are below
/// the service's clock resolution, longer ones overflow millisecond
/// arithmetic on event times.
pub const MIN_DURATION: Duration = Duration::from_millis(1);
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

fn duration(field: &str, text: &str) -> Result<Duration> {
    let d = humantime::parse_duration(text)
        .map_err(|e| anyhow!("{field}: {text:?} is not a duration ({e}); e.g. \"24h\", \"5m\""))?;
    if d < MIN_DURATION || d > MAX_DURATION {
        bail!("{field}: {text:?} must be between 1ms and 10 years");
    }
    Ok(d)
}

fn nonempty(field: &str, v: &str) -> Result<()> {
    if v.trim().is_empty() {
        bail!("{field}: must not be empty");
    }
    Ok(())
}

impl Config {
    /// Parse TOML text (errors name the line and field).
    pub fn parse(text: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| anyhow!("configuration: {e}"))
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
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

    /// Validate everything and calibrate the plan.
    pub fn validate(self) -> Result<Validated> {
        let k = &self.kafka;
        nonempty("kafka.brokers", &k.brokers)?;
        nonempty("kafka.input_topic", &k.input_topic)?;
        nonempty("kafka.output_topic", &k.output_topic)?;
        nonempty("kafka.dead_letter_topic", &k.dead_letter_topic)?;
        nonempty("kafka.group_id", &k.group_id)?;
        let state = k.state_topic();
        let topics = [
            &k.input_topic,
            &k.output_topic,
            &k.dead_letter_topic,
            &state,
        ];
        for (i, a) in topics.iter().enumerate() {
            if topics[i + 1..].contains(a) {
                bail!("kafka: input_topic, output_topic, dead_letter_topic and state_topic must be four different topics ({a} twice)");
            }
        }
        if !(1..=1_000_000).contains(&k.dead_letters_in_flight) {
            bail!("kafka.dead_letters_in_flight: must be in [1, 1000000]");
        }
        if self.http.ready_max_lag < 0 {
            bail!("http.ready_max_lag: must be ≥ 0");
        }
        if self.streams.is_empty() {
            bail!("stream: declare at least one [[stream]]");
        }
        if self.limits.max_message_bytes == 0 {
            bail!("limits.max_message_bytes: must be > 0");
        }
        if self.limits.max_readings_per_message == 0 {
            bail!("limits.max_readings_per_message: must be > 0");
        }
        let horizon = duration("privacy.horizon", &self.privacy.horizon)?;
        let max_lateness = duration("limits.max_lateness", &self.limits.max_lateness)?;
        let max_clock_skew = duration("limits.max_clock_skew", &self.limits.max_clock_skew)?;
        let privacy = PrivacySpec {
            relation: self.privacy.relation,
            budget: self.budget()?,
        };
        let plan = plan(&privacy, &self.streams).map_err(|e| anyhow!("{e}"))?;
        let window_timeouts = self
            .streams
            .iter()
            .map(|s| {
                s.window_timeout
                    .as_deref()
                    .map(|t| duration(&format!("stream '{}': window_timeout", s.name), t))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let windows = self
            .streams
            .iter()
            .map(|s| {
                let Some(t) = s.window.as_deref() else {
                    return Ok(None);
                };
                let field = format!("stream '{}': window", s.name);
                let d = duration(&field, t)?;
                if d.as_millis() == 0 || horizon.as_millis() % d.as_millis() != 0 {
                    bail!(
                        "{field}: {t:?} must be a whole number of milliseconds that divides privacy.horizon \
                         ({:?}), so that no window straddles a horizon boundary",
                        self.privacy.horizon
                    );
                }
                Ok(Some(d))
            })
            .collect::<Result<_>>()?;
        Ok(Validated {
            config: self,
            plan,
            horizon,
            max_lateness,
            window_timeouts,
            windows,
            max_clock_skew,
        })
    }

    /// Load the release key; production refuses to run without one.
    pub fn release_key(&self) -> Result<ReleaseKey> {
        let p = &self.privacy;
        if let Some(var) = &p.key_env {
            let v =
                zeroize::Zeroizing::new(std::env::var(var).map_err(|_| {
                    anyhow!("privacy.key_env: environment variable {var} is not set")
                })?);
            // Out of the environment once read (child processes and later
            // reads no longer see it; /proc/PID/environ keeps the initial
            // block, so key_file is the safer choice).
            std::env::remove_var(var);
            return ReleaseKey::from_hex(&v).map_err(|e| anyhow!("privacy.key_env ({var}): {e}"));
        }
        if let Some(path) = &p.key_file {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                if let Ok(m) = std::fs::metadata(path) {
                    let mode = m.permissions().mode() & 0o777;
                    if mode & 0o077 != 0 {
                        bail!(
                            "privacy.key_file {}: mode {mode:04o} lets group or others read the release key; \
                             run `chmod 600 {}` (whoever reads the key can recompute the noise)",
                            path.display(),
                            path.display()
                        );
                    }
                }
            }
            let text = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "privacy.key_file: cannot read {} (create one with `fleetdp keygen --out {}`)",
                    path.display(),
                    path.display()
                )
            })?;
            let text = zeroize::Zeroizing::new(text);
            return ReleaseKey::from_hex(&text)
                .map_err(|e| anyhow!("privacy.key_file {}: {e}", path.display()));
        }
        bail!("privacy: no release key; set key_file or key_env (FleetDP refuses to release without a secret key)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const SAMPLE: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"
input_topic = "readings"
output_topic = "releases"
dead_letter_topic = "readings.dlq"

[privacy]
epsilon_per_device = 1.0
horizon = "24h"
key_env = "FLEETDP_TEST_KEY"

[[stream]]
name = "cabin_temp_c"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 1000
max_readings_per_device = 1
max_windows_per_device = 24
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, 0, 10, 20, 30, 40, 85]
quantiles = [0.5, 0.9]
"#;

    #[test]
    fn sample_validates() {
        let v = Config::parse(SAMPLE).unwrap().validate().unwrap();
        assert_eq!(v.horizon, Duration::from_secs(86_400));
        assert_eq!(v.plan.streams.len(), 1);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                SAMPLE.replace("horizon = \"24h\"", "horizon = \"often\""),
                "privacy.horizon",
            ),
            (
                SAMPLE.replace("epsilon_per_device = 1.0", ""),
                "privacy.epsilon_per_device",
            ),
            (
                SAMPLE.replace(
                    "epsilon_per_device = 1.0",
                    "epsilon_per_device = 1.0\nmeasure = \"zcdp\"",
                ),
                "privacy.epsilon_per_device",
            ),
            (
                SAMPLE.replace("output_topic = \"releases\"", "output_topic = \"readings\""),
                "kafka",
            ),
            (
                SAMPLE.replace("resolution = 0.1", "resolution = 0.3"),
                "lower",
            ),
            (
                SAMPLE.replace("window_size = 1000", "window_size = 1000\nwindow_sise = 3"),
                "window_sise",
            ),
            (
                SAMPLE.replace(
                    "max_windows_per_device = 24",
                    "max_windows_per_device = 24\nbudget_share = 1.5",
                ),
                "budget_share",
            ),
        ];
        for (text, field) in cases {
            let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err();
            let msg = format!("{err:#}");
            assert!(msg.contains(field), "expected {field:?} in: {msg}");
        }
    }

    #[test]
    fn add_remove_needs_time_windows_that_divide_the_horizon() {
        let ar = SAMPLE.replace(
            "horizon = \"24h\"",
            "horizon = \"24h\"\nrelation = \"add-remove\"",
        );
        let err = format!("{:#}", Config::parse(&ar).unwrap().validate().unwrap_err());
        assert!(err.contains("window") && err.contains("presence"), "{err}");
        let timed = ar.replace("window_size = 1000", "window = \"5m\"");
        let v = Config::parse(&timed).unwrap().validate().unwrap();
        assert_eq!(v.windows, vec![Some(Duration::from_secs(300))]);
        let err = format!(
            "{:#}",
            Config::parse(&timed.replace("\"5m\"", "\"7m\""))
                .unwrap()
                .validate()
                .unwrap_err()
        );
        assert!(err.contains("divides privacy.horizon"), "{err}");
        for (from, to, field) in [
            ("\"5m\"", "\"often\"", "stream 'cabin_temp_c': window"),
            ("\"5m\"", "\"0s\"", "stream 'cabin_temp_c': window"),
        ] {
            let err = format!(
                "{:#}",
                Config::parse(&timed.replace(from, to))
                    .unwrap()
                    .validate()
                    .unwrap_err()
            );
            assert!(err.contains(field), "{err}");
        }
        let soon = SAMPLE.replace(
            "window_size = 1000",
            "window_size = 1000\nwindow_timeout = \"soon\"",
        );
        let err = format!(
            "{:#}",
            Config::parse(&soon).unwrap().validate().unwrap_err()
        );
        assert!(
            err.contains("stream 'cabin_temp_c': window_timeout"),
            "{err}"
        );
    }

    /// Settings that used to pass validation and then panic, abort on a
    /// huge allocation, hang, or collide: each refused, naming its field.
    #[test]
    fn crashing_settings_are_refused_with_their_field() {
        let cases = [
            ("horizon = \"24h\"", "horizon = \"1ns\"", "privacy.horizon"),
            (
                "horizon = \"24h\"",
                "horizon = \"300000000years\"",
                "privacy.horizon",
            ),
            (
                "[[stream]]",
                "[limits]\nmax_lateness = \"300000000years\"\n[[stream]]",
                "limits.max_lateness",
            ),
            (
                "[[stream]]",
                "[limits]\nmax_clock_skew = \"0s\"\n[[stream]]",
                "limits.max_clock_skew",
            ),
            (
                "window_size = 1000",
                "window_size = 1099511627776",
                "window_size",
            ),
            (
                "window_size = 1000",
                "window_size = 1000\nwindow_timeout = \"1ns\"",
                "window_timeout",
            ),
            (
                "max_readings_per_device = 1",
                "max_readings_per_device = 4000000000",
                "max_readings_per_device",
            ),
            (
                "max_windows_per_device = 24",
                "max_windows_per_device = 4000000000",
                "max_windows_per_device",
            ),
            (
                "epsilon_per_device = 1.0",
                "epsilon_per_device = 1e-15",
                "epsilon_per_device",
            ),
            ("name = \"cabin_temp_c\"", "name = \"a/0\"", "name"),
        ];
        for (from, to, field) in cases {
            let text = SAMPLE.replace(from, to);
            assert_ne!(text, SAMPLE, "{to}");
            let started = std::time::Instant::now();
            let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err();
            let msg = format!("{err:#}");
            assert!(msg.contains(field), "{to}: expected {field:?} in: {msg}");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(1),
                "{to}: slow"
            );
        }
    }

    #[test]
    fn debug_never_shows_client_property_values() {
        let text = SAMPLE.replace(
            "dead_letter_topic = \"readings.dlq\"",
            "dead_letter_topic = \"readings.dlq\"\n[kafka.properties]\n\"sasl.password\" = \"hunter2\"",
        );
        let c = Config::parse(&text).unwrap();
        let shown = format!("{c:?}");
        assert!(
            shown.contains("sasl.password") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn key_is_required() {
        let mut c = Config::parse(SAMPLE).unwrap();
        c.privacy.key_env = None;
        assert!(format!("{:#}", c.release_key().unwrap_err()).contains("no release key"));
        c.privacy.key_env = Some("FLEETDP_SURELY_UNSET_VAR".into());
        assert!(format!("{:#}", c.release_key().unwrap_err()).contains("FLEETDP_SURELY_UNSET_VAR"));
    }
}
