//! The mark of an error no restart can cure: a configuration, key or
//! state FleetDP refuses until the operator changes something. The
//! command exits with `EX_CONFIG` (78) for it, where a runtime failure
//! exits 1 and an orchestrator's restart may help (`commands::logs`).
//! Marked where the refusal is made, at any layer above this one (a plan
//! change found on restore as much as a bad field at start).

/// An error in the configuration (or the key or state it names). Shown
/// exactly as the error it wraps.
#[derive(Debug)]
pub struct Configuration(pub anyhow::Error);

impl std::fmt::Display for Configuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Configuration {}

/// Mark `e` as a configuration error.
pub fn configuration(e: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(Configuration(e))
}
