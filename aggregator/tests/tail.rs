//! `fleetdp tail` over the broker: it prints every release of the output
//! topic, fleet-wide and per partition, as JSON documents identical to the
//! releases consumers decode and as the demo's table (`--fleet`: fleet-wide
//! only), and it stops after `--max` or an idle spell. The JSON Schemas
//! shipped for consumers accept every JSON record the pipeline writes.

use crate::harness;

use fleetdp::tail::{run, TailFormat, TailOptions};
use harness::schema::schema_errors;
use harness::*;
use std::time::Duration;

const TEMP: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nmax_windows_per_device = 100\nstatistics = [\"mean\", \"count\"]";

#[test]
fn tail_prints_every_release_as_json_and_as_a_table() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "tail", 1).await;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "",
            TEMP,
        );
        let base = now_ms() - 60_000;
        let msgs: Vec<Out> = (0..20)
            .map(|i| temp_reading(Some(0), &format!("d{i}"), 20.0 + i as f64, base + i))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v.clone(), [9; 32]);
        assert!(wait_until(Duration::from_secs(120), || count(&c.windows_released) >= 4).await);
        let fleet_written =
            || tokio::task::block_in_place(|| fleet_releases(&broker, &t.output)).len() >= 4;
        assert!(wait_until(Duration::from_secs(60), fleet_written).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        let want = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert_eq!(want.len(), 4);
        let fleet = tokio::task::block_in_place(|| fleet_releases(&broker, &t.output));
        assert_eq!(fleet.len(), 4);
        // Every record in topic order, as consumers decode it, as JSON.
        let all: Vec<String> = tokio::task::block_in_place(|| read_all(&broker, &t.output))
            .iter()
            .map(|m| {
                let ct = m.headers.get("content-type").map(String::as_str);
                if m.is_fleet() {
                    let f = fleetdp::fleet::decode_fleet(&m.payload, ct).unwrap();
                    serde_json::to_string(&f).unwrap()
                } else {
                    let r = fleetdp::kafka::decode_release(&m.payload, ct).unwrap();
                    serde_json::to_string(&r).unwrap()
                }
            })
            .collect();

        let opts = |format, max, fleet_only| TailOptions {
            format,
            from_beginning: true,
            max,
            idle: Some(Duration::from_secs(10)),
            fleet_only,
        };
        let mut out = Vec::new();
        let n = tokio::task::block_in_place(|| {
            run(&v, &opts(TailFormat::Json, Some(3), false), &mut out)
        })
        .unwrap();
        assert_eq!(n, 3, "stops after --max");
        let got: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(got, all[..3]);

        let mut out = Vec::new();
        let n = tokio::task::block_in_place(|| {
            run(&v, &opts(TailFormat::Table, None, false), &mut out)
        })
        .unwrap();
        assert_eq!(n, 8, "stops after the idle spell with every release");
        let text = String::from_utf8(out).unwrap();
        for r in &want {
            let line = format!("temp          p0 #{:<3} n=5 mean", r.window_seq);
            assert!(text.contains(&line), "{line:?} missing from:\n{text}");
            let line = format!(
                "temp          FLEET #{:<3} [1/1 partitions] n=5 mean",
                r.window_seq
            );
            assert!(text.contains(&line), "{line:?} missing from:\n{text}");
        }
        assert!(text.contains(" ± "), "intervals shown:\n{text}");

        // --fleet: the fleet-wide view only.
        let mut out = Vec::new();
        let n =
            tokio::task::block_in_place(|| run(&v, &opts(TailFormat::Table, None, true), &mut out))
                .unwrap();
        assert_eq!(n, 4);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text.lines().filter(|l| l.contains(" FLEET #")).count(),
            4,
            "{text}"
        );
        assert!(!text.contains(" p0 #"), "{text}");
    });
}

/// The JSON Schema shipped for consumers (`proto/schema/`) accepts every
/// JSON release the pipeline writes — every statistic, the guarantee,
/// running totals with their summed and combined estimates — and refuses a
/// release with a field it does not describe (so a new field cannot ship
/// without the schema).
#[test]
fn json_releases_match_the_shipped_schema() {
    let schema: serde_json::Value = serde_json::from_str(include_str!(
        "../../proto/schema/window_release.schema.json"
    ))
    .unwrap();
    let fleet_schema: serde_json::Value =
        serde_json::from_str(include_str!("../../proto/schema/fleet_release.schema.json")).unwrap();
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "schema", 1).await;
        let mut v = config(
            &broker,
            &t,
            "epsilon_per_device = 4.0\nhorizon = \"24h\"",
            "",
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\n\
             max_windows_per_device = 10\nrunning_share = 0.2\n\
             statistics = [\"count\", \"sum\", \"mean\", \"variance\", \"std\", \"histogram\", \"quantiles\"]\n\
             histogram_edges = [-20.0, 0.0, 20.0, 40.0, 60.0]\nquantiles = [0.5, 0.9]",
        );
        v.config.kafka.output_format = fleetdp::config::OutputFormat::Json;
        let base = now_ms() - 60_000;
        let msgs: Vec<Out> = (0..15)
            .map(|i| temp_reading(Some(0), &format!("d{i}"), 15.0 + i as f64, base + i))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, [4; 32]);
        assert!(wait_until(Duration::from_secs(120), || count(&c.windows_released) >= 3).await);
        let fleet_written =
            || tokio::task::block_in_place(|| fleet_releases(&broker, &t.output)).len() >= 3;
        assert!(wait_until(Duration::from_secs(60), fleet_written).await);
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        let all = tokio::task::block_in_place(|| read_all(&broker, &t.output));
        let (fleet, raw): (Vec<Read>, Vec<Read>) = all.into_iter().partition(|m| m.is_fleet());
        assert_eq!((raw.len(), fleet.len()), (3, 3));
        // Each kind's documents, then one drifted: a field the schema
        // does not name.
        let drifted = |docs: &[serde_json::Value]| {
            let mut d = docs[0].clone();
            d["statistics"][0]["new_field"] = 1.into();
            d
        };
        let mut fleet_docs = Vec::new();
        for r in &fleet {
            assert_eq!(r.headers["content-type"], "application/json");
            let doc: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            fleet_docs.push(doc.clone());
            assert_eq!(doc["statistics"].as_array().unwrap().len(), 8, "{doc}");
            assert!(doc["statistics"][1]["half_width"].is_number(), "{doc}");
            // The fleet-wide running totals (one partition: its own).
            assert!(doc["running"][0]["combined"].is_number(), "{doc}");
            assert!(doc["running"][1]["summed_bins"].is_array(), "{doc}");
        }
        fleet_docs.push(drifted(&fleet_docs));
        let mut docs = Vec::new();
        for r in &raw {
            assert_eq!(r.headers["content-type"], "application/json");
            let doc: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            docs.push(doc.clone());
            assert!(doc["running"][0]["combined"].is_number(), "{doc}");
            // Quantiles over every grid point: a rank interval.
            assert!(doc["statistics"][6]["rank_half_width"].is_number(), "{doc}");
        }
        docs.push(drifted(&docs));
        for (schema, docs) in [(&fleet_schema, &fleet_docs), (&schema, &docs)] {
            let Some(errors) = schema_errors(schema, docs) else {
                return;
            };
            let (drifted, written) = errors.split_last().unwrap();
            for (e, doc) in written.iter().zip(docs.iter()) {
                assert!(e.is_empty(), "{e:?} in {doc}");
            }
            assert!(
                drifted.iter().any(|e| e.contains("new_field")),
                "{drifted:?}"
            );
        }
    });
}

/// `fleetdp advise` over the broker: it proposes bounds covering ≥ 99% of
/// the input's readings, prints the spend and the plan with them, records
/// the spend in the state topic, and refuses a second run that would take
/// the horizon's advisor spends above the declared budget.
#[test]
fn advise_proposes_bounds_records_its_spend_and_refuses_past_the_budget() {
    use rand::{Rng, SeedableRng};
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "advise", 1).await;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "",
            TEMP,
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let base = now_ms() - 60_000;
        let values: Vec<f64> = (0..3000)
            .map(|_| {
                let (u, w): (f64, f64) = (rng.gen::<f64>().max(1e-12), rng.gen());
                20.0 + 5.0 * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * w).cos()
            })
            .collect();
        let msgs: Vec<Out> = values
            .iter()
            .enumerate()
            .map(|(i, &x)| temp_reading(Some(0), &format!("d{i}"), x, base + i as i64))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let opts = |epsilon| fleetdp::advise::AdviseOptions {
            stream: "temp".into(),
            epsilon,
            coverage: 0.99,
            max_readings: 100_000,
            max_readings_per_device: 1,
        };
        let mut out = Vec::new();
        // Seeded noise: the run is reproducible (the method's coverage over
        // many draws is the core's test, dp/tests/advise.rs).
        let mut noise = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        fleetdp::advise::run_with_rng(&v, &opts(0.6), &mut noise, &mut out)
            .await
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let field = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} = ")))
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
                .parse()
                .unwrap()
        };
        let (lower, upper) = (field("lower"), field("upper"));
        let inside = values.iter().filter(|&&x| lower <= x && x <= upper).count();
        assert!(
            inside as f64 >= 0.99 * values.len() as f64,
            "[{lower}, {upper}]:\n{text}"
        );
        // Not the whole grid (±2⁶⁰): with 3,000 readings the scans' noise
        // can overshoot by a few powers of two (README, Choosing bounds).
        assert!(lower > -1e4 && upper < 1e4, "{text}");
        // The plan accepts the proposal it prints.
        assert!(!text.contains("is refused"), "{text}");
        assert!(
            text.contains("ε = 0.6 per device") && text.contains("the plan with these bounds"),
            "{text}"
        );
        // The spend is in the state topic.
        let recorded = tokio::task::block_in_place(|| read_all(&broker, &t.state))
            .into_iter()
            .filter(|m| m.headers.get("fleetdp-record").map(String::as_str) == Some("advise"))
            .count();
        assert_eq!(recorded, 1);
        // 0.6 + 0.6 > 1: refused, nothing more recorded.
        let e = fleetdp::advise::run(&v, &opts(0.6), &mut Vec::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("refused") && e.contains("1.2"), "{e}");
        // An unknown stream or a bad ε is refused before anything is recorded.
        let mut bad = opts(0.1);
        bad.stream = "nope".into();
        assert!(fleetdp::advise::run(&v, &bad, &mut Vec::new())
            .await
            .is_err());
        assert!(fleetdp::advise::run(&v, &opts(0.0), &mut Vec::new())
            .await
            .is_err());
        // A missing input topic: refused naming it, nothing recorded, and
        // the output does not claim otherwise (it printed "recorded" first).
        let mut gone = t.regroup();
        gone.input = unique("advise-missing-in");
        let v2 = config(
            &broker,
            &gone,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "",
            TEMP,
        );
        let mut said = Vec::new();
        let e = fleetdp::advise::run(&v2, &opts(0.1), &mut said)
            .await
            .unwrap_err();
        let said = String::from_utf8(said).unwrap();
        assert!(format!("{e:#}").contains("kafka.input_topic"), "{e:#}");
        assert!(!said.contains("recorded"), "{said}");
        let recorded = tokio::task::block_in_place(|| read_all(&broker, &t.state))
            .into_iter()
            .filter(|m| m.headers.get("fleetdp-record").map(String::as_str) == Some("advise"))
            .count();
        assert_eq!(recorded, 1);
    });
}

/// Issue: `tail` wrote a foreign record's terminal control sequences
/// (`ESC[31m`, BEL, `ESC[2J`) to the terminal as they were, and showed
/// foreign records as if they were releases. A record that decodes but
/// lacks the key FleetDP gives its release is skipped; what is shown has
/// every control character escaped (and JSON lines stay JSON).
#[test]
fn tail_escapes_control_characters_and_skips_foreign_records() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "tail-hostile", 1).await;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "",
            TEMP,
        );
        let stream = "temp\u{1b}[31m\u{7}\u{1b}[2J\u{9b}";
        let json = |s: &str| {
            serde_json::json!({"stream": s, "partition": 0, "window_seq": 3, "readings": 5})
                .to_string()
                .into_bytes()
        };
        let record = |key: String, payload: Vec<u8>| Out {
            partition: Some(0),
            key,
            payload,
            content_type: Some("application/json".into()),
        };
        produce(
            &broker,
            &t.output,
            &[
                // Keyed as FleetDP keys that release: shown, escaped.
                record(format!("{stream}/0/3"), json(stream)),
                // Decodes, but foreign: skipped.
                record("x".into(), json("\u{7}bell")),
                record("temp/0/9".into(), json("temp")),
            ],
        )
        .await;
        for format in [TailFormat::Table, TailFormat::Json] {
            let opts = TailOptions {
                format,
                from_beginning: true,
                max: None,
                idle: Some(Duration::from_secs(5)),
                fleet_only: false,
            };
            let mut out = Vec::new();
            let n = tokio::task::block_in_place(|| run(&v, &opts, &mut out)).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert_eq!(n, 1, "{format:?}: only FleetDP's record is shown:\n{text}");
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "{format:?}: a control character reached the terminal: {text:?}"
            );
            assert!(
                text.contains("\\u001b[31m") && text.contains("\\u009b"),
                "{text:?}"
            );
            if format == TailFormat::Json {
                let r: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
                assert_eq!(r["stream"], stream, "escaped JSON decodes to the record");
            }
        }
    });
}
