//! The pipeline with SASL SCRAM (SHA-256 and SHA-512) and PLAIN, configured
//! through `[kafka.security]` with the password from the environment
//! (`${…}`). tansu 0.6 cannot authenticate, so a private tansu advertises a
//! loopback front (tests/fronts.py) that performs the SASL exchange
//! itself and refuses wrong credentials before forwarding anything.
//!
//! `fleetdp simulate --config` connects the same way.
//!
//! Controls: a wrong password is refused by the front, and the pipeline
//! then fails at start instead of staying up without a cluster; the
//! password never appears in the effective-configuration line.
//!
//! Needs FLEETDP_TANSU (tests/run.sh sets it) and a Python 3.

mod harness;

use harness::front::{python, Fronted};
use harness::*;
use std::process::Command;
use std::time::Duration;

const KEY: [u8; 32] = [6; 32];
const FRONT: &str = include_str!("fronts.py");
const USER: &str = "fleetdp";
const PASSWORD: &str = "correct horse battery staple";

fn front(tansu: &std::ffi::OsStr, mechanism: &str) -> Fronted {
    Fronted::start(tansu, |port, upstream| {
        let mut c = Command::new(python());
        c.args([
            "-c",
            FRONT,
            "sasl",
            &port.to_string(),
            &upstream.to_string(),
        ])
        .args([mechanism, USER, PASSWORD]);
        c
    })
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
            let f = front(&tansu, mechanism);
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
            let t = Topics::created(&broker, &format!("sasl-{}", mechanism.to_lowercase()), 1).await;
            let text = config_text(
                &broker,
                &t,
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                &security("FLEETDP_TEST_SASL_PASSWORD"),
                STREAM,
            );
            if mechanism == "SCRAM-SHA-256" {
                simulate_with(&broker, &text).await;
            }
            let config = fleetdp::config::Config::parse(&text).unwrap();
            assert!(!config.shown().contains(PASSWORD), "{}", config.shown());
            let (stop, c, h) = spawn_pipeline(config.validate().unwrap(), KEY);
            for i in 0..5 {
                let r = temp_reading(Some(0), &format!("sasl-{i}"), 20.0, now_ms());
                produce(&broker, &t.input, std::slice::from_ref(&r)).await;
            }
            let released = wait_until(Duration::from_secs(60), || count(&c.windows_released) >= 1).await;
            stop.send(true).unwrap();
            let _ = h.await;
            assert!(released, "{mechanism}: nothing released");
            let out = tokio::task::block_in_place(|| releases(&broker, &t.output));
            assert_eq!(out.len(), 1, "{mechanism}: releases read back");

            // Control: the wrong password is refused, and the service
            // fails at start rather than running without its cluster.
            let text = config_text(
                &broker,
                &t.regroup(),
                "epsilon_per_device = 1.0\nhorizon = \"24h\"",
                &security("FLEETDP_TEST_SASL_WRONG"),
                STREAM,
            );
            let v = fleetdp::config::Config::parse(&text).unwrap().validate().unwrap();
            let (stop, _c, h) = spawn_pipeline(v, KEY);
            let ended = tokio::time::timeout(Duration::from_secs(40), h).await;
            let _ = stop.send(true);
            match ended {
                Ok(r) => assert!(r.unwrap().is_err(), "{mechanism}: a wrong password started"),
                Err(_) => panic!("{mechanism}: a wrong password did not fail within 40 s"),
            }
        }
    });
}
