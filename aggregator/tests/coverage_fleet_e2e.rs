//! The fleet-wide count's 95% interval through the whole service
//! (docs/output.md, fleet records): four input partitions, add-remove,
//! running totals on, eight streams of one-second windows, readings of
//! fresh devices placed on known partitions at the wall clock, so every
//! window's true count is known per partition and fleet-wide. Each fleet
//! record's count and each partition's window count must hold its truth in
//! at least 95% of non-empty windows, less 3.3 standard errors. The
//! default run is short (CI); `FLEETDP_COVERAGE_SECONDS` makes it long
//! enough to tell 94% from 95%.

use crate::harness;

use fleetdp::pipeline::{Options, Pipeline};
use harness::*;
use std::collections::HashMap;
use std::time::Duration;

const STREAMS: usize = 8;
const PARTITIONS: i32 = 4;
const WINDOW_MS: i64 = 1000;
const LATENESS_MS: i64 = 10_000;

fn seconds() -> u64 {
    std::env::var("FLEETDP_COVERAGE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

fn reading(stream: usize, partition: i32, device: u64, event_ms: i64) -> Out {
    Out {
        partition: Some(partition),
        key: format!("d{device}"),
        payload: format!(
            r#"{{"device_id":"d{device}","stream":"s{stream}","value":{},"event_time_ms":{event_ms}}}"#,
            device % 100
        )
        .into_bytes(),
        content_type: Some("application/json".into()),
    }
}

/// Covered and counted, with the share and its floor.
struct Tally {
    covered: u64,
    n: u64,
    /// Sum of the half-widths (their mean is printed).
    width: f64,
}

impl Tally {
    fn add(&mut self, hit: bool) {
        self.covered += u64::from(hit);
        self.n += 1;
    }
    fn check(&self, what: &str) {
        let share = self.covered as f64 / self.n as f64;
        let floor = 0.95 - 3.3 * (0.95 * 0.05 / self.n as f64).sqrt();
        let w = self.width / self.n as f64;
        eprintln!(
            "{what}: {} of {} = {share:.4} (floor {floor:.4}), mean half-width {w:.1}",
            self.covered, self.n
        );
        assert!(self.n >= 50, "{what}: {} windows", self.n);
        assert!(share >= floor, "{what}: {share:.4} < {floor:.4}");
    }
}

fn run(measure: &str) {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("coverage");
        broker
            .create_topics(&[(&t.input, PARTITIONS), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let streams: String = (0..STREAMS)
            .map(|s| {
                format!(
                    "[[stream]]\nname = \"s{s}\"\nlower = 0.0\nupper = 100.0\nresolution = 0.1\nwindow = \"1s\"\n\
                     statistics = [\"count\", \"mean\"]\nrunning_share = 0.2\nbudget_share = 0.125\n\n"
                )
            })
            .collect();
        let budget = match measure {
            "zcdp" => "rho_per_device = 0.5\ndelta = 1e-6",
            _ => "epsilon_per_device = 4.0",
        };
        let privacy = format!(
            "relation = \"add-remove\"\nmeasure = \"{measure}\"\n{budget}\nhorizon = \"1h\""
        );
        let limits = "[limits]\nmax_lateness = \"10s\"\nmax_clock_skew = \"1m\"\nrelease_delay = \"100ms\"";
        let text = config_text(&broker, &t, &privacy, limits, &streams)
            .replacen("[kafka]\n", "[kafka]\ninput_partitioner = \"none\"\n", 1);
        let v = fleetdp::config::Config::parse(&text).unwrap().validate().unwrap();
        let p = Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes([5; 32]));
        let c = p.counters.clone();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let h = tokio::spawn(async move { p.run(rx, Options::default()).await });

        // Input only once the service consumes (it releases empty windows
        // on the clock), so that no reading arrives late.
        let up = wait_until(Duration::from_secs(60), || count(&c.windows_released) >= 1).await;
        assert!(up, "no window released");
        // (stream, partition, seq) → readings.
        let mut truth: HashMap<(usize, i32, i64), u64> = HashMap::new();
        let (mut device, mut rng) = (0u64, 0x9e37_79b9_7f4a_7c15u64);
        let end = now_ms() + seconds() as i64 * 1000;
        let mut first_seq = None;
        while now_ms() < end {
            let at = now_ms();
            first_seq.get_or_insert(at / WINDOW_MS + 2);
            let mut batch = vec![];
            for s in 0..STREAMS {
                for part in 0..PARTITIONS {
                    // 0–9 readings per (stream, partition) per 100 ms: about 45 a
                    // window, far from 0, so clamping does not help coverage.
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    for _ in 0..rng % 10 {
                        device += 1;
                        batch.push(reading(s, part, device, at));
                        *truth.entry((s, part, at / WINDOW_MS)).or_default() += 1;
                    }
                }
            }
            produce(&broker, &t.input, &batch).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let last_seq = end / WINDOW_MS - 1;
        // Every window up to the last is released and combined.
        // (Lateness generous for a loaded CI machine: a late reading would
        // make the truth unknown.)
        let due = end + LATENESS_MS + 2000;
        while now_ms() < due {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let combined = || tokio::task::block_in_place(|| fleet_releases(&broker, &t.output));
        let enough = (STREAMS as i64 * (last_seq - first_seq.unwrap())) as usize;
        assert!(wait_until(Duration::from_secs(60), || combined().len() >= enough).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(count(&c.dropped_time_window), 0, "late readings: the truth is not known");
        assert_eq!(count(&c.readings_accepted), truth.values().sum::<u64>());

        let first = first_seq.unwrap();
        let in_range = |seq: i64| (first..=last_seq).contains(&seq);
        let mut part_tally = Tally { covered: 0, n: 0, width: 0.0 };
        for r in releases(&broker, &t.output) {
            let seq = r.window_seq as i64;
            let s: usize = r.stream[1..].parse().unwrap();
            let n = truth.get(&(s, r.partition, seq)).copied().unwrap_or(0);
            if !in_range(seq) || n == 0 {
                continue;
            }
            let count = r.statistics.iter().find(|x| x.name == "count").unwrap();
            part_tally.add((count.values[0] - n as f64).abs() <= count.half_width.unwrap());
            part_tally.width += count.half_width.unwrap();
        }
        let mut fleet_tally = Tally { covered: 0, n: 0, width: 0.0 };
        let mut latest: HashMap<(String, u64), proto::FleetRelease> = HashMap::new();
        for f in combined() {
            latest.insert((f.stream.clone(), f.window_seq), f);
        }
        for ((stream, seq), f) in &latest {
            let seq = *seq as i64;
            let s: usize = stream[1..].parse().unwrap();
            let n: u64 = (0..PARTITIONS)
                .map(|p| truth.get(&(s, p, seq)).copied().unwrap_or(0))
                .sum();
            if !in_range(seq) || n == 0 {
                continue;
            }
            assert!(f.complete, "{stream} {seq}: partitions {:?}", f.partitions);
            let count = f.statistics.iter().find(|x| x.name == "count").unwrap();
            fleet_tally.add((count.values[0] - n as f64).abs() <= count.half_width.unwrap());
            fleet_tally.width += count.half_width.unwrap();
        }
        part_tally.check(&format!("{measure}: partition counts"));
        fleet_tally.check(&format!("{measure}: fleet counts"));
    });
}

#[test]
fn the_fleet_count_covers_its_truth_through_the_service_pure() {
    run("pure");
}

#[test]
fn the_fleet_count_covers_its_truth_through_the_service_zcdp() {
    run("zcdp");
}
