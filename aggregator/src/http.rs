//! The HTTP listener: Prometheus `/metrics`.

use anyhow::{Context, Result};
use metrics_exporter_prometheus::PrometheusBuilder;
use std::net::SocketAddr;

/// Install the Prometheus recorder and serve `/metrics` on `addr` (needs a
/// tokio runtime). Returns the bound address.
pub fn serve_metrics(addr: &str) -> Result<SocketAddr> {
    let sock: SocketAddr = addr
        .parse()
        .with_context(|| format!("http.listen: {addr:?} is not an address like 127.0.0.1:9898"))?;
    // Fail early and clearly when the port is taken.
    std::net::TcpListener::bind(sock)
        .with_context(|| format!("http.listen: cannot listen on {sock}"))?;
    PrometheusBuilder::new()
        .with_http_listener(sock)
        .install()
        .context("starting the metrics listener")?;
    metrics::gauge!("fleetdp_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(sock)
}
