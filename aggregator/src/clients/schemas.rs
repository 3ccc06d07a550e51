//! Writers' schemas from a Confluent-compatible Schema Registry, for framed
//! Avro input (`[input] schema_registry_url`): before a message is decoded,
//! the schema its frame names is fetched once (`GET /schemas/ids/{id}`) and
//! held by the decoder for the rest of the run.
//!
//! Bounds (docs/configuration.md, limits): at most [`MAX_SCHEMAS`] ids are held (found or
//! refused); a response is at most [`MAX_SCHEMA_BYTES`]; a request times out
//! after [`FETCH_TIMEOUT`]. Every definite answer that cannot be used — an
//! id the registry does not have (404), another 4xx, an answer larger than
//! the bound, one that is not a schema, a schema that is not Avro or does
//! not parse — and ids past the bound are held as refusals: their messages
//! are dead-lettered naming the id and the reason.
//! A registry that cannot be reached (connection refused, timeout, 5xx) is
//! retried with backoff up to [`RETRY_MAX`] while the loop waits — nothing
//! is dead-lettered for an outage, as for the broker's.

use anyhow::{anyhow, bail, Context as _, Result};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::{Request, StatusCode, Uri};
use std::time::Duration;

/// Most schema ids held per run.
pub const MAX_SCHEMAS: usize = 1_000;
/// Largest registry response read (bytes).
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// One request's time limit.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between retries while the registry is unreachable.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// A registry's base address (`http://host:port[/prefix]`).
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    host: String,
    port: u16,
    prefix: String,
}

/// What one fetch found.
#[derive(Debug)]
enum Fetched {
    /// The schema (or why it cannot be used): held for the run.
    Held(std::result::Result<ingest::AvroSchema, String>),
    /// The registry could not answer; try again.
    Unreachable(String),
}

impl SchemaRegistry {
    /// Parse and check `url` (`input.schema_registry_url`).
    pub fn parse(url: &str) -> Result<SchemaRegistry> {
        let field = "input.schema_registry_url";
        let uri: Uri = url
            .parse()
            .map_err(|e| anyhow!("{field}: {url:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => bail!("{field}: https is not supported; reach the registry over http (e.g. a local proxy)"),
            _ => bail!("{field}: {url:?} must start with http://"),
        }
        let host = uri
            .host()
            .ok_or_else(|| anyhow!("{field}: {url:?} has no host"))?
            .to_string();
        if uri.query().is_some() {
            bail!("{field}: {url:?} must not carry a query");
        }
        Ok(SchemaRegistry {
            host,
            port: uri.port_u16().unwrap_or(80),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// `GET {prefix}/schemas/ids/{id}`: status and body (`Err`: a body over
    /// [`MAX_SCHEMA_BYTES`], announced or read).
    async fn get(&self, id: u32) -> Result<(StatusCode, std::result::Result<Bytes, String>)> {
        let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("connecting to {}:{}", self.host, self.port))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        let conn = tokio::spawn(conn);
        let req = Request::get(format!("{}/schemas/ids/{id}", self.prefix))
            .header(hyper::header::HOST, format!("{}:{}", self.host, self.port))
            .header(
                hyper::header::ACCEPT,
                "application/vnd.schemaregistry.v1+json, application/json",
            )
            .body(Empty::<Bytes>::new())?;
        let res = sender.send_request(req).await?;
        let status = res.status();
        let too_large = |n: String| format!("an answer larger than {MAX_SCHEMA_BYTES} bytes ({n})");
        let announced = res
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(n) = announced.filter(|&n| n > MAX_SCHEMA_BYTES as u64) {
            conn.abort();
            return Ok((status, Err(too_large(format!("{n} announced")))));
        }
        let body = match Limited::new(res.into_body(), MAX_SCHEMA_BYTES)
            .collect()
            .await
        {
            Ok(b) => Ok(b.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large("read".into())),
            Err(e) => return Err(anyhow!("reading the response: {e}")),
        };
        conn.abort();
        Ok((status, body))
    }

    /// One attempt at schema `id`.
    async fn fetch(&self, id: u32) -> Fetched {
        let (status, body) = match tokio::time::timeout(FETCH_TIMEOUT, self.get(id)).await {
            Err(_) => return Fetched::Unreachable(format!("no answer within {FETCH_TIMEOUT:?}")),
            Ok(Err(e)) => return Fetched::Unreachable(format!("{e:#}")),
            Ok(Ok(r)) => r,
        };
        if status == StatusCode::NOT_FOUND {
            return Fetched::Held(Err("not found in the registry".into()));
        }
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Fetched::Unreachable(format!("HTTP {status}"));
        }
        if !status.is_success() {
            return Fetched::Held(Err(format!("the registry answered HTTP {status}")));
        }
        match body {
            Ok(body) => Fetched::Held(parse_answer(&body, id)),
            Err(why) => Fetched::Held(Err(why)),
        }
    }

    /// Make sure the decoder holds the writer's schema of `payload`'s frame
    /// before it is decoded: fetched (retrying while the registry cannot be
    /// reached, until `stop`), or a refusal held for the id. Returns false
    /// when stopped while waiting.
    pub async fn ensure(
        &self,
        decoder: &mut ingest::Decoder,
        payload: &[u8],
        content_type: Option<&str>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> bool {
        let Some(id) = decoder.avro_schema_needed(payload, content_type) else {
            return true;
        };
        if decoder.avro_schemas_held() >= MAX_SCHEMAS {
            decoder.add_avro_schema(
                id,
                Err(format!("more than {MAX_SCHEMAS} schema ids in one run")),
            );
            return true;
        }
        let mut wait = Duration::from_millis(500);
        loop {
            match self.fetch(id).await {
                Fetched::Held(schema) => {
                    match &schema {
                        Ok(_) => tracing::info!(schema_id = id, "fetched an Avro schema"),
                        Err(why) => {
                            tracing::warn!(schema_id = id, reason = %why, "schema refused; its messages are dead-lettered")
                        }
                    }
                    decoder.add_avro_schema(id, schema);
                    return true;
                }
                Fetched::Unreachable(why) => {
                    tracing::warn!(schema_id = id, error = %why, retry_in = ?wait, "schema registry unreachable; waiting");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.changed() => return false,
                    }
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

/// A `/schemas/ids/{id}` answer: `{"schema": "…", "schemaType": "AVRO"}`
/// (no `schemaType` means Avro).
fn parse_answer(body: &[u8], id: u32) -> std::result::Result<ingest::AvroSchema, String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        schema: String,
        #[serde(rename = "schemaType", default)]
        schema_type: Option<String>,
    }
    let a: Answer = serde_json::from_slice(body)
        .map_err(|e| format!("the registry's answer is not a schema: {e}"))?;
    match a.schema_type.as_deref() {
        None | Some("AVRO") => ingest::AvroSchema::new(&a.schema, Some(id)),
        Some("PROTOBUF") => Err("a PROTOBUF schema: Protobuf schemas are not fetched from the registry; \
                                 declare the topic's descriptor set (input.protobuf_descriptor_set)"
            .into()),
        Some(other) => Err(format!("a {other} schema, not Avro")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_naming_the_field() {
        let r = SchemaRegistry::parse("http://127.0.0.1:8081/api/").unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.prefix.as_str()),
            ("127.0.0.1", 8081, "/api")
        );
        assert_eq!(SchemaRegistry::parse("http://registry").unwrap().port, 80);
        for bad in [
            "https://r:8081",
            "r:8081",
            "ftp://r",
            "http://r/?a=1",
            "not a url",
        ] {
            let e = SchemaRegistry::parse(bad).unwrap_err().to_string();
            assert!(e.contains("input.schema_registry_url"), "{bad}: {e}");
        }
    }

    #[test]
    fn answers_are_parsed() {
        let body = serde_json::json!({ "schema": ingest::EXAMPLE_AVRO_SCHEMA }).to_string();
        assert_eq!(
            parse_answer(body.as_bytes(), 3).unwrap().name(),
            "acme.v1.Telemetry"
        );
        let proto = r#"{"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"}"#;
        let e = parse_answer(proto.as_bytes(), 3).unwrap_err();
        assert!(
            e.contains("PROTOBUF") && e.contains("input.protobuf_descriptor_set"),
            "{e}"
        );
        let json = r#"{"schema": "{}", "schemaType": "JSON"}"#;
        assert!(parse_answer(json.as_bytes(), 3)
            .unwrap_err()
            .contains("a JSON schema, not Avro"));
        assert!(parse_answer(b"<html>", 3)
            .unwrap_err()
            .contains("not a schema"));
        let bad = r#"{"schema": "{\"type\": \"nope\"}"}"#;
        assert!(parse_answer(bad.as_bytes(), 3)
            .unwrap_err()
            .contains("Avro"));
    }
}
