//! When time-window releases arrive, against what they hold: under
//! add-remove a consumer timing arrivals must not learn how long a
//! release took to make (its readings and devices). Prints, per run, each
//! release's arrival on the output topic minus its due moment plus
//! `limits.release_delay` (ms), for the one busy window (`BUSY` readings
//! of as many devices, several charges records) and the empty ones around
//! after it, then the busy window's offset from the empty ones' median. Two runs
//! in the same process: the baseline written as soon as made
//! (`release_delay = "1ms"`), then the delay FleetDP defaults to.
//!
//!   cargo bench -p fleetdp --bench release_timing
//!
//! The broker is FLEETDP_BENCH_BROKERS or KAFKA_BROKERS (e.g. the tansu
//! that tests/run.sh installs), else the in-process mock cluster with a
//! smaller busy window (it keeps only ~5 MiB per partition);
//! FLEETDP_BENCH_BUSY sets the busy window's readings. A run takes about
//! a minute (windows of 10 s, due 20 s after their end).

use fleetdp::config::{Config, Validated};
use fleetdp::dp::rng::ReleaseKey;
use fleetdp::pipeline::{Options, Pipeline};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Message;
use std::time::{Duration, Instant};

/// Window length and lateness (ms): every busy reading is produced
/// before its window is due.
const WINDOW_MS: i64 = 10_000;
const LATENESS_MS: i64 = 20_000;

fn now_ms() -> i64 {
    fleetdp::pipeline::now_ms()
}

fn config(brokers: &str, run: &str, delay: &str) -> Validated {
    let text = format!(
        r#"
[kafka]
brokers = "{brokers}"
input_topic = "{run}-in"
output_topic = "{run}-out"
dead_letter_topic = "{run}-dlq"
group_id = "{run}"
input_partitioner = "none"
input_format = "json"
[kafka.consumer_properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[privacy]
relation = "add-remove"
epsilon_per_device = 10.0
horizon = "1h"
[limits]
max_lateness = "{LATENESS_MS}ms"
max_clock_skew = "1m"
release_delay = "{delay}"
[fleet]
enabled = false
[[stream]]
name = "t"
lower = 0.0
upper = 100.0
resolution = 0.1
window = "{WINDOW_MS}ms"
statistics = ["count", "mean"]
"#
    );
    Config::parse(&text).unwrap().validate().unwrap()
}

/// One run: the busy window's readings produced at once, then every
/// release read as it arrives until the busy one and three later ones came.
/// Returns (seq, arrival − (due + delay)) and the busy window's seq.
async fn run(
    brokers: &str,
    mock: Option<&rdkafka::mocking::MockCluster<'_, rdkafka::producer::DefaultProducerContext>>,
    busy: usize,
    delay_ms: i64,
) -> (Vec<(u64, i64)>, u64) {
    let run = format!("timing-{:08x}", rand::random::<u32>());
    let base = fleetdp::kafka::client_config(brokers, &Default::default());
    let topics = [
        format!("{run}-in"),
        format!("{run}-out"),
        format!("{run}-dlq"),
        format!("{run}-out.state"),
    ];
    match mock {
        Some(m) => topics.iter().for_each(|t| m.create_topic(t, 1, 1).unwrap()),
        None => {
            let t: Vec<(&str, i32)> = topics.iter().map(|t| (t.as_str(), 1)).collect();
            fleetdp::kafka::ensure_topics(&base, &t, &[]).await.unwrap();
        }
    }
    let v = config(brokers, &run, &format!("{delay_ms}ms"));
    let p = Pipeline::new(v, ReleaseKey::from_bytes([7; 32]));
    let counters = p.counters.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let h = tokio::spawn(async move { p.run(rx, Options::default()).await });
    // The busy window: the one that starts next (readings are dated at
    // its start; they are all produced long before it is due).
    let start = (now_ms() / WINDOW_MS + 1) * WINDOW_MS;
    let busy_seq = (start / WINDOW_MS) as u64;
    let began = Instant::now();
    produce(&base, &topics[0], start, busy).await;
    println!(
        "  produced {busy} readings in {:.1} s; waiting for window {busy_seq} and three after it",
        began.elapsed().as_secs_f64()
    );
    let (client, out) = (base.clone(), topics[1].clone());
    let seen = tokio::task::spawn_blocking(move || arrivals(client, &out, busy_seq + 3, delay_ms))
        .await
        .unwrap();
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    // (tansu 0.6 keeps part of multi-record produce batches.)
    let accepted = counters
        .readings_accepted
        .load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "  the busy window held {accepted} readings (charges records: {})",
        accepted.div_ceil(40_000).max(1)
    );
    (seen, busy_seq)
}

/// Produce `busy` readings of as many devices dated `start + 1` to
/// `topic`, every one acknowledged.
async fn produce(base: &rdkafka::ClientConfig, topic: &str, start: i64, busy: usize) {
    let producer: FutureProducer = base.clone().set("linger.ms", "20").create().unwrap();
    let payloads: Vec<String> = (0..busy)
        .map(|i| {
            format!(
                r#"{{"device_id":"d{i}","stream":"t","value":20,"event_time_ms":{}}}"#,
                start + 1
            )
        })
        .collect();
    for chunk in payloads.chunks(10_000) {
        // Enqueued now (`send` would enqueue each only when awaited).
        let sent: Vec<_> = chunk
            .iter()
            .map(|p| {
                producer
                    .send_result(FutureRecord::to(topic).key("").payload(p))
                    .map_err(|(e, _)| e)
                    .unwrap()
            })
            .collect();
        for f in sent {
            f.await.unwrap().map_err(|(e, _)| e).unwrap();
        }
    }
}

/// Read the releases of `out` as they arrive, up to window `last`: (seq,
/// arrival − (due + delay)) in ms.
fn arrivals(client: rdkafka::ClientConfig, out: &str, last: u64, delay_ms: i64) -> Vec<(u64, i64)> {
    let consumer: BaseConsumer = client
        .clone()
        .set("group.id", format!("{out}-reader"))
        .set("auto.offset.reset", "earliest")
        // Arrivals as soon as the broker has them, not at the end of a
        // long poll.
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    consumer.subscribe(&[out]).unwrap();
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(180);
    while Instant::now() < end && !seen.iter().any(|&(s, _)| s >= last) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(5)) else {
            continue;
        };
        let arrived = now_ms();
        if let Ok(r) = fleetdp::kafka::decode_release(m.payload().unwrap_or(&[]), None) {
            seen.push((r.window_seq, arrived - (r.released_at_ms + delay_ms)));
        }
    }
    seen
}

fn median(mut xs: Vec<i64>) -> i64 {
    xs.sort_unstable();
    xs.get(xs.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let env = std::env::var("FLEETDP_BENCH_BROKERS")
        .or_else(|_| std::env::var("KAFKA_BROKERS"))
        .ok();
    let mock = env
        .is_none()
        .then(|| rdkafka::mocking::MockCluster::new(1).unwrap());
    let brokers = env.unwrap_or_else(|| mock.as_ref().unwrap().bootstrap_servers());
    let busy = std::env::var("FLEETDP_BENCH_BUSY")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(if mock.is_some() { 45_000 } else { 100_000 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("release timing: one window of {busy} readings of as many devices among empty ones; arrival − (due + release_delay), ms");
    let mut offsets = Vec::new();
    for (label, delay_ms) in [
        ("as soon as made (release_delay = 1ms), baseline", 1),
        ("release_delay = 10s (default)", 10_000),
    ] {
        let (seen, busy_seq) = rt.block_on(run(&brokers, mock.as_ref(), busy, delay_ms));
        println!(
            "    (seq − busy, ms): {:?}",
            seen.iter()
                .map(|&(s, d)| (s as i64 - busy_seq as i64, d))
                .collect::<Vec<_>>()
        );
        // The empty windows after the busy one: earlier ones wait for the
        // group join and the first restore.
        let empty: Vec<i64> = seen
            .iter()
            .filter(|(s, _)| *s > busy_seq)
            .map(|&(_, d)| d)
            .collect();
        let at_busy = seen.iter().find(|(s, _)| *s == busy_seq).map(|&(_, d)| d);
        let (lo, hi) = (
            empty.iter().min().copied().unwrap_or(0),
            empty.iter().max().copied().unwrap_or(0),
        );
        let m = median(empty.clone());
        println!(
            "  {label}: empty windows {} (min {lo}, median {m}, max {hi}); busy window {at_busy:?}",
            empty.len()
        );
        if let Some(b) = at_busy {
            println!("    busy − median(empty) = {} ms", b - m);
            offsets.push(b - m);
        }
    }
    if let [base, delayed] = offsets[..] {
        println!("busy window's offset from the empty ones: {base} ms as soon as made, {delayed} ms with the delay");
    }
}
