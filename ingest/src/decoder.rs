//! The decoder: a message's payload, in whichever format and framing the
//! configuration declares, into validated [`Reading`]s or one
//! [`Rejection`]. The shared types it produces live in the crate root; the
//! formats it calls (`json`, `mapped`, `wire`, `avro`, `described`,
//! `framing`) read bytes and know nothing of it.

use crate::names::StreamNames;
use crate::*;
use serde_json::Value;

mod registry;

/// Decodes and validates messages against the declared streams.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Declared stream names and their positions.
    streams: StreamNames,
    default_format: Format,
    limits: Limits,
    /// JSON payloads are the fleet's own documents, read by this mapping.
    mapping: Option<Mapping>,
    /// Every path of `mapping`, for the binary readers (once, not per message).
    mapped_paths: Vec<Path>,
    /// How messages are framed around their payload.
    framing: Framing,
    /// Protobuf payloads are the fleet's own message, read by `mapping`.
    described: Option<Described>,
    /// Avro payloads are the fleet's own record, read by `mapping`.
    avro: Option<AvroSchema>,
    /// Avro writers' schemas fetched from a Schema Registry, by id (or why
    /// an id has none); `Some` when the schemas come from a registry.
    registry: Option<HashMap<u32, Result<AvroSchema, String>>>,
    /// OTLP metrics are read through this mapping.
    otlp: Option<OtlpMapping>,
}

impl Decoder {
    pub fn new(
        streams: impl IntoIterator<Item = String>,
        default_format: Format,
        limits: Limits,
    ) -> Self {
        Self {
            streams: StreamNames::new(streams),
            default_format,
            limits,
            mapping: None,
            mapped_paths: Vec::new(),
            framing: Framing::None,
            described: None,
            avro: None,
            registry: None,
            otlp: None,
        }
    }

    /// Read OTLP metrics (`otlp_proto`, `otlp_json`) through `mapping`.
    pub fn with_otlp(mut self, mapping: OtlpMapping) -> Self {
        self.otlp = Some(mapping);
        self
    }

    /// Read Protobuf payloads as the fleet's own message (its descriptor),
    /// through the mapping of [`Decoder::with_mapping`].
    pub fn with_described(mut self, mut described: Described) -> Self {
        if self.mapping.is_some() {
            described.prepare(&self.mapped_paths);
        }
        self.described = Some(described);
        self
    }

    /// Read messages framed as `framing` (e.g. Schema Registry's).
    pub fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// Read JSON payloads as the fleet's own documents (`[input]`).
    pub fn with_mapping(mut self, mapping: Mapping) -> Self {
        self.mapped_paths = mapping.paths();
        self.mapping = Some(mapping);
        let paths = &self.mapped_paths;
        let fetched = self
            .registry
            .iter_mut()
            .flat_map(|r| r.values_mut().flatten());
        for a in self.avro.iter_mut().chain(fetched) {
            a.prepare(paths);
        }
        if let Some(d) = &mut self.described {
            d.prepare(paths);
        }
        self
    }

    /// Decode a payload; `content_type` is the message's header, if any.
    pub fn decode(
        &self,
        payload: &[u8],
        content_type: Option<&str>,
    ) -> Result<Vec<Reading>, Rejection> {
        Ok(match self.decode_any(payload, content_type)? {
            Decoded::Plain(p) => vec![self.visit_plain(p, |r| r.into_owned())?],
            Decoded::Many(v) => v,
            Decoded::Found(v) => owned(&v),
            Decoded::Docs(m, docs) => owned(&self.mapped_found(m, &docs)?),
            Decoded::Leaves(m, leaves) => owned(&self.validated(m.found_in(&leaves)?)?),
        })
    }

    /// [`Decoder::decode`], each reading handed to `f` in order, borrowed
    /// (a message of one plain `DeviceReading` is read in place, nothing
    /// allocated). The verdict is decode's: a refused message reaches `f`
    /// with nothing; `f`'s own refusal stops the visit and is returned.
    /// Returns how many readings `f` took.
    pub fn visit(
        &self,
        payload: &[u8],
        content_type: Option<&str>,
        mut f: impl FnMut(usize, ReadingRef<'_>) -> Result<(), Rejection>,
    ) -> Result<usize, Rejection> {
        match self.decode_any(payload, content_type)? {
            Decoded::Plain(p) => self.visit_plain(p, |r| f(0, r))?.map(|()| 1),
            Decoded::Many(v) => {
                for (i, r) in v.iter().enumerate() {
                    f(i, r.borrowed())?;
                }
                Ok(v.len())
            }
            Decoded::Found(v) => hand_over(&v, f),
            Decoded::Docs(m, docs) => hand_over(&self.mapped_found(m, &docs)?, f),
            Decoded::Leaves(m, leaves) => hand_over(&self.validated(m.found_in(&leaves)?)?, f),
        }
    }

    /// Decode a payload, its one reading borrowed where it can be.
    fn decode_any<'a>(
        &'a self,
        payload: &'a [u8],
        content_type: Option<&str>,
    ) -> Result<Decoded<'a>, Rejection> {
        if payload.len() > self.limits.max_message_bytes {
            return Err(Rejection::new(
                Reason::Oversize,
                format!(
                    "payload of {} bytes exceeds {}",
                    payload.len(),
                    self.limits.max_message_bytes
                ),
            ));
        }
        let format = self.format_of(content_type)?;
        let (payload, format, fetched) = self.unframe(payload, format)?;
        let raw: Vec<RawReading> = match format {
            Format::Protobuf | Format::ProtobufBatch if self.described.is_some() => {
                let d = self.described.as_ref().expect("matched");
                let m = self.mapping.as_ref().ok_or_else(|| {
                    Rejection::new(Reason::Undecodable, "a described message needs a mapping")
                })?;
                return Ok(match d.leaves(payload) {
                    Some(leaves) => Decoded::Leaves(m, leaves?),
                    None => {
                        Decoded::Docs(m, vec![d.to_json_for(payload, Some(&self.mapped_paths))?])
                    }
                });
            }
            Format::Protobuf => return Ok(Decoded::Plain(payload)),
            Format::ProtobufBatch => {
                // Counted from the framing first: nothing is materialised
                // for a batch over the limit.
                if let Some(n) = scan::batch_readings(payload) {
                    self.check_count(n)?;
                }
                wire::WireBatch::decode(payload)
                    .map_err(|e| Rejection::new(Reason::Undecodable, format!("ReadingBatch: {e}")))?
                    .readings
                    .into_iter()
                    .map(RawReading::from)
                    .collect()
            }
            Format::Avro => {
                let (Some(a), Some(m)) = (fetched.or(self.avro.as_ref()), &self.mapping) else {
                    return Err(Rejection::new(
                        Reason::Undecodable,
                        "an Avro message needs its schema (input.avro_schema or a registry, framed) and an [input] mapping",
                    ));
                };
                return Ok(match a.leaves(payload) {
                    Some(leaves) => Decoded::Leaves(m, leaves?),
                    None => {
                        Decoded::Docs(m, vec![a.to_json_for(payload, Some(&self.mapped_paths))?])
                    }
                });
            }
            Format::OtlpProto => match self.otlp.as_ref().and_then(|m| otlp_walk::walk(payload, m))
            {
                // The request as encoders write it and within the bounds,
                // read in one walk, its device ids borrowed; anything else
                // is bounded, then decoded whole.
                Some(walked) => return self.validated(walked).map(Decoded::Found),
                None => self.otlp_readings(payload, format)?,
            },
            Format::OtlpJson => self.otlp_readings(payload, format)?,
            Format::Json if self.mapping.is_some() => {
                let m = self.mapping.as_ref().expect("matched");
                let docs = mapped::parse_docs(payload, self.limits.max_readings_per_message)?;
                return Ok(Decoded::Docs(m, docs));
            }
            Format::Json => self.json_readings(payload)?,
        };
        self.check_count(raw.len())?;
        raw.into_iter()
            .enumerate()
            .map(|(i, r)| self.validate(i, r))
            .collect::<Result<_, _>>()
            .map(Decoded::Many)
    }

    /// One `DeviceReading` (the common case), validated without a batch
    /// and handed to `f` borrowed.
    fn visit_plain<T>(
        &self,
        payload: &[u8],
        f: impl FnOnce(ReadingRef<'_>) -> T,
    ) -> Result<T, Rejection> {
        let mut w = Found::default();
        Ok(match self.one_reading(payload, &mut w)? {
            None => f(w.borrowed()),
            Some(r) => f(r.borrowed()),
        })
    }

    /// One `DeviceReading`, read into `w` in place when it is in the form
    /// encoders write (then `None`), else decoded in full.
    fn one_reading<'a>(
        &self,
        payload: &'a [u8],
        w: &mut Found<'a>,
    ) -> Result<Option<Reading>, Rejection> {
        if wire::borrowed(payload, w).is_some() {
            self.check_count(1)?;
            self.validate_one(0, w)?;
            return Ok(None);
        }
        let r = wire::WireReading::decode(payload)
            .map_err(|e| Rejection::new(Reason::Undecodable, format!("DeviceReading: {e}")))?;
        self.check_count(1)?;
        Ok(Some(self.validate(0, r.into())?))
    }

    /// Mapped documents' readings (module `mapped`), counted and each
    /// validated before any is handed over.
    fn mapped_found<'d>(
        &self,
        m: &'d Mapping,
        docs: &'d [Value],
    ) -> Result<Vec<Found<'d>>, Rejection> {
        self.validated(m.found_of(docs)?)
    }

    /// A walk's readings (an OTLP request's, a mapped document's), counted
    /// and each validated before any is handed over.
    fn validated<'a>(&self, mut found: Vec<Found<'a>>) -> Result<Vec<Found<'a>>, Rejection> {
        self.check_count(found.len())?;
        for (i, w) in found.iter_mut().enumerate() {
            self.validate_one(i, w)?;
        }
        Ok(found)
    }

    /// Validate reading `i` as a walk found it, and note its stream's index.
    fn validate_one(&self, i: usize, w: &mut Found<'_>) -> Result<(), Rejection> {
        let parts = (
            Some(&*w.device_id),
            Some(w.stream),
            w.value,
            w.event_time_ms,
        );
        w.stream_index = self.validate_ref(i, parts, &w.labels)?.stream_index;
        Ok(())
    }

    /// The payload inside its framing, the format it is read as (a
    /// framing's message index may name it) and, for framed Avro in
    /// registry mode, the writer's schema its id names.
    fn unframe<'p>(
        &self,
        payload: &'p [u8],
        mut format: Format,
    ) -> Result<(&'p [u8], Format, Option<&AvroSchema>), Rejection> {
        let mut fetched: Option<&AvroSchema> = None;
        let payload = match self.framing {
            Framing::None => payload,
            Framing::Confluent => {
                let protobuf = !matches!(format, Format::Json | Format::Avro);
                let f = framing::unframe(payload, protobuf)?;
                if let (Format::Avro, Some(r)) = (format, &self.registry) {
                    fetched = Some(match r.get(&f.schema_id) {
                        Some(Ok(a)) => a,
                        Some(Err(why)) => {
                            return Err(Rejection::new(
                                Reason::Undecodable,
                                format!("Schema Registry: schema id {}: {why}", f.schema_id),
                            ))
                        }
                        None => {
                            return Err(Rejection::new(
                                Reason::Undecodable,
                                format!(
                                    "Schema Registry: schema id {} was not fetched",
                                    f.schema_id
                                ),
                            ))
                        }
                    });
                } else if let (Format::Avro, Some(a)) = (format, &self.avro) {
                    a.check_id(f.schema_id)?;
                } else if let (true, Some(d)) = (protobuf, &self.described) {
                    d.check_indexes(f.indexes())?;
                    format = Format::Protobuf;
                } else if protobuf {
                    // The message index names the message in fleetdp.proto.
                    format = match f.indexes() {
                        [0] => Format::Protobuf,
                        [1] => Format::ProtobufBatch,
                        other => {
                            return Err(Rejection::new(
                                Reason::Undecodable,
                                format!(
                                    "Schema Registry framing: message index {other:?} is not DeviceReading [0] or ReadingBatch [1] of fleetdp.proto"
                                ),
                            ))
                        }
                    };
                }
                f.body
            }
        };
        Ok((payload, format, fetched))
    }

    /// The readings of a payload in FleetDP's own JSON (one reading, a
    /// list or a `readings` batch).
    fn json_readings(&self, payload: &[u8]) -> Result<Vec<RawReading>, Rejection> {
        let max = self.limits.max_readings_per_message;
        let list = json::parse(payload, max).map_err(|e| match e {
            json::JsonError::TooMany => Rejection::new(
                Reason::BatchSize,
                format!("more than {max} readings; allowed 1 to {max}"),
            ),
            json::JsonError::Syntax(e) => {
                Rejection::new(Reason::Undecodable, format!("JSON: {}", json_error(&e)))
            }
        })?;
        let mut out = Vec::with_capacity(list.len());
        for (i, r) in list.into_iter().enumerate() {
            let value = match r.value {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::Number(n)) => n.as_f64(),
                Some(serde_json::Value::String(s)) if spelled_not_finite(&s) => Some(f64::NAN),
                Some(_) => {
                    return Err(Rejection::new(
                        Reason::Undecodable,
                        format!("reading {i}: field 'value' is not a number"),
                    ))
                }
            };
            out.push(RawReading {
                device_id: r.device_id,
                stream: r.stream,
                value,
                event_time_ms: r.event_time_ms,
                labels: r
                    .labels
                    .map(|l| l.into_iter().collect())
                    .unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// The format a message's content type names (none: the declared one).
    /// OTLP/HTTP's content types name OTLP when it is the declared format
    /// (FleetDP's own `vnd.fleetdp` types keep their meaning).
    fn format_of(&self, content_type: Option<&str>) -> Result<Format, Rejection> {
        let Some(ct) = content_type else {
            return Ok(self.default_format);
        };
        let format = Format::from_content_type(ct).ok_or_else(|| {
            Rejection::new(Reason::Undecodable, format!("unknown content-type {ct:?}"))
        })?;
        Ok(
            match (
                self.default_format.is_otlp() && !ct.contains("vnd.fleetdp"),
                format,
            ) {
                (true, Format::Protobuf) => Format::OtlpProto,
                (true, Format::Json) => Format::OtlpJson,
                _ => format,
            },
        )
    }

    /// The readings of an OTLP metrics request, its parts bounded first.
    fn otlp_readings(&self, payload: &[u8], format: Format) -> Result<Vec<RawReading>, Rejection> {
        let m = self.otlp.as_ref().ok_or_else(|| {
            Rejection::new(
                Reason::Undecodable,
                "an OTLP message needs an [otlp] mapping",
            )
        })?;
        let req = match format {
            Format::OtlpProto => {
                // Not for the walk (`decode_any`): bounded, then decoded whole.
                otlp_scan::check(payload)?;
                // One copy of the request; its strings are slices of it.
                let buf = prost::bytes::Bytes::copy_from_slice(payload);
                <otlp::ExportRequest as Message>::decode(buf).map_err(|e| {
                    Rejection::new(
                        Reason::Undecodable,
                        format!("ExportMetricsServiceRequest: {e}"),
                    )
                })?
            }
            _ => otlp_json::parse(payload).map_err(|f| match f {
                otlp_json::Failure::Over(r) => r,
                otlp_json::Failure::Json(e) => Rejection::new(
                    Reason::Undecodable,
                    format!("OTLP/JSON: {}", json_error(&e)),
                ),
            })?,
        };
        m.readings(&req)
    }

    /// A message must carry 1 to `max_readings_per_message` readings.
    fn check_count(&self, n: usize) -> Result<(), Rejection> {
        if n == 0 || n > self.limits.max_readings_per_message {
            return Err(Rejection::new(
                Reason::BatchSize,
                format!(
                    "{n} readings; allowed 1 to {}",
                    self.limits.max_readings_per_message
                ),
            ));
        }
        Ok(())
    }

    /// Check one decoded reading (the `i`th of its message).
    fn validate(&self, i: usize, raw: RawReading) -> Result<Reading, Rejection> {
        let parts = (
            raw.device_id.as_deref(),
            raw.stream.as_deref(),
            raw.value,
            raw.event_time_ms,
        );
        let r = self.validate_ref(i, parts, &raw.labels)?;
        let (stream_index, value, event_time_ms) = (r.stream_index, r.value, r.event_time_ms);
        Ok(Reading {
            device_id: raw.device_id.expect("validated"),
            stream: raw.stream.expect("validated"),
            stream_index,
            value,
            event_time_ms,
            labels: raw.labels,
        })
    }

    /// Check one decoded reading's parts — device id, stream, value, event
    /// time — and labels (the `i`th of its message).
    fn validate_ref<'a>(
        &self,
        i: usize,
        (device_id, stream, value, event_time_ms): RawParts<'a>,
        labels: &'a Labels,
    ) -> Result<ReadingRef<'a>, Rejection> {
        let device_id = device_id
            .filter(|d| !d.is_empty())
            .ok_or_else(|| missing("device_id", i))?;
        if device_id.len() > self.limits.max_device_id_bytes {
            return Err(Rejection::new(
                Reason::Oversize,
                format!(
                    "reading {i}: device_id longer than {} bytes",
                    self.limits.max_device_id_bytes
                ),
            ));
        }
        let stream = stream
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("stream", i))?;
        let value = value.ok_or_else(|| missing("value", i))?;
        let event_time_ms = event_time_ms.ok_or_else(|| missing("event_time_ms", i))?;
        if !value.is_finite() {
            return Err(Rejection::new(
                Reason::NotFinite,
                format!("reading {i}: value is NaN or infinite"),
            ));
        }
        let Some(stream_index) = self.streams.get(stream) else {
            // The stream name is operator metadata, not a private value.
            return Err(Rejection::new(
                Reason::UnknownStream,
                format!(
                    "reading {i}: stream {:?} is not declared",
                    truncate(stream, 64)
                ),
            ));
        };
        check_labels(i, labels)?;
        Ok(ReadingRef {
            device_id,
            stream,
            stream_index,
            value,
            event_time_ms,
            labels,
        })
    }
}

/// A reading's device id, stream, value and event time, as decoded.
type RawParts<'a> = (Option<&'a str>, Option<&'a str>, Option<f64>, Option<i64>);

/// What a message decodes to: one plain reading still to be read (and
/// validated), or validated readings, or an OTLP request's validated
/// readings as its walk found them.
enum Decoded<'a> {
    /// One plain `DeviceReading`, not read yet ([`Decoder::visit_plain`]
    /// reads it into a [`Found`] of its own).
    Plain(&'a [u8]),
    Many(Vec<Reading>),
    Found(Vec<Found<'a>>),
    /// Documents, with the mapping they are read through
    /// ([`Decoder::mapped_found`]).
    Docs(&'a Mapping, Vec<Value>),
    /// One document's leaves, read straight from its bytes by a projection
    /// (`AvroSchema::leaves`, `Described::leaves`), with the mapping they
    /// are read through.
    Leaves(&'a Mapping, Vec<crate::leaf::Leaf<'a>>),
}

/// Validated readings handed to `f` in order, borrowed; how many it took.
fn hand_over(
    found: &[Found<'_>],
    mut f: impl FnMut(usize, ReadingRef<'_>) -> Result<(), Rejection>,
) -> Result<usize, Rejection> {
    for (i, w) in found.iter().enumerate() {
        f(i, w.borrowed())?;
    }
    Ok(found.len())
}

/// Validated readings, owned.
fn owned(found: &[Found<'_>]) -> Vec<Reading> {
    found.iter().map(|w| w.borrowed().into_owned()).collect()
}

/// Bound a reading's labels and sort them by name (the rejection names the
/// label, never its value).
fn check_labels(i: usize, labels: &Labels) -> Result<(), Rejection> {
    if labels.len() > MAX_LABELS {
        return Err(Rejection::new(
            Reason::Oversize,
            format!("reading {i}: more than {MAX_LABELS} labels"),
        ));
    }
    for (name, value) in labels.iter() {
        if name.is_empty() || name.len() > MAX_LABEL_BYTES || value.len() > MAX_LABEL_BYTES {
            return Err(Rejection::new(
                Reason::Oversize,
                format!(
                    "reading {i}: label {:?}: names 1 to {MAX_LABEL_BYTES} bytes, values at most {MAX_LABEL_BYTES}",
                    truncate(name, MAX_LABEL_BYTES)
                ),
            ));
        }
    }
    Ok(())
}
