//! `[otlp]`: reading OpenTelemetry metrics (`kafka.input_format =
//! "otlp_proto"` or `"otlp_json"`, as the Collector's Kafka exporter
//! writes them) — which attribute names the device, which metric feeds
//! which stream, which attributes feed dimensions. Validated at start;
//! each error names the field. Also `kafka.otlp_topic` and
//! `kafka.otlp_encoding`: every release written again as OpenTelemetry
//! metrics (`runtime/otlp_out.rs`).

use anyhow::{bail, Result};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The `[otlp]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The attribute naming the device: a data point's, else its
    /// resource's.
    pub device_attribute: String,
    /// Stream name = the metric name whose points feed it.
    pub metrics: BTreeMap<String, String>,
    /// Dimension name = the attribute holding its value (a point's, else
    /// its resource's), for streams with `group_by`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `kafka.otlp_encoding`: how releases are written to `kafka.otlp_topic`,
/// as the Collector's Kafka receiver names its encodings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpEncoding {
    #[default]
    OtlpProto,
    OtlpJson,
}

/// `kafka.otlp_topic` names a topic none of `others` (FleetDP's other
/// topics) is; `kafka.otlp_encoding` needs it.
pub fn check_output(
    topic: Option<&str>,
    encoding: Option<OtlpEncoding>,
    others: &[String],
) -> Result<()> {
    match topic {
        None if encoding.is_some() => {
            bail!(
                "kafka.otlp_encoding: set kafka.otlp_topic too (the topic the OTLP records go to)"
            )
        }
        Some(t) if t.trim().is_empty() => bail!("kafka.otlp_topic: must not be empty"),
        Some(t) if others.iter().any(|o| o == t) => {
            bail!(
                "kafka.otlp_topic: {t} is already one of FleetDP's topics; name a topic of its own"
            )
        }
        _ => Ok(()),
    }
}

/// Longest attribute or metric name `[otlp]` may name (bytes).
const MAX_NAME_BYTES: usize = 255;

/// The mapping of `[otlp]`, checked against `[kafka]`'s format, `[input]`
/// and the declared streams.
pub(super) fn mapping(
    otlp: Option<&OtlpConfig>,
    format: ingest::Format,
    has_input: bool,
    declared: &[String],
) -> Result<Option<ingest::OtlpMapping>> {
    let Some(o) = otlp else {
        if format.is_otlp() {
            bail!("kafka.input_format: OTLP needs an [otlp] table (device_attribute and metrics)");
        }
        return Ok(None);
    };
    if !format.is_otlp() {
        bail!("otlp: set kafka.input_format = \"otlp_proto\" or \"otlp_json\" (the table maps OpenTelemetry metrics)");
    }
    if has_input {
        bail!("input: not with [otlp] (OpenTelemetry metrics are mapped by [otlp] alone)");
    }
    let named = |field: String, v: &str| {
        if v.is_empty() || v.len() > MAX_NAME_BYTES {
            bail!("{field}: must be 1 to {MAX_NAME_BYTES} bytes");
        }
        Ok(())
    };
    named("otlp.device_attribute".into(), &o.device_attribute)?;
    if o.metrics.is_empty() {
        bail!("otlp.metrics: map at least one declared stream to its metric's name");
    }
    let mut metrics = Vec::new();
    for (stream, metric) in &o.metrics {
        if !declared.contains(stream) {
            bail!("otlp.metrics.{stream}: not a declared [[stream]]");
        }
        named(format!("otlp.metrics.{stream}"), metric)?;
        if metrics.iter().any(|(m, _): &(String, String)| m == metric) {
            bail!("otlp.metrics.{stream}: metric {metric:?} already feeds another stream");
        }
        metrics.push((metric.clone(), stream.clone()));
    }
    if o.labels.len() > ingest::MAX_LABELS {
        bail!("otlp.labels: at most {} labels", ingest::MAX_LABELS);
    }
    for (name, attr) in &o.labels {
        named(format!("otlp.labels.{name}"), attr)?;
    }
    Ok(Some(ingest::OtlpMapping {
        device_attribute: o.device_attribute.clone(),
        metrics,
        labels: o
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    //! Each refusal names its field.

    use super::*;
    use ingest::Format;

    fn table(metrics: &[(&str, &str)]) -> OtlpConfig {
        OtlpConfig {
            device_attribute: "device.id".into(),
            metrics: metrics
                .iter()
                .map(|(s, m)| (s.to_string(), m.to_string()))
                .collect(),
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn each_refusal_names_its_field() {
        let declared = vec!["temp".to_string(), "volt".to_string()];
        let ok = table(&[("temp", "cabin.temperature")]);
        let m = mapping(Some(&ok), Format::OtlpJson, false, &declared)
            .unwrap()
            .unwrap();
        assert_eq!(m.metrics, vec![("cabin.temperature".into(), "temp".into())]);
        assert!(mapping(None, Format::Json, false, &declared)
            .unwrap()
            .is_none());
        let err = |o: Option<&OtlpConfig>, f: Format, input: bool| {
            mapping(o, f, input, &declared).unwrap_err().to_string()
        };
        assert!(err(None, Format::OtlpProto, false).contains("[otlp]"));
        assert!(err(Some(&ok), Format::Json, false).contains("kafka.input_format"));
        assert!(err(Some(&ok), Format::OtlpProto, true).contains("input:"));
        let t = table(&[("gone", "x")]);
        assert!(err(Some(&t), Format::OtlpProto, false).contains("otlp.metrics.gone"));
        let t = table(&[]);
        assert!(err(Some(&t), Format::OtlpProto, false).contains("otlp.metrics"));
        let t = table(&[("temp", "same"), ("volt", "same")]);
        assert!(err(Some(&t), Format::OtlpProto, false).contains("already feeds"));
        let t = table(&[("temp", "")]);
        assert!(err(Some(&t), Format::OtlpProto, false).contains("otlp.metrics.temp"));
        let mut t = ok.clone();
        t.device_attribute = "x".repeat(256);
        assert!(err(Some(&t), Format::OtlpProto, false).contains("otlp.device_attribute"));
        let mut t = ok.clone();
        t.labels = (0..=ingest::MAX_LABELS)
            .map(|i| (format!("d{i}"), "a".into()))
            .collect();
        assert!(err(Some(&t), Format::OtlpProto, false).contains("otlp.labels"));
    }

    #[test]
    fn the_otlp_output_topic_is_its_own_and_an_encoding_needs_it() {
        let others = ["in".to_string(), "out".to_string()];
        let enc = Some(OtlpEncoding::OtlpJson);
        assert!(check_output(Some("otlp"), enc, &others).is_ok());
        assert!(check_output(None, None, &others).is_ok());
        let err = |t, e| check_output(t, e, &others).unwrap_err().to_string();
        assert!(err(None, enc).contains("kafka.otlp_encoding"));
        assert!(err(Some("out"), None).contains("kafka.otlp_topic"));
        assert!(err(Some(" "), None).contains("kafka.otlp_topic"));
        let parsed: OtlpEncoding = toml::from_str::<toml::Value>("e = \"otlp_json\"").unwrap()["e"]
            .clone()
            .try_into()
            .unwrap();
        assert_eq!(parsed, OtlpEncoding::OtlpJson);
    }
}
