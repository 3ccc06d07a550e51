//! A restart inside a message that holds readings of two windows loses
//! nothing: the resume position is the reading (offset and index within
//! its message), not the message. With windows of 3 and input A, B, [C, D]
//! (one JSON array message), window 0 = {A, B, C} closes inside the batch;
//! after a stop or a crash and E, F, window 1 must be {D, E, F}, as in an
//! uninterrupted run (D used to be skipped as already released).

use crate::harness;

use harness::*;
use std::time::Duration;

const KEY: [u8; 32] = [4; 32];
const STREAM: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 3\nmax_windows_per_device = 100\nstatistics = [\"mean\"]";

fn one(device: &str, event_ms: i64) -> String {
    format!(r#"{{"device_id":"{device}","stream":"temp","value":21.5,"event_time_ms":{event_ms}}}"#)
}

fn message(readings: &[String]) -> Out {
    let payload = if readings.len() == 1 {
        readings[0].clone()
    } else {
        format!("[{}]", readings.join(","))
    };
    Out {
        partition: Some(0),
        key: "k".into(),
        payload: payload.into_bytes(),
        content_type: Some("application/json".into()),
    }
}

fn straddle(crash: bool) {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new(if crash { "resume-kill" } else { "resume-stop" });
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let privacy = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
        let e = now_ms() - 60_000;
        produce(
            &broker,
            &t.input,
            &[
                message(&[one("a", e)]),
                message(&[one("b", e + 1)]),
                message(&[one("c", e + 2), one("d", e + 3)]),
            ],
        )
        .await;
        let (stop, c, h) = spawn_pipeline(config(&broker, &t, privacy, "", STREAM), KEY);
        assert!(wait_until(Duration::from_secs(120), || count(&c.windows_released) >= 1).await);
        if crash {
            // No graceful end: nothing finished, committed or flushed.
            h.abort();
            let _ = h.await;
        } else {
            stop.send(true).unwrap();
            h.await.unwrap().unwrap();
        }
        drop(stop);

        produce(
            &broker,
            &t.input,
            &[message(&[one("e", e + 4)]), message(&[one("f", e + 5)])],
        )
        .await;
        let t2 = t.regroup();
        let (stop, c, h) = spawn_pipeline(config(&broker, &t2, privacy, "", STREAM), KEY);
        let released =
            wait_until(Duration::from_secs(60), || count(&c.windows_released) >= 1).await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(
            released,
            "window 1 was not released: accepted {} (D lost), already released {}",
            count(&c.readings_accepted),
            count(&c.already_released)
        );
        assert_eq!(count(&c.readings_accepted), 3, "D, E and F");
        assert_eq!(count(&c.already_released), 3, "A, B and C");

        let out = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let w1: Vec<_> = out.iter().filter(|r| r.window_seq == 1).collect();
        assert!(!w1.is_empty());
        assert_eq!(
            (w1[0].first_offset, w1[0].last_offset, w1[0].n),
            (2, 4, 3),
            "window 1 = D (in the batch at offset 2), E, F"
        );
    });
}

#[test]
fn a_stop_inside_a_straddling_batch_loses_nothing() {
    straddle(false);
}

#[test]
fn a_crash_inside_a_straddling_batch_loses_nothing() {
    straddle(true);
}
