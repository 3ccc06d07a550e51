//! OpenTelemetry metrics in, through the broker: requests made and
//! encoded by the OpenTelemetry Python SDK (`otlp_fleet.py`: one
//! MeterProvider per device, several devices' resources per request, a
//! gauge and a delta counter), written as the Collector's Kafka exporter
//! writes them (no content-type header), in `otlp_proto` and in
//! `otlp_json`; every round's window is released with its devices and its
//! mean within three of its half-widths of the truth (ε = 125 a window;
//! the noise is keyed by the window's values, so the check is the same in
//! every run).

use crate::harness;

use harness::*;
use std::process::Command;
use std::time::Duration;

const DEVICES: usize = 12;
const ROUNDS: usize = 4;

const STREAMS: &str = r#"
[[stream]]
name = "temp"
lower = 0.0
upper = 50.0
resolution = 0.01
window_size = 12
max_windows_per_device = 4
statistics = ["mean"]
budget_share = 0.5

[[stream]]
name = "trips"
lower = 0.0
upper = 10.0
resolution = 1.0
window_size = 12
max_windows_per_device = 4
statistics = ["mean"]
budget_share = 0.5
"#;

/// The SDK's requests (four devices each) and each round's true mean.
fn fleet(py: &str, encoding: &str) -> (Vec<Vec<u8>>, Vec<f64>) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp_fleet.py");
    let out = stdout_of(Command::new(py).args([
        script,
        &DEVICES.to_string(),
        &ROUNDS.to_string(),
        "4",
        encoding,
    ]));
    let text = String::from_utf8(out).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let truth: serde_json::Value = serde_json::from_str(lines.pop().unwrap()).unwrap();
    let bytes = lines
        .iter()
        .map(|l| {
            (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect();
    let means = truth["temp_means"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_f64().unwrap())
        .collect();
    (bytes, means)
}

#[test]
fn sdk_made_requests_are_released_in_both_encodings() {
    let Some(py) = front::python_with("opentelemetry.exporter.otlp.proto.common") else {
        return;
    };
    let broker = Broker::start();
    let rt = runtime();
    for encoding in ["proto", "json"] {
        let (requests, means) = fleet(&py, encoding);
        assert_eq!(requests.len(), ROUNDS * DEVICES / 4);
        rt.block_on(async {
            let t = Topics::created(&broker, &format!("otlp-{encoding}"), 1).await;
            let text = config_text(
                &broker,
                &t,
                "epsilon_per_device = 1000.0\nhorizon = \"24h\"",
                "[otlp]\ndevice_attribute = \"device.id\"\n[otlp.metrics]\ntemp = \"cabin.temperature\"\ntrips = \"trips\"",
                STREAMS,
            )
            .replace("[kafka]\n", &format!("[kafka]\ninput_format = \"otlp_{encoding}\"\n"));
            let v = fleetdp::config::Config::parse(&text).unwrap().validate().unwrap();
            let msgs: Vec<Out> = requests
                .into_iter()
                .enumerate()
                .map(|(i, payload)| Out {
                    partition: Some(0),
                    key: format!("batch-{i}"),
                    payload,
                    content_type: None,
                })
                .collect();
            produce(&broker, &t.input, &msgs).await;
            let (stop, counters, h) = spawn_pipeline(v, [9; 32]);
            let done = wait_until(Duration::from_secs(90), || {
                releases(&broker, &t.output).len() >= 2 * ROUNDS
            })
            .await;
            stop.send(true).unwrap();
            h.await.unwrap().unwrap();
            let got = releases(&broker, &t.output);
            assert!(done, "{encoding}: {} releases, {} dead letters", got.len(), counters.dead_letters_total());
            assert_eq!(counters.dead_letters_total(), 0, "{encoding}");
            for r in &got {
                assert_eq!(r.n, DEVICES as u64, "{encoding} {}#{}", r.stream, r.window_seq);
                let mean = r.statistics[0].values[0];
                let truth = match r.stream.as_str() {
                    "temp" => means[r.window_seq as usize],
                    _ => 1.0,
                };
                // The noise is keyed by the window's values: fixed for
                // this fleet's (deterministic) readings.
                let hw = r.statistics[0].half_width.unwrap();
                assert!(hw < 0.5 && (mean - truth).abs() <= 3.0 * hw, "{encoding} {}#{}: {mean} against {truth}", r.stream, r.window_seq);
            }
        });
    }
}
