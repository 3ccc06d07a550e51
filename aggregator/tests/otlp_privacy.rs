//! The OTLP mapping keeps the per-device bound (docs/input.md#opentelemetry): by
//! brute force through the real decoder, `[otlp]` mapping and windows, as
//! `flat_map.rs` checks the `[input]` mapping. An OTLP request carries
//! several resources, each a device, and a point may name its own device
//! (its attribute wins over its resource's); whatever the mix, per stream a
//! device adds at most `k` readings to a window and reaches at most `W`
//! windows per horizon, and removing it (add-remove) removes exactly its
//! own points from every stream's windows, nothing else.
//!
//! Sampled: 300 random streams of 2–3 devices, 1–4 requests of 1–3
//! resources with 1–3 points each, over two horizons, `k` ∈ {1, 2},
//! `W` ∈ {1, 3}; each device removed in turn. The control reads with
//! looser caps than it checks, and must fail.

use crate::flat_map::{check, run_payloads, DAY, HOUR, T0};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config(k: u32, w: u32) -> String {
    let stream = |name: &str| {
        format!(
            "[[stream]]\nname = \"{name}\"\nlower = 0.0\nupper = 100.0\nresolution = 1.0\n\
             window = \"1h\"\nmax_readings_per_device = {k}\nmax_windows_per_device = {w}\n\
             statistics = [\"sum\"]\nbudget_share = 0.5\n"
        )
    };
    format!(
        "[kafka]\nbrokers = \"127.0.0.1:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\n\
         dead_letter_topic = \"dlq\"\ninput_format = \"otlp_json\"\ninput_partitioner = \"none\"\n\
         [privacy]\nrelation = \"add-remove\"\nepsilon_per_device = 1.0\nhorizon = \"24h\"\n\
         [limits]\nmax_lateness = \"1h\"\n\
         [otlp]\ndevice_attribute = \"device.id\"\n[otlp.metrics]\na = \"metric.a\"\nb = \"metric.b\"\n{}{}",
        stream("a"),
        stream("b")
    )
}

/// A point: its device (the resource's, or its own attribute's), event
/// time, metric (`a` or `b`) and value; values carry their device
/// (`10·d .. 10·d + 9`).
#[derive(Clone)]
struct Point {
    device: u8,
    own: bool,
    t: i64,
    metric: char,
    value: i64,
}

/// A request: resources (device, points).
type Request = Vec<(u8, Vec<Point>)>;

fn json(r: &Request) -> Vec<u8> {
    let attr = |d: u8| format!(r#"{{"key":"device.id","value":{{"stringValue":"car-{d}"}}}}"#);
    let resources: Vec<String> = r
        .iter()
        .map(|(d, points)| {
            let metrics: Vec<String> = points
                .iter()
                .map(|p| {
                    let own = if p.own { attr(p.device) } else { String::new() };
                    format!(
                        r#"{{"name":"metric.{}","gauge":{{"dataPoints":[{{"timeUnixNano":"{}","asInt":"{}","attributes":[{own}]}}]}}}}"#,
                        p.metric,
                        p.t * 1_000_000,
                        p.value
                    )
                })
                .collect();
            format!(
                r#"{{"resource":{{"attributes":[{}]}},"scopeMetrics":[{{"metrics":[{}]}}]}}"#,
                attr(*d),
                metrics.join(",")
            )
        })
        .collect();
    format!(r#"{{"resourceMetrics":[{}]}}"#, resources.join(",")).into_bytes()
}

fn random_requests(rng: &mut ChaCha8Rng) -> Vec<Request> {
    let devices = rng.gen_range(2..=3u8);
    (0..rng.gen_range(1..=4) * devices)
        .map(|_| {
            (0..rng.gen_range(1..=3))
                .map(|_| {
                    let d = rng.gen_range(0..devices);
                    let points = (0..rng.gen_range(1..=3))
                        .map(|_| {
                            // A fifth of the points name another device.
                            let own = rng.gen_bool(0.2);
                            let device = if own { rng.gen_range(0..devices) } else { d };
                            Point {
                                device,
                                own,
                                t: T0 + rng.gen_range(HOUR..2 * DAY - 2 * HOUR),
                                metric: if rng.gen_bool(0.5) { 'a' } else { 'b' },
                                value: 10 * i64::from(device) + rng.gen_range(0..10),
                            }
                        })
                        .collect();
                    (d, points)
                })
                .collect()
        })
        .collect()
}

/// Each request with its message timestamp: the latest event time it
/// holds. A neighbour keeps the other messages' timestamps (removing a
/// device changes no one else's record), so it is fixed here, before any
/// device is removed.
fn stamped(requests: Vec<Request>) -> Vec<(Request, i64)> {
    requests
        .into_iter()
        .map(|r| {
            let times = r.iter().flat_map(|(_, ps)| ps.iter().map(|p| p.t));
            let stamp = times.max().unwrap();
            (r, stamp)
        })
        .collect()
}

/// `requests` without device `d`'s points (a request left with none is
/// not sent).
fn without(requests: &[(Request, i64)], d: u8) -> Vec<(Request, i64)> {
    let keep = |ps: &[Point]| {
        ps.iter()
            .filter(|p| p.device != d)
            .cloned()
            .collect::<Vec<_>>()
    };
    requests
        .iter()
        .map(|(r, stamp)| {
            let kept: Request = r
                .iter()
                .map(|(rd, ps)| (*rd, keep(ps)))
                .filter(|(_, ps)| !ps.is_empty())
                .collect();
            (kept, *stamp)
        })
        .filter(|(r, _)| !r.is_empty())
        .collect()
}

fn run(text: &str, requests: &[(Request, i64)]) -> crate::flat_map::Windows {
    let payloads: Vec<(Vec<u8>, i64)> = requests.iter().map(|(r, t)| (json(r), *t)).collect();
    run_payloads(text, &payloads, "application/json")
}

fn sweep(control: bool) -> Result<usize, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(55);
    let mut checked = 0;
    for _ in 0..300 {
        let (k, w) = (rng.gen_range(1..=2u32), [1u32, 3][rng.gen_range(0..2)]);
        let requests = stamped(random_requests(&mut rng));
        let text = if control {
            config(k + 2, w)
        } else {
            config(k, w)
        };
        let full = run(&text, &requests);
        for d in 0..3u8 {
            let rest = without(&requests, d);
            check(
                &full,
                &run(&text, &rest),
                i64::from(d),
                k as usize,
                w as usize,
            )?;
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn removing_a_device_removes_exactly_its_own_points_within_k_and_w() {
    let n = sweep(false).unwrap();
    assert!(n >= 900, "{n} neighbours checked");
}

#[test]
fn the_check_fails_without_the_caps() {
    assert!(sweep(true).is_err());
}
