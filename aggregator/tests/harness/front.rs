//! A private tansu behind a front on loopback (a TLS terminator or a SASL
//! front the test runs): tansu advertises the front's address, so every
//! client connection goes through it. Dropped, both stop. And the whole
//! pipeline through such a front ([`whole_pipeline`]).

use super::{
    config, count, dead_letter_details, fleet_releases, free_port, now_ms, produce, releases,
    spawn_pipeline, temp_reading, wait_until, Broker, Out, Topics,
};
use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Fronted {
    tansu: Child,
    front: Child,
    /// The front's port: the cluster's address for clients.
    pub port: u16,
}

impl Drop for Fronted {
    fn drop(&mut self) {
        let _ = self.front.kill();
        let _ = self.tansu.kill();
        let _ = self.front.wait();
        let _ = self.tansu.wait();
    }
}

/// A private in-memory tansu listening on `upstream` and advertising
/// `advertised` (the proxy or front every client goes through).
pub fn tansu_at(tansu: &std::ffi::OsStr, upstream: u16, advertised: u16) -> Child {
    Command::new(tansu)
        .arg("broker")
        .env("LISTENER_URL", format!("tcp://127.0.0.1:{upstream}"))
        .env(
            "ADVERTISED_LISTENER_URL",
            format!("tcp://127.0.0.1:{advertised}"),
        )
        .env("STORAGE_ENGINE", "memory://tansu/")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tansu (FLEETDP_TANSU)")
}

/// The Python the fronts run on.
pub fn python() -> String {
    std::env::var("FLEETDP_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A Python with confluent-kafka (tests/run.sh installs it into
/// `.tools/venv` and sets FLEETDP_PYTHON); without one the caller skips,
/// unless FLEETDP_REQUIRE_PYTHON_CLIENT is set (tests/run.sh sets it).
pub fn python_client() -> Option<String> {
    python_with("confluent_kafka")
}

/// A Python that can import `module` (tests/run.sh installs the tests'
/// packages into `.tools/venv`); the same skip rule as [`python_client`].
pub fn python_with(module: &str) -> Option<String> {
    let py = python();
    let ok = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    assert!(
        std::env::var_os("FLEETDP_REQUIRE_PYTHON_CLIENT").is_none(),
        "{py} has no {module} (tests/run.sh installs it into .tools/venv)"
    );
    eprintln!("no Python with {module}: skipped (tests/run.sh installs it)");
    None
}

impl Fronted {
    /// Start tansu (`FLEETDP_TANSU`) and the front `front(port, upstream)`
    /// makes, which prints `ready` once it listens.
    pub fn start(tansu: &std::ffi::OsStr, front: impl FnOnce(u16, u16) -> Command) -> Fronted {
        let (port, upstream) = (free_port(), free_port());
        let tansu = tansu_at(tansu, upstream, port);
        let mut front = front(port, upstream)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the front");
        let mut line = String::new();
        std::io::BufReader::new(front.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the front did not start");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", upstream)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Fronted { tansu, front, port }
    }
}

/// The whole pipeline through `broker` configured with `security` (TLS,
/// SASL): two runs on the same topics and group, stopped in between. The
/// first releases a window and dead-letters an undecodable message; the
/// second restores the state the first wrote and resumes at the next seq
/// (seq 0 is not released again); fleet records of both seqs are written.
/// Everything is read back through the same secured front.
pub async fn whole_pipeline(broker: &Broker, security: &str, name: &str) {
    const KEY: [u8; 32] = [5; 32];
    let t = Topics::created(broker, name, 1).await;
    let v = || {
        config(
            broker,
            &t,
            "epsilon_per_device = 1.0\nhorizon = \"24h\"",
            security,
            "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"count\", \"mean\"]",
        )
    };
    let wait = Duration::from_secs(60);
    for run in 0..2 {
        let (stop, c, h) = spawn_pipeline(v(), KEY);
        for i in 0..5 {
            let r = temp_reading(Some(0), &format!("{name}-{run}-{i}"), 20.0, now_ms());
            produce(broker, &t.input, std::slice::from_ref(&r)).await;
        }
        if run == 0 {
            let garbage = Out {
                partition: Some(0),
                key: "garbage".into(),
                payload: vec![0xff; 16],
                content_type: Some("application/json".into()),
            };
            produce(broker, &t.input, &[garbage]).await;
        }
        let released = wait_until(wait, || count(&c.windows_released) >= 1).await;
        let fleet = wait_until(wait, || {
            tokio::task::block_in_place(|| fleet_releases(broker, &t.output)).len() > run
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert!(released, "{name}, run {run}: nothing released");
        assert!(fleet, "{name}, run {run}: no fleet record");
    }
    let seqs: Vec<u64> = tokio::task::block_in_place(|| releases(broker, &t.output))
        .iter()
        .map(|r| r.window_seq)
        .collect();
    assert_eq!(
        seqs,
        [0, 1],
        "{name}: the second run resumed from restored state"
    );
    let dead = dead_letter_details(broker, &t.dlq);
    assert_eq!(
        dead.len(),
        1,
        "{name}: the undecodable message was dead-lettered"
    );
}

/// A pipeline configured with `security` (the `[kafka.security]` lines) and
/// `stream` fails at start within `wait`, its error naming
/// `kafka.security`: a wrong CA, password or secret, a missing client
/// certificate.
pub async fn fails_at_start(
    broker: &Broker,
    security: &str,
    stream: &str,
    name: &str,
    wait: Duration,
) {
    let t = Topics::created(broker, name, 1).await;
    let v = config(
        broker,
        &t,
        "epsilon_per_device = 1.0\nhorizon = \"24h\"",
        security,
        stream,
    );
    let (stop, _c, h) = spawn_pipeline(v, [5; 32]);
    let ended = tokio::time::timeout(wait, h).await;
    let _ = stop.send(true);
    match ended {
        Ok(r) => {
            let e = format!("{:#}", r.unwrap().expect_err("it started"));
            assert!(
                e.contains("kafka.security"),
                "{name}: the error names the setting: {e}"
            );
        }
        Err(_) => panic!("{name}: did not fail within {wait:?}"),
    }
}
