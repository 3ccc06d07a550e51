//! A fleet's own multi-metric JSON topic over the broker (`[input]`): each
//! document (`vin`, an RFC 3339 `ts`, several metrics in nested objects)
//! gives one reading per mapped metric it carries; windows of both streams
//! are released with the readings' true values inside their intervals; a
//! document with a malformed time or a non-numeric metric is dead-lettered
//! whole, its header naming the path and never the value.

use crate::harness;

use fleetdp::Partitioner;
use harness::*;
use std::time::Duration;

const STREAMS: &str =
    "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\n\
    window_size = 10\nmax_windows_per_device = 10\nbudget_share = 0.5\nstatistics = [\"count\", \"mean\"]\n\n\
    [[stream]]\nname = \"battery\"\nlower = 10.0\nupper = 15.0\nresolution = 0.01\n\
    window_size = 5\nmax_windows_per_device = 10\nbudget_share = 0.5\nstatistics = [\"count\", \"mean\"]";

const INPUT: &str =
    "[input]\ndevice_id = \"vin\"\nevent_time = \"/ts\"\nevent_time_unit = \"rfc3339\"\n\
    [input.streams]\ntemp = \"cabin.temp_c\"\nbattery = \"/battery/volts\"";

fn doc(vin: &str, body: &str) -> Out {
    Out {
        partition: Some(Partitioner::Murmur2.partition(vin.as_bytes(), 1).unwrap()),
        key: vin.to_string(),
        payload: body.as_bytes().to_vec(),
        content_type: Some("application/json".into()),
    }
}

#[test]
fn multi_metric_documents_are_read_by_the_mapping() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "mapped", 1).await;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 50.0\nhorizon = \"24h\"",
            INPUT,
            STREAMS,
        );
        let ts = |i: usize| {
            let at = std::time::UNIX_EPOCH
                + Duration::from_millis((now_ms() - 60_000) as u64 + i as u64);
            humantime::format_rfc3339_millis(at).to_string()
        };
        // Ten vehicles report both metrics; five more only the temperature.
        let mut msgs: Vec<Out> = (0..10)
            .map(|i| {
                doc(
                    &format!("VIN{i}"),
                    &format!(
                        r#"{{"vin":"VIN{i}","ts":"{}","cabin":{{"temp_c":{}}},"battery":{{"volts":12.5}},"odo":123}}"#,
                        ts(i),
                        20 + i
                    ),
                )
            })
            .collect();
        // Bad: a time that is not RFC 3339; a metric that is not a number.
        msgs.push(doc("BAD1", r#"{"vin":"BAD1","ts":"yesterday","cabin":{"temp_c":21}}"#));
        msgs.push(doc(
            "BAD2",
            &format!(r#"{{"vin":"BAD2","ts":"{}","cabin":{{"temp_c":"secret-hot"}}}}"#, ts(20)),
        ));
        for i in 10..15 {
            msgs.push(doc(
                &format!("VIN{i}"),
                &format!(r#"{{"vin":"VIN{i}","ts":"{}","cabin":{{"temp_c":{}}}}}"#, ts(i), 20 + i),
            ));
        }
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, [6; 32]);
        assert!(
            wait_until(Duration::from_secs(120), || count(&c.windows_released) >= 3).await,
            "released {}",
            count(&c.windows_released)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(count(&c.readings_accepted), 25, "15 temperatures and 10 voltages");

        let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
        let mean = |r: &proto::WindowRelease| {
            let m = r.statistics.iter().find(|s| s.name == "mean").unwrap();
            (m.values[0], m.half_width.unwrap())
        };
        let temp: Vec<_> = rs.iter().filter(|r| r.stream == "temp").collect();
        let battery: Vec<_> = rs.iter().filter(|r| r.stream == "battery").collect();
        assert_eq!((temp.len(), battery.len()), (1, 2), "10 + 5 temperatures, 5 + 5 voltages");
        let (m, hw) = mean(temp[0]);
        assert!((m - 24.5).abs() <= hw, "temp mean {m} ± {hw}, true 24.5");
        for b in battery {
            let (m, hw) = mean(b);
            assert!((m - 12.5).abs() <= hw, "battery mean {m} ± {hw}, true 12.5");
        }

        let dlq = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        let details: Vec<(&str, &str)> = dlq
            .iter()
            .map(|m| (m.headers["fleetdp-reason"].as_str(), m.headers["fleetdp-detail"].as_str()))
            .collect();
        assert_eq!(details.len(), 2, "{details:?}");
        assert!(details[0].1.contains("'/ts' is not an RFC 3339 time"), "{details:?}");
        assert_eq!(details[1].0, "undecodable");
        assert!(details[1].1.contains("'cabin.temp_c' is not a number"), "{details:?}");
        assert!(!details[1].1.contains("secret"), "a value in a dead letter's detail");
    });
}

/// Schema Registry framing over the broker: FleetDP's protobuf readings and
/// batches written as Confluent's serializer writes them (magic byte,
/// schema id, message index) are read; a message without the frame is
/// dead-lettered naming the framing.
#[test]
fn schema_registry_framed_protobuf_is_read() {
    use prost::Message as _;
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "framed", 1).await;
        let mut v = config(
            &broker,
            &t,
            "epsilon_per_device = 50.0\nhorizon = \"24h\"",
            "",
            STREAMS,
        );
        v.config.kafka.input_framing = ingest::Framing::Confluent;
        let at = now_ms() - 60_000;
        let reading = |i: usize| proto::DeviceReading {
            device_id: format!("car-{i}"),
            stream: "temp".into(),
            value: Some(20.0 + i as f64),
            event_time_ms: Some(at + i as i64),
            labels: Default::default(),
        };
        let out = framed_out;
        let mut msgs: Vec<Out> = (0..5)
            .map(|i| {
                out(
                    &format!("car-{i}"),
                    ingest::frame(17, Some(&[0]), &reading(i).encode_to_vec()),
                )
            })
            .collect();
        let batch = proto::ReadingBatch {
            readings: (5..10).map(reading).collect(),
        };
        msgs.push(out(
            "batch",
            ingest::frame(18, Some(&[1]), &batch.encode_to_vec()),
        ));
        msgs.push(out("car-99", reading(99).encode_to_vec()));
        produce(&broker, &t.input, &msgs).await;
        let (stop, c, h) = spawn_pipeline(v, [8; 32]);
        assert!(
            wait_until(Duration::from_secs(120), || count(&c.windows_released) >= 1).await,
            "released {}",
            count(&c.windows_released)
        );
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(
            count(&c.readings_accepted),
            10,
            "5 framed readings and a framed batch of 5"
        );
        let rs = tokio::task::block_in_place(|| releases(&broker, &t.output));
        assert_eq!(rs.iter().filter(|r| r.stream == "temp").count(), 1);
        let dlq = tokio::task::block_in_place(|| read_all(&broker, &t.dlq));
        assert_eq!(dlq.len(), 1);
        assert!(
            dlq[0].headers["fleetdp-detail"].contains("Schema Registry framing"),
            "{:?}",
            dlq[0].headers
        );
    });
}

/// The fleet's own Protobuf message (`acme.v1.Telemetry`, the README's
/// worked example) through its descriptor set and `[input]` paths, framed
/// by Schema Registry: readings of both mapped metrics are released; a
/// message of another type in the schema (index [1]) and one without its
/// device id are dead-lettered naming what is wrong.
#[test]
fn a_fleets_own_protobuf_messages_are_read_through_their_descriptor_set() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "described", 1).await;
        let dir = std::env::temp_dir().join(unique("fleetdp-described"));
        std::fs::create_dir_all(&dir).unwrap();
        let set = dir.join("telemetry.pb");
        std::fs::write(&set, ingest::example_descriptor_set()).unwrap();
        let text = config_text(
            &broker,
            &t,
            "epsilon_per_device = 50.0\nhorizon = \"24h\"",
            &format!(
                "[input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\nprotobuf_descriptor_set = {:?}\nprotobuf_message = \"acme.v1.Telemetry\"\n\
                 [input.streams]\ntemp = \"cabin.temp\"\nbattery = \"tyres.0\"",
                set.display().to_string()
            ),
            &STREAMS.replace("lower = 10.0\nupper = 15.0", "lower = 0.0\nupper = 5.0"),
        )
        .replace("[kafka]\n", "[kafka]\ninput_framing = \"confluent\"\nread_content_type = false\n");
        let v = fleetdp::config::Config::parse(&text)
            .unwrap()
            .validate()
            .unwrap();
        let at = now_ms() - 60_000;
        let out = framed_out;
        let mut msgs: Vec<Out> = (0..10)
            .map(|i| {
                let vin = format!("VIN{i}");
                let body = ingest::example_message(&vin, at + i, Some(20.0 + i as f64), "4.2");
                out(&vin, ingest::frame(3, Some(&[0]), &body))
            })
            .collect();
        let body = ingest::example_message("VINX", at, Some(1.0), "4.2");
        msgs.push(out("other-type", ingest::frame(3, Some(&[1]), &body)));
        let body = ingest::example_message("", at, Some(1.0), "4.2");
        msgs.push(out("no-vin", ingest::frame(3, Some(&[0]), &body)));
        let details = run_framed(&broker, &t, v, &msgs, 20).await;
        assert_eq!(details.len(), 2, "{details:?}");
        assert!(details.iter().any(|d| d.contains("message index [1]") && d.contains("acme.v1.Telemetry")), "{details:?}");
        assert!(details.iter().any(|d| d.contains("'vin'")), "{details:?}");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// A fleet's own Avro records over the broker, Schema Registry framed, the
/// schema id pinned: readings released; a message with another schema id, a
/// truncated one and one without a device id dead-lettered naming what is
/// wrong; a record with a `null` temperature still gives its battery.
#[test]
fn a_fleets_own_avro_records_are_read_against_their_schema() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "avro", 1).await;
        let dir = std::env::temp_dir().join(unique("fleetdp-avro"));
        std::fs::create_dir_all(&dir).unwrap();
        let schema = dir.join("telemetry.avsc");
        std::fs::write(&schema, ingest::EXAMPLE_AVRO_SCHEMA).unwrap();
        let text = config_text(
            &broker,
            &t,
            "epsilon_per_device = 50.0\nhorizon = \"24h\"",
            &format!(
                "[input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\navro_schema = {:?}\navro_schema_id = 42\n\
                 [input.streams]\ntemp = \"cabin.temp_c\"\nbattery = \"battery_v\"",
                schema.display().to_string()
            ),
            STREAMS,
        )
        .replace(
            "[kafka]\n",
            "[kafka]\ninput_format = \"avro\"\ninput_framing = \"confluent\"\nread_content_type = false\n",
        );
        let v = fleetdp::config::Config::parse(&text)
            .unwrap()
            .validate()
            .unwrap();
        let at = now_ms() - 60_000;
        let out = framed_out;
        // Ten devices with both readings, one with only a battery reading.
        let mut msgs: Vec<Out> = (0..11)
            .map(|i| {
                let vin = format!("VIN{i}");
                let temp = (i < 10).then_some(20.0 + i as f64);
                let body = ingest::example_avro(&vin, at + i, temp, 12.0 + i as f32 / 10.0);
                out(&vin, ingest::frame(42, None, &body))
            })
            .collect();
        let body = ingest::example_avro("VINX", at, Some(1.0), 12.0);
        msgs.push(out("other-id", ingest::frame(43, None, &body)));
        msgs.push(out("cut", ingest::frame(42, None, &body[..body.len() - 2])));
        let body = ingest::example_avro("", at, Some(1.0), 12.0);
        msgs.push(out("no-vin", ingest::frame(42, None, &body)));
        // Ten temperatures, eleven batteries.
        let details = run_framed(&broker, &t, v, &msgs, 21).await;
        assert_eq!(details.len(), 3, "{details:?}");
        assert!(details.iter().any(|d| d.contains("schema id 43") && d.contains("pins 42")), "{details:?}");
        assert!(details.iter().any(|d| d.contains("acme.v1.Telemetry")), "{details:?}");
        assert!(details.iter().any(|d| d.contains("'vin'")), "{details:?}");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// Produce `msgs`, run the pipeline until the temp window and both battery
/// windows are released, check the readings accepted and the releases;
/// the dead letters' details.
async fn run_framed(
    broker: &Broker,
    t: &Topics,
    v: fleetdp::config::Validated,
    msgs: &[Out],
    accepted: u64,
) -> Vec<String> {
    produce(broker, &t.input, msgs).await;
    let (stop, c, h) = spawn_pipeline(v, [8; 32]);
    assert!(
        wait_until(Duration::from_secs(120), || count(&c.windows_released) >= 3).await,
        "released {}",
        count(&c.windows_released)
    );
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    assert_eq!(count(&c.readings_accepted), accepted);
    let rs = tokio::task::block_in_place(|| releases(broker, &t.output));
    assert_eq!(rs.iter().filter(|r| r.stream == "temp").count(), 1);
    assert_eq!(rs.iter().filter(|r| r.stream == "battery").count(), 2);
    dead_letter_details(broker, &t.dlq)
}
