//! The pipeline with SASL SCRAM (SHA-256 and SHA-512), PLAIN and
//! OAUTHBEARER (OIDC client credentials), configured
//! through `[kafka.security]` with the password from the environment
//! (`${…}`). tansu 0.6 cannot authenticate, so a private tansu advertises a
//! loopback front (tests/fronts.py) that performs the SASL exchange
//! itself and refuses wrong credentials before forwarding anything.
//!
//! `fleetdp simulate --config` connects the same way.
//!
//! Controls: a wrong password (or client secret) is refused by the front, and the pipeline
//! then fails at start instead of staying up without a cluster; the
//! password never appears in the effective-configuration line.
//!
//! Needs FLEETDP_TANSU (tests/run.sh sets it) and a Python 3.

use crate::harness;

use harness::front::{fails_at_start, python, whole_pipeline, Fronted};
use harness::*;
use std::process::Command;
use std::time::Duration;

const FRONT: &str = include_str!("fronts.py");
const USER: &str = "fleetdp";
const PASSWORD: &str = "correct horse battery staple";

/// The SASL front for `mechanism`; with OAUTHBEARER, `token_port` serves
/// its token endpoint. Every mechanism a client asks for is appended to
/// [`record_of`]`(port)`.
fn front(tansu: &std::ffi::OsStr, mechanism: &str, token_port: Option<u16>) -> Fronted {
    Fronted::start(tansu, |port, upstream| {
        let mut c = Command::new(python());
        c.env("FRONT_RECORD", record_of(port));
        c.args([
            "-c",
            FRONT,
            "sasl",
            &port.to_string(),
            &upstream.to_string(),
        ])
        .args([mechanism, USER, PASSWORD]);
        c.args(token_port.map(|p| p.to_string()));
        c
    })
}

/// Where the front on `port` records the mechanisms asked of it.
fn record_of(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("fleetdp-sasl-front-{}-{port}", std::process::id()))
}

/// The mechanisms asked of the front on `port` so far.
fn asked(port: u16) -> Vec<String> {
    std::fs::read_to_string(record_of(port))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Issue: every client of the service (consumer, producers, lag
/// probe, restore readers, fleet combiner, `simulate`) asked the front
/// for the configured mechanism, and none for another: a stray spelling
/// once had some clients authenticate with PLAIN.
fn every_client_asked_for(port: u16, mechanism: &str) {
    let asked = asked(port);
    assert!(
        asked.len() >= 4,
        "only {} handshakes: {asked:?}",
        asked.len()
    );
    assert!(
        asked.iter().all(|m| m == mechanism),
        "asked for other mechanisms than {mechanism}: {asked:?}"
    );
}

/// Issue, through the binary: `sasl.mechanism = "PLAIN"` left in
/// `[kafka.properties]` beside `[kafka.security]` is refused at start
/// (exit 78, naming it), before any client asks the front for anything.
fn a_leftover_alias_never_reaches_the_front(broker: &Broker, port: u16) {
    let before = asked(port).len();
    let t = Topics::new("sasl-alias");
    let key = std::env::temp_dir().join(unique("fleetdp-sasl-key"));
    let hex: String = (0..32u8)
        .map(|i| format!("{:02x}", i.wrapping_mul(41) ^ 0x3c))
        .collect();
    std::fs::write(&key, hex).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let text = config_text(
        broker,
        &t,
        &format!("epsilon_per_device = 1.0\nhorizon = \"24h\"\nkey_file = \"{}\"", key.display()),
        &format!(
            "[kafka.properties]\n\"sasl.mechanism\" = \"PLAIN\"\n[kafka.security]\nprotocol = \"sasl_plaintext\"\nsasl_mechanism = \"SCRAM-SHA-256\"\nusername = \"{USER}\"\npassword = \"${{FLEETDP_TEST_SASL_PASSWORD}}\""
        ),
        STREAM,
    );
    let file = std::env::temp_dir().join(unique("fleetdp-sasl-alias.toml"));
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["run", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("kafka.properties.\"sasl.mechanism\""), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");
    assert_eq!(asked(port).len(), before, "a client reached the front");
}

const STREAM: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"count\", \"mean\"]";

/// `fleetdp simulate --config` connects with the configuration's security
/// (it used to take `--brokers` only).
async fn simulate_with(broker: &Broker, config_text: &str) {
    let topic = unique("sasl-sim");
    broker.create_topics(&[(&topic, 1)]).await;
    let dir = std::env::temp_dir().join(unique("fleetdp-sasl-sim"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fleetdp.toml");
    std::fs::write(&file, config_text).unwrap();
    let status = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["simulate", "--config"])
            .arg(&file)
            .args([
                "--topic",
                &topic,
                "--messages",
                "5",
                "--rate",
                "0",
                "--devices",
                "5",
                // The test's stream ("temp") is not one the simulator makes.
                "--streams",
                "cabin_temp_c",
            ])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    });
    assert!(status.success(), "simulate --config failed");
    let got = tokio::task::block_in_place(|| read_all(broker, &topic));
    assert!(
        !got.is_empty(),
        "simulate wrote nothing through the SASL front"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The whole pipeline through `broker` with the security `security(var)`
/// makes, the secret read from the environment variable `var`: the right
/// one (`good`) runs it ([`whole_pipeline`]) and never shows in the
/// effective configuration; the wrong one (`wrong`) fails at start instead
/// of staying up without its cluster.
async fn authenticated_round(
    broker: &Broker,
    label: &str,
    security: impl Fn(&str) -> String,
    (good, wrong): (&str, &str),
    simulate: bool,
) {
    let plan = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
    let secret = std::env::var(good).unwrap();
    let shown = fleetdp::config::Config::parse(&config_text(
        broker,
        &Topics::new("shown"),
        plan,
        &security(good),
        STREAM,
    ))
    .unwrap()
    .shown();
    assert!(!shown.contains(&secret), "{shown}");
    if simulate {
        let t = Topics::new("sim");
        simulate_with(
            broker,
            &config_text(broker, &t, plan, &security(good), STREAM),
        )
        .await;
    }
    whole_pipeline(broker, &security(good), &format!("sasl-{label}")).await;

    // Control: the wrong secret is refused, and the service fails at
    // start rather than running without its cluster.
    let name = format!("sasl-{label}-wrong");
    fails_at_start(
        broker,
        &security(wrong),
        STREAM,
        &name,
        Duration::from_secs(40),
    )
    .await;
}

#[test]
fn the_pipeline_authenticates_with_scram_and_plain() {
    let Some(tansu) = std::env::var_os("FLEETDP_TANSU").filter(|s| !s.is_empty()) else {
        eprintln!("FLEETDP_TANSU not set: skipped (tests/run.sh sets it)");
        return;
    };
    std::env::set_var("FLEETDP_TEST_SASL_PASSWORD", PASSWORD);
    std::env::set_var("FLEETDP_TEST_SASL_WRONG", "Tr0ub4dor&3");
    let rt = runtime();
    rt.block_on(async {
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
            let f = front(&tansu, mechanism, None);
            let mut broker = Broker::external(format!("127.0.0.1:{}", f.port));
            broker.properties = vec![
                ("security.protocol".into(), "sasl_plaintext".into()),
                ("sasl.mechanisms".into(), mechanism.into()),
                ("sasl.username".into(), USER.into()),
                ("sasl.password".into(), PASSWORD.into()),
            ];
            let security = |var: &str| {
                format!(
                    "[kafka.security]\nprotocol = \"sasl_plaintext\"\nsasl_mechanism = \"{mechanism}\"\nusername = \"{USER}\"\npassword = \"${{{var}}}\""
                )
            };
            authenticated_round(
                &broker,
                &mechanism.to_lowercase(),
                security,
                ("FLEETDP_TEST_SASL_PASSWORD", "FLEETDP_TEST_SASL_WRONG"),
                mechanism == "SCRAM-SHA-256",
            )
            .await;
            every_client_asked_for(f.port, mechanism);
            if mechanism == "SCRAM-SHA-256" {
                a_leftover_alias_never_reaches_the_front(&broker, f.port);
            }
        }
    });
}

/// OAUTHBEARER through librdkafka's OIDC client-credentials flow: FleetDP
/// fetches a token from the front's token endpoint with the client id and
/// secret and presents it; the front accepts only tokens it issued. The
/// wrong client secret gets no token (HTTP 401) and the service fails at
/// start.
#[test]
fn the_pipeline_authenticates_with_oauthbearer_client_credentials() {
    let Some(tansu) = std::env::var_os("FLEETDP_TANSU").filter(|s| !s.is_empty()) else {
        eprintln!("FLEETDP_TANSU not set: skipped (tests/run.sh sets it)");
        return;
    };
    std::env::set_var("FLEETDP_TEST_OAUTH_SECRET", PASSWORD);
    std::env::set_var("FLEETDP_TEST_OAUTH_WRONG", "Tr0ub4dor&3");
    let token_port = free_port();
    let url = format!("http://127.0.0.1:{token_port}/token");
    let rt = runtime();
    rt.block_on(async {
        let f = front(&tansu, "OAUTHBEARER", Some(token_port));
        let mut broker = Broker::external(format!("127.0.0.1:{}", f.port));
        broker.properties = vec![
            ("security.protocol".into(), "sasl_plaintext".into()),
            ("sasl.mechanisms".into(), "OAUTHBEARER".into()),
            ("sasl.oauthbearer.method".into(), "oidc".into()),
            ("sasl.oauthbearer.token.endpoint.url".into(), url.clone()),
            ("sasl.oauthbearer.client.id".into(), USER.into()),
            ("sasl.oauthbearer.client.secret".into(), PASSWORD.into()),
        ];
        let security = |var: &str| {
            format!(
                "[kafka.security]\nprotocol = \"sasl_plaintext\"\nsasl_mechanism = \"OAUTHBEARER\"\n[kafka.security.oauthbearer]\ntoken_endpoint_url = \"{url}\"\nclient_id = \"{USER}\"\nclient_secret = \"${{{var}}}\"\nscope = \"kafka\""
            )
        };
        authenticated_round(
            &broker,
            "oauthbearer",
            security,
            ("FLEETDP_TEST_OAUTH_SECRET", "FLEETDP_TEST_OAUTH_WRONG"),
            true,
        )
        .await;
        every_client_asked_for(f.port, "OAUTHBEARER");
    });
}
