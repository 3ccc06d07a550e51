//! The flat-map bound of multi-metric messages (README "Bring your own
//! topic", docs/DESIGN.md §2), checked by brute force through the real
//! decoder, mapping and windows: one message may carry readings of several
//! streams, and a JSON payload several documents of one device — up to any
//! number of readings of one stream. Whatever the fan-out, per stream a
//! device adds at most `k` readings to a window and reaches at most `W`
//! windows per horizon, and removing the device (add-remove) removes
//! exactly its own readings from the windows of every stream, nothing else.
//!
//! Sampled: 400 random streams of 2–3 devices sending 1–5 messages of 1–3
//! documents with one or two metrics each, event times over two horizons,
//! for `k` ∈ {1, 2} and `W` ∈ {1, 3}; each device removed in turn. A
//! control shows the check can fail (caps not applied per stream: one
//! device's readings of a message admitted beyond `k`).

use fleetdp::config::Config;
use fleetdp::telemetry::Counters;
use fleetdp::{ClosedWindow, Processor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) const HOUR: i64 = 3_600_000;
pub(crate) const DAY: i64 = 24 * HOUR;
/// The first horizon's start.
pub(crate) const T0: i64 = 1_700_000_000_000 / DAY * DAY;

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
         dead_letter_topic = \"dlq\"\n[privacy]\nrelation = \"add-remove\"\nepsilon_per_device = 1.0\n\
         horizon = \"24h\"\n[limits]\nmax_lateness = \"1h\"\n\
         [input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\n[input.streams]\na = \"m.a\"\nb = \"b\"\n{}{}",
        stream("a"),
        stream("b")
    )
}

/// A message: its device and documents (event time, metric a, metric b).
type Msg = (u8, Vec<(i64, Option<i64>, Option<i64>)>);

/// Values carry their device: device `d` sends values `10·d .. 10·d + 9`.
fn payload(m: &Msg) -> Vec<u8> {
    let docs: Vec<String> =
        m.1.iter()
            .map(|(t, a, b)| {
                let mut doc = format!(r#"{{"vin":"car-{}","ts":{t}"#, m.0);
                if let Some(a) = a {
                    doc += &format!(r#","m":{{"a":{a}}}"#);
                }
                if let Some(b) = b {
                    doc += &format!(r#","b":{b}"#);
                }
                doc + "}"
            })
            .collect();
    format!("[{}]", docs.join(",")).into_bytes()
}

fn random_stream(rng: &mut ChaCha8Rng) -> Vec<Msg> {
    let devices = rng.gen_range(2..=3u8);
    let mut out = Vec::new();
    for d in 0..devices {
        for _ in 0..rng.gen_range(1..=5) {
            let docs = (0..rng.gen_range(1..=3))
                .map(|_| {
                    let t = T0 + rng.gen_range(HOUR..2 * DAY - 2 * HOUR);
                    let v = || 10 * i64::from(d);
                    let (a, b) = match rng.gen_range(0..3) {
                        0 => (Some(v() + rng.gen_range(0..10)), None),
                        1 => (None, Some(v() + rng.gen_range(0..10))),
                        _ => (
                            Some(v() + rng.gen_range(0..10)),
                            Some(v() + rng.gen_range(0..10)),
                        ),
                    };
                    (t, a, b)
                })
                .collect();
            out.push((d, docs));
        }
    }
    // Interleave the devices' messages.
    for i in (1..out.len()).rev() {
        let j = rng.gen_range(0..=i);
        out.swap(i, j);
    }
    out
}

/// Windows by (stream, seq), their values sorted.
pub(crate) type Windows = BTreeMap<(String, u64), Vec<i64>>;

fn run(text: &str, msgs: &[Msg]) -> Windows {
    let payloads: Vec<(Vec<u8>, i64)> = msgs
        .iter()
        .map(|m| (payload(m), m.1.iter().map(|d| d.0).max().unwrap()))
        .collect();
    run_payloads(text, &payloads, "application/json")
}

/// The windows the real decoder, mapping and windower make of `payloads`
/// (each with its message timestamp: the latest event time it holds, so
/// no lateness), all closed.
pub(crate) fn run_payloads(text: &str, payloads: &[(Vec<u8>, i64)], content_type: &str) -> Windows {
    let v = Config::parse(text).unwrap().validate().unwrap();
    let mut p = Processor::new(&v, Arc::new(Counters::default()));
    p.windower_mut().start_time_lanes(0, T0);
    let mut closed: Vec<ClosedWindow> = Vec::new();
    for (i, (payload, stamp)) in payloads.iter().enumerate() {
        let r = p.process(
            0,
            i as i64,
            payload,
            Some(content_type),
            Some(*stamp),
            &mut closed,
        );
        assert!(r.is_ok(), "{r:?}");
    }
    let end = T0 + 4 * DAY;
    p.windower_mut()
        .close_due(end, |_| end, |_| 0, usize::MAX, &mut closed);
    closed
        .into_iter()
        .map(|w| {
            let mut values = w.values.clone();
            values.sort_unstable();
            ((v.plan.streams[w.stream].spec.name.clone(), w.seq), values)
        })
        .collect()
}

/// Check the bound for device `d` between a stream's windows and those
/// without `d`; `Err` says what broke.
pub(crate) fn check(
    full: &Windows,
    without: &Windows,
    d: i64,
    k: usize,
    w: usize,
) -> Result<(), String> {
    if full.keys().ne(without.keys()) {
        return Err("the windows released differ".into());
    }
    let mut per_horizon: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for ((stream, seq), values) in full {
        let own: Vec<i64> = values.iter().copied().filter(|x| x / 10 == d).collect();
        let rest: Vec<i64> = values.iter().copied().filter(|x| x / 10 != d).collect();
        if rest != without[&(stream.clone(), *seq)] {
            return Err(format!(
                "{stream} window {seq}: other devices' readings changed"
            ));
        }
        if own.len() > k {
            return Err(format!(
                "{stream} window {seq}: {} readings of one device",
                own.len()
            ));
        }
        if !own.is_empty() {
            // Windows of 1 h: 24 to a horizon.
            *per_horizon.entry((stream.clone(), seq / 24)).or_default() += 1;
        }
    }
    match per_horizon.iter().find(|(_, &n)| n > w) {
        Some(((s, h), n)) => Err(format!("{s}: {n} windows in horizon {h}")),
        None => Ok(()),
    }
}

fn sweep(control: bool) -> Result<usize, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let mut checked = 0;
    for _ in 0..400 {
        let (k, w) = (rng.gen_range(1..=2u32), [1u32, 3][rng.gen_range(0..2)]);
        let msgs = random_stream(&mut rng);
        // The control reads with looser caps than it checks.
        let text = if control {
            config(k + 2, w)
        } else {
            config(k, w)
        };
        let full = run(&text, &msgs);
        let devices = msgs.iter().map(|m| m.0).max().unwrap();
        for d in 0..=devices {
            let rest: Vec<Msg> = msgs.iter().filter(|m| m.0 != d).cloned().collect();
            let without = run(&text, &rest);
            check(&full, &without, i64::from(d), k as usize, w as usize)?;
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn multi_metric_messages_keep_the_per_stream_bound() {
    let n = sweep(false).unwrap();
    assert!(n >= 800, "{n} neighbours checked");
}

#[test]
fn the_check_fails_without_the_caps() {
    assert!(sweep(true).is_err());
}
