//! `[input]`: reading a fleet's own JSON documents, Protobuf messages
//! (through their descriptor set) or Avro records (through their schema) — where the device id, the event time and
//! each stream's value live (paths), and how the time is written. Validated
//! at start; each error names the field.

use anyhow::{anyhow, bail, Result};
use ingest::{Mapping, Path, TimeUnit};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The `[input]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputConfig {
    /// Path of the device id (a JSON Pointer such as `/vin` or a dotted
    /// path such as `vehicle.vin`).
    pub device_id: String,
    /// Path of the event time.
    pub event_time: String,
    /// `ms` (default), `s`, `us`, `ns` or `rfc3339`.
    #[serde(default = "default_unit")]
    pub event_time_unit: String,
    /// Stream name = path of its value; one message may carry several.
    pub streams: BTreeMap<String, String>,
    /// Dimension name = path of its value (for streams with `group_by`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The fleet's messages are Protobuf: a serialized `FileDescriptorSet`
    /// (`protoc --descriptor_set_out=… --include_imports`) holding them.
    #[serde(default)]
    pub protobuf_descriptor_set: Option<std::path::PathBuf>,
    /// The message type in it, fully qualified (`acme.v1.Telemetry`).
    #[serde(default)]
    pub protobuf_message: Option<String>,
    /// The fleet's messages are Avro: the writer's schema (`.avsc`, a
    /// record), for `kafka.input_format = "avro"`.
    #[serde(default)]
    pub avro_schema: Option<std::path::PathBuf>,
    /// With Schema Registry framing: the schema id every message must carry
    /// (others are dead-lettered naming both ids).
    #[serde(default)]
    pub avro_schema_id: Option<u32>,
    /// Framed Avro: fetch each message's writer's schema by its id from
    /// this Confluent-compatible Schema Registry (`http://host:port`).
    #[serde(default)]
    pub schema_registry_url: Option<String>,
}

/// Largest Avro schema file read (bytes).
pub const MAX_AVRO_SCHEMA_BYTES: u64 = 1 << 20;

/// Largest descriptor set read (bytes).
pub const MAX_DESCRIPTOR_SET_BYTES: u64 = 16 << 20;

fn default_unit() -> String {
    "ms".into()
}

impl InputConfig {
    /// The fleet's Protobuf message, if declared.
    pub(crate) fn described(&self) -> Result<Option<ingest::Described>> {
        match (&self.protobuf_descriptor_set, &self.protobuf_message) {
            (None, None) => Ok(None),
            (Some(_), None) | (None, Some(_)) => bail!(
                "input.protobuf_descriptor_set and input.protobuf_message: declare both (the set's file and the message's full name) or neither"
            ),
            (Some(path), Some(name)) => {
                let field = "input.protobuf_descriptor_set";
                let bytes = super::files::read_bounded(field, path, MAX_DESCRIPTOR_SET_BYTES)?;
                let described = ingest::Described::new(&bytes, name).map_err(|e| {
                    anyhow!("input.protobuf_message / {field} ({}): {e}", path.display())
                })?;
                // Every mapped path must name a readable field.
                let paths = [("device_id", &self.device_id), ("event_time", &self.event_time)]
                    .into_iter()
                    .map(|(k, p)| (format!("input.{k}"), p))
                    .chain(self.streams.iter().map(|(k, p)| (format!("input.streams.{k}"), p)))
                    .chain(self.labels.iter().map(|(k, p)| (format!("input.labels.{k}"), p)));
                for (setting, text) in paths {
                    // Unparsable paths are reported by the mapping.
                    if let Ok(p) = Path::parse(text) {
                        described
                            .check_path(&p)
                            .map_err(|e| anyhow!("{setting}: {e}"))?;
                    }
                }
                Ok(Some(described))
            }
        }
    }

    /// The fleet's Avro record, if declared.
    pub(crate) fn avro(&self) -> Result<Option<ingest::AvroSchema>> {
        let Some(path) = &self.avro_schema else {
            if self.avro_schema_id.is_some() {
                bail!("input.avro_schema_id: only with input.avro_schema");
            }
            return Ok(None);
        };
        let field = "input.avro_schema";
        let text = super::files::read_text(field, path, MAX_AVRO_SCHEMA_BYTES)?;
        ingest::AvroSchema::new(&text, self.avro_schema_id)
            .map(Some)
            .map_err(|e| anyhow!("{field} ({}): {e}", path.display()))
    }

    /// The mapping, its streams in `declared` order.
    pub(crate) fn mapping(&self, declared: &[String]) -> Result<Mapping> {
        let path =
            |field: &str, text: &str| Path::parse(text).map_err(|e| anyhow!("input.{field}: {e}"));
        let unit = TimeUnit::parse(&self.event_time_unit).ok_or_else(|| {
            anyhow!(
                "input.event_time_unit: {:?} is not one of \"ms\", \"s\", \"us\", \"ns\", \"rfc3339\"",
                self.event_time_unit
            )
        })?;
        if self.streams.is_empty() {
            bail!("input.streams: map at least one declared stream to the path of its value");
        }
        for name in self.streams.keys() {
            if !declared.contains(name) {
                bail!("input.streams.{name}: not a declared [[stream]]");
            }
        }
        let mut streams = Vec::new();
        for name in declared {
            if let Some(p) = self.streams.get(name) {
                streams.push((name.clone(), path(&format!("streams.{name}"), p)?));
            }
        }
        if self.labels.len() > ingest::MAX_LABELS {
            bail!("input.labels: at most {} labels", ingest::MAX_LABELS);
        }
        let labels = self
            .labels
            .iter()
            .map(|(name, p)| Ok((name.clone(), path(&format!("labels.{name}"), p)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Mapping {
            device_id: path("device_id", &self.device_id)?,
            event_time: path("event_time", &self.event_time)?,
            unit,
            streams,
            labels,
        })
    }
}

/// Where the fleet's own messages get their shape: a Protobuf descriptor
/// set, an Avro schema file, or a Schema Registry — checked against
/// `[kafka]`'s format and framing, each error naming its field.
pub(crate) struct Sources {
    pub described: Option<ingest::Described>,
    pub avro: Option<ingest::AvroSchema>,
    pub schema_registry: Option<crate::clients::schemas::SchemaRegistry>,
}

pub(crate) fn sources(input: Option<&InputConfig>, kafka: &super::KafkaConfig) -> Result<Sources> {
    let described = match input {
        Some(i) => i.described()?,
        None => None,
    };
    if described.is_some() && kafka.input_format == ingest::Format::Json {
        bail!("kafka.input_format: \"json\" with input.protobuf_message; set \"protobuf\" (the fleet's messages are Protobuf)");
    }
    let avro = match input {
        Some(i) => i.avro()?,
        None => None,
    };
    let schema_registry = match input.and_then(|i| i.schema_registry_url.as_ref()) {
        None => None,
        Some(url) => {
            let r = crate::clients::schemas::SchemaRegistry::parse(url)?;
            if avro.is_some() {
                bail!("input.schema_registry_url and input.avro_schema: declare one (schemas from the registry, or one schema file)");
            }
            if kafka.input_framing != ingest::Framing::Confluent {
                bail!("input.schema_registry_url: set kafka.input_framing = \"confluent\" (the frame names the schema id)");
            }
            if kafka.input_format == ingest::Format::Protobuf && !kafka.read_content_type {
                bail!("input.schema_registry_url: Protobuf schemas are not fetched from the registry; declare the topic's descriptor set \
                       (input.protobuf_descriptor_set and input.protobuf_message; docs/input.md, Your own Protobuf messages)");
            }
            if kafka.input_format != ingest::Format::Avro && !kafka.read_content_type {
                bail!("input.schema_registry_url: set kafka.input_format = \"avro\" (schemas are fetched for Avro messages)");
            }
            Some(r)
        }
    };
    match (kafka.input_format == ingest::Format::Avro, avro.is_some() || schema_registry.is_some()) {
        (true, false) => bail!("kafka.input_format: \"avro\" needs [input] with avro_schema (the writer's schema) or schema_registry_url, and the paths to read"),
        (false, true) if !kafka.read_content_type => bail!("input.avro_schema: set kafka.input_format = \"avro\" (or keep read_content_type = true and send content-type application/avro)"),
        _ => {}
    }
    if avro.is_some() && described.is_some() {
        bail!("input.avro_schema and input.protobuf_message: declare one (the topic's messages are Avro or Protobuf)");
    }
    Ok(Sources {
        described,
        avro,
        schema_registry,
    })
}
