//! Integration-test harness: a broker (the one in FLEETDP_TEST_BROKERS or
//! KAFKA_BROKERS — tansu, started by tests/run.sh, or a real cluster — else
//! librdkafka's in-process mock cluster), unique topic names, producing
//! messages and reading topics back.
#![allow(dead_code)]

use fleetdp::config::{Config, Validated};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub mod child;
pub mod front;
pub mod outage;
pub mod schema;

pub struct Broker {
    pub brokers: String,
    mock: Option<MockCluster<'static, DefaultProducerContext>>,
    /// Client properties the test's own clients need (TLS to a front).
    pub properties: Vec<(String, String)>,
}

impl Broker {
    pub fn start() -> Broker {
        for var in ["FLEETDP_TEST_BROKERS", "KAFKA_BROKERS"] {
            if let Ok(b) = std::env::var(var) {
                if !b.is_empty() {
                    return Broker {
                        brokers: b,
                        mock: None,
                        properties: vec![],
                    };
                }
            }
        }
        let mock = MockCluster::new(1).expect("mock cluster");
        Broker {
            brokers: mock.bootstrap_servers(),
            mock: Some(mock),
            properties: vec![],
        }
    }

    /// A broker someone else runs (and keeps alive).
    pub fn external(brokers: String) -> Broker {
        Broker {
            brokers,
            mock: None,
            properties: vec![],
        }
    }

    /// A broker other processes can reach (not the in-process mock).
    pub fn is_external(&self) -> bool {
        self.mock.is_none()
    }

    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    pub async fn create_topics(&self, topics: &[(&str, i32)]) {
        match &self.mock {
            Some(m) => {
                for (t, p) in topics {
                    m.create_topic(t, *p, 1).expect("mock topic");
                }
            }
            // State topics compacted, as FleetDP's start check requires
            // of a cluster that reports cleanup.policy.
            None => {
                let state: Vec<&str> = topics
                    .iter()
                    .map(|t| t.0)
                    .filter(|t| t.contains("-state-"))
                    .collect();
                fleetdp::kafka::ensure_topics(&self.client(), topics, &state)
                    .await
                    .expect("create topics")
            }
        }
        // Wait until metadata shows them.
        let c = self.client();
        let names: Vec<String> = topics.iter().map(|(t, _)| t.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let mut cc = c.clone();
            cc.set("group.id", "fleetdp-test-metadata");
            let consumer: BaseConsumer = cc.create().unwrap();
            for t in names {
                fleetdp::kafka::partition_count(&consumer, &t, Duration::from_secs(20))
                    .expect("topic visible");
            }
        })
        .await
        .unwrap();
    }
}

/// A unique name for a topic or group.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// Topics of one test.
pub struct Topics {
    pub input: String,
    pub output: String,
    pub dlq: String,
    pub state: String,
    pub group: String,
}

impl Topics {
    /// The same topics under a fresh consumer group (tansu may not reassign
    /// a group rejoined after a clean stop; a fresh group reads from the start).
    pub fn regroup(&self) -> Topics {
        Topics {
            input: self.input.clone(),
            output: self.output.clone(),
            dlq: self.dlq.clone(),
            state: self.state.clone(),
            group: unique("regroup-g"),
        }
    }

    /// New topics named after `name`, created on `broker`: the input with
    /// `partitions`, the others with one.
    pub async fn created(broker: &Broker, name: &str, partitions: i32) -> Topics {
        let t = Topics::new(name);
        broker
            .create_topics(&[
                (&t.input, partitions),
                (&t.output, 1),
                (&t.dlq, 1),
                (&t.state, 1),
            ])
            .await;
        t
    }

    pub fn new(name: &str) -> Topics {
        Topics {
            input: unique(&format!("{name}-in")),
            output: unique(&format!("{name}-out")),
            dlq: unique(&format!("{name}-dlq")),
            state: unique(&format!("{name}-state")),
            group: unique(&format!("{name}-g")),
        }
    }
}

/// A validated config for `streams_toml` on these topics.
pub fn config(
    broker: &Broker,
    t: &Topics,
    privacy_toml: &str,
    extra_toml: &str,
    streams_toml: &str,
) -> Validated {
    let text = config_text(broker, t, privacy_toml, extra_toml, streams_toml);
    Config::parse(&text).unwrap().validate().unwrap()
}

/// The TOML text of such a config (for `fleetdp run` child processes).
pub fn config_text(
    broker: &Broker,
    t: &Topics,
    privacy_toml: &str,
    extra_toml: &str,
    streams_toml: &str,
) -> String {
    format!(
        r#"
[kafka]
brokers = "{}"
input_topic = "{}"
output_topic = "{}"
dead_letter_topic = "{}"
state_topic = "{}"
group_id = "{}"

[kafka.consumer_properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

[privacy]
{privacy_toml}

{extra_toml}

{streams_toml}
"#,
        broker.brokers, t.input, t.output, t.dlq, t.state, t.group
    )
}

/// One message to produce.
#[derive(Clone)]
pub struct Out {
    pub partition: Option<i32>,
    pub key: String,
    pub payload: Vec<u8>,
    pub content_type: Option<String>,
}

/// One JSON reading of stream `temp` on partition 0 (`None`: by key).
pub fn temp_reading(partition: Option<i32>, device: &str, value: f64, event_ms: i64) -> Out {
    Out {
        partition,
        key: device.to_string(),
        payload: format!(
            r#"{{"device_id":"{device}","stream":"temp","value":{value},"event_time_ms":{event_ms}}}"#
        )
        .into_bytes(),
        content_type: Some("application/json".into()),
    }
}

/// The wall clock in ms since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A counter's value.
pub fn count(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

/// The first `count` messages of a simulated fleet, partitioned by key.
pub fn fleet_messages(spec: fleetdp::sim::FleetSpec, count: usize) -> Vec<Out> {
    let mut fleet = fleetdp::sim::Fleet::new(spec);
    (0..count)
        .map(|_| {
            let m = fleet.next_message();
            Out {
                partition: None,
                key: m.key,
                payload: m.payload,
                content_type: Some(m.content_type.to_string()),
            }
        })
        .collect()
}

/// Produce messages in order and wait for every ack.
pub async fn produce(broker: &Broker, topic: &str, msgs: &[Out]) {
    let producer: FutureProducer = broker
        .client()
        .set("linger.ms", "5")
        .set("partitioner", "murmur2_random")
        // Tests send oversized messages too.
        .set("message.max.bytes", "10000000")
        .create()
        .unwrap();
    // In order: one at a time per partition is enough for test sizes, but
    // batching the futures keeps it fast while preserving order per partition
    // (librdkafka keeps order within a partition).
    let mut pending = Vec::new();
    for m in msgs {
        let mut r = FutureRecord::to(topic).key(&m.key).payload(&m.payload);
        if let Some(p) = m.partition {
            r = r.partition(p);
        }
        if let Some(ct) = &m.content_type {
            r = r.headers(OwnedHeaders::new().insert(Header {
                key: "content-type",
                value: Some(ct.as_str()),
            }));
        }
        pending.push(producer.send(r, Duration::from_secs(30)));
        if pending.len() >= 1000 {
            for f in pending.drain(..) {
                f.await.expect("delivered");
            }
        }
    }
    for f in pending {
        f.await.expect("delivered");
    }
}

/// A message read back.
#[derive(Debug, Clone)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub headers: HashMap<String, String>,
    /// The record's timestamp (ms), if it has one.
    pub timestamp: Option<i64>,
}

impl Read {
    /// A fleet-wide release (header `fleetdp-record: fleet`).
    pub fn is_fleet(&self) -> bool {
        self.headers.get("fleetdp-record").map(String::as_str) == Some("fleet")
    }
}

/// Everything in a topic up to its current high watermarks.
pub fn read_all(broker: &Broker, topic: &str) -> Vec<Read> {
    let consumer: BaseConsumer = broker
        .client()
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let parts = fleetdp::kafka::partition_count(&consumer, topic, Duration::from_secs(20)).unwrap();
    let mut tpl = TopicPartitionList::new();
    let mut remaining = HashMap::new();
    for p in 0..parts as i32 {
        let (lo, hi) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .unwrap();
        if hi > lo {
            tpl.add_partition_offset(topic, p, Offset::Offset(lo))
                .unwrap();
            remaining.insert(p, hi);
        }
    }
    let mut out = Vec::new();
    if remaining.is_empty() {
        return out;
    }
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !remaining.is_empty() && Instant::now() < deadline {
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap();
        let mut headers = HashMap::new();
        if let Some(h) = m.headers() {
            for i in 0..h.count() {
                let hd = h.get(i);
                headers.insert(
                    hd.key.to_string(),
                    String::from_utf8_lossy(hd.value.unwrap_or(&[])).into_owned(),
                );
            }
        }
        if remaining
            .get(&m.partition())
            .is_some_and(|&hi| m.offset() + 1 >= hi)
        {
            remaining.remove(&m.partition());
        }
        out.push(Read {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().unwrap_or(&[]).to_vec(),
            payload: m.payload().unwrap_or(&[]).to_vec(),
            headers,
            timestamp: m.timestamp().to_millis(),
        });
    }
    assert!(remaining.is_empty(), "timed out reading {topic}");
    out
}

/// The output topic's records of one kind (fleet-wide or not), decoded,
/// in topic order.
fn decoded<T>(
    broker: &Broker,
    topic: &str,
    fleet: bool,
    decode: fn(&[u8], Option<&str>) -> anyhow::Result<T>,
) -> Vec<T> {
    read_all(broker, topic)
        .into_iter()
        .filter(|r| r.is_fleet() == fleet)
        .map(|r| {
            decode(
                &r.payload,
                r.headers.get("content-type").map(String::as_str),
            )
            .unwrap()
        })
        .collect()
}

/// Window releases in the output topic (fleet-wide ones left out).
pub fn releases(broker: &Broker, topic: &str) -> Vec<proto::WindowRelease> {
    decoded(broker, topic, false, fleetdp::kafka::decode_release)
}

/// Fleet-wide releases in the output topic, in topic order.
pub fn fleet_releases(broker: &Broker, topic: &str) -> Vec<proto::FleetRelease> {
    decoded(broker, topic, true, fleetdp::fleet::decode_fleet)
}

/// Poll `cond` until it holds or `timeout` passes.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cond()
}

/// A current-thread runtime (the mock cluster is not Send; it stays on the
/// test's thread).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Run a pipeline in the background; returns its stop switch, counters and handle.
pub fn spawn_pipeline(
    v: Validated,
    key: [u8; 32],
) -> (
    tokio::sync::watch::Sender<bool>,
    std::sync::Arc<fleetdp::telemetry::Counters>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let p = fleetdp::pipeline::Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes(key));
    let counters = p.counters.clone();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let h = tokio::spawn(async move { p.run(rx, fleetdp::pipeline::Options::default()).await });
    (tx, counters, h)
}

/// Every (stream, partition) has seqs 0..m exactly once, each window holds
/// `n` and the windows tile the partition's offsets from 0.
pub fn assert_contiguous_and_tiling(
    releases: &[proto::WindowRelease],
    n: u64,
) -> std::collections::BTreeMap<(String, i32), Vec<proto::WindowRelease>> {
    let mut by: std::collections::BTreeMap<(String, i32), Vec<proto::WindowRelease>> =
        Default::default();
    for r in releases {
        by.entry((r.stream.clone(), r.partition))
            .or_default()
            .push(r.clone());
    }
    for ((s, p), rs) in by.iter_mut() {
        rs.sort_by_key(|r| r.window_seq);
        for (i, r) in rs.iter().enumerate() {
            assert_eq!(
                r.window_seq, i as u64,
                "{s}/{p}: seqs not contiguous or duplicated"
            );
            assert_eq!(r.n, n, "{s}/{p}#{i}: wrong n");
            let expected_first = if i == 0 { 0 } else { rs[i - 1].last_offset + 1 };
            assert_eq!(
                r.first_offset, expected_first,
                "{s}/{p}#{i}: offsets do not tile"
            );
            assert_eq!(
                r.last_offset - r.first_offset + 1,
                n as i64,
                "{s}/{p}#{i}: one reading per offset"
            );
        }
    }
    by
}

/// Run `cmd` to its end and return its stdout; panics with the command
/// and its stderr when it fails.
pub fn stdout_of(cmd: &mut std::process::Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `deploy/fleetdp.toml` pointed at `broker` and the topics and group of
/// `t` (panics if the file's broker or input topic moved, so a test
/// cannot silently run against the shipped values).
pub fn shipped_config(broker: &Broker, t: &Topics) -> String {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/fleetdp.toml"
    ))
    .unwrap();
    for from in [
        "\"127.0.0.1:9092\"",
        "\"readings\"",
        "\"releases\"",
        "group_id = \"fleetdp\"",
    ] {
        assert!(
            shipped.contains(from),
            "deploy/fleetdp.toml no longer has {from}"
        );
    }
    // tansu 0.6 loses records of multi-record batches: one dead letter at
    // a time there (a real cluster keeps the shipped value).
    let in_flight = if std::env::var("KAFKA_BROKERS").is_ok_and(|b| !b.is_empty()) {
        "dead_letters_in_flight = 10000"
    } else {
        "dead_letters_in_flight = 1"
    };
    shipped
        .replacen("dead_letters_in_flight = 10000", in_flight, 1)
        .replace("\"127.0.0.1:9092\"", &format!("{:?}", broker.brokers))
        .replace("\"readings\"", &format!("{:?}", t.input))
        .replace("\"releases\"", &format!("{:?}", t.output))
        .replace("\"readings.dlq\"", &format!("{:?}", t.dlq))
        .replace(
            "group_id = \"fleetdp\"",
            &format!(
                "group_id = {:?}\nstate_topic = {:?}\nconsumer_properties = {{ \"session.timeout.ms\" = \"6000\", \"heartbeat.interval.ms\" = \"500\" }}",
                t.group, t.state
            ),
        )
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP/1.1 GET: `(status, body)`, or `None` when nothing answers.
pub fn http_get(url: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, buf.split_once("\r\n\r\n")?.1.to_string()))
}

/// The `fleetdp-detail` header of every dead letter on `topic`.
pub fn dead_letter_details(broker: &Broker, topic: &str) -> Vec<String> {
    tokio::task::block_in_place(|| read_all(broker, topic))
        .into_iter()
        .map(|m| m.headers["fleetdp-detail"].clone())
        .collect()
}

/// A message for partition 0 without a content type (framed input, read as
/// the declared format).
pub fn framed_out(key: &str, payload: Vec<u8>) -> Out {
    Out {
        partition: Some(0),
        key: key.to_string(),
        payload,
        content_type: None,
    }
}

/// A record's running totals but their noisy values (and estimates) and
/// what follows from the lane's start (`windows`, and `std`, a function of
/// it): a process starts its lanes at its own assignment, a moment no
/// reading decides, so tests check those apart.
#[allow(clippy::type_complexity)]
pub fn running_public(
    ts: &[proto::v1::RunningTotal],
) -> Vec<(String, u64, usize, String, f64, bool, Vec<f64>)> {
    ts.iter()
        .map(|t| {
            (
                t.name.clone(),
                t.count,
                t.values.len(),
                t.mechanism.clone(),
                t.spent,
                t.summed.is_some() || t.combined.is_some() || !t.summed_bins.is_empty(),
                t.bin_edges.clone(),
            )
        })
        .collect()
}

/// Everything a window release publishes besides its noisy values, as
/// text: the fields that must be equal between runs on neighbouring
/// inputs (`released_at`: the release time, when the runs share a clock).
pub fn release_public_fields(r: &proto::WindowRelease, released_at: bool) -> String {
    let statistics: Vec<_> = r
        .statistics
        .iter()
        .map(|x| {
            (
                x.name.clone(),
                x.level,
                x.mechanism.clone(),
                x.spent,
                x.values.len(),
                x.half_width.is_some(),
                // Public parameters only: equal between neighbours, value
                // and all.
                x.rank_half_width,
            )
        })
        .collect();
    format!(
        "{:?} {:?}",
        (
            r.window_seq,
            r.group.clone(),
            r.first_offset,
            r.last_offset,
            r.first_event_time_ms,
            r.last_event_time_ms,
            r.n,
            r.padded,
            released_at.then_some(r.released_at_ms),
            r.guarantee.clone(),
        ),
        (
            statistics,
            running_public(&r.running),
            // Which raw moments it carries (values are noisy).
            r.moments.as_ref().map(|m| {
                [m.count, m.centred_sum, m.centred_sum_sq, m.boundary, m.sum].map(|x| x.is_some())
            }),
        )
    )
}
