//! `fleetdp simulate`'s settings: every one bounded (the message names the
//! flag), the fleet they describe and where it is sent. The binary runs the
//! production loop with its progress bar ([`super::produce_fleet`]).

use super::{Fleet, FleetSpec, Signal};
use crate::config::{Config, Validated};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Duration;

/// Most simulated devices (memory: a device is about 100 bytes).
pub const MAX_DEVICES: usize = 10_000_000;
/// Most messages per second asked of the producer.
pub const MAX_RATE: f64 = 1e7;
/// Longest duty cycle, in rounds (a year of hourly rounds).
pub const MAX_CYCLE: u32 = 8_784;

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// Bootstrap servers, e.g. 127.0.0.1:9092 (default: the --config's).
    #[arg(long, required_unless_present = "config")]
    pub brokers: Option<String>,
    /// A service configuration whose kafka.brokers, kafka.security and
    /// kafka.properties the simulator connects with (a secured cluster); its
    /// input topic and streams are the defaults of --topic and --streams.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The topic to produce to (default: the --config's input_topic, else
    /// "readings").
    #[arg(long)]
    pub topic: Option<String>,
    /// Simulated devices (1 to 10,000,000).
    #[arg(long, default_value_t = 1000)]
    pub devices: usize,
    /// Messages per second (0: as fast as possible; at most 10,000,000).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// How long to produce.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Stop after this many messages.
    #[arg(long)]
    pub messages: Option<u64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fraction of malformed messages.
    #[arg(long, default_value_t = 0.0)]
    pub bad_fraction: f64,
    /// Payload format.
    #[arg(long, value_enum, default_value_t = SimFormat::Protobuf)]
    pub format: SimFormat,
    /// Streams to simulate, of cabin_temp_c, battery_v, speed_kmh (default:
    /// those the --config declares, else all three).
    #[arg(long, value_delimiter = ',')]
    pub streams: Option<Vec<String>>,
    /// Simulated (event) time between a device's readings of a stream: a
    /// round, 1ms to 10 years.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub round: Duration,
    /// "ACTIVE/CYCLE": each device reports only in ACTIVE consecutive rounds
    /// of every CYCLE (a car driven two hours a day: `--round 1h --duty
    /// 2/24`), each from its own offset. Default: every round.
    #[arg(long, value_parser = parse_duty)]
    pub duty: Option<(u32, u32)>,
    /// Event times: "auto" (the default: the wall clock as each message
    /// is sent when the --config declares time windows, add-remove, whose
    /// lateness bound drops old readings; else rounds one --round apart
    /// from 2026-01-01), "now" (the wall clock), or an RFC 3339 time such
    /// as 2026-01-01T00:00:00Z for the first round, later rounds one
    /// --round apart.
    #[arg(long, default_value = "auto", value_parser = parse_start)]
    pub start: Start,
}

/// `--start`.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    Auto,
    Now,
    At(i64),
}

impl Start {
    /// The first round's event time, or `None`: the wall clock per
    /// message (`time_windows`: the configuration releases time windows).
    fn first_round(self, time_windows: bool) -> Option<i64> {
        match self {
            Start::Auto if time_windows => None,
            Start::Auto => Some(FleetSpec::default().start_ms),
            Start::Now => None,
            Start::At(ms) => Some(ms),
        }
    }
}

fn parse_start(text: &str) -> Result<Start, String> {
    match text {
        "auto" => return Ok(Start::Auto),
        "now" => return Ok(Start::Now),
        _ => {}
    }
    let t = humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("{text:?} is neither \"now\" nor an RFC 3339 time ({e})"))?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("{text:?} is before 1970"))?
        .as_millis();
    i64::try_from(ms)
        .map(Start::At)
        .map_err(|_| format!("{text:?} is too far ahead"))
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SimFormat {
    Protobuf,
    Json,
}

/// `"2/24"` → `(2, 24)`, with `1 ≤ active ≤ cycle ≤ MAX_CYCLE`.
fn parse_duty(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?} is not ACTIVE/CYCLE rounds, e.g. \"2/24\"");
    let (a, c) = text.split_once('/').ok_or_else(bad)?;
    let (a, c): (u32, u32) = (
        a.trim().parse().map_err(|_| bad())?,
        c.trim().parse().map_err(|_| bad())?,
    );
    if a == 0 || a > c || c > MAX_CYCLE {
        return Err(format!(
            "{text:?}: needs 1 ≤ ACTIVE ≤ CYCLE ≤ {MAX_CYCLE} rounds"
        ));
    }
    Ok((a, c))
}

/// What `simulate` sends and where.
pub struct Prepared {
    pub fleet: Fleet,
    pub brokers: String,
    pub properties: std::collections::BTreeMap<String, String>,
    pub topic: String,
}

impl SimulateArgs {
    /// Check every setting and build the fleet; a refused `--config` is a
    /// configuration error (exit 78).
    pub fn prepare(&self) -> Result<Prepared> {
        if self.devices == 0 || self.devices > MAX_DEVICES {
            bail!("--devices must be between 1 and {MAX_DEVICES}");
        }
        if !(0.0..=MAX_RATE).contains(&self.rate) {
            bail!("--rate must be between 0 (as fast as possible) and {MAX_RATE:e} messages per second");
        }
        if !(0.0..=1.0).contains(&self.bad_fraction) {
            bail!("--bad-fraction must be in [0, 1]");
        }
        if self.round < crate::config::MIN_DURATION || self.round > crate::config::MAX_DURATION {
            bail!("--round must be between 1ms and 10 years");
        }
        let loaded = self
            .config
            .as_ref()
            .map(|path| {
                Config::load(path)
                    .and_then(Config::validate)
                    .map_err(crate::commands::logs::configuration)
            })
            .transpose()?;
        let signals = self
            .stream_names(loaded.as_ref())?
            .iter()
            .map(|s| {
                Signal::from_stream(s).with_context(|| {
                    format!(
                        "--streams: unknown stream {s:?} (known: cabin_temp_c, battery_v, speed_kmh)"
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Time windows (add-remove) drop readings past their lateness bound:
        // stamped with the wall clock unless --start says otherwise.
        let time_windows = loaded
            .as_ref()
            .is_some_and(|v| v.plan.streams.iter().any(|s| s.spec.window_ms.is_some()));
        let first = self.start.first_round(time_windows);
        let fleet = Fleet::new(FleetSpec {
            devices: self.devices,
            seed: self.seed,
            signals,
            bad_fraction: self.bad_fraction,
            format: match self.format {
                SimFormat::Protobuf => ingest::Format::Protobuf,
                SimFormat::Json => ingest::Format::Json,
            },
            interval_ms: self.round.as_millis() as i64,
            duty: self.duty,
            start_ms: first.unwrap_or_default(),
            wall_clock: first.is_none(),
            ..FleetSpec::default()
        });
        let (brokers, properties, topic) = match loaded {
            Some(v) => {
                let k = v.config.kafka;
                (
                    self.brokers.clone().unwrap_or(k.brokers),
                    k.properties,
                    self.topic.clone().unwrap_or(k.input_topic),
                )
            }
            None => (
                self.brokers
                    .clone()
                    .context("--brokers or --config is required")?,
                Default::default(),
                self.topic.clone().unwrap_or_else(|| "readings".into()),
            ),
        };
        Ok(Prepared {
            fleet,
            brokers,
            properties,
            topic,
        })
    }

    /// `--streams`, else a configuration's own streams: readings of a
    /// stream it does not declare would only be dead-lettered
    /// (unknown_stream).
    fn stream_names(&self, loaded: Option<&Validated>) -> Result<Vec<String>> {
        Ok(match (&self.streams, loaded) {
            (Some(s), _) => s.clone(),
            (None, Some(v)) => {
                let known: Vec<String> = v
                    .config
                    .streams
                    .iter()
                    .map(|s| s.name.clone())
                    .filter(|n| Signal::from_stream(n).is_some())
                    .collect();
                if known.is_empty() {
                    bail!(
                        "--config declares no stream the simulator makes (cabin_temp_c, battery_v, speed_kmh); pass --streams"
                    );
                }
                known
            }
            (None, None) => Signal::ALL.iter().map(|s| s.stream().to_string()).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimulateArgs,
    }

    fn parse(extra: &[&str]) -> Result<SimulateArgs, clap::Error> {
        let mut argv = vec!["simulate", "--brokers", "127.0.0.1:9"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn a_duty_cycle_and_a_round_shape_the_fleet() {
        let args = parse(&["--devices", "240", "--round", "1h", "--duty", "2/24"]).unwrap();
        let p = args.prepare().unwrap();
        assert_eq!(p.topic, "readings");
        assert_eq!(p.fleet.spec().interval_ms, 3_600_000);
        assert_eq!(p.fleet.spec().duty, Some((2, 24)));
        // 240 devices × 3 signals, two rounds in 24.
        assert_eq!(p.fleet.messages_per_round(), 60.0);
    }

    /// Issue: `simulate --config` dated readings from 2026-01-01, so a
    /// service with time windows dropped every one as late. With a
    /// configuration of time windows (or `--start now`) each message is
    /// stamped with the wall clock; a fixed time is kept when asked for.
    #[test]
    fn time_windows_get_the_wall_clock_unless_asked_otherwise() {
        assert_eq!(Start::Auto.first_round(true), None);
        assert_eq!(Start::Now.first_round(false), None);
        assert_eq!(
            Start::Auto.first_round(false),
            Some(FleetSpec::default().start_ms)
        );
        let p = parse(&["--start", "now"]).unwrap().prepare().unwrap();
        assert!(p.fleet.spec().wall_clock);
        let p = parse(&["--start", "2026-01-01T00:00:00Z"])
            .unwrap()
            .prepare()
            .unwrap();
        assert_eq!(p.fleet.spec().start_ms, 1_767_225_600_000);
        assert!(!p.fleet.spec().wall_clock);
        let p = parse(&[]).unwrap().prepare().unwrap();
        assert!(!p.fleet.spec().wall_clock, "no --config: rounds as before");
    }

    #[test]
    fn every_setting_is_bounded_and_named() {
        for (flags, named) in [
            (&["--duty", "3/2"][..], "--duty"),
            (&["--duty", "0/24"], "--duty"),
            (&["--duty", "2"], "--duty"),
            (&["--duty", "1/99999"], "--duty"),
            (&["--round", "soon"], "--round"),
            (&["--start", "yesterday"], "--start"),
            (&["--start", "1969-12-31T00:00:00Z"], "--start"),
        ] {
            let err = parse(flags)
                .err()
                .unwrap_or_else(|| panic!("{flags:?} parsed"));
            assert!(err.to_string().contains(named), "{flags:?}: {err}");
        }
        for (flags, named) in [
            (&["--devices", "0"][..], "--devices"),
            (&["--devices", "10000001"], "--devices"),
            (&["--rate=-1"], "--rate"),
            (&["--rate", "NaN"], "--rate"),
            (&["--rate", "inf"], "--rate"),
            (&["--bad-fraction", "2"], "--bad-fraction"),
            (&["--round", "0s"], "--round"),
            (&["--streams", "oil_temp"], "--streams"),
        ] {
            let err = match parse(flags).unwrap().prepare() {
                Err(e) => e,
                Ok(_) => panic!("{flags:?} accepted"),
            };
            assert!(err.to_string().contains(named), "{flags:?}: {err}");
        }
    }
}
