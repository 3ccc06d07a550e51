//! The HTTP listener: `/metrics` (Prometheus), `/healthz` (the consuming
//! loop moved within `http.stall_timeout`),
//! `/readyz` (partitions assigned and caught up within a bound), the status
//! page at `/` and the JSON it polls at `/api/status`.

use crate::config::Validated;
use crate::serve::status::StatusBoard;
use crate::telemetry::{self, Counters};
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// What the handlers read.
pub struct HttpState {
    pub metrics: PrometheusHandle,
    pub board: Arc<StatusBoard>,
    pub config: Arc<Validated>,
    pub counters: Arc<Counters>,
    /// The plan's review page (`report::review_page`, what `plan --report`
    /// writes), made once by the caller and served at `/plan`.
    pub review: String,
}

const PAGE: &str = include_str!("status.html");

/// Install the Prometheus recorder (once per process) and return its handle.
pub fn recorder() -> Result<PrometheusHandle> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    // One installer at a time: a second caller waits and gets the handle.
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    // Release latency as a Prometheus histogram (buckets from 1 ms to 10 s).
    let h = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(telemetry::name::RELEASE_LATENCY.into()),
            telemetry::LATENCY_BUCKETS,
        )
        .context("latency buckets")?
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    telemetry::describe_all();
    telemetry::build_info();
    // Upkeep drains histogram samples even when nobody scrapes.
    let upkeep = h.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(5));
            upkeep.run_upkeep();
        })
        .context("starting the metrics upkeep thread")?;
    Ok(HANDLE.get_or_init(|| h).clone())
}

/// Connections served at once; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 512;
/// Time a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a connection may stay open, keep-alive included.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Listen on `addr` and serve until the runtime ends (needs a tokio
/// runtime). Returns the bound address. Hostile clients are bounded: at
/// most [`MAX_CONNECTIONS`] at once, [`HEADER_READ_TIMEOUT`] to send
/// headers, [`CONNECTION_LIFETIME`] in all; out of file descriptors, the
/// oldest connection not yet served a request is closed to accept the next
/// (`OpenConnections`); other accept errors back off instead of spinning.
pub async fn serve(addr: &str, state: Arc<HttpState>) -> Result<SocketAddr> {
    listen(addr, "http.listen", state, Routes::All).await
}

/// Serve only `/healthz` and `/readyz` on `addr` (`http.probe_listen`): a
/// listener of their own, with its own connection slots, so a flood of the
/// main listener (a public status page) cannot make an orchestrator's
/// probes fail.
pub async fn serve_probes(addr: &str, state: Arc<HttpState>) -> Result<SocketAddr> {
    listen(addr, "http.probe_listen", state, Routes::Probes).await
}

/// What a listener answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routes {
    All,
    Probes,
}

async fn listen(
    addr: &str,
    field: &str,
    state: Arc<HttpState>,
    routes: Routes,
) -> Result<SocketAddr> {
    let sock: SocketAddr = addr
        .parse()
        .with_context(|| format!("{field}: {addr:?} is not an address like 127.0.0.1:9898"))?;
    let listener = tokio::net::TcpListener::bind(sock)
        .await
        .with_context(|| format!("{field}: cannot listen on {sock}"))?;
    let bound = listener.local_addr()?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let open = Arc::new(Mutex::new(OpenConnections::default()));
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(10);
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => {
                    backoff = Duration::from_millis(10);
                    stream
                }
                Err(e) if out_of_descriptors(&e) && open.lock().expect("lock").shed() => {
                    // A descriptor is freed as the shed connection's task
                    // ends: accept again at once.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let st = state.clone();
            let served = Arc::new(AtomicBool::new(false));
            let (id, shed) = open.lock().expect("lock").add(served.clone());
            let open = open.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    served.store(true, Ordering::Relaxed);
                    let st = st.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(&req, &st, routes)) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
                tokio::select! {
                    _ = tokio::time::timeout(CONNECTION_LIFETIME, conn) => {}
                    _ = shed => {}
                }
                open.lock().expect("lock").remove(id);
                drop(slot);
            });
        }
    });
    Ok(bound)
}

/// Whether accepting failed for want of file descriptors (the process's
/// or the system's).
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// A listener's open connections, oldest first. When the process runs out
/// of file descriptors (hundreds of clients that connect and never send a
/// request, under a low `ulimit -n`), the oldest connection that has not
/// been served a request is closed so the next one in the queue, a probe
/// perhaps, is accepted at once instead of after the header timeout.
#[derive(Default)]
struct OpenConnections {
    next: u64,
    /// id → (whether it was served a request, its close switch).
    conns: BTreeMap<u64, (Arc<AtomicBool>, oneshot::Sender<()>)>,
}

impl OpenConnections {
    fn add(&mut self, served: Arc<AtomicBool>) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        self.next += 1;
        self.conns.insert(self.next, (served, tx));
        (self.next, rx)
    }

    fn remove(&mut self, id: u64) {
        self.conns.remove(&id);
    }

    /// Close the oldest connection never served a request, else the
    /// oldest one; false when there is none.
    fn shed(&mut self) -> bool {
        let id = self
            .conns
            .iter()
            .find(|(_, (served, _))| !served.load(Ordering::Relaxed))
            .or_else(|| self.conns.iter().next())
            .map(|(id, _)| *id);
        let Some(id) = id else { return false };
        let (_, close) = self.conns.remove(&id).expect("listed");
        let _ = close.send(());
        true
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .body(Full::new(body.into()))
        .expect("a valid response")
}

/// The review page's policy: its inline style, nothing else loaded.
const REVIEW_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'";

/// The status page's policy: its own inline script and style, requests to
/// this origin only, no framing.
const PAGE_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn handle(req: &Request<Incoming>, st: &HttpState, routes: Routes) -> Response<Full<Bytes>> {
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET and HEAD\n",
        );
        r.headers_mut().insert(
            "allow",
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    let path = req.uri().path();
    if routes == Routes::Probes && !matches!(path, "/healthz" | "/readyz") {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "probes only: /healthz, /readyz\n",
        );
    }
    match path {
        "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4", {
            telemetry::before_scrape(st.board.ready().is_ok());
            telemetry::partition_stalls(&st.board.stalls());
            let mut text = st.metrics.render();
            text.push_str(&crate::telemetry::render_partition_gauges());
            if st.config.config.http.hide_exact_counts {
                crate::telemetry::without_exact_counts(&text)
            } else {
                text
            }
        }),
        "/healthz" => match st.board.health(crate::clock::now_ms()) {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n"),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("stalled: {why}\n"),
            ),
        },
        "/readyz" => match st.board.ready() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ready\n"),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        "/api/status" => reply(
            StatusCode::OK,
            "application/json",
            st.board.to_json(&st.config, &st.counters).to_string(),
        ),
        // The review page `plan --report` writes, of this instance's plan
        // (public parameters only).
        "/plan" => html(st.review.clone(), REVIEW_CSP),
        "/" | "/index.html" => html(PAGE, PAGE_CSP),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// An HTML page under its content security policy, never framed.
fn html(body: impl Into<Bytes>, csp: &'static str) -> Response<Full<Bytes>> {
    let mut r = reply(StatusCode::OK, "text/html; charset=utf-8", body);
    let headers = r.headers_mut();
    headers.insert(
        "content-security-policy",
        hyper::header::HeaderValue::from_static(csp),
    );
    headers.insert(
        "x-frame-options",
        hyper::header::HeaderValue::from_static("DENY"),
    );
    r
}
