//! Soak: the pipeline for a long stretch at 80% of its measured maximum
//! rate, printing resident memory (RSS) as it goes and at start and end.
//! Memory must stay flat: per-lane device maps grow until every device has
//! been seen, then stop; windows, releases in flight and state records are
//! bounded.
//!
//! Run (10 minutes against the tansu that tests/run.sh installs):
//!   FLEETDP_BENCH_BROKERS=127.0.0.1:9092 cargo bench -p fleetdp --bench soak
//! FLEETDP_SOAK_SECS changes the length. Without a broker it runs on the
//! in-process mock cluster, whose stored log then counts in the RSS.

use fleetdp::config::{Config, Validated};
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::pipeline::{Options, Pipeline};
use fleetdp::sim::{Fleet, FleetSpec, Signal};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[kafka]
brokers = "BROKERS"
input_topic = "INPUT"
output_topic = "OUTPUT"
dead_letter_topic = "INPUT.dlq"
group_id = "GROUP"
[kafka.consumer_properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[privacy]
epsilon_per_device = 1.0
horizon = "6h"
[http]
listen = ""
[[stream]]
name = "cabin_temp_c"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 5000
max_readings_per_device = 1
max_windows_per_device = 1000
budget_share = 0.5
statistics = ["mean", "histogram"]
histogram_edges = [-40, -20, 0, 20, 40, 60, 85]
[[stream]]
name = "battery_v"
lower = 10.0
upper = 15.0
resolution = 0.01
window_size = 5000
max_readings_per_device = 1
max_windows_per_device = 1000
budget_share = 0.5
statistics = ["mean", "quantiles"]
quantiles = [0.5]
"#;

const DEVICES: usize = 50_000;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn fleet() -> Fleet {
    Fleet::new(FleetSpec {
        devices: DEVICES,
        seed: 1,
        signals: vec![Signal::CabinTemp, Signal::BatteryVolts],
        bad_fraction: 0.001,
        ..FleetSpec::default()
    })
}

fn main() {
    let secs: u64 = std::env::var("FLEETDP_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let env = std::env::var("FLEETDP_BENCH_BROKERS")
        .or_else(|_| std::env::var("KAFKA_BROKERS"))
        .ok();
    let mock = env
        .is_none()
        .then(|| rdkafka::mocking::MockCluster::new(1).unwrap());
    let brokers = env.unwrap_or_else(|| mock.as_ref().unwrap().bootstrap_servers());
    let suffix = format!("{:08x}", rand::random::<u32>());
    let (input, output) = (format!("soak-in-{suffix}"), format!("soak-out-{suffix}"));
    let text = CONFIG
        .replace("BROKERS", &brokers)
        .replace("INPUT", &input)
        .replace("OUTPUT", &output)
        .replace("GROUP", &format!("soak-{suffix}"));
    let v: Validated = Config::parse(&text).unwrap().validate().unwrap();
    let parts = 4;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let base = fleetdp::kafka::client_config(&brokers, &Default::default());
        let state = format!("{output}.state");
        let dlq = format!("{input}.dlq");
        match &mock {
            Some(m) => {
                for t in [&input, &output, &dlq, &state] {
                    m.create_topic(t, parts, 1).unwrap();
                }
            }
            None => fleetdp::kafka::ensure_topics(
                &base,
                &[
                    (&input, parts),
                    (&output, parts),
                    (&dlq, 1),
                    (&state, parts),
                ],
                &[&state],
            )
            .await
            .unwrap(),
        }
        println!(
            "soak through {}: {DEVICES} devices × 2 streams, {secs}s",
            if mock.is_some() {
                "the mock cluster (its log counts in RSS)"
            } else {
                brokers.as_str()
            }
        );

        // 1. The maximum rate: the pipeline on a backlog.
        let backlog = if mock.is_some() { 200_000u64 } else { 600_000 };
        let (_never, rx) = tokio::sync::watch::channel(false);
        // One fleet for both phases: event time keeps moving forward.
        let mut fleet = fleet();
        fleetdp::sim::produce_fleet(
            &base,
            &input,
            &mut fleet,
            0.0,
            Some(backlog),
            None,
            rx,
            |_| {},
        )
        .await
        .unwrap();
        let p = Pipeline::new(v, ReleaseKey::from_bytes([4; 32]));
        let c = p.counters.clone();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let h = tokio::spawn(async move { p.run(rx, Options::default()).await });
        let mut first = None;
        while c.messages.load(Ordering::Relaxed) < backlog {
            if c.messages.load(Ordering::Relaxed) > 0 {
                first.get_or_insert_with(Instant::now);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let max_rate = backlog as f64 / first.unwrap().elapsed().as_secs_f64();
        let rate = 0.8 * max_rate;
        println!("maximum rate {max_rate:.0} messages/s; soaking at 80%: {rate:.0}/s");

        // 2. The soak: a producer at 80%, the same pipeline consuming.
        let (pstop, prx) = tokio::sync::watch::channel(false);
        let producer = {
            let base = base.clone();
            let input = input.clone();
            tokio::spawn(async move {
                fleetdp::sim::produce_fleet(
                    &base,
                    &input,
                    &mut fleet,
                    rate,
                    None,
                    Some(Duration::from_secs(secs)),
                    prx,
                    |_| {},
                )
                .await
            })
        };
        let start = Instant::now();
        let consumed0 = c.messages.load(Ordering::Relaxed);
        let rss_start = rss_mib();
        println!(
            "{:>6} {:>12} {:>10} {:>9}",
            "t (s)", "consumed", "windows", "RSS MiB"
        );
        println!(
            "{:>6} {:>12} {:>10} {:>9.1}",
            0,
            0,
            c.windows_released.load(Ordering::Relaxed),
            rss_start
        );
        let mut samples = vec![rss_start];
        let every = Duration::from_secs((secs / 20).clamp(5, 30));
        while start.elapsed() < Duration::from_secs(secs) {
            tokio::time::sleep(every).await;
            let rss = rss_mib();
            samples.push(rss);
            println!(
                "{:>6.0} {:>12} {:>10} {:>9.1}",
                start.elapsed().as_secs_f64(),
                c.messages.load(Ordering::Relaxed) - consumed0,
                c.windows_released.load(Ordering::Relaxed),
                rss
            );
        }
        let _ = pstop.send(true);
        let produced = producer.await.unwrap().unwrap();
        // Let the pipeline drain what is left.
        let target = consumed0 + produced;
        let drain = Instant::now();
        while c.messages.load(Ordering::Relaxed) < target
            && drain.elapsed() < Duration::from_secs(60)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let consumed = c.messages.load(Ordering::Relaxed) - consumed0;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        let rss_end = rss_mib();
        let peak = samples.iter().cloned().fold(f64::MIN, f64::max);
        // Flat: the second half of the run holds no more than the first.
        let half = samples.len() / 2;
        let first_half = samples[..half.max(1)]
            .iter()
            .cloned()
            .fold(f64::MIN, f64::max);
        let second_half = samples[half..].iter().cloned().fold(f64::MIN, f64::max);
        println!(
            "RSS start {rss_start:.1} MiB, end {rss_end:.1} MiB, peak {peak:.1} MiB; \
             max of the second half / first half = {:.3}",
            second_half / first_half
        );
        println!(
            "produced {produced}, consumed {consumed} ({:.0}/s), {} windows released, kept up: {}",
            consumed as f64 / start.elapsed().as_secs_f64(),
            c.windows_released.load(Ordering::Relaxed),
            consumed >= produced
        );
    });
    drop(mock);
}
