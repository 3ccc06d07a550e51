//! `kafka.properties` and `kafka.consumer_properties`: the raw librdkafka
//! properties, made safe to hand to every client.
//!
//! - Every key is rewritten under librdkafka's canonical name
//!   (`clients::names`), and two keys that are one property
//!   (`sasl.mechanism` and `sasl.mechanisms`, `linger.ms` and
//!   `queue.buffering.max.ms`) are refused: rdkafka applies properties in
//!   hash-map order, so with both the winner would differ from client to
//!   client (one authenticating with SCRAM, the next with PLAIN).
//! - Beside `[kafka.security]`, a security property in `kafka.properties`
//!   under any spelling is refused: security is set in one place. In
//!   `consumer_properties` it is refused always, since every client must
//!   authenticate the same way.
//! - `kafka.brokers` is the only source of the bootstrap list.
//! - A NUL byte in a key or value is refused naming the field.
//! - Finally librdkafka checks every property, so a setting this build
//!   cannot use fails at start naming the field, not mid-stream.

use super::security::SecurityConfig;
use crate::clients::names;
use anyhow::{bail, Result};
use std::collections::{BTreeMap, BTreeSet};

/// Security properties that only tune TLS's algorithms and are allowed in
/// `kafka.properties` beside `[kafka.security]`.
const TLS_TUNING: [&str; 3] = ["ssl.cipher.suites", "ssl.curves.list", "ssl.sigalgs.list"];

/// Whether librdkafka's property `canonical` decides how a client
/// connects or authenticates (transport, TLS material and checks, SASL).
pub(crate) fn is_security(canonical: &str) -> bool {
    canonical == "security.protocol"
        || [
            "ssl.",
            "ssl_",
            "sasl.",
            "enable.ssl.",
            "enable.sasl.",
            "https.",
        ]
        .iter()
        .any(|p| canonical.starts_with(p))
}

/// Rewrite `props`'s keys canonically, refusing two spellings of one
/// property, a NUL byte and the bootstrap list; `field` names the table.
fn canonicalize(
    field: &str,
    props: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, (String, String)>> {
    let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (k, v) in props {
        if k.contains('\0') || v.contains('\0') {
            bail!("{field}.{k:?}: holds a NUL byte");
        }
        let c = names::canonical(k);
        if c == "metadata.broker.list" {
            bail!("{field}.{k:?}: the brokers are kafka.brokers; remove it");
        }
        if let Some((first, _)) = out.get(c) {
            bail!(
                "{field}.{k:?}: librdkafka reads it as {c:?}, as it does {first:?}: one property set twice; keep one"
            );
        }
        out.insert(c.to_string(), (k.clone(), v.clone()));
    }
    Ok(out)
}

/// Check and merge the client properties (see the module doc): on
/// success `properties` holds `[kafka.security]`'s properties and the
/// raw ones, and both maps are keyed by canonical names.
pub(crate) fn merge(
    security: Option<&SecurityConfig>,
    properties: &mut BTreeMap<String, String>,
    consumer: &mut BTreeMap<String, String>,
) -> Result<()> {
    let raw = canonicalize("kafka.properties", properties)?;
    let raw_consumer = canonicalize("kafka.consumer_properties", consumer)?;
    for (c, (k, _)) in &raw_consumer {
        if is_security(c) {
            bail!(
                "kafka.consumer_properties.{k:?}: a security setting ({c}) for the consumer alone; every client must connect the same way: set it in [kafka.security] or kafka.properties"
            );
        }
    }
    let mut merged: BTreeMap<String, String> = raw
        .iter()
        .map(|(c, (_, v))| (c.clone(), v.clone()))
        .collect();
    let mut from_security = BTreeSet::new();
    if let Some(s) = security {
        let set = s.properties()?;
        for (c, (k, _)) in &raw {
            let spelled = if k == c {
                String::new()
            } else {
                format!(" (librdkafka reads it as {c:?})")
            };
            if set.contains_key(c) {
                bail!("kafka.properties.{k:?}{spelled}: also set by [kafka.security]; keep one");
            }
            if is_security(c) && !TLS_TUNING.contains(&c.as_str()) {
                bail!(
                    "kafka.properties.{k:?}{spelled}: a security setting beside [kafka.security]; set security in one place (move it into [kafka.security] or drop the table)"
                );
            }
        }
        for (k, v) in set {
            from_security.insert(k.clone());
            merged.insert(k, v);
        }
    }
    check(&merged, &raw, &from_security)?;
    *properties = merged;
    *consumer = raw_consumer.into_iter().map(|(c, (_, v))| (c, v)).collect();
    Ok(())
}

/// Have librdkafka check every property, naming the field it came from;
/// a refused value is never repeated (it may be a secret).
fn check(
    merged: &BTreeMap<String, String>,
    raw: &BTreeMap<String, (String, String)>,
    from_security: &BTreeSet<String>,
) -> Result<()> {
    let mut c = rdkafka::ClientConfig::new();
    for (k, v) in merged {
        c.set(k, v);
    }
    let Err(e) = c.create_native_config() else {
        return Ok(());
    };
    let rdkafka::error::KafkaError::ClientConfig(_, why, key, value) = &e else {
        bail!("kafka.properties: the client configuration was refused ({e})");
    };
    // librdkafka quotes the value it refuses, which may be a secret: the
    // quoted value is blanked, not every occurrence of its letters.
    let why = if value.is_empty() {
        why.clone()
    } else {
        why.replace(&format!("\"{value}\""), "<value>")
            .replace(&format!("'{value}'"), "<value>")
    };
    let field = if from_security.contains(key) {
        "kafka.security".to_string()
    } else {
        let spelled = raw.get(key).map(|(k, _)| k.as_str()).unwrap_or(key);
        format!("kafka.properties.{spelled:?}")
    };
    let hint = if why.contains("libcurl") {
        " (this FleetDP's librdkafka was built without libcurl, as its build warned: install Debian's \
         libcurl4-openssl-dev, run `cargo clean -p rdkafka-sys` and build again)"
    } else {
        ""
    };
    bail!("{field}: librdkafka refuses {key}: {why}{hint}");
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn validate(extra: &str) -> anyhow::Result<crate::config::Validated> {
        Config::parse(&super::super::security::tests::BASE.replace("SECURITY", extra))?.validate()
    }

    fn refused(extra: &str) -> String {
        format!("{:#}", validate(extra).unwrap_err())
    }

    const SCRAM: &str = "[kafka.security]\nprotocol = \"sasl_plaintext\"\nsasl_mechanism = \"SCRAM-SHA-256\"\nusername = \"u\"\npassword = \"p\"";

    /// Issue: `sasl.mechanism` is librdkafka's alias of
    /// `sasl.mechanisms`; beside `[kafka.security]` it was let through and
    /// some clients authenticated with PLAIN, sending the password in
    /// clear.
    #[test]
    fn an_alias_of_a_security_property_is_refused() {
        for (key, value) in [
            ("sasl.mechanism", "PLAIN"),
            ("sasl.mechanisms", "PLAIN"),
            ("security.protocol", "plaintext"),
            ("sasl.username", "other"),
            ("ssl.ca.pem", "x"),
            ("enable.ssl.certificate.verification", "false"),
            ("sasl.oauthbearer.client.credentials.client.secret", "x"),
        ] {
            let e = refused(&format!(
                "[kafka.properties]\n\"{key}\" = \"{value}\"\n{SCRAM}"
            ));
            assert!(
                e.starts_with(&format!("kafka.properties.\"{key}\"")),
                "{key}: {e}"
            );
        }
        // TLS tuning stays allowed.
        validate(
            "[kafka.properties]\n\"ssl.cipher.suites\" = \"ECDHE-RSA-AES256-GCM-SHA384\"\n[kafka.security]\nprotocol = \"ssl\"",
        )
        .unwrap();
    }

    #[test]
    fn two_spellings_of_one_property_are_refused() {
        let e = refused(
            "[kafka.properties]\n\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.mechanisms\" = \"SCRAM-SHA-256\"",
        );
        assert!(e.contains("one property set twice"), "{e}");
        let e = refused(
            "[kafka.properties]\n\"linger.ms\" = \"5\"\n\"queue.buffering.max.ms\" = \"7\"",
        );
        assert!(e.contains("one property set twice"), "{e}");
        let e = refused("[kafka.properties]\n\"bootstrap.servers\" = \"x:1\"");
        assert!(e.contains("the brokers are kafka.brokers"), "{e}");
    }

    #[test]
    fn the_consumer_cannot_connect_another_way() {
        for key in ["sasl.mechanism", "security.protocol", "ssl.ca.location"] {
            let e = refused(&format!("[kafka.consumer_properties]\n\"{key}\" = \"x\""));
            assert!(
                e.starts_with(&format!("kafka.consumer_properties.\"{key}\"")),
                "{e}"
            );
        }
    }

    /// Keys end up canonical, so a later setting of a property (a client
    /// role's own) replaces an earlier one whatever the hash order.
    #[test]
    fn keys_are_stored_under_librdkafka_s_names() {
        let v = validate(
            "[kafka.properties]\n\"linger.ms\" = \"5\"\n\"sasl.mechanism\" = \"PLAIN\"\n[kafka.consumer_properties]\n\"max.partition.fetch.bytes\" = \"65536\"",
        )
        .unwrap();
        let p = &v.config.kafka.properties;
        assert_eq!(p["queue.buffering.max.ms"], "5");
        assert_eq!(p["sasl.mechanisms"], "PLAIN");
        assert!(!p.contains_key("linger.ms") && !p.contains_key("sasl.mechanism"));
        assert_eq!(
            v.config.kafka.consumer_properties["fetch.message.max.bytes"],
            "65536"
        );
    }

    /// A refused value is blanked where librdkafka quotes it, not wherever
    /// its letters occur (`debug = "e"` garbled the message), and a NUL
    /// byte is named.
    #[test]
    fn refusals_name_the_field_and_read_cleanly() {
        let e = refused("[kafka.properties]\ndebug = \"e\"");
        assert!(e.contains("property \"debug\""), "{e}");
        assert!(e.starts_with("kafka.properties.\"debug\""), "{e}");
        let e = refused("[kafka.properties]\n\"client.id\" = \"a\\u0000b\"");
        assert!(
            e.contains("kafka.properties.\"client.id\": holds a NUL byte"),
            "{e}"
        );
    }
}
