//! `[kafka.security]`: how FleetDP reaches a cluster that needs TLS, mutual
//! TLS or SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with librdkafka's
//! OIDC client-credentials flow). Validated at start with errors that name
//! the field, then mapped to librdkafka properties merged into
//! `kafka.properties`, which every client FleetDP creates starts from
//! (consumer, producers, lag probe, restore and registry readers, the fleet
//! combiner, `tail`, `advise`). Raw `kafka.properties` keep working for
//! anything else; a security property set both ways, under any of
//! librdkafka's spellings, is refused (`super::properties`).
//!
//! Secrets (`password`, `key_password`, `oauthbearer.client_secret`) are
//! usually `${ENV}` or `${file:/path}` (`super::secrets`); `Debug` never
//! shows them.

use super::files;
use anyhow::{bail, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Largest CA bundle, certificate or key file.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// `kafka.security.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl Protocol {
    fn librdkafka(self) -> &'static str {
        match self {
            Protocol::Plaintext => "plaintext",
            Protocol::Ssl => "ssl",
            Protocol::SaslPlaintext => "sasl_plaintext",
            Protocol::SaslSsl => "sasl_ssl",
        }
    }
    fn tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }
    fn sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }
}

/// The `[kafka.security]` table.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    #[serde(default)]
    pub protocol: Protocol,
    /// CA bundle (PEM) that signed the brokers' certificates; absent: the
    /// system's trust store.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Passphrase of an encrypted `key_file`.
    pub key_password: Option<String>,
    /// Check that a broker's certificate names the host connected to
    /// (default true).
    #[serde(default = "yes")]
    pub verify_hostname: bool,
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`.
    pub sasl_mechanism: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub oauthbearer: Option<OauthConfig>,
}

/// `[kafka.security.oauthbearer]`: the OIDC client-credentials flow
/// (Confluent Cloud OAuth, MSK IAM through an OAuth endpoint).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OauthConfig {
    pub token_endpoint_url: String,
    pub client_id: String,
    pub client_secret: String,
    pub scope: Option<String>,
    /// SASL extensions, `key=value,key=value` (e.g. Confluent's
    /// `logicalCluster=lkc-…,identityPoolId=pool-…`).
    pub extensions: Option<String>,
}

fn yes() -> bool {
    true
}

impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("SecurityConfig")
            .field("protocol", &self.protocol)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("key_password", &hidden(&self.key_password))
            .field("verify_hostname", &self.verify_hostname)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field(
                "oauthbearer",
                &self.oauthbearer.as_ref().map(|o| {
                    format!(
                        "token_endpoint_url={} client_id={} client_secret=<redacted>",
                        o.token_endpoint_url, o.client_id
                    )
                }),
            )
            .finish()
    }
}

/// Mechanisms this build speaks.
const MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

impl SecurityConfig {
    /// Check the table and return the librdkafka properties it stands for.
    pub(crate) fn properties(&self) -> Result<BTreeMap<String, String>> {
        let mut p = BTreeMap::new();
        p.insert(
            "security.protocol".to_string(),
            self.protocol.librdkafka().to_string(),
        );
        let mut set = |k: &str, v: &str| {
            p.insert(k.to_string(), v.to_string());
        };
        self.tls(&mut set)?;
        self.sasl(&mut set)?;
        Ok(p)
    }

    /// The TLS settings: refused without TLS; with it, each file read and
    /// checked now, and the properties they stand for.
    fn tls(&self, set: &mut impl FnMut(&str, &str)) -> Result<()> {
        let f = "kafka.security";
        let tls_field = [
            ("ca_file", self.ca_file.is_some()),
            ("cert_file", self.cert_file.is_some()),
            ("key_file", self.key_file.is_some()),
            ("key_password", self.key_password.is_some()),
            ("verify_hostname", !self.verify_hostname),
        ];
        if !self.protocol.tls() {
            if let Some((name, _)) = tls_field.iter().find(|(_, given)| *given) {
                bail!(
                    "{f}.{name}: a TLS setting, but protocol = \"{}\" does not use TLS (use \"ssl\" or \"sasl_ssl\")",
                    self.protocol.librdkafka()
                );
            }
        }
        if self.protocol.tls() {
            for (name, path) in [
                ("ca_file", &self.ca_file),
                ("cert_file", &self.cert_file),
                ("key_file", &self.key_file),
            ] {
                if let Some(path) = path {
                    // Read once now: a missing or unreadable file is named
                    // here, not as a handshake failure later.
                    let field = format!("{f}.{name}");
                    if name == "key_file" {
                        files::check_private(&field, path)?;
                    }
                    let pem = files::read_text(&field, path, MAX_PEM_BYTES)?;
                    if !pem.contains("-----BEGIN ") {
                        bail!("{field}: {} holds no PEM block", path.display());
                    }
                }
            }
            match (&self.cert_file, &self.key_file) {
                (Some(_), None) => bail!("{f}.key_file: required with cert_file (mutual TLS)"),
                (None, Some(_)) => bail!("{f}.cert_file: required with key_file (mutual TLS)"),
                _ => {}
            }
            if self.key_password.is_some() && self.key_file.is_none() {
                bail!("{f}.key_password: given without key_file");
            }
            if let Some(ca) = &self.ca_file {
                set("ssl.ca.location", &ca.display().to_string());
            }
            if let (Some(c), Some(k)) = (&self.cert_file, &self.key_file) {
                set("ssl.certificate.location", &c.display().to_string());
                set("ssl.key.location", &k.display().to_string());
            }
            if let Some(pw) = &self.key_password {
                set("ssl.key.password", pw);
            }
            set(
                "ssl.endpoint.identification.algorithm",
                if self.verify_hostname {
                    "https"
                } else {
                    "none"
                },
            );
        }
        Ok(())
    }

    /// The SASL settings: refused without SASL; with it, the mechanism and
    /// its credentials.
    fn sasl(&self, set: &mut impl FnMut(&str, &str)) -> Result<()> {
        let f = "kafka.security";
        let sasl_fields = [
            ("sasl_mechanism", self.sasl_mechanism.is_some()),
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
            ("oauthbearer", self.oauthbearer.is_some()),
        ];
        if !self.protocol.sasl() {
            if let Some((name, _)) = sasl_fields.iter().find(|(_, given)| *given) {
                bail!(
                    "{f}.{name}: a SASL setting, but protocol = \"{}\" does not use SASL (use \"sasl_ssl\" or \"sasl_plaintext\")",
                    self.protocol.librdkafka()
                );
            }
            return Ok(());
        }
        let Some(mech) = &self.sasl_mechanism else {
            bail!(
                "{f}.sasl_mechanism: required with protocol = \"{}\" (one of {})",
                self.protocol.librdkafka(),
                MECHANISMS.join(", ")
            );
        };
        let mech = mech.to_ascii_uppercase();
        if mech == "GSSAPI" {
            bail!(
                "{f}.sasl_mechanism: GSSAPI (Kerberos) is not built into FleetDP; use SCRAM-SHA-512 or OAUTHBEARER (see docs/security.md)"
            );
        }
        if !MECHANISMS.contains(&mech.as_str()) {
            bail!(
                "{f}.sasl_mechanism: {mech:?} is not one of {}",
                MECHANISMS.join(", ")
            );
        }
        set("sasl.mechanisms", &mech);
        if mech == "OAUTHBEARER" {
            return self.oauthbearer(set);
        }
        if self.oauthbearer.is_some() {
            bail!("{f}.oauthbearer: only with sasl_mechanism = \"OAUTHBEARER\"");
        }
        let given = |v: &Option<String>| v.as_deref().filter(|x| !x.is_empty()).is_some();
        if !given(&self.username) {
            bail!("{f}.username: required with sasl_mechanism = \"{mech}\"");
        }
        if !given(&self.password) {
            bail!("{f}.password: required with sasl_mechanism = \"{mech}\" (e.g. \"${{SASL_PASSWORD}}\")");
        }
        set(
            "sasl.username",
            self.username.as_deref().unwrap_or_default(),
        );
        set(
            "sasl.password",
            self.password.as_deref().unwrap_or_default(),
        );
        Ok(())
    }

    /// OAUTHBEARER through an OIDC token endpoint (no username or
    /// password).
    fn oauthbearer(&self, set: &mut impl FnMut(&str, &str)) -> Result<()> {
        let f = "kafka.security";
        for (name, given) in [
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
        ] {
            if given {
                bail!("{f}.{name}: not used with OAUTHBEARER (set [kafka.security.oauthbearer])");
            }
        }
        let Some(o) = &self.oauthbearer else {
            bail!("{f}.oauthbearer: required with sasl_mechanism = \"OAUTHBEARER\" (token_endpoint_url, client_id, client_secret)");
        };
        for (name, v) in [
            ("token_endpoint_url", &o.token_endpoint_url),
            ("client_id", &o.client_id),
            ("client_secret", &o.client_secret),
        ] {
            if v.trim().is_empty() {
                bail!("{f}.oauthbearer.{name}: must not be empty");
            }
        }
        if !(o.token_endpoint_url.starts_with("https://")
            || o.token_endpoint_url.starts_with("http://"))
        {
            bail!("{f}.oauthbearer.token_endpoint_url: must be an http(s) URL");
        }
        set("sasl.oauthbearer.method", "oidc");
        set("sasl.oauthbearer.token.endpoint.url", &o.token_endpoint_url);
        set("sasl.oauthbearer.client.id", &o.client_id);
        set("sasl.oauthbearer.client.secret", &o.client_secret);
        if let Some(s) = &o.scope {
            set("sasl.oauthbearer.scope", s);
        }
        if let Some(x) = &o.extensions {
            set("sasl.oauthbearer.extensions", x);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::config::Config;

    pub(in crate::config) const BASE: &str = r#"
[kafka]
brokers = "b:9093"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
SECURITY
[privacy]
epsilon_per_device = 1.0
horizon = "24h"
[[stream]]
name = "temp"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 10
statistics = ["mean"]
"#;

    fn with(security: &str) -> anyhow::Result<crate::config::Validated> {
        Config::parse(&BASE.replace("SECURITY", security))?.validate()
    }

    fn pem(name: &str, mode: u32) -> String {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("fleetdp-security-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(name);
        std::fs::write(
            &p,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    }

    #[test]
    fn scram_over_tls_maps_to_librdkafka_and_hides_the_password() {
        std::env::set_var("FLEETDP_TEST_SASL_PASSWORD", "pa55-w0rd");
        let ca = pem("ca.pem", 0o644);
        let v = with(&format!(
            "[kafka.security]\nprotocol = \"sasl_ssl\"\nsasl_mechanism = \"scram-sha-512\"\nusername = \"fleetdp\"\npassword = \"${{FLEETDP_TEST_SASL_PASSWORD}}\"\nca_file = \"{ca}\""
        ))
        .unwrap();
        let p = &v.config.kafka.properties;
        assert_eq!(p["security.protocol"], "sasl_ssl");
        assert_eq!(p["sasl.mechanisms"], "SCRAM-SHA-512");
        assert_eq!(p["sasl.username"], "fleetdp");
        assert_eq!(p["sasl.password"], "pa55-w0rd");
        assert_eq!(p["ssl.ca.location"], ca);
        assert_eq!(p["ssl.endpoint.identification.algorithm"], "https");
        let shown = v.config.shown();
        assert!(!shown.contains("pa55-w0rd"), "{shown}");
        assert!(shown.contains("scram-sha-512"), "{shown}");
    }

    /// Issue: OAUTHBEARER's OIDC flow was refused by librdkafka at the
    /// first client ("not supported in this build: OAuth/OIDC depends on
    /// libcurl"), since the vendored libcurl was never found by librdkafka's
    /// configure. The whole configuration validates now, which has
    /// librdkafka check every property.
    #[test]
    fn this_build_speaks_oidc_tls_and_every_codec() {
        let text = BASE.replace(
            "SECURITY",
            "[kafka.properties]\n\"compression.type\" = \"zstd\"\n[kafka.security]\nprotocol = \"sasl_ssl\"\nsasl_mechanism = \"OAUTHBEARER\"\n[kafka.security.oauthbearer]\ntoken_endpoint_url = \"https://idp.example/token\"\nclient_id = \"fleetdp\"\nclient_secret = \"s3cret\"",
        );
        Config::parse(&text).unwrap().validate().unwrap();
        for codec in ["gzip", "snappy", "lz4", "zstd"] {
            let mut c = rdkafka::ClientConfig::new();
            c.set("compression.codec", codec);
            c.create_native_config().unwrap();
        }
    }

    /// A property librdkafka does not know, or cannot use in this build,
    /// fails validation naming it.
    #[test]
    fn a_property_librdkafka_refuses_fails_validation_by_name() {
        let text = BASE.replace(
            "SECURITY",
            "[kafka.properties]\n\"no.such.property\" = \"1\"",
        );
        let e = Config::parse(&text)
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("kafka.properties.\"no.such.property\": librdkafka refuses"),
            "{e}"
        );
        // A refused value is not repeated: it may be a secret.
        let text = BASE.replace(
            "SECURITY",
            "[kafka.properties]\n\"security.protocol\" = \"hunter2-secret\"",
        );
        let e = Config::parse(&text)
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("security.protocol") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn mutual_tls_and_oauthbearer_map_to_librdkafka() {
        let (cert, key) = (pem("client.pem", 0o644), pem("client.key", 0o600));
        let v = with(&format!(
            "[kafka.security]\nprotocol = \"ssl\"\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\nverify_hostname = false"
        ))
        .unwrap();
        let p = &v.config.kafka.properties;
        assert_eq!(p["security.protocol"], "ssl");
        assert_eq!(p["ssl.certificate.location"], cert);
        assert_eq!(p["ssl.key.location"], key);
        assert_eq!(p["ssl.endpoint.identification.algorithm"], "none");
        let v = with(
            "[kafka.security]\nprotocol = \"sasl_ssl\"\nsasl_mechanism = \"OAUTHBEARER\"\n[kafka.security.oauthbearer]\ntoken_endpoint_url = \"https://idp.example/token\"\nclient_id = \"fleetdp\"\nclient_secret = \"s3cret\"\nscope = \"kafka\"\nextensions = \"logicalCluster=lkc-1\"",
        )
        .unwrap();
        let p = &v.config.kafka.properties;
        assert_eq!(p["sasl.mechanisms"], "OAUTHBEARER");
        assert_eq!(p["sasl.oauthbearer.method"], "oidc");
        assert_eq!(p["sasl.oauthbearer.client.secret"], "s3cret");
        assert_eq!(p["sasl.oauthbearer.extensions"], "logicalCluster=lkc-1");
        assert!(!format!("{:?}", v.config).contains("s3cret"));
    }

    #[test]
    fn bad_security_settings_name_the_field() {
        let open_key = pem("open.key", 0o644);
        let cert = pem("c.pem", 0o644);
        let cases = [
            ("protocol = \"sasl_ssl\"", "kafka.security.sasl_mechanism: required"),
            (
                "protocol = \"sasl_ssl\"\nsasl_mechanism = \"GSSAPI\"\nusername = \"u\"\npassword = \"p\"",
                "GSSAPI (Kerberos) is not built",
            ),
            (
                "protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-1\"",
                "kafka.security.sasl_mechanism: \"SCRAM-SHA-1\" is not one of",
            ),
            (
                "protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\nusername = \"u\"",
                "kafka.security.password: required",
            ),
            (
                "protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\npassword = \"p\"",
                "kafka.security.username: required",
            ),
            (
                "protocol = \"sasl_ssl\"\nsasl_mechanism = \"OAUTHBEARER\"",
                "kafka.security.oauthbearer: required",
            ),
            (
                "protocol = \"plaintext\"\nca_file = \"/x.pem\"",
                "kafka.security.ca_file: a TLS setting",
            ),
            (
                "protocol = \"ssl\"\nusername = \"u\"",
                "kafka.security.username: a SASL setting",
            ),
            (
                "protocol = \"ssl\"\nca_file = \"/nonexistent/ca.pem\"",
                "kafka.security.ca_file",
            ),
            ("protocol = \"tls\"", "unknown variant"),
        ];
        for (table, want) in cases {
            let e = format!(
                "{:#}",
                with(&format!("[kafka.security]\n{table}")).unwrap_err()
            );
            assert!(e.contains(want), "{table}: {e}");
        }
        let e = format!(
            "{:#}",
            with(&format!(
                "[kafka.security]\nprotocol = \"ssl\"\ncert_file = \"{cert}\"\nkey_file = \"{open_key}\""
            ))
            .unwrap_err()
        );
        assert!(
            e.contains("kafka.security.key_file") && e.contains("mode 0644"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            with(&format!(
                "[kafka.security]\nprotocol = \"ssl\"\ncert_file = \"{cert}\""
            ))
            .unwrap_err()
        );
        assert!(
            e.contains("kafka.security.key_file: required with cert_file"),
            "{e}"
        );
        // The same property both ways.
        let e = format!(
            "{:#}",
            with("[kafka.properties]\n\"security.protocol\" = \"ssl\"\n[kafka.security]\nprotocol = \"ssl\"")
                .unwrap_err()
        );
        assert!(e.contains("kafka.properties.\"security.protocol\""), "{e}");
    }
}

#[cfg(test)]
mod documented {
    use crate::config::Config;

    /// Every `[kafka.security]` block of the manual's "Connecting to a
    /// secured cluster" (`docs/security.md`) parses and validates (with the
    /// files and variables it names made up).
    #[test]
    fn the_documented_blocks_validate() {
        let page = include_str!("../../../docs/security.md");
        let from = page
            .find("## Connecting to a secured cluster")
            .expect("docs/security.md has the section");
        let section = &page[from..from + page[from + 3..].find("\n## ").unwrap() + 3];
        let dir = std::env::temp_dir().join(format!("fleetdp-readme-sec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, mode) in [
            ("ca.pem", 0o644),
            ("service.cert", 0o644),
            ("service.key", 0o600),
            ("kafka_password", 0o600),
        ] {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.join(name);
            std::fs::write(&p, "-----BEGIN X-----\nAA==\n-----END X-----\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        for var in [
            "CONFLUENT_API_KEY",
            "CONFLUENT_API_SECRET",
            "OAUTH_CLIENT_SECRET",
            "EVENTHUBS_CONNECTION_STRING",
        ] {
            std::env::set_var(var, format!("made-up-{var}"));
        }
        let mut blocks = 0;
        for block in section.split("```toml\n").skip(1) {
            let block = &block[..block.find("```").unwrap()];
            let block = block
                .replace("/etc/fleetdp/", &format!("{}/", dir.display()))
                .replace("/run/secrets/", &format!("{}/", dir.display()));
            let text = super::tests::BASE.replace("SECURITY", &block);
            let v = Config::parse(&text)
                .and_then(|c| c.validate())
                .unwrap_or_else(|e| panic!("{block}\n{e:#}"));
            assert!(v.config.kafka.properties.contains_key("security.protocol"));
            blocks += 1;
        }
        assert_eq!(blocks, 5);
    }
}
