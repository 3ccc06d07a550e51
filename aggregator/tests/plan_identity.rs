//! The plan identity (what a lane's state is written under) covers every
//! setting that places or charges a reading: seeded pairs of configurations
//! (one drawn, the other with a few settings changed) run the same input
//! through the processor, and for every declared stream
//! - the same identity ⇒ the same lanes, windows, values and charges;
//! - a different identity ⇒ a restore under the other configuration finds
//!   a change for each of the stream's recorded lanes (so it is refused
//!   within a horizon);
//!
//! and a changed setting that places or charges readings (W, k, n, budget,
//! statistics, group_by, G, key sets, relation, horizon, the plan's
//! streams) always changes the identity, while the settings left out on
//! purpose (unit, HTTP, Kafka group) never do. It used to cover neither
//! `group_by` nor the key sets nor the plan's streams: a mid-horizon
//! `group_by` made every device spend its budget again.

use fleetdp::config::{Config, Validated};
use fleetdp::state::{fingerprint, unplanned_lanes, PlanChange};
use fleetdp::telemetry::Counters;
use fleetdp::{ClosedWindow, Processor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

const HOUR: i64 = 3_600_000;
const T0: i64 = 1_700_000_000_000 / (24 * HOUR) * (24 * HOUR) + HOUR;
const PAIRS: usize = 300;

#[derive(Clone, Debug)]
struct Stream {
    name: String,
    n: u64,
    w: u32,
    k: u32,
    share: f64,
    stats: &'static str,
    group_by: bool,
    g: u32,
    unit: &'static str,
}

#[derive(Clone, Debug)]
struct Draw {
    add_remove: bool,
    epsilon: f64,
    horizon: &'static str,
    firmware: Vec<&'static str>,
    streams: Vec<Stream>,
    listen: &'static str,
    group_id: &'static str,
}

impl Draw {
    fn new(rng: &mut ChaCha8Rng) -> Draw {
        let stream = |rng: &mut ChaCha8Rng, name: &str| Stream {
            name: name.into(),
            n: rng.gen_range(2..5),
            w: rng.gen_range(1..4),
            k: rng.gen_range(1..3),
            share: 0.5,
            stats: ["[\"sum\"]", "[\"mean\"]", "[\"count\", \"sum\"]"][rng.gen_range(0..3)],
            group_by: rng.gen_bool(0.5),
            g: rng.gen_range(1..3),
            unit: "°C",
        };
        Draw {
            add_remove: rng.gen_bool(0.3),
            epsilon: 1.0,
            horizon: "24h",
            firmware: vec!["4.1", "4.2"],
            streams: vec![stream(rng, "temp"), stream(rng, "speed")],
            listen: "127.0.0.1:9898",
            group_id: "fleetdp",
        }
    }

    fn toml(&self) -> String {
        let relation = if self.add_remove {
            "add-remove"
        } else {
            "change-one"
        };
        let firmware: Vec<String> = self.firmware.iter().map(|f| format!("{f:?}")).collect();
        let mut t = format!(
            "[kafka]\nbrokers = \"127.0.0.1:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\n\
             dead_letter_topic = \"dlq\"\ngroup_id = \"{}\"\n[privacy]\nrelation = \"{relation}\"\n\
             epsilon_per_device = {}\nhorizon = \"{}\"\n[http]\nlisten = \"{}\"\n\
             [dimensions]\nfirmware = [{}]\n",
            self.group_id,
            self.epsilon,
            self.horizon,
            self.listen,
            firmware.join(", ")
        );
        for s in &self.streams {
            let windows = if self.add_remove {
                "window = \"1h\"".to_string()
            } else {
                format!("window_size = {}\nwindow_timeout = \"1h\"", s.n)
            };
            t += &format!(
                "[[stream]]\nname = \"{}\"\nlower = 0.0\nupper = 100.0\nresolution = 1.0\n{windows}\n\
                 max_windows_per_device = {}\nmax_readings_per_device = {}\nbudget_share = {}\n\
                 statistics = {}\nunit = \"{}\"\n",
                s.name, s.w, s.k, s.share, s.stats, s.unit
            );
            if s.group_by {
                t += &format!(
                    "group_by = [\"firmware\"]\nmax_groups_per_device = {}\n",
                    s.g
                );
            }
        }
        t
    }
}

/// A change to a drawn configuration: its name and whether it may place or
/// charge readings differently (then the identity must change).
fn mutate(rng: &mut ChaCha8Rng, d: &mut Draw) -> (&'static str, bool) {
    let i = rng.gen_range(0..d.streams.len());
    let s = &mut d.streams[i];
    match rng.gen_range(0..15) {
        0 => {
            s.w += 1;
            ("W", true)
        }
        1 => {
            s.k += 1;
            ("k", true)
        }
        2 if !d.add_remove => {
            s.n += 1;
            ("n", true)
        }
        3 => {
            s.share = 0.25;
            ("budget_share", true)
        }
        4 => {
            s.stats = if s.stats == "[\"sum\"]" {
                "[\"mean\"]"
            } else {
                "[\"sum\"]"
            };
            ("statistics", true)
        }
        5 => {
            s.group_by = !s.group_by;
            ("group_by", true)
        }
        6 if s.group_by => {
            s.g = 3 - s.g.min(2);
            ("G", true)
        }
        7 => {
            d.firmware.push("4.3");
            // Only grouped streams are placed by the key set.
            ("the firmware key set", d.streams.iter().any(|s| s.group_by))
        }
        8 => {
            d.add_remove = !d.add_remove;
            ("relation", true)
        }
        9 => {
            d.horizon = "48h";
            ("horizon", true)
        }
        10 => {
            s.name = format!("{}2", s.name);
            ("a stream's name", true)
        }
        11 => {
            d.epsilon = 2.0;
            ("epsilon", true)
        }
        12 => {
            s.unit = "K";
            ("unit", false)
        }
        13 => {
            d.listen = "127.0.0.1:9899";
            ("http.listen", false)
        }
        _ => {
            d.group_id = "other";
            ("kafka.group_id", false)
        }
    }
}

/// One reading, or (a third of the time) a list of one of each stream: a
/// message is accepted or refused whole, so the plan's other streams
/// decide whether a stream's readings in it are admitted.
fn message(rng: &mut ChaCha8Rng, i: usize) -> Vec<u8> {
    let device = format!("d{}", rng.gen_range(0..12));
    let t = T0 + i as i64 * 60_000;
    let labels = match rng.gen_range(0..3) {
        0 => String::new(),
        1 => r#","labels":{"firmware":"4.2"}"#.into(),
        _ => r#","labels":{"firmware":"4.3"}"#.into(),
    };
    let (both, one) = (rng.gen_bool(1.0 / 3.0), rng.gen_range(0..2));
    let (x, y) = (rng.gen_range(0..100), rng.gen_range(0..100));
    let reading = |stream: &str, value: i32| {
        format!(
            r#"{{"device_id":"{device}","stream":"{stream}","value":{value},"event_time_ms":{t}{labels}}}"#
        )
    };
    let text = if both {
        format!("[{},{}]", reading("temp", x), reading("speed", y))
    } else {
        reading(["temp", "speed"][one], x)
    };
    text.into_bytes()
}

/// The lane's windows, comparable across configurations.
type Lane = Vec<(u64, Vec<i64>, Vec<(u64, i64)>, u64)>;

/// Closed windows by lane name (planned stream name).
fn run(v: &Validated, msgs: &[Vec<u8>]) -> BTreeMap<String, Lane> {
    let mut p = Processor::new(v, Arc::new(Counters::default()));
    let add_remove = v.plan.privacy.relation.to_string() == "add-remove";
    if add_remove {
        p.windower_mut().start_time_lanes(0, T0 - HOUR);
    }
    let mut closed: Vec<ClosedWindow> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        // A refused message is skipped, as its dead letter would be.
        let _ = p.process(0, i as i64, m, Some("application/json"), None, &mut closed);
    }
    if add_remove {
        let end = T0 + 100 * HOUR;
        p.windower_mut()
            .close_due(end, |_| end, |_| 0, usize::MAX, &mut closed);
    }
    let mut out: BTreeMap<String, Lane> = BTreeMap::new();
    for w in closed {
        let mut charges = w.charges.clone();
        charges.sort();
        out.entry(v.plan.streams[w.stream].spec.name.clone())
            .or_default()
            .push((w.seq, w.values.clone(), charges, w.padded));
    }
    out
}

fn declared(lane: &str) -> &str {
    lane.split_once('[').map_or(lane, |(d, _)| d)
}

/// Each planned stream's fingerprint, by lane name.
fn fingerprints(v: &Validated) -> BTreeMap<String, proto::v1::PlanFingerprint> {
    (0..v.plan.streams.len())
        .map(|i| {
            (
                v.plan.streams[i].spec.name.clone(),
                fingerprint(v, i, 1, ""),
            )
        })
        .collect()
}

#[test]
fn the_same_identity_admits_alike_and_another_is_refused() {
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261127u64);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut same, mut differ, mut pairs) = (0, 0, 0);
    while pairs < PAIRS {
        let a = Draw::new(&mut rng);
        let mut b = a.clone();
        let mutations: Vec<(&str, bool)> = (0..rng.gen_range(1..3))
            .map(|_| mutate(&mut rng, &mut b))
            .collect();
        if a.toml() == b.toml() {
            continue; // the changes undid each other
        }
        let (Ok(va), Ok(vb)) = (
            Config::parse(&a.toml()).unwrap().validate(),
            Config::parse(&b.toml()).unwrap().validate(),
        ) else {
            continue;
        };
        pairs += 1;
        let msgs: Vec<Vec<u8>> = (0..120).map(|i| message(&mut rng, i)).collect();
        let (wa, wb) = (run(&va, &msgs), run(&vb, &msgs));
        let (fa, fb) = (fingerprints(&va), fingerprints(&vb));
        let relevant = mutations.iter().any(|m| m.1);
        let what = || format!("{mutations:?}\n--- a\n{}\n--- b\n{}", a.toml(), b.toml());
        // Per declared stream of a: is its identity the same in b?
        let mut streams: Vec<&str> = fa.keys().map(|l| declared(l)).collect();
        streams.dedup();
        let mut any_changed = false;
        for s in streams {
            let lanes_a: Vec<&String> = fa.keys().filter(|l| declared(l) == s).collect();
            let first_b = fb.iter().find(|(l, _)| declared(l) == s);
            let unchanged = match first_b {
                Some((_, now)) => PlanChange::between(&fa[lanes_a[0]], now).is_none(),
                None => false,
            };
            if unchanged {
                // The same identity: the same lanes, windows and charges.
                let la: BTreeMap<_, _> = wa.iter().filter(|(l, _)| declared(l) == s).collect();
                let lb: BTreeMap<_, _> = wb.iter().filter(|(l, _)| declared(l) == s).collect();
                assert_eq!(
                    la,
                    lb,
                    "stream {s}: same identity, other admissions\n{}",
                    what()
                );
                continue;
            }
            any_changed = true;
            // Another identity: each recorded lane of a is refused under b,
            // whether b has a lane of that name or not.
            let planned = |name: &str| fb.contains_key(name);
            let unplanned = unplanned_lanes(
                &vb,
                1,
                lanes_a.iter().map(|l| (l.to_string(), 0)),
                planned,
                |l| Some(fa[&l.0].clone()),
            );
            for l in &lanes_a {
                let refused = match fb.get(*l) {
                    Some(now) => PlanChange::between(&fa[*l], now).is_some(),
                    None => unplanned.iter().any(|((n, _), _)| n == *l),
                };
                assert!(
                    refused,
                    "lane {l}: changed identity not refused\n{}",
                    what()
                );
            }
        }
        if relevant {
            assert!(
                any_changed,
                "a relevant change kept every identity\n{}",
                what()
            );
            differ += 1;
        } else {
            assert!(
                !any_changed,
                "an irrelevant change moved an identity\n{}",
                what()
            );
            same += 1;
        }
    }
    // Both kinds of pairs were drawn.
    assert!(same >= 20 && differ >= 100, "same {same}, differ {differ}");
}

/// `adaptive_quantiles` only weighs a window's quantile candidates by
/// earlier releases, at the same spend in the same lane: turning it on or
/// off keeps every stream's identity (no refusal on restart), while
/// changing the quantile levels, beside it, changes it.
#[test]
fn adaptive_quantiles_is_a_free_choice() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("adaptive_quantiles = true"));
    let validated = |t: &str| Config::parse(t).unwrap().validate().unwrap();
    let on = fingerprints(&validated(&text));
    let off = fingerprints(&validated(
        &text.replace("adaptive_quantiles = true", "adaptive_quantiles = false"),
    ));
    let unset = fingerprints(&validated(&text.replace("adaptive_quantiles = true", "")));
    for (lane, f) in &on {
        for other in [&off, &unset] {
            assert_eq!(f.digest, other[lane].digest, "{lane}");
            assert!(PlanChange::between(f, &other[lane]).is_none(), "{lane}");
        }
        assert!(!f.settings.contains_key("stream.adaptive_quantiles"));
    }
    let levels = fingerprints(&validated(&text.replacen(
        "quantiles = [0.5, 0.9]",
        "quantiles = [0.5, 0.95]",
        1,
    )));
    assert!(
        on.iter()
            .any(|(lane, f)| PlanChange::between(f, &levels[lane]).is_some()),
        "the control: other levels are another plan"
    );
}
