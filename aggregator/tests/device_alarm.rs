//! The device-limit alarm through `fleetdp run` with
//! `http.hide_exact_counts` (docs/privacy.md#the-device-limit-alarm): a
//! lane that counts 40 devices of a horizon against a limit of 40 turns
//! `fleetdp_device_limit_alarm` to 1, one with 5 stays at 0, and neither
//! fires in the first horizon the instance sees (an instance runs only in
//! horizons it saw begin). The exact device gauge stays hidden.

use crate::harness;

use harness::child::Service;
use harness::*;
use std::time::Duration;

const STREAMS: &str = r#"
[[stream]]
name = "temp"
lower = 0.0
upper = 100.0
resolution = 1.0
window_size = 10
max_windows_per_device = 100
statistics = ["mean"]
budget_share = 0.5
device_alarm_share = 0.5

[[stream]]
name = "volt"
lower = 0.0
upper = 100.0
resolution = 1.0
window_size = 5
max_windows_per_device = 100
statistics = ["mean"]
budget_share = 0.5
device_alarm_share = 0.5
"#;

fn reading(stream: &str, device: &str, event_ms: i64) -> Out {
    Out {
        partition: Some(0),
        key: device.to_string(),
        payload: format!(
            r#"{{"device_id":"{device}","stream":"{stream}","value":50,"event_time_ms":{event_ms}}}"#
        )
        .into_bytes(),
        content_type: Some("application/json".into()),
    }
}

/// One horizon's readings from `at`: 40 devices of `temp` (4 windows), 5
/// of `volt` twice (2 windows).
fn horizon(at: i64) -> Vec<Out> {
    let mut out: Vec<Out> = (0..40)
        .map(|d| reading("temp", &format!("t{d}"), at + d * 1000))
        .collect();
    out.extend((0..10).map(|i| reading("volt", &format!("v{}", i % 5), at + i * 1000)));
    out
}

/// The alarm gauge's lines on `/metrics`, by stream.
fn alarms(s: &Service) -> Vec<(String, String)> {
    let Some((200, body)) = s.get("/metrics") else {
        return vec![];
    };
    assert!(
        !body.contains("fleetdp_lane_devices"),
        "the exact device gauge is hidden"
    );
    body.lines()
        .filter(|l| l.starts_with("fleetdp_device_limit_alarm{"))
        .map(|l| {
            let stream = l
                .split("stream=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            (
                stream.to_string(),
                l.rsplit(' ').next().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_lane_near_its_device_limit_raises_the_alarm_under_hidden_counts() {
    let broker = Broker::start();
    if !broker.is_external() {
        // A child process cannot reach the in-process mock cluster.
        return;
    }
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "alarm", 1).await;
        // ε = 100: each instance gets ε = 12.5, noise well under a device.
        let service = Service::start(
            &broker,
            &t,
            "epsilon_per_device = 100.0\nhorizon = \"1h\"",
            "hide_exact_counts = true\n[limits]\nmax_devices_per_lane = 40",
            STREAMS,
        );
        assert!(
            service.ready_within(Duration::from_secs(60)).await,
            "{}",
            service.log()
        );
        // Two whole hours back: horizons A and A + 1 are both past.
        let a = (now_ms() / 3_600_000 - 3) * 3_600_000;
        produce(&broker, &t.input, &horizon(a)).await;
        let seen = |s: &Service| {
            let mut got = alarms(s);
            got.sort();
            got
        };
        let both = |v: &str, w: &str| vec![("temp".into(), v.into()), ("volt".into(), w.into())];
        let first = wait_until(Duration::from_secs(60), || seen(&service).len() == 2).await;
        assert!(first, "{:?}\n{}", seen(&service), service.log());
        assert_eq!(seen(&service), both("0", "0"), "blind in the first horizon");
        produce(&broker, &t.input, &horizon(a + 3_600_000)).await;
        let fired = wait_until(Duration::from_secs(60), || seen(&service) == both("1", "0")).await;
        assert!(fired, "{:?}\n{}", seen(&service), service.log());
        assert!(
            !service.log().contains("FleetDPDeviceLimit cannot fire"),
            "every stream has an alarm"
        );
    });
}

/// With hidden counts, a stream without an alarm is named at start: its
/// FleetDPDeviceLimit cannot fire.
#[test]
fn hidden_counts_name_the_streams_without_an_alarm() {
    let broker = Broker::start();
    if !broker.is_external() {
        return;
    }
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "alarm-warn", 1).await;
        let streams = STREAMS.replacen("device_alarm_share = 0.5\n", "", 1);
        let service = Service::start(
            &broker,
            &t,
            "epsilon_per_device = 100.0\nhorizon = \"1h\"",
            "hide_exact_counts = true",
            &streams,
        );
        let warned = wait_until(Duration::from_secs(30), || {
            service.log().contains("FleetDPDeviceLimit cannot fire")
        })
        .await;
        let log = service.log();
        assert!(warned, "{log}");
        let line = log
            .lines()
            .find(|l| l.contains("FleetDPDeviceLimit cannot fire"))
            .unwrap();
        assert!(
            line.contains("streams=temp") && !line.contains("volt"),
            "{line}"
        );
    });
}
