//! The HTTP listener under hostile clients: only GET and HEAD, security
//! headers on every answer and a restrictive policy on the page, and
//! hundreds of connections that never finish their headers neither keep
//! their sockets beyond the header timeout nor stop `/healthz` answering;
//! with `http.probe_listen`, the probes answer on their own listener even
//! while every slot of the main one is taken.

use fleetdp::config::Config;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[kafka]
brokers = "127.0.0.1:1"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 10
statistics = ["mean"]
"#;

/// A request's raw answer: status line, headers (lower-case names), body.
fn raw(addr: &str, request: &str) -> (String, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// What the listener serves, for a pipeline of [`CONFIG`] that never runs.
fn http_state() -> Arc<fleetdp::http::HttpState> {
    let v = Config::parse(CONFIG).unwrap().validate().unwrap();
    let p = fleetdp::pipeline::Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes([5; 32]));
    Arc::new(fleetdp::http::HttpState {
        metrics: fleetdp::http::recorder().unwrap(),
        board: p.board.clone(),
        config: p.config(),
        counters: p.counters.clone(),
        review: fleetdp::report::review_page(
            &fleetdp::report::PlanReport::new(&p.config()),
            &p.config(),
        ),
    })
}

#[test]
fn the_listener_refuses_other_methods_sends_security_headers_and_survives_slow_clients() {
    runtime().block_on(async {
        let state = http_state();
        let addr = fleetdp::http::serve("127.0.0.1:0", state)
            .await
            .unwrap()
            .to_string();
        tokio::task::block_in_place(|| {
            let close = "Connection: close\r\n\r\n";
            for method in ["DELETE", "POST", "PUT", "PATCH", "OPTIONS"] {
                let (status, h, _) = raw(
                    &addr,
                    &format!(
                        "{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n{close}"
                    ),
                );
                assert!(status.contains(" 405 "), "{method}: {status}");
                assert_eq!(header(&h, "allow"), Some("GET, HEAD"));
            }
            let (status, h, body) = raw(
                &addr,
                &format!("HEAD /healthz HTTP/1.1\r\nHost: x\r\n{close}"),
            );
            assert!(status.contains(" 200 "), "{status}");
            assert!(body.is_empty(), "HEAD has no body");
            assert_eq!(header(&h, "x-content-type-options"), Some("nosniff"));
            let (status, h, _) = raw(&addr, &format!("GET / HTTP/1.1\r\nHost: x\r\n{close}"));
            assert!(status.contains(" 200 "), "{status}");
            let csp = header(&h, "content-security-policy").expect("a policy on the page");
            assert!(
                csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
                "{csp}"
            );
            assert_eq!(header(&h, "cache-control"), Some("no-store"));

            // 300 clients that open a connection and never finish their headers.
            let slow: Vec<TcpStream> = (0..300)
                .map(|_| {
                    let mut s = TcpStream::connect(&addr).unwrap();
                    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                        .unwrap();
                    s
                })
                .collect();
            let started = Instant::now();
            let (status, _, _) = raw(
                &addr,
                &format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{close}"),
            );
            assert!(status.contains(" 200 "), "{status}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "healthz took {:?}",
                started.elapsed()
            );
            // After the header timeout the server has closed every one of them.
            std::thread::sleep(fleetdp::http::HEADER_READ_TIMEOUT + Duration::from_secs(2));
            for mut s in slow {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                // EOF (after a 408 or nothing) means the server closed it.
                if let Err(e) = s.read_to_end(&mut Vec::new()) {
                    assert!(
                        e.kind() == std::io::ErrorKind::ConnectionReset,
                        "a slow connection is still open: {e}"
                    );
                }
            }
        });
    });
}

/// Every connection slot of the main listener held by clients that never
/// finish their headers: the probe listener still answers at once, and
/// serves nothing but the probes.
#[test]
fn the_probe_listener_answers_while_the_main_one_is_flooded() {
    runtime().block_on(async {
        let state = http_state();
        let main = fleetdp::http::serve("127.0.0.1:0", state.clone())
            .await
            .unwrap()
            .to_string();
        let probes = fleetdp::http::serve_probes("127.0.0.1:0", state)
            .await
            .unwrap()
            .to_string();
        tokio::task::block_in_place(|| {
            let close = "Connection: close\r\n\r\n";
            let flood: Vec<TcpStream> = (0..fleetdp::http::MAX_CONNECTIONS + 50)
                .filter_map(|_| {
                    let mut s = TcpStream::connect(&main).ok()?;
                    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").ok()?;
                    Some(s)
                })
                .collect();
            assert!(flood.len() > fleetdp::http::MAX_CONNECTIONS / 2);
            let started = Instant::now();
            let (status, _, body) = raw(
                &probes,
                &format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{close}"),
            );
            assert!(status.contains(" 200 "), "{status}");
            assert_eq!(body, "ok\n");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{:?}",
                started.elapsed()
            );
            let (status, _, _) = raw(
                &probes,
                &format!("GET /readyz HTTP/1.1\r\nHost: x\r\n{close}"),
            );
            assert!(status.contains(" 503 "), "not assigned yet: {status}");
            for path in ["/metrics", "/", "/api/status"] {
                let (status, _, _) = raw(
                    &probes,
                    &format!("GET {path} HTTP/1.1\r\nHost: x\r\n{close}"),
                );
                assert!(
                    status.contains(" 404 "),
                    "{path} on the probe listener: {status}"
                );
            }
            drop(flood);
        });
    });
}

/// Issue: with fewer file descriptors than attacking connections (a limit
/// of 256, 500 connections that never send a request), `/healthz` on the
/// single listener failed for ≈ 10 s, until header timeouts freed
/// descriptors. The listener now closes the oldest connection never served
/// a request whenever accepting runs out of descriptors, so the probe
/// behind them is answered at once. The service (the demo: a whole
/// pipeline on the in-process cluster) runs in a child process with the low
/// limit; the attackers are this process's connections.
#[test]
fn a_probe_answers_while_hostile_connections_exhaust_the_descriptors() {
    use std::os::unix::process::CommandExt as _;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"));
    cmd.args(["demo", "--duration", "90s", "--devices", "200", "--listen"])
        .arg(&addr)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit(2) between fork and exec touches no shared state.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let healthz = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let deadline = Instant::now() + Duration::from_secs(60);
    let up = loop {
        if TcpStream::connect(&addr).is_ok() && raw(&addr, healthz).0.contains(" 200 ") {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let result = std::panic::catch_unwind(|| {
        assert!(up, "the demo never served /healthz");
        // Up to 500 connections that never send a byte: more than the child
        // has descriptors. Those it cannot accept wait in the listen queue;
        // once that is full too a connect times out, and the flood stops.
        let sock: std::net::SocketAddr = addr.parse().unwrap();
        let mut hostile = Vec::new();
        while hostile.len() < 500 {
            match TcpStream::connect_timeout(&sock, Duration::from_millis(300)) {
                Ok(s) => hostile.push(s),
                Err(_) => break,
            }
        }
        assert!(hostile.len() >= 100, "only {} connections", hostile.len());
        // Before: every descriptor stayed taken until the header timeout
        // (5 s) and the probe's connection waited in (or for) the queue.
        for attempt in 0..3 {
            let started = Instant::now();
            let (status, _, _) = raw(&addr, healthz);
            assert!(
                status.contains(" 200 ") && started.elapsed() < Duration::from_secs(3),
                "attempt {attempt}: {status:?} after {:?}",
                started.elapsed()
            );
        }
        // The oldest hostile connections were the ones closed.
        let mut closed = 0;
        for mut s in hostile.into_iter().take(50) {
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut b = [0u8; 1];
            match s.read(&mut b) {
                Ok(0) => closed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
                _ => {}
            }
        }
        assert!(closed > 0, "no hostile connection was shed");
    });
    // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// `/plan` serves the review page `plan --report` writes, of the
/// instance's own plan, under a policy that loads nothing; the status page
/// links to it.
#[test]
fn the_plan_is_served_as_the_review_page_and_linked_from_the_status_page() {
    runtime().block_on(async {
        let state = http_state();
        let expected = fleetdp::report::review_page(
            &fleetdp::report::PlanReport::new(&state.config),
            &state.config,
        );
        let addr = fleetdp::http::serve("127.0.0.1:0", state)
            .await
            .unwrap()
            .to_string();
        let (addr2, get) = (
            addr.clone(),
            "GET /plan HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        let (status, headers, body) = tokio::task::spawn_blocking(move || raw(&addr2, get))
            .await
            .unwrap();
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(body, expected, "/plan differs from plan --report's page");
        let csp = header(&headers, "content-security-policy").unwrap_or_default();
        assert!(csp.starts_with("default-src 'none'"), "{csp}");
        let index = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let (_, _, page) = tokio::task::spawn_blocking(move || raw(&addr, index))
            .await
            .unwrap();
        assert!(
            page.contains("href=\"/plan\""),
            "the status page does not link /plan"
        );
    });
}
