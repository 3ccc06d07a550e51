//! A window's charges outgrow one Kafka message: with 100,000 distinct
//! devices the record is ≈ 1.2 MB, over the producer's default limit, and
//! the service used to exit and replay the same window forever. The
//! charges are now split into records of at most 40,000 devices; restore
//! reassembles them, so every device keeps its cap across a restart.

use crate::harness;

use harness::*;
use std::time::Duration;

const KEY: [u8; 32] = [8; 32];
const DEVICES: usize = 100_000;

/// One JSON message holding a reading of each device in `ids`.
fn batch(ids: std::ops::Range<usize>, event_ms: i64) -> Out {
    let readings: Vec<String> = ids
        .map(|i| {
            format!(r#"{{"device_id":"dev{i}","stream":"temp","value":21.5,"event_time_ms":{event_ms}}}"#)
        })
        .collect();
    Out {
        partition: Some(0),
        key: "batch".into(),
        payload: format!("[{}]", readings.join(",")).into_bytes(),
        content_type: Some("application/json".into()),
    }
}

#[test]
fn a_window_of_100000_devices_is_released_and_its_charges_restored() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("bigwin");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let stream = format!(
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = {DEVICES}\nmax_windows_per_device = 1\nstatistics = [\"mean\"]"
        );
        let privacy = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
        let event = now_ms() - 60_000;
        let msgs: Vec<Out> = (0..DEVICES / 1000)
            .map(|b| batch(b * 1000..(b + 1) * 1000, event))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(config(&broker, &t, privacy, "", &stream), KEY);
        let released = wait_until(Duration::from_secs(180), || {
            count(&c.windows_released) >= 1 || h.is_finished()
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().expect("the service failed on the large window");
        assert!(released, "the window of {DEVICES} devices was not released");

        let state = tokio::task::block_in_place(|| read_all(&broker, &t.state));
        let charges: Vec<&Read> = state
            .iter()
            .filter(|m| m.headers.get(fleetdp::state::RECORD_KIND).map(String::as_str) == Some(fleetdp::state::CHARGES))
            .collect();
        assert_eq!(charges.len(), 3, "100,000 charges in records of 40,000");
        assert!(charges.iter().all(|m| m.payload.len() < 1_000_000));

        // A restart restores all three records: devices charged in the last
        // one are over their cap (W = 1) as much as those in the first.
        let t2 = t.regroup();
        produce(&broker, &t.input, &[batch(0..500, event), batch(DEVICES - 500..DEVICES, event)]).await;
        let (stop, c, h) = spawn_pipeline(config(&broker, &t2, privacy, "", &stream), KEY);
        let capped = wait_until(Duration::from_secs(120), || {
            count(&c.dropped_horizon_cap) >= 1000 || h.is_finished()
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(
            capped,
            "dropped {} of 1000 returning devices as over their cap",
            count(&c.dropped_horizon_cap)
        );
        assert_eq!(count(&c.readings_accepted), 0);
    });
}
