//! A private tansu behind a front on loopback (a TLS terminator or a SASL
//! front the test runs): tansu advertises the front's address, so every
//! client connection goes through it. Dropped, both stop.

use super::free_port;
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
    let py = python();
    let ok = Command::new(&py)
        .args(["-c", "import confluent_kafka"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    assert!(
        std::env::var_os("FLEETDP_REQUIRE_PYTHON_CLIENT").is_none(),
        "{py} has no confluent_kafka (tests/run.sh installs it into .tools/venv)"
    );
    eprintln!("no Python with confluent-kafka: skipped (tests/run.sh installs it)");
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
