//! The `fleetdp` command: demo, run, plan, simulate, keygen.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use fleetdp::config::Config;
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::pipeline::{Options, Pipeline};
use fleetdp::report::PlanReport;
use fleetdp::sim::command::{Prepared, SimulateArgs};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::watch;

/// FleetDP: differentially private summaries of device telemetry over Kafka.
#[derive(Parser)]
#[command(version = fleetdp::VERSION, about, long_about = None)]
struct Cli {
    /// Log as JSON lines instead of text.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything in process: a mock Kafka, a simulated fleet, the
    /// pipeline and /metrics; prints each release as it lands. No setup.
    Demo(DemoArgs),
    /// Run the service against a Kafka cluster.
    Run {
        /// The TOML configuration (see deploy/fleetdp.toml).
        #[arg(long, short)]
        config: PathBuf,
        /// Create the input, output, dead-letter and state topics that do not
        /// exist, with this many partitions (1 to 10,000; the dead-letter topic
        /// gets 1) and the settings of docs/operations.md#topics (state topic
        /// compacted, input retention ≥ horizon + max_lateness). Existing
        /// topics are left alone and checked at start like any other.
        #[arg(long, value_name = "PARTITIONS", value_parser = clap::value_parser!(i32).range(1..=fleetdp::pipeline::MAX_CREATE_PARTITIONS as i64))]
        create_topics: Option<i32>,
        /// Replicas of each topic --create-topics creates (1 to 32; production:
        /// 3, with min.insync.replicas 2, which it sets).
        #[arg(
            long,
            value_name = "REPLICAS",
            default_value_t = 1,
            requires = "create_topics",
            value_parser = clap::value_parser!(i32).range(1..=fleetdp::pipeline::MAX_REPLICATION as i64)
        )]
        replication_factor: i32,
        /// Accept state written under another plan (horizon, W, k, n, budget,
        /// time windows or the input's partition count). Only at a horizon
        /// boundary: the old plan's charges are dropped, so a change within a
        /// horizon would give devices fresh caps (see docs/operations.md, Operator's playbook).
        #[arg(long)]
        allow_plan_change: bool,
    },
    /// Show what a configuration spends and how accurate it is, and warn
    /// about figures it would release mostly as noise; exits non-zero when
    /// the plan is over budget or invalid (or, with --strict, warned about).
    Plan {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
        format: PlanFormat,
        /// Fail (exit 78, the configuration error's code) when a figure would be mostly noise: a mean's or
        /// std's 95% half-width over 5% of the stream's range, a histogram
        /// bin's over the count the bin expects, or any figure over its
        /// declared target_error.
        #[arg(long)]
        strict: bool,
        /// Also write the plan as one self-contained HTML page for a privacy
        /// review (the promise, each mechanism with its proof, the accuracy
        /// trade-off as charts) to this file.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
    },
    /// Produce a simulated fleet's readings to a Kafka topic (load generator).
    Simulate(SimulateArgs),
    /// Print the output topic's releases as they land (as the demo does, or
    /// one JSON document per line). Never commits offsets.
    Tail(TailArgs),
    /// Propose a stream's lower, upper and resolution from a sample of the
    /// input topic, privately: spends its own ε per device (printed first
    /// and recorded in the state topic; count it against the horizon's
    /// budget), refused when this horizon's runs for the stream would pass
    /// the declared budget.
    Advise(AdviseArgs),
    /// Write a new random release key (64 hex digits) to a file.
    Keygen {
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the Grafana dashboard for a configuration: the shipped fleet
    /// view plus a row per stream with its unit on the axes (import it, or
    /// put it in Grafana's provisioning folder).
    Dashboard {
        #[arg(long)]
        config: PathBuf,
    },
}

/// `fleetdp demo`'s options.
#[derive(clap::Args)]
struct DemoArgs {
    /// How long to run.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Simulated devices (each reports in two hours of the simulated day;
    /// the windows scale with the fleet, and so does their accuracy).
    #[arg(long, default_value_t = fleetdp::demo::DEMO_DEVICES)]
    devices: usize,
    /// Real seconds per simulated hour (2.5: a day per minute).
    #[arg(long, default_value_t = 2.5)]
    round_seconds: f64,
    /// Where to serve /metrics ("" to disable).
    #[arg(long, default_value = "127.0.0.1:9898")]
    listen: String,
    /// Seed of the simulated fleet.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Show the same fleet at a tight budget (ε = 0.2 per device per day,
    /// split evenly) to see what the default's budget buys.
    #[arg(long)]
    tight: bool,
    /// Print every partition's release too (fleet-wide releases are
    /// always printed).
    #[arg(long)]
    partitions: bool,
    /// The fleet sends its own multi-metric JSON documents (vin, an
    /// RFC 3339 ts, nested metrics), read through an [input] mapping.
    #[arg(long)]
    documents: bool,
}

/// `fleetdp tail`'s options.
#[derive(clap::Args)]
struct TailArgs {
    /// The service's TOML configuration (brokers, output topic).
    #[arg(long, short)]
    config: PathBuf,
    #[arg(long, value_enum, default_value_t = TailFormatArg::Table)]
    format: TailFormatArg,
    /// Start from the oldest release kept instead of from now.
    #[arg(long)]
    from_beginning: bool,
    /// Stop after this many releases.
    #[arg(long)]
    max: Option<u64>,
    /// Stop after this long without a release (e.g. 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    idle: Option<Duration>,
    /// Only fleet-wide releases (every partition's window of a seq
    /// combined), not each partition's.
    #[arg(long)]
    fleet: bool,
}

/// `fleetdp advise`'s options.
#[derive(clap::Args)]
struct AdviseArgs {
    /// The service's TOML configuration (brokers, topics, the stream).
    #[arg(long, short)]
    config: PathBuf,
    /// The [[stream]] to advise on.
    #[arg(long)]
    stream: String,
    /// ε this run spends per device (pure DP), in (0, 100].
    #[arg(long, default_value_t = 1.0)]
    epsilon: f64,
    /// Share of readings the bounds should cover, in [0.5, 0.9999].
    #[arg(long, default_value_t = 0.99)]
    coverage: f64,
    /// Most readings sampled (from the oldest kept), 1 to 10^7.
    #[arg(long, default_value_t = 1_000_000)]
    max_readings: u64,
    /// Readings kept per device (k of the sample), 1 to 10,000.
    #[arg(long, default_value_t = 1)]
    max_readings_per_device: u32,
}

#[derive(Clone, Copy, ValueEnum)]
enum TailFormatArg {
    Table,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanFormat {
    Text,
    Json,
}

fn init_logging(json: bool, default: &str) {
    fleetdp::logs::init(json, default);
}

/// A configuration (or its key) refused: exit code 78, not 1.
fn configuration<T>(r: Result<T>) -> Result<T> {
    r.map_err(fleetdp::logs::configuration)
}

fn shutdown_on_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            // SIGHUP (a closed terminal, or an operator expecting a reload)
            // stops gracefully too: nothing is reloaded in place.
            let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("signal received: finishing the message in hand");
        let _ = tx.send(true);
    });
    rx
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_json = cli.log_json;
    let result = match cli.command {
        Command::Demo(args) => demo(args, cli.log_json),
        Command::Run {
            config,
            create_topics,
            replication_factor,
            allow_plan_change,
        } => {
            init_logging(cli.log_json, "info");
            let create = create_topics.map(|p| (p, replication_factor));
            run(config, create, allow_plan_change)
        }
        Command::Plan {
            config,
            format,
            strict,
            report,
        } => plan(config, format, strict, report),
        Command::Simulate(args) => {
            init_logging(cli.log_json, "warn");
            simulate(args)
        }
        Command::Tail(args) => tail_command(args, cli.log_json),
        Command::Keygen { out } => keygen(out),
        Command::Dashboard { config } => {
            configuration(Config::load(&config).and_then(Config::validate)).and_then(|v| {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&fleetdp::dashboard::generate(&v))?
                );
                Ok(())
            })
        }
        Command::Advise(args) => advise_command(args, cli.log_json),
    };
    fleetdp::logs::finish(result, log_json)
}

/// `fleetdp demo`.
fn demo(a: DemoArgs, log_json: bool) -> Result<()> {
    init_logging(log_json, "warn");
    fleetdp::demo::run(fleetdp::demo::DemoOptions {
        duration: a.duration,
        devices: a.devices,
        round_seconds: a.round_seconds,
        listen: (!a.listen.is_empty()).then_some(a.listen),
        seed: a.seed,
        tight: a.tight,
        key: None,
        partitions: a.partitions,
        documents: a.documents,
    })
    .map(|_| ())
}

/// `fleetdp tail`.
fn tail_command(a: TailArgs, log_json: bool) -> Result<()> {
    init_logging(log_json, "warn");
    let opts = fleetdp::tail::TailOptions {
        format: match a.format {
            TailFormatArg::Table => fleetdp::tail::TailFormat::Table,
            TailFormatArg::Json => fleetdp::tail::TailFormat::Json,
        },
        from_beginning: a.from_beginning,
        max: a.max,
        idle: a.idle,
        fleet_only: a.fleet,
    };
    tail(a.config, &opts)
}

/// `fleetdp advise`.
fn advise_command(a: AdviseArgs, log_json: bool) -> Result<()> {
    init_logging(log_json, "warn");
    let opts = fleetdp::advise::AdviseOptions {
        stream: a.stream,
        epsilon: a.epsilon,
        coverage: a.coverage,
        max_readings: a.max_readings,
        max_readings_per_device: a.max_readings_per_device,
    };
    advise(a.config, &opts)
}

fn advise(path: PathBuf, opts: &fleetdp::advise::AdviseOptions) -> Result<()> {
    let v = configuration(Config::load(&path).and_then(Config::validate))?;
    runtime()?.block_on(fleetdp::advise::run(
        &v,
        opts,
        &mut std::io::stdout().lock(),
    ))
}

fn tail(path: PathBuf, opts: &fleetdp::tail::TailOptions) -> Result<()> {
    let v = configuration(Config::load(&path).and_then(Config::validate))?;
    fleetdp::tail::run(&v, opts, &mut std::io::stdout().lock())?;
    Ok(())
}

fn run(path: PathBuf, create: Option<(i32, i32)>, allow_plan_change: bool) -> Result<()> {
    let (key, v) = configuration(Config::load(&path).and_then(|config| {
        let key = config.release_key()?;
        if config.rotate_from()? == Some(key.id()) {
            bail!(
                "privacy.rotate_from: names this instance's own release key ({}); it must name the key being \
                 replaced (see docs/operations.md#rotating-the-release-key)",
                key.id()
            );
        }
        Ok((key, config.validate()?))
    }))?;
    fleetdp::logs::effective_configuration(&v);
    tracing::info!(
        release_key_id = %key.id(),
        rotate_from = v.config.rotate_from()?.as_deref().unwrap_or(""),
        "release key loaded"
    );
    runtime()?.block_on(async move {
        if let Some((partitions, replication)) = create {
            fleetdp::pipeline::create_topics(&v, partitions, replication).await?;
        }
        let listen = v.config.http.listen.clone();
        let probe_listen = v.config.http.probe_listen.clone();
        let pipeline = Pipeline::new(v, key);
        if !listen.is_empty() || !probe_listen.is_empty() {
            let config = pipeline.config();
            let state = std::sync::Arc::new(fleetdp::http::HttpState {
                metrics: fleetdp::http::recorder()?,
                board: pipeline.board.clone(),
                review: fleetdp::report::review_page(&fleetdp::report::PlanReport::new(&config), &config),
                config,
                counters: pipeline.counters.clone(),
            });
            if !listen.is_empty() {
                let a = fleetdp::http::serve(&listen, state.clone()).await?;
                tracing::info!(address = %a, "serving /metrics, /healthz, /readyz and the status page");
            }
            if !probe_listen.is_empty() {
                let a = fleetdp::http::serve_probes(&probe_listen, state).await?;
                tracing::info!(address = %a, "serving /healthz and /readyz");
            }
        }
        let shutdown = shutdown_on_signals();
        let opts = Options {
            allow_plan_change,
            ..Options::default()
        };
        pipeline.run(shutdown, opts).await
    })
}

fn plan(path: PathBuf, format: PlanFormat, strict: bool, page: Option<PathBuf>) -> Result<()> {
    let v = configuration(Config::load(&path).and_then(Config::validate))?;
    let report = PlanReport::new(&v);
    match format {
        PlanFormat::Text => print!("{}", report.to_text()),
        PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if let Some(page) = page {
        std::fs::write(&page, fleetdp::report::review_page(&report, &v))
            .with_context(|| format!("writing the review page {}", page.display()))?;
        eprintln!("the review page is {}", page.display());
    }
    if strict && !report.warnings.is_empty() {
        return configuration(Err(anyhow::anyhow!(
            "--strict: {} figure(s) of {} would be mostly noise (see the warnings above)",
            report.warnings.len(),
            path.display()
        )));
    }
    Ok(())
}

fn simulate(args: SimulateArgs) -> Result<()> {
    let Prepared {
        mut fleet,
        brokers,
        properties,
        topic,
    } = args.prepare()?;
    let (rate, messages, duration) = (args.rate, args.messages, args.duration);
    let config = fleetdp::kafka::client_config(&brokers, &properties);
    runtime()?.block_on(async move {
        let shutdown = shutdown_on_signals();
        let started = std::time::Instant::now();
        // On a terminal a progress bar (toward --messages, else --duration);
        // otherwise a plain line per second.
        let bar = std::io::stderr().is_terminal().then(|| {
            let (len, template) = match messages {
                Some(m) => (
                    m,
                    "{bar:40} {pos}/{len} messages · {per_sec} · {elapsed} (ETA {eta})",
                ),
                None => (
                    duration.as_secs().max(1),
                    "{bar:40} {elapsed}/{len}s · {msg}",
                ),
            };
            let bar = indicatif::ProgressBar::new(len);
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar
        });
        let sent = fleetdp::sim::produce_fleet(
            &config,
            &topic,
            &mut fleet,
            rate,
            messages,
            Some(duration),
            shutdown,
            |n| {
                let per_second = n as f64 / started.elapsed().as_secs_f64().max(1e-9);
                match &bar {
                    Some(b) if messages.is_some() => b.set_position(n),
                    Some(b) => {
                        b.set_position(started.elapsed().as_secs());
                        b.set_message(format!("{n} messages ({per_second:.0}/s)"));
                    }
                    None => eprintln!("  {n} messages sent ({per_second:.0}/s)"),
                }
            },
        )
        .await?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        println!(
            "{sent} messages produced to {topic} in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// Create the key file atomically: it must not exist (no overwrite, and a
/// symlink in its place is not followed: `create_new` is `O_EXCL`), and it
/// is readable by its owner only from the moment it exists.
fn keygen(out: PathBuf) -> Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&out).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
            "{} exists; refusing to overwrite a release key (or to follow a link there)",
            out.display()
        ),
        _ => anyhow::Error::new(e).context(format!("creating {}", out.display())),
    })?;
    let key = ReleaseKey::ephemeral();
    let hex = zeroize::Zeroizing::new(key.to_hex() + "\n");
    f.write_all(hex.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote a new release key to {} (mode 0600); its id is {} (privacy.rotate_from names it)",
        out.display(),
        key.id()
    );
    Ok(())
}
