//! What the service serves over HTTP: the status board the runtime keeps
//! up to date (`status`), and `/metrics`, the probes and the status page
//! (`http`).

pub mod http;
pub(crate) mod status;
