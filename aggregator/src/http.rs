//! The HTTP listener: `/metrics` (Prometheus), `/healthz` (process up),
//! `/readyz` (partitions assigned and caught up within a bound), the status
//! page at `/` and the JSON it polls at `/api/status`.

use crate::config::Validated;
use crate::pipeline::Counters;
use crate::status::StatusBoard;
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// What the handlers read.
pub struct HttpState {
    pub metrics: PrometheusHandle,
    pub board: Arc<StatusBoard>,
    pub config: Arc<Validated>,
    pub counters: Arc<Counters>,
}

const PAGE: &str = include_str!("status.html");

/// Install the Prometheus recorder (once per process) and return its handle.
pub fn recorder() -> Result<PrometheusHandle> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    // Release latency as a Prometheus histogram (buckets from 1 ms to 10 s).
    let h = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("fleetdp_release_latency_seconds".into()),
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
        )
        .context("latency buckets")?
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    metrics::gauge!("fleetdp_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
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

/// Listen on `addr` and serve until the runtime ends (needs a tokio
/// runtime). Returns the bound address.
pub async fn serve(addr: &str, state: Arc<HttpState>) -> Result<SocketAddr> {
    let sock: SocketAddr = addr
        .parse()
        .with_context(|| format!("http.listen: {addr:?} is not an address like 127.0.0.1:9898"))?;
    let listener = tokio::net::TcpListener::bind(sock)
        .await
        .with_context(|| format!("http.listen: cannot listen on {sock}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let st = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(&req, &st)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()))
        .expect("a valid response")
}

fn handle(req: &Request<Incoming>, st: &HttpState) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4", {
            let text = st.metrics.render();
            if st.config.config.http.hide_exact_counts {
                crate::status::without_exact_counts(&text)
            } else {
                text
            }
        }),
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n"),
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
        "/" | "/index.html" => reply(StatusCode::OK, "text/html; charset=utf-8", PAGE),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}
