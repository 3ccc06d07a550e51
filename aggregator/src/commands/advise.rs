//! `fleetdp advise`: propose a stream's `lower`, `upper` and `resolution`
//! from a bounded sample of the input topic, privately
//! ([`crate::dp::advise`], where the privacy argument is).
//!
//! The spend is the operator's to count against the horizon's budget
//! (docs/configuration.md, "Choosing bounds"): it is printed before anything is read and
//! recorded in the state topic (kind [`ADVISE`], key
//! `advise/<stream>/<horizon>/<run>`) before the sample is read, so a run
//! that fails half-way is still counted; a run that would take the
//! horizon's advisor spends for the stream above the declared per-horizon
//! budget is refused.

use crate::clients::kafka::{self, produce_acked, read_topic, Record};
use crate::config::Validated;
use crate::dp::advise::{advise, Advice, AdviseSpec};
use crate::dp::mechanism::Measure;
pub use crate::state::ADVISE;
use crate::state::RECORD_KIND;
use anyhow::{anyhow, bail, Context as _, Result};
use rand::{Rng, SeedableRng};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::ClientConfig;
use std::collections::HashMap;
use std::io::Write;

/// Most readings a run may sample.
pub const MAX_SAMPLE: u64 = 10_000_000;

/// What `fleetdp advise` was asked.
#[derive(Debug, Clone)]
pub struct AdviseOptions {
    pub stream: String,
    /// ε of this run (pure DP).
    pub epsilon: f64,
    pub coverage: f64,
    /// Most readings sampled (1 to [`MAX_SAMPLE`]).
    pub max_readings: u64,
    /// Readings kept per device (`k` of the sample).
    pub max_readings_per_device: u32,
}

/// A recorded run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Spend {
    stream: String,
    horizon: i64,
    epsilon: f64,
    at_ms: i64,
}

/// The budget unit a run's ε takes in the plan's measure: ε itself (pure),
/// or ε²/2 (an ε-DP mechanism is ε²/2-zCDP).
fn in_budget_units(measure: Measure, epsilon: f64) -> f64 {
    match measure {
        Measure::Pure => epsilon,
        Measure::Zcdp => epsilon * epsilon / 2.0,
    }
}

/// Run the advisor; prints to `out`, progress to stderr.
pub async fn run(v: &Validated, opts: &AdviseOptions, out: &mut impl Write) -> Result<()> {
    run_with_rng(v, opts, &mut rand::rngs::StdRng::from_entropy(), out).await
}

/// [`run`] with the noise drawn from `rng` (tests pass a seeded one so a
/// run is reproducible; the command uses fresh entropy).
pub async fn run_with_rng<R: Rng + Send>(
    v: &Validated,
    opts: &AdviseOptions,
    rng: &mut R,
    out: &mut impl Write,
) -> Result<()> {
    let Some(index) = v.config.streams.iter().position(|s| s.name == opts.stream) else {
        bail!(
            "--stream {:?} is not a [[stream]] of the configuration (declared: {})",
            opts.stream,
            v.config
                .streams
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    if !(1..=MAX_SAMPLE).contains(&opts.max_readings) {
        bail!("--max-readings must be in [1, {MAX_SAMPLE}]");
    }
    let spec = AdviseSpec {
        epsilon: opts.epsilon,
        max_readings_per_device: opts.max_readings_per_device,
        coverage: opts.coverage,
    };
    // Refuse bad settings before anything is read or recorded.
    advise(&mut rand::thread_rng(), &[], &spec).map_err(|e| anyhow!("{e}"))?;
    let k = &v.config.kafka;
    let base = kafka::client_config(&k.brokers, &k.properties);
    let state = k.state_topic();
    let budget = &v.plan.privacy.budget;
    let unit = if budget.measure == Measure::Pure {
        "ε"
    } else {
        "ρ"
    };
    let now = crate::clock::now_ms();
    let horizon = now.div_euclid(v.horizon.as_millis() as i64);
    let cost = in_budget_units(budget.measure, opts.epsilon);
    writeln!(
        out,
        "fleetdp advise: stream {}, ε = {} per device ({unit} = {cost}), counted against horizon {horizon}'s budget of {unit} = {}",
        opts.stream, opts.epsilon, budget.per_horizon
    )?;
    // The input must be there before any spend is recorded.
    check_input(&base, k).await?;
    let (_tx, stop) = tokio::sync::watch::channel(false);
    // Earlier runs of this horizon.
    let prefix = format!("advise/{}/{horizon}/", opts.stream);
    let spent = spent_before(&base, &state, &prefix, &stop).await?;
    let after = in_budget_units(budget.measure, spent + opts.epsilon);
    if after > budget.per_horizon * (1.0 + 1e-12) {
        bail!(
            "refused: advisor runs for stream {} in this horizon would spend ε = {} (this one {}; {unit} = {after}), above the declared {unit} = {} per horizon",
            opts.stream,
            spent + opts.epsilon,
            opts.epsilon,
            budget.per_horizon
        );
    }
    // Recorded before the sample is read.
    let record = Spend {
        stream: opts.stream.clone(),
        horizon,
        epsilon: opts.epsilon,
        at_ms: now,
    };
    let key = format!("{prefix}{now}-{:08x}", rand::random::<u32>());
    record_spend(&base, &state, &key, &record, &stop).await?;
    writeln!(out, "spend recorded in {state}")?;
    let values = sample(v, index, opts, &base, stop).await?;
    let a = advise(rng, &values, &spec).map_err(|e| anyhow!("{e}"))?;
    report(v, index, opts, &a, out)
}

/// The input topic must exist before any spend is recorded.
async fn check_input(base: &ClientConfig, k: &crate::config::KafkaConfig) -> Result<()> {
    let (base, topic, brokers) = (base.clone(), k.input_topic.clone(), k.brokers.clone());
    tokio::task::spawn_blocking(move || -> Result<usize> {
        let consumer: rdkafka::consumer::BaseConsumer<kafka::Quiet> =
            base.create_with_context(kafka::Quiet("advise"))?;
        kafka::partition_count(&consumer, &topic, std::time::Duration::from_secs(10)).map_err(|e| {
            let e = kafka::explain_startup("kafka.input_topic", &topic, &brokers, e);
            anyhow::anyhow!("{e:#}; nothing sampled, nothing recorded")
        })
    })
    .await??;
    Ok(())
}

/// What earlier advisor runs recorded in `state` under `prefix` (this
/// stream and horizon) spent, in ε.
async fn spent_before(
    base: &ClientConfig,
    state: &str,
    prefix: &str,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<f64> {
    let (base, state, prefix, stop) = (
        base.clone(),
        state.to_string(),
        prefix.to_string(),
        stop.clone(),
    );
    tokio::task::spawn_blocking(move || -> Result<f64> {
        let mut total = 0.0;
        let quiet = |_: &str, _: u64, _: u64| {};
        read_topic(
            &base,
            &state,
            |_, low| Some(low),
            &stop,
            &quiet,
            |msg| {
                let key = msg.key().and_then(|k| std::str::from_utf8(k).ok());
                if kafka::header(msg, RECORD_KIND) == Some(ADVISE)
                    && key.is_some_and(|k| k.starts_with(&prefix))
                {
                    if let Some(s) = msg
                        .payload()
                        .and_then(|p| serde_json::from_slice::<Spend>(p).ok())
                    {
                        total += s.epsilon;
                    }
                }
                Ok(())
            },
        )
        .with_context(|| format!("reading earlier advisor runs from {state}"))?;
        Ok(total)
    })
    .await?
}

/// Record this run's spend in `state` under `key`, acknowledged by every
/// replica, before the sample is read.
async fn record_spend(
    base: &ClientConfig,
    state: &str,
    key: &str,
    record: &Spend,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let producer: kafka::Producer = base
        .clone()
        .set("request.required.acks", "all")
        .create_with_context(kafka::Quiet("advise"))?;
    let payload = serde_json::to_vec(record)?;
    produce_acked(
        &producer,
        Record {
            topic: state,
            key: key.as_bytes(),
            payload: Some(&payload),
            partition: None,
            headers: OwnedHeaders::new().insert(Header {
                key: RECORD_KIND,
                value: Some(ADVISE),
            }),
            timestamp_ms: None,
        },
        &mut stop.clone(),
    )
    .await
    .with_context(|| format!("recording the spend in {state}"))?;
    Ok(())
}

/// Each device's first `k` readings of the stream, up to `max_readings`,
/// decoded as the service decodes them (messages it would dead-letter are
/// skipped and counted).
async fn sample(
    v: &Validated,
    index: usize,
    opts: &AdviseOptions,
    base: &rdkafka::ClientConfig,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<f64>> {
    let mut decoder = crate::engine::process::decoder(v);
    let registry = v.schema_registry.clone();
    let runtime = tokio::runtime::Handle::current();
    let (base, topic) = (base.clone(), v.config.kafka.input_topic.clone());
    let (max, k) = (opts.max_readings as usize, opts.max_readings_per_device);
    tokio::task::spawn_blocking(move || -> Result<Vec<f64>> {
        let mut values = Vec::new();
        let mut per_device: HashMap<u64, u32> = HashMap::new();
        let mut skipped = 0u64;
        let progress = |t: &str, read: u64, total: u64| {
            eprintln!("advise: read {read} of {total} messages of {t}");
        };
        let r = read_topic(
            &base,
            &topic,
            |_, low| Some(low),
            &stop,
            &progress,
            |msg| {
                let ct = kafka::header(msg, crate::clients::kafka::CONTENT_TYPE);
                let payload = msg.payload().unwrap_or(&[]);
                if let Some(r) = &registry {
                    let mut stop = stop.clone();
                    if !runtime.block_on(r.ensure(&mut decoder, payload, ct, &mut stop)) {
                        return Err(anyhow!("stopped"));
                    }
                }
                match decoder.decode(payload, ct) {
                    Err(_) => skipped += 1,
                    Ok(readings) => {
                        for r in readings.iter().filter(|r| r.stream_index == index) {
                            let n = per_device
                                .entry(crate::engine::window::device_key(&r.device_id))
                                .or_insert(0);
                            if *n < k && r.value.is_finite() {
                                *n += 1;
                                values.push(r.value);
                            }
                        }
                    }
                }
                if values.len() >= max {
                    return Err(anyhow!(Full));
                }
                Ok(())
            },
        );
        match r {
            Err(e) if e.downcast_ref::<Full>().is_none() => return Err(e),
            _ => {}
        }
        values.truncate(max);
        if skipped > 0 {
            eprintln!("advise: {skipped} messages skipped (not decodable as the service's input)");
        }
        Ok(values)
    })
    .await?
}

/// The sample is full.
#[derive(Debug)]
struct Full;

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sample full")
    }
}

impl std::error::Error for Full {}

/// The proposed `[[stream]]` lines and what the plan would give with them.
fn report(
    v: &Validated,
    index: usize,
    opts: &AdviseOptions,
    a: &Advice,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "sample: ≈ {} readings (noisy), at most {} per device; clamp rate at the proposal ≈ {:.2}% (noisy)",
        a.readings,
        opts.max_readings_per_device,
        a.clamp_rate * 100.0
    )?;
    writeln!(
        out,
        "\nproposed (covering ≈ {}% of the sample):",
        opts.coverage * 100.0
    )?;
    writeln!(
        out,
        "[[stream]]\nname = {:?}\nlower = {}\nupper = {}\nresolution = {}",
        opts.stream, a.lower, a.upper, a.resolution
    )?;
    // The plan with these bounds.
    let mut config = v.config.clone();
    let s = &mut config.streams[index];
    (s.lower, s.upper, s.resolution) = (a.lower, a.upper, a.resolution);
    match config.validate() {
        Ok(planned) => {
            let text = crate::commands::report::PlanReport::new(&planned).to_text();
            let mine: Vec<&str> = text
                .split("\nstream ")
                .filter(|b| {
                    b.starts_with(&format!("{} ", opts.stream))
                        || b.starts_with(&format!("{}:", opts.stream))
                })
                .collect();
            writeln!(
                out,
                "\nthe plan with these bounds:\nstream {}",
                mine.join("\nstream ").trim_end()
            )?;
        }
        Err(e) => writeln!(out, "\nthe plan with these bounds is refused: {e:#}")?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_costs_epsilon_or_its_zcdp_equivalent() {
        assert_eq!(in_budget_units(Measure::Pure, 0.5), 0.5);
        assert_eq!(in_budget_units(Measure::Zcdp, 0.5), 0.125);
    }
}
