//! Logging and exit codes of the `fleetdp` command: text or JSON lines on
//! stderr (colour only on a terminal), the effective configuration as
//! structured fields, the fatal line in the log's own format, and an exit
//! code that says whether restarting can help.

use crate::config::Validated;
use std::io::IsTerminal as _;
use std::process::ExitCode;

/// Exit codes (docs/troubleshooting.md, "Exit codes"): 0 done, [`EXIT_RUNTIME`] a
/// failure while running (Kafka, I/O: an orchestrator's restart may help),
/// [`EXIT_USAGE`] a bad command line, [`EXIT_CONFIG`] a configuration or
/// key FleetDP refuses (a restart cannot help until it is changed).
pub const EXIT_RUNTIME: u8 = 1;
/// A bad command line (clap's own code).
pub const EXIT_USAGE: u8 = 2;
/// A configuration or release key refused (`EX_CONFIG` of sysexits.h).
pub const EXIT_CONFIG: u8 = 78;

pub use crate::config::{configuration, Configuration};

/// Stderr, with every value a configuration expanded from `${…}` blanked
/// in each line written ([`crate::config::redact_logged`]): whatever line
/// shows a setting (the `starting` line's brokers, topics and group id, a
/// client's error naming a broker), an expanded value never reaches the
/// log. The formatter writes each event with one call.
struct Redacting;

impl std::io::Write for Redacting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(crate::config::redact_logged(&text).as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Install the global subscriber: JSON lines or text on stderr, ANSI
/// colours only when stderr is a terminal; `RUST_LOG` overrides `default`.
pub fn init(json: bool, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(|| Redacting);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

/// The exit code for a command's result.
pub fn exit_code(result: &anyhow::Result<()>) -> u8 {
    result.as_ref().err().map_or(0, error_code)
}

/// The exit code for a failure: [`EXIT_CONFIG`] if it is (or wraps) a
/// [`Configuration`] error, else [`EXIT_RUNTIME`].
pub fn error_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<Configuration>().is_some() {
        EXIT_CONFIG
    } else {
        EXIT_RUNTIME
    }
}

/// The last line of a failed command: why it stopped, as text
/// (`fleetdp: …`) or, under `--log-json`, as one JSON object shaped like
/// the other lines (timestamp, level, fields.message, target) with the
/// exit code.
pub fn fatal_line(e: &anyhow::Error, json: bool, code: u8) -> String {
    crate::config::redact_logged(&fatal_text(e, json, code))
}

fn fatal_text(e: &anyhow::Error, json: bool, code: u8) -> String {
    if !json {
        return format!("fleetdp: {e:#}");
    }
    serde_json::json!({
        "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        "level": "ERROR",
        "fields": {"message": format!("{e:#}"), "exit_code": code},
        "target": "fleetdp",
    })
    .to_string()
}

/// Print the fatal line (if any) and turn a result into the exit code.
pub fn finish(result: anyhow::Result<()>, json: bool) -> ExitCode {
    let code = exit_code(&result);
    if let Err(e) = &result {
        eprintln!("{}", fatal_line(e, json, code));
    }
    ExitCode::from(code)
}

/// Log the effective configuration at start, as fields (one line for the
/// service, one per planned stream); secrets never appear (client
/// properties are not logged, the key is not in the configuration).
pub fn effective_configuration(v: &Validated) {
    let c = &v.config;
    let k = &c.kafka;
    let p = &v.plan.privacy;
    tracing::info!(
        version = crate::VERSION,
        brokers = %k.brokers,
        input_topic = %k.input_topic,
        output_topic = %k.output_topic,
        dead_letter_topic = %k.dead_letter_topic,
        state_topic = %k.state_topic(),
        group_id = %k.group_id,
        relation = %p.relation,
        measure = ?p.budget.measure,
        budget_per_horizon = p.budget.per_horizon,
        horizon = v.horizon_text(),
        http_listen = %c.http.listen,
        hide_exact_counts = c.http.hide_exact_counts,
        streams = v.plan.streams.len(),
        "starting"
    );
    for s in &v.plan.streams {
        let statistics: Vec<String> = s.spec.statistics.iter().map(|x| format!("{x:?}")).collect();
        tracing::info!(
            stream = %s.spec.name,
            window_size = s.spec.window_size,
            window_ms = ?s.spec.window_ms,
            max_windows_per_device = s.spec.max_windows_per_device,
            budget_share = s.spec.budget_share,
            spent_per_horizon = crate::telemetry::tidy(crate::dp::rational::to_f64(&s.per_horizon())),
            statistics = %statistics.join(","),
            "stream planned"
        );
    }
    if c.http.hide_exact_counts {
        let without: Vec<&str> = v
            .config
            .streams
            .iter()
            .filter(|s| s.device_alarm_share == 0.0)
            .map(|s| s.name.as_str())
            .collect();
        if !without.is_empty() {
            tracing::warn!(
                streams = %without.join(","),
                "with http.hide_exact_counts the device-limit drops are hidden, so FleetDPDeviceLimit cannot fire for these streams; give them device_alarm_share (docs/privacy.md#the-device-limit-alarm)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue: under `--log-json` the line that says why the process
    /// died was plain text; exit codes did not tell a bad configuration
    /// (restarting cannot help) from a runtime failure.
    #[test]
    fn the_fatal_line_is_json_under_log_json_and_the_code_names_the_class() {
        let e = configuration(anyhow::anyhow!("privacy.horizon: \"1x\" is not a duration"));
        let code = error_code(&e);
        assert_eq!(code, EXIT_CONFIG);
        let line = fatal_line(&e, true, code);
        let doc: serde_json::Value = serde_json::from_str(&line).expect(&line);
        assert_eq!(doc["level"], "ERROR");
        assert_eq!(doc["fields"]["exit_code"], 78);
        assert_eq!(
            doc["fields"]["message"],
            "privacy.horizon: \"1x\" is not a duration"
        );
        assert!(doc["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(
            fatal_line(&e, false, code),
            "fleetdp: privacy.horizon: \"1x\" is not a duration"
        );
        // Context added around a configuration error keeps its class.
        let wrapped: anyhow::Result<()> = Err(e.context("starting"));
        assert_eq!(exit_code(&wrapped), EXIT_CONFIG);
        let runtime: anyhow::Result<()> = Err(anyhow::anyhow!("broker down"));
        assert_eq!(exit_code(&runtime), EXIT_RUNTIME);
        assert_eq!(exit_code(&Ok(())), 0);
    }
}
