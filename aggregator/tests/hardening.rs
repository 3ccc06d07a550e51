//! Hardening of the data path, over the broker:
//!
//! - wrong device clocks never stop a lane (one future event time used to
//!   move a lane's lateness reference, and every later reading was refused
//!   as too old): a reading dated before 1970 or more than `max_clock_skew`
//!   ahead of its message's timestamp is dead-lettered `future` before it
//!   touches any lane; the readings around it are accepted;
//! - an idle instance applies its assignment without a message arriving;
//! - a dead letter too large for the producer is sent truncated (it used to
//!   be retried forever, and nothing behind it was processed);
//! - a missing dead-letter or state topic is an error at start;
//! - under add-remove, an output topic stamped with the broker's clock
//!   (LogAppendTime, which shows when each release arrived) is warned about.

use crate::harness;

use harness::*;
use ingest::Reason;
use std::time::Duration;

const KEY: [u8; 32] = [5; 32];
const WAIT: Duration = Duration::from_secs(120);

fn reading(device: &str, event_ms: i64) -> Out {
    temp_reading(Some(0), device, 21.5, event_ms)
}

/// Stream `temp`: windows of 5, mean only, `W` = 100.
const TEMP: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nmax_windows_per_device = 100\nstatistics = [\"mean\"]";
const PRIVACY: &str = "epsilon_per_device = 1.0\nhorizon = \"24h\"";

/// New topics named after `name` (`partitions` input partitions) and a
/// configuration of stream `temp` on them with `extra` settings.
async fn setup(
    broker: &Broker,
    name: &str,
    partitions: i32,
    extra: &str,
) -> (Topics, fleetdp::config::Validated) {
    let t = Topics::created(broker, name, partitions).await;
    let v = config(broker, &t, PRIVACY, extra, TEMP);
    (t, v)
}

#[test]
fn microsecond_and_fast_clocks_are_dead_lettered_and_the_lane_goes_on() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("clocks");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            "[limits]\nmax_lateness = \"10m\"",
            r#"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 5
max_windows_per_device = 100
statistics = ["mean"]
"#,
        );
        let now = now_ms();
        let base = now - 60_000;
        let mut msgs: Vec<Out> = (0..20)
            .map(|i| reading(&format!("a{i}"), base + i))
            .collect();
        msgs.push(reading("micros", base * 1000)); // µs sent as ms
        msgs.push(reading("fast", now + 2 * 3_600_000)); // a clock 2 h fast
        msgs.push(reading("ancient", -5));
        msgs.extend((0..20).map(|i| reading(&format!("b{i}"), base + 100 + i)));
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, KEY);
        assert!(
            wait_until(WAIT, || count(&c.windows_released) >= 8).await,
            "released {} of 8; accepted {}, dead letters {}",
            count(&c.windows_released),
            count(&c.readings_accepted),
            c.dead_letters_total()
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(
            count(&c.readings_accepted),
            40,
            "every reading with a sane clock"
        );
        assert_eq!(c.dead_letters(Reason::Future), 3);
        assert_eq!(
            c.dead_letters(Reason::TooOld),
            0,
            "a wrong clock moved the lane"
        );
        let dlq = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        let reasons: Vec<&str> = dlq
            .iter()
            .map(|m| m.headers["fleetdp-reason"].as_str())
            .collect();
        assert_eq!(reasons, ["future", "future", "future"]);
    });
}

/// An instance on an empty topic applies its assignment on the idle tick:
/// it becomes ready without a message arriving (it used to wait for one).
#[test]
fn an_idle_instance_becomes_ready_without_a_message() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let (_t, v) = setup(&broker, "idle", 2, "").await;
        let p = fleetdp::pipeline::Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes(KEY));
        let board = p.board.clone();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let h = tokio::spawn(async move { p.run(rx, fleetdp::pipeline::Options::default()).await });
        let ready = wait_until(Duration::from_secs(60), || board.ready().is_ok()).await;
        let why = board.ready().err();
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(ready, "not ready on an empty topic: {why:?}");
    });
}

/// SIGHUP and SIGTERM both stop `fleetdp run` gracefully: exit 0, having
/// finished, committed and flushed (SIGHUP used to kill it at once).
#[test]
fn sighup_and_sigterm_stop_gracefully() {
    let broker = Broker::start();
    if !broker.is_external() {
        // A child process cannot reach the in-process mock cluster.
        return;
    }
    let rt = runtime();
    rt.block_on(async {
        for (signal, name) in [(libc::SIGHUP, "hup"), (libc::SIGTERM, "term")] {
            let t = Topics::new(&format!("signal-{name}"));
            broker
                .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
                .await;
            let (ready, status, _) = run_until_ready(
                &broker,
                &t,
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"mean\"]",
                signal,
            )
            .await;
            assert!(ready, "{name}: never ready");
            assert!(status.success(), "{name}: {status:?}");
        }
    });
}

/// `fleetdp run` on `t` in a child process until `/readyz` answers 200 or
/// a minute passes, then stopped with `signal`: whether it became ready,
/// how it exited, and what it logged.
async fn run_until_ready(
    broker: &Broker,
    t: &Topics,
    privacy: &str,
    stream: &str,
    signal: libc::c_int,
) -> (bool, std::process::ExitStatus, String) {
    let service = harness::child::Service::start(broker, t, privacy, "", stream);
    let ready = service.ready_within(Duration::from_secs(60)).await;
    let (status, logged) = service.stop(signal);
    (ready, status, logged)
}

/// An undecodable message of ≈ 1,000,500 bytes (under the input limit, over
/// the producer's default `message.max.bytes`) and a valid 1.1 MB reading
/// (over `max_message_bytes`) are both dead-lettered, truncated with their
/// original size, and every reading after them is processed.
#[test]
fn oversized_dead_letters_are_truncated_and_the_stream_goes_on() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let (t, v) = setup(&broker, "oversize", 1, "").await;
        let base = now_ms() - 60_000;
        let mut msgs: Vec<Out> = (0..10)
            .map(|i| reading(&format!("a{i}"), base + i))
            .collect();
        let garbage = Out {
            partition: Some(0),
            key: "garbage".into(),
            payload: vec![0xff; 1_000_500],
            content_type: Some("application/json".into()),
        };
        let mut big = reading("big", base + 50);
        let pad = " ".repeat(1_100_000);
        big.payload = format!(
            r#"{{"device_id":"big","stream":"temp","value":21.5,"event_time_ms":{}{pad}}}"#,
            base + 50
        )
        .into_bytes();
        msgs.push(garbage);
        msgs.push(big);
        msgs.extend((0..10).map(|i| reading(&format!("b{i}"), base + 100 + i)));
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, KEY);
        let done = wait_until(WAIT, || {
            count(&c.windows_released) >= 4 && c.dead_letters_total() >= 2
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(
            done,
            "released {} of 4, dead letters {}: an oversized dead letter wedged the stream",
            count(&c.windows_released),
            c.dead_letters_total()
        );
        assert_eq!(count(&c.readings_accepted), 20);
        assert_eq!(c.dead_letters(Reason::Undecodable), 1);
        assert_eq!(c.dead_letters(Reason::Oversize), 1);
        let dlq = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        assert_eq!(dlq.len(), 2);
        for (m, size) in dlq.iter().zip([1_000_500usize, msgs[11].payload.len()]) {
            assert_eq!(m.headers["fleetdp-truncated"], "payload");
            assert_eq!(m.headers["fleetdp-original-size"], size.to_string());
            assert_eq!(
                m.payload.len(),
                fleetdp::pipeline::TRUNCATED_DEAD_LETTER_BYTES,
                "the first bytes are kept"
            );
        }
    });
}

/// A missing dead-letter or state topic stops the service at start with an
/// error naming the setting (it used to surface only when first used).
#[test]
fn a_missing_dead_letter_or_state_topic_is_an_error_at_start() {
    let broker = Broker::start();
    if !broker.is_external() {
        // The mock cluster creates topics on first use.
        return;
    }
    let rt = runtime();
    rt.block_on(async {
        for (missing, field) in [
            ("dlq", "kafka.dead_letter_topic"),
            ("state", "kafka.state_topic"),
        ] {
            let t = Topics::new(&format!("missing-{missing}"));
            let mut topics = vec![(t.input.as_str(), 1), (t.output.as_str(), 1)];
            if missing != "dlq" {
                topics.push((t.dlq.as_str(), 1));
            }
            if missing != "state" {
                topics.push((t.state.as_str(), 1));
            }
            broker.create_topics(&topics).await;
            let msg = start_error(&broker, &t).await;
            assert!(msg.contains(field), "{missing}: {msg}");
            assert!(msg.contains("--create-topics"), "{missing}: {msg}");
        }
    });
}

/// The error a pipeline of stream `temp` on `t` stops with at start.
async fn start_error(broker: &Broker, t: &Topics) -> String {
    let v = config(broker, t, PRIVACY, "", TEMP);
    let (_stop, _c, h) = spawn_pipeline(v, KEY);
    let err = tokio::time::timeout(Duration::from_secs(60), h)
        .await
        .expect("the service stopped at start")
        .unwrap()
        .expect_err("an error at start");
    format!("{err:#}")
}

/// An unreachable cluster is reported against `kafka.brokers` and
/// `kafka.security`, not against the first topic read (it used to read
/// "kafka.input_topic (…): fetching metadata … BrokerTransportFailure").
#[test]
fn an_unreachable_cluster_names_the_brokers_setting() {
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("unreachable");
        let msg = start_error(&Broker::external("127.0.0.1:1".into()), &t).await;
        assert!(msg.starts_with("kafka.brokers (127.0.0.1:1)"), "{msg}");
        assert!(msg.contains("kafka.security"), "{msg}");
    });
}

/// A foreign record in the state topic and one in the output topic are
/// skipped and counted on restore (they used to make every instance exit
/// after its retries, on every start).
#[test]
fn foreign_records_in_the_internal_topics_are_skipped_and_counted() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let (t, v) = setup(&broker, "foreign", 1, "").await;
        let foreign = |partition| Out {
            partition: Some(partition),
            key: "hello".into(),
            payload: b"world".to_vec(),
            content_type: None,
        };
        produce(&broker, &t.state, &[foreign(0)]).await;
        produce(&broker, &t.output, &[foreign(0)]).await;
        let base = now_ms() - 60_000;
        let msgs: Vec<Out> = (0..10)
            .map(|i| reading(&format!("d{i}"), base + i))
            .collect();
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, KEY);
        let done = wait_until(WAIT, || count(&c.windows_released) >= 2).await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(done, "released {}", count(&c.windows_released));
        assert!(
            count(&c.restore_skipped) >= 2,
            "one foreign record per topic, skipped on each restore: {}",
            count(&c.restore_skipped)
        );
    });
}

/// Under add-remove the output topic's record timestamps are FleetDP's (a
/// window's due moment); a topic set to LogAppendTime replaces them with
/// the arrival moment. `run` warns about it at start, naming the setting;
/// an output topic with CreateTime gets no such line.
#[test]
fn an_output_topic_stamped_by_the_broker_is_warned_about_under_add_remove() {
    let broker = Broker::start();
    if !broker.is_external() {
        // A child process cannot reach the in-process mock cluster.
        return;
    }
    let rt = runtime();
    rt.block_on(async {
        for stamp in ["LogAppendTime", "CreateTime"] {
            let t = Topics::new(&format!("stamp-{}", stamp.to_lowercase()));
            broker
                .create_topics(&[(&t.input, 1), (&t.dlq, 1), (&t.state, 1)])
                .await;
            let admin: rdkafka::admin::AdminClient<_> = broker.client().create().unwrap();
            let topic = rdkafka::admin::NewTopic::new(
                &t.output,
                1,
                rdkafka::admin::TopicReplication::Fixed(1),
            )
            .set("message.timestamp.type", stamp);
            let made = admin
                .create_topics(&[topic], &rdkafka::admin::AdminOptions::new())
                .await
                .unwrap();
            assert!(made.iter().all(|r| r.is_ok()), "{made:?}");
            let (ready, status, text) = run_until_ready(
                &broker,
                &t,
                "relation = \"add-remove\"\nepsilon_per_device = 1.0\ndelta = 1e-6\nhorizon = \"1h\"",
                "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow = \"10s\"\nstatistics = [\"count\"]",
                libc::SIGTERM,
            )
            .await;
            assert!(ready && status.success(), "{stamp}: {status:?}\n{text}");
            let warned = text.contains("message.timestamp.type=LogAppendTime");
            assert_eq!(warned, stamp == "LogAppendTime", "{stamp}:\n{text}");
            if warned {
                assert!(text.contains("kafka.output_topic") && text.contains("CreateTime"), "{text}");
            }
        }
    });
}
