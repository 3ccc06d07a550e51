//! `fleetdp demo`: an in-process Kafka (librdkafka's mock cluster), a
//! simulated fleet, the pipeline and `/metrics`, with each fleet-wide
//! release printed as it lands next to the true value (the demo owns its
//! data); `--partitions` adds every partition's release. Stops by itself.

use super::sim::{Fleet, FleetSpec};
use crate::clients::kafka;
use crate::config::{Config, Validated};
use crate::dp::release::StatKind;
use crate::dp::rng::ReleaseKey;
use crate::runtime::pipeline::{Options, Pipeline};
use anyhow::{Context, Result};
use rdkafka::mocking::MockCluster;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

mod screen;
use screen::Screen;

/// The demo's configuration, embedded.
pub const DEMO_CONFIG: &str = include_str!("../../../deploy/demo.toml");

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub duration: Duration,
    pub devices: usize,
    /// Real seconds per simulated round (every device reports every stream once).
    pub round_seconds: f64,
    pub listen: Option<String>,
    pub seed: u64,
    /// The same fleet at [`TIGHT_EPSILON`] per device per day, the budget
    /// split evenly (its targets cannot be met there).
    pub tight: bool,
    /// The release key (default: a fresh one per run).
    pub key: Option<ReleaseKey>,
    /// Print every partition's release too (the fleet-wide ones always).
    pub partitions: bool,
    /// The fleet publishes its own multi-metric JSON documents, read through
    /// an `[input]` mapping ([`super::sim::DOCUMENT_MAPPING`]).
    pub documents: bool,
}

/// ε per device per horizon of `fleetdp demo --tight`.
pub const TIGHT_EPSILON: f64 = 0.2;

/// The fleet `deploy/demo.toml`'s window sizes are written for; other
/// fleets get them scaled (a window holds about an hour of the fleet's
/// readings on a partition).
pub const DEMO_DEVICES: usize = 100_000;

/// Each simulated device reports in this many rounds (hours) of a day.
pub const ACTIVE_HOURS: u32 = 2;

/// What the run's budget means for one device, in plain words (the demo
/// runs at a budget no deployment should use, and says so).
pub(crate) fn budget_statement(v: &Validated) -> String {
    use crate::dp::mechanism::{zcdp_to_approx_dp, Measure};
    let b = &v.plan.privacy.budget;
    let horizon = v.horizon_text();
    let (declared, eps) = match b.measure {
        Measure::Pure => (
            format!("ε = {}", super::report::sig(b.per_horizon)),
            b.per_horizon,
        ),
        Measure::Zcdp => {
            let e = zcdp_to_approx_dp(b.per_horizon, b.delta);
            (
                format!(
                    "ρ = {} (≈ ε = {} at δ = {:e})",
                    super::report::sig(b.per_horizon),
                    super::report::sig(e),
                    b.delta
                ),
                e,
            )
        }
    };
    let (factor, strength) = super::report::odds(eps);
    format!(
        "Budget: {declared} per device per {horizon}. Whatever is released, the odds of any guess about one \
         device's readings in a {horizon} change by at most a factor e^ε ≈ {factor}: {strength} \
         ({}).",
        super::report::ODDS_SCALE
    )
}

/// What a demo run showed.
#[derive(Debug, Clone)]
pub struct DemoOutcome {
    /// Partitions' figures (histogram bins each) within their stream's
    /// `target_error` or the bound `fleetdp plan` warns at (`super::judge`),
    /// and all.
    pub useful: (u64, u64),
    /// The same for the fleet-wide figures.
    pub fleet_useful: (u64, u64),
    pub fleet_releases: u64,
    /// The end-of-run summary, as printed.
    pub summary: String,
    /// Grouped streams: each group's latest fleet-wide mean, by (declared
    /// stream, group key).
    pub group_means: BTreeMap<(String, String), f64>,
    pub windows_released: u64,
}

/// The demo configuration pointed at `brokers`, its window sizes scaled
/// to `devices` (tight, documents: see [`DemoOptions`]).
pub fn demo_config(
    brokers: &str,
    tight: bool,
    documents: bool,
    devices: usize,
) -> Result<Validated> {
    let mut c = Config::parse(DEMO_CONFIG).context("embedded demo config")?;
    c.kafka.brokers = brokers.to_string();
    // Windows hold about an hour of the fleet's readings, whatever its
    // size; a mean's noise scales as 1/n, so its target does too (a
    // histogram bin's noise does not depend on n).
    let scale = devices.max(1) as f64 / DEMO_DEVICES as f64;
    for s in &mut c.streams {
        if s.window_size > 0 {
            let n = ((s.window_size as f64 * scale).round() as u64).max(1);
            let actual = n as f64 / s.window_size as f64;
            s.window_size = n;
            for (kind, target) in s.target_error.iter_mut() {
                if !matches!(kind, StatKind::Histogram | StatKind::Count) {
                    *target /= actual;
                }
            }
        }
    }
    if documents {
        c.input =
            Some(toml::from_str(super::sim::DOCUMENT_MAPPING).context("the documents' mapping")?);
    }
    if tight {
        c.privacy.epsilon_per_device = Some(TIGHT_EPSILON);
        c.streams.iter_mut().for_each(|s| s.target_error.clear());
    }
    c.validate()
}

/// Run the demo; blocks until it ends.
pub fn run(opts: DemoOptions) -> Result<DemoOutcome> {
    // The mock cluster is not Send: it lives on this thread for the whole run.
    let mock = MockCluster::new(1).context("starting the in-process Kafka cluster")?;
    let brokers = mock.bootstrap_servers();
    let v = demo_config(&brokers, opts.tight, opts.documents, opts.devices)?;
    let k = &v.config.kafka;
    mock.create_topic(&k.input_topic, 2, 1)?;
    mock.create_topic(&k.output_topic, 2, 1)?;
    mock.create_topic(&k.dead_letter_topic, 1, 1)?;
    mock.create_topic(&k.state_topic(), 2, 1)?;
    if let Some(r) = &v.config.registry {
        // The mock cluster keeps about 5 MiB per partition and drops what
        // is older: the default fleet's 100,000 rows (≈ 13 MB) on one
        // partition lost a seventh of the fleet to `firmware=other`.
        mock.create_topic(&r.topic, 8, 1)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    let result = rt.block_on(run_async(v, opts));
    drop(rt);
    drop(mock);
    result
}

async fn run_async(v: Validated, opts: DemoOptions) -> Result<DemoOutcome> {
    print_intro(&v, &opts);
    let report = super::report::PlanReport::new(&v).to_text();
    let base = kafka::client_config(&v.config.kafka.brokers, &v.config.kafka.properties);
    let spec = fleet_spec(&v, &opts);
    if let Some(topic) = &spec.registry_topic {
        publish_registry(&base, topic, &spec, &opts).await?;
    }
    let input = v.config.kafka.input_topic.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
    let (fleet_tx, mut fleet_rx) = mpsc::unbounded_channel();
    let key = opts.key.clone().unwrap_or_else(ReleaseKey::ephemeral);
    let pipeline = std::sync::Arc::new(Pipeline::new(v, key));
    if let Some(addr) = &opts.listen {
        serve_status(&pipeline, addr).await;
    }
    println!("{report}");
    println!(
        "Fleet-wide releases as they land (every partition's window of a seq combined; value ± 95% half-width, true value alongside){}:",
        if opts.partitions { ", then each partition's" } else { "; --partitions shows each partition's" }
    );
    let p = pipeline.clone();
    let rx = stop_rx.clone();
    let service = tokio::spawn(async move {
        let events = Options {
            events: Some(ev_tx),
            fleet_events: Some(fleet_tx),
            with_truth: true,
            // The in-process mock answers no DescribeConfigs.
            skip_topic_check: true,
            ..Options::default()
        };
        p.run(rx, events).await
    });
    let mut fleet = Fleet::new(spec);
    let rate = fleet.messages_per_round() / opts.round_seconds;
    let producer = tokio::spawn(async move {
        super::sim::produce_fleet(&base, &input, &mut fleet, rate, None, None, stop_rx, |_| {})
            .await
    });
    let mut screen = Screen::new(pipeline.config(), opts.partitions);
    let mut progress = tokio::time::interval(Duration::from_secs(5));
    let deadline = tokio::time::sleep(opts.duration);
    tokio::pin!(deadline);
    let c = pipeline.counters.clone();
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        tokio::select! {
            Some(e) = ev_rx.recv() => screen.landed(e),
            Some(f) = fleet_rx.recv() => {
                // Its partitions' windows were acknowledged before it was
                // read back: take their values first.
                while let Ok(e) = ev_rx.try_recv() {
                    screen.landed(e);
                }
                screen.fleet_landed(f);
            }
            _ = progress.tick() => println!("{}", progress_line(&c, screen.started())),
            _ = &mut deadline => break,
            _ = &mut ctrl_c => break,
        }
    }
    let _ = stop_tx.send(true);
    producer.await??;
    service.await??;
    while let Ok(e) = ev_rx.try_recv() {
        screen.landed(e);
    }
    while let Ok(f) = fleet_rx.try_recv() {
        screen.fleet_landed(f);
    }
    let outcome = screen.finish(c.windows_released.load(Ordering::Relaxed));
    print!("{}", outcome.summary);
    println!(
        "Done: {} messages, {} windows released, {} dead letters. Run `fleetdp run --config deploy/fleetdp.toml` against a real cluster.",
        c.messages.load(Ordering::Relaxed),
        c.windows_released.load(Ordering::Relaxed),
        c.dead_letters_total()
    );
    Ok(outcome)
}

/// What the demo runs and how to read it, before it starts.
fn print_intro(v: &Validated, opts: &DemoOptions) {
    println!(
        "FleetDP demo: in-process Kafka, {} simulated devices, {} s.",
        opts.devices,
        opts.duration.as_secs()
    );
    if opts.tight {
        println!(
            "--tight: the same fleet at ε = {TIGHT_EPSILON} per device per day, split evenly: compare with the default."
        );
    } else {
        println!(
            "The budget is split by each stream's target_error (see deploy/demo.toml); `--tight` shows ε = {TIGHT_EPSILON}."
        );
    }
    if opts.documents {
        println!(
            "--documents: each device sends one JSON document per report, e.g. \
             {{\"vin\":\"dev-000001\",\"ts\":\"2026-01-01T00:00:00.450Z\",\"cabin\":{{\"temp_c\":21.3}},\
             \"battery\":{{\"volts\":12.61}},\"speed_kmh\":58.2,\"odo_km\":10001}}, read through this [input] table:{}",
            super::sim::DOCUMENT_MAPPING.replace("\n[streams]", "\n[input.streams]").replace('\n', "\n    ")
        );
    }
    println!("{}", budget_statement(v));
}

/// The simulated fleet: hourly rounds, each device active in
/// [`ACTIVE_HOURS`] of a day; firmware 4.2 rolls out halfway through (its
/// registry rows change then).
fn fleet_spec(v: &Validated, opts: &DemoOptions) -> FleetSpec {
    let rollout = ((opts.duration.as_secs_f64() / opts.round_seconds) / 2.0).max(1.0) as i64;
    FleetSpec {
        devices: opts.devices,
        interval_ms: 3_600_000,
        duty: Some((ACTIVE_HOURS, 24)),
        seed: opts.seed,
        documents: opts.documents,
        rollout_round: Some(rollout),
        registry_topic: v.config.registry.as_ref().map(|r| r.topic.clone()),
        ..FleetSpec::default()
    }
}

/// The fleet's device registry rows, produced before the first reading.
async fn publish_registry(
    base: &rdkafka::ClientConfig,
    topic: &str,
    spec: &FleetSpec,
    opts: &DemoOptions,
) -> Result<()> {
    let rows = Fleet::new(spec.clone()).registry_rows();
    super::sim::produce_rows(base, topic, &rows).await?;
    let rollout = spec.rollout_round.unwrap_or_default();
    println!(
        "Device registry: {} rows on `{topic}` (model, region, firmware; 4.2 on a fifth of the fleet, \
         three fifths after the rollout at hour {rollout}, ≈ {:.0} s in). battery_v is released per \
         firmware: the simulated 4.2 drains batteries by {} V — watch the two groups part.",
        rows.len(),
        rollout as f64 * opts.round_seconds,
        super::sim::FIRMWARE_4_2_DRAIN
    );
    Ok(())
}

/// Serve the status page and `/metrics` on `addr` (a failure is printed,
/// not fatal: the demo runs without them).
async fn serve_status(pipeline: &Pipeline, addr: &str) {
    let config = pipeline.config();
    let review = super::report::review_page(&super::report::PlanReport::new(&config), &config);
    let state = crate::serve::http::recorder().map(|metrics| {
        std::sync::Arc::new(crate::serve::http::HttpState {
            metrics,
            board: pipeline.board.clone(),
            config,
            counters: pipeline.counters.clone(),
            review,
        })
    });
    let served = match state {
        Ok(s) => crate::serve::http::serve(addr, s).await,
        Err(e) => Err(e),
    };
    match served {
        Ok(a) => println!("Status page: http://{a}/ · Prometheus metrics: http://{a}/metrics"),
        Err(e) => println!("(HTTP listener not started: {e:#})"),
    }
}

/// The line printed every 5 s.
fn progress_line(c: &crate::telemetry::Counters, started: Instant) -> String {
    format!(
        "  … {:.0}s: {} messages, {} readings accepted, {} dead letters, {} dropped by the per-device caps \
         (readings past a device's k per window or W windows per horizon: what bounds its influence), {} windows released",
        started.elapsed().as_secs_f64(),
        c.messages.load(Ordering::Relaxed),
        c.readings_accepted.load(Ordering::Relaxed),
        c.dead_letters_total(),
        c.dropped_window_cap.load(Ordering::Relaxed)
            + c.dropped_horizon_cap.load(Ordering::Relaxed)
            + c.dropped_group_cap.load(Ordering::Relaxed),
        c.windows_released.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any fleet size plans: the windows and the mean targets scale with
    /// it (a small fleet's figures are noisier, never refused), for both
    /// budgets and both input shapes.
    #[test]
    fn every_fleet_size_plans() {
        for devices in [1, 200, 1_000, 20_000, DEMO_DEVICES, 1_000_000] {
            for (tight, documents) in [(false, false), (true, false), (false, true)] {
                let v = demo_config("127.0.0.1:9", tight, documents, devices)
                    .unwrap_or_else(|e| panic!("{devices} devices, tight {tight}: {e:#}"));
                let cabin = &v.config.streams[0];
                assert!(cabin.window_size >= 1, "{devices}");
            }
        }
        let small = demo_config("127.0.0.1:9", false, false, 1_000).unwrap();
        assert_eq!(small.config.streams[0].window_size, 38);
    }

    /// The demo says what its budget means: its ε = 2 per device per day
    /// is moderate protection, `--tight`'s 0.2 strong.
    #[test]
    fn the_demo_states_what_its_budget_buys() {
        let v = demo_config("127.0.0.1:9", false, false, DEMO_DEVICES).unwrap();
        let s = budget_statement(&v);
        assert!(s.contains("ε = 2 per device per 24h"), "{s}");
        assert!(s.contains("e^ε ≈ 7.39:"), "{s}");
        assert!(s.contains("moderate protection"), "{s}");
        let s = budget_statement(&demo_config("127.0.0.1:9", true, false, DEMO_DEVICES).unwrap());
        assert!(
            s.contains("ε = 0.2 per device per 24h") && s.contains("strong protection"),
            "{s}"
        );
        for (eps, shown) in [
            (0.2, "1.22"),
            (2.0, "7.39"),
            (10.0, "22000"),
            (24.0, "2.65e10"),
        ] {
            assert_eq!(crate::commands::report::odds(eps).0, shown);
        }
    }
}
