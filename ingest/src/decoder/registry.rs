//! The decoder's Schema Registry side: the writers' schemas of framed Avro
//! messages, fetched by the caller (`aggregator/src/clients/schemas.rs`)
//! and held by the decoder, and the fleet's own Avro schema when it is
//! declared instead.

use super::Decoder;
use crate::AvroSchema;

/// Schemas from a Schema Registry, held by the decoder (the caller fetches
/// them: `aggregator/src/clients/schemas.rs`).
impl Decoder {
    /// Read framed Avro payloads against their writers' schemas, fetched
    /// from a Schema Registry by the caller ([`Decoder::avro_schema_needed`],
    /// [`Decoder::add_avro_schema`]).
    pub fn with_avro_registry(mut self) -> Self {
        self.registry = Some(std::collections::HashMap::new());
        self
    }

    /// The schema id of a framed Avro payload whose writer's schema the
    /// decoder does not hold yet (registry mode only); `None` when it holds
    /// it, or the payload is not such a message (decoding will say why).
    pub fn avro_schema_needed(&self, payload: &[u8], content_type: Option<&str>) -> Option<u32> {
        let known = self.registry.as_ref()?;
        let format = match content_type {
            Some(ct) => crate::Format::from_content_type(ct)?,
            None => self.default_format,
        };
        if format != crate::Format::Avro || self.framing != crate::Framing::Confluent {
            return None;
        }
        let [0, a, b, c, d, ..] = payload else {
            return None;
        };
        let id = u32::from_be_bytes([*a, *b, *c, *d]);
        (!known.contains_key(&id)).then_some(id)
    }

    /// Schema ids held (fetched or refused).
    pub fn avro_schemas_held(&self) -> usize {
        self.registry
            .as_ref()
            .map_or(0, std::collections::HashMap::len)
    }

    /// Hold the writer's schema of `id`, or why it has none (messages with
    /// that id are dead-lettered with the reason).
    pub fn add_avro_schema(&mut self, id: u32, mut schema: Result<AvroSchema, String>) {
        if let (Ok(a), Some(_)) = (&mut schema, &self.mapping) {
            a.prepare(&self.mapped_paths);
        }
        if let Some(r) = &mut self.registry {
            r.insert(id, schema);
        }
    }

    /// Read Avro payloads as the fleet's own record (its writer's schema),
    /// through the mapping of `Decoder::with_mapping`.
    pub fn with_avro(mut self, mut schema: AvroSchema) -> Self {
        if self.mapping.is_some() {
            schema.prepare(&self.mapped_paths);
        }
        self.avro = Some(schema);
        self
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    fn mapping(temp: &str) -> Mapping {
        Mapping {
            device_id: Path::parse("vin").unwrap(),
            event_time: Path::parse("ts").unwrap(),
            unit: TimeUnit::Milliseconds,
            streams: vec![("temp".into(), Path::parse(temp).unwrap())],
            labels: vec![],
        }
    }

    fn decoder(format: Format) -> Decoder {
        Decoder::new(["temp".to_string()], format, Limits::default())
    }

    /// Every schema and message type the decoder holds reads the mapping's
    /// paths straight from the bytes, whichever was given first and however
    /// a schema came (declared, or fetched from a registry before or after
    /// the mapping); without a mapping none is prepared.
    #[test]
    fn every_schema_held_is_prepared_for_the_mapping() {
        let avro = || AvroSchema::new(EXAMPLE_AVRO_SCHEMA, None).unwrap();
        let m = || mapping("cabin.temp_c");
        let prepared = |d: &Decoder| d.avro.as_ref().is_some_and(AvroSchema::is_prepared);
        assert!(prepared(
            &decoder(Format::Avro).with_avro(avro()).with_mapping(m())
        ));
        assert!(prepared(
            &decoder(Format::Avro).with_mapping(m()).with_avro(avro())
        ));
        assert!(!prepared(&decoder(Format::Avro).with_avro(avro())));
        let fetched = |d: &Decoder| matches!(d.registry.as_ref().unwrap().get(&3), Some(Ok(a)) if a.is_prepared());
        let mut after = decoder(Format::Avro).with_avro_registry().with_mapping(m());
        after.add_avro_schema(3, Ok(avro()));
        assert!(fetched(&after));
        let mut before = decoder(Format::Avro).with_avro_registry();
        before.add_avro_schema(3, Ok(avro()));
        assert!(!fetched(&before));
        assert!(fetched(&before.with_mapping(m())));

        let own = || Described::new(&example_descriptor_set(), "acme.v1.Telemetry").unwrap();
        let m = || mapping("cabin.temp");
        let prepared = |d: &Decoder| d.described.as_ref().is_some_and(Described::is_prepared);
        assert!(prepared(
            &decoder(Format::Protobuf)
                .with_described(own())
                .with_mapping(m())
        ));
        assert!(prepared(
            &decoder(Format::Protobuf)
                .with_mapping(m())
                .with_described(own())
        ));
        assert!(!prepared(&decoder(Format::Protobuf).with_described(own())));
    }
}
