//! The pipeline over TLS and mutual TLS, configured through
//! `[kafka.security]`. tansu 0.6 serves no TLS, so each case runs a private
//! tansu that advertises a TLS-terminating front on loopback (Python's ssl
//! module, the test's own CA made with the openssl CLI) as its address:
//! every connection of every client goes through the front. The test's own
//! clients speak TLS too. The whole pipeline runs over it: releases, a dead
//! letter, a restart that restores state, fleet records.
//!
//! Controls: the mutual-TLS front refuses a handshake without a client
//! certificate; a pipeline that trusts another CA, or has no client
//! certificate for mutual TLS, fails at start naming `kafka.security`.
//!
//! Needs FLEETDP_TANSU (tests/run.sh sets it), `openssl` and a Python 3.

use crate::harness;

use harness::front::{fails_at_start, python, whole_pipeline, Fronted};
use harness::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const COUNT: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"count\"]";

/// The fronts (TLS mode here).
const FRONT: &str = include_str!("fronts.py");

fn sh(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `name`, and a certificate it signs for `cn` (with IP SAN 127.0.0.1).
fn certificates(dir: &Path, ca: &str, leaves: &[&str]) {
    let ca_key = format!("{ca}.key");
    let ca_pem = format!("{ca}.pem");
    sh(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca_pem,
            "-days",
            "1",
            "-subj",
            &format!("/CN={ca}"),
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    for leaf in leaves {
        let (key, csr, pem) = (
            format!("{leaf}.key"),
            format!("{leaf}.csr"),
            format!("{leaf}.pem"),
        );
        sh(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={leaf}"),
            ],
        );
        sh(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "1",
                "-extfile",
                "san.ext",
            ],
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join(&key), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

fn start(tansu: &std::ffi::OsStr, dir: &Path, client_ca: Option<&Path>) -> Fronted {
    Fronted::start(tansu, |port, upstream| {
        let mut c = Command::new(python());
        c.args(["-c", FRONT, "tls", &port.to_string(), &upstream.to_string()])
            .arg(dir.join("broker.pem"))
            .arg(dir.join("broker.key"))
            .arg(
                client_ca
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            );
        c
    })
}

/// Whether the broker answers a request through the front, with or
/// without a client certificate.
fn handshake(dir: &Path, port: u16, with_cert: bool) -> bool {
    let script = r#"
import socket, ssl, sys
port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
if cert:
    ctx.load_cert_chain(cert, key)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 5), server_hostname="127.0.0.1")
s.settimeout(5)
# ApiVersions v0, correlation id 1, no client id: the broker answers.
s.sendall(bytes.fromhex("0000000a00120000000000 01ffff".replace(" ", "")))
if len(s.recv(64)) < 8:
    sys.exit("no answer")
"#;
    let (cert, key) = match with_cert {
        true => (dir.join("fleetdp.pem"), dir.join("fleetdp.key")),
        false => (PathBuf::new(), PathBuf::new()),
    };
    Command::new(python())
        .args(["-c", script, &port.to_string()])
        .arg(dir.join("test-ca.pem"))
        .arg(cert)
        .arg(key)
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[test]
fn the_pipeline_runs_over_tls_and_mutual_tls() {
    let Some(tansu) = std::env::var_os("FLEETDP_TANSU").filter(|s| !s.is_empty()) else {
        eprintln!("FLEETDP_TANSU not set: skipped (tests/run.sh sets it)");
        return;
    };
    let dir = std::env::temp_dir().join(unique("fleetdp-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    certificates(&dir, "test-ca", &["broker", "fleetdp"]);
    certificates(&dir, "other-ca", &[]);
    let ca = dir.join("test-ca.pem");
    let tls_props = |with_cert: bool| {
        let mut p = vec![
            ("security.protocol".to_string(), "ssl".to_string()),
            ("ssl.ca.location".to_string(), ca.display().to_string()),
        ];
        if with_cert {
            p.push((
                "ssl.certificate.location".into(),
                dir.join("fleetdp.pem").display().to_string(),
            ));
            p.push((
                "ssl.key.location".into(),
                dir.join("fleetdp.key").display().to_string(),
            ));
        }
        p
    };
    let rt = runtime();
    rt.block_on(async {
        // Server-authenticated TLS.
        let front = start(&tansu, &dir, None);
        let mut broker = Broker::external(format!("127.0.0.1:{}", front.port));
        broker.properties = tls_props(false);
        let security = format!("[kafka.security]\nprotocol = \"ssl\"\nca_file = \"{}\"", ca.display());
        whole_pipeline(&broker, &security, "tls").await;
        // Control: trusting another CA, nothing gets through.
        let other = format!(
            "[kafka.security]\nprotocol = \"ssl\"\nca_file = \"{}\"",
            dir.join("other-ca.pem").display()
        );
        fails_at_start(&broker, &other, COUNT, "tls-wrong-ca", Duration::from_secs(30)).await;
        drop(front);

        // Mutual TLS: the front requires a certificate our CA signed.
        let front = start(&tansu, &dir, Some(&ca));
        assert!(handshake(&dir, front.port, true), "the mTLS front refused a good client");
        assert!(!handshake(&dir, front.port, false), "the mTLS front let a client without a certificate in");
        let mut broker = Broker::external(format!("127.0.0.1:{}", front.port));
        broker.properties = tls_props(true);
        let security = format!(
            "[kafka.security]\nprotocol = \"ssl\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"",
            ca.display(),
            dir.join("fleetdp.pem").display(),
            dir.join("fleetdp.key").display()
        );
        whole_pipeline(&broker, &security, "mtls").await;
        // Control: without its certificate FleetDP is refused and says
        // which setting to check.
        let no_cert = format!("[kafka.security]\nprotocol = \"ssl\"\nca_file = \"{}\"", ca.display());
        fails_at_start(&broker, &no_cert, COUNT, "mtls-no-cert", Duration::from_secs(30)).await;
        drop(front);
    });
    let _ = std::fs::remove_dir_all(&dir);
}
