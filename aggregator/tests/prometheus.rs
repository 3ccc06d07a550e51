//! The Prometheus side with a real Prometheus (Debian's `prometheus`
//! package: server and promtool):
//!
//! - promtool checks the alert rules and the scrape configuration, and runs
//!   the rules' unit tests (`deploy/prometheus/alerts_test.yml`: each alert
//!   fires on the series it is for, and not before its `for`);
//! - a Prometheus server scrapes a running `fleetdp demo`, and every
//!   dashboard query and alert expression evaluates without error, the
//!   main ones with data; every rule evaluates healthily.
//!
//! Binaries: /usr/bin/prometheus and /usr/bin/promtool (tests/run.sh
//! installs them). Without them the tests say so and pass, unless
//! FLEETDP_REQUIRE_PROMETHEUS is set (tests/run.sh sets it).

use crate::harness;

use harness::{free_port, unique};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `/usr/bin/{name}`, or `None` (and a note) when it is not installed.
fn tool(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin").join(name);
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("FLEETDP_REQUIRE_PROMETHEUS").is_none(),
        "{} is missing (tests/run.sh installs Debian's prometheus)",
        p.display()
    );
    eprintln!(
        "{} not installed: skipped (tests/run.sh installs it)",
        p.display()
    );
    None
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_and_unit_tests_the_rules() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let dir = deploy().join("prometheus");
    run_ok(
        Command::new(&promtool)
            .args(["check", "rules", "alerts.yml"])
            .current_dir(&dir),
    );
    let out = run_ok(
        Command::new(&promtool)
            .args(["test", "rules", "alerts_test.yml"])
            .current_dir(&dir),
    );
    assert!(out.contains("SUCCESS"), "{out}");
    // The scrape configuration, with its rule file where this checkout has it.
    let tmp = std::env::temp_dir().join(unique("fleetdp-promtool"));
    std::fs::create_dir_all(&tmp).unwrap();
    let cfg = std::fs::read_to_string(dir.join("prometheus.yml"))
        .unwrap()
        .replace(
            "/etc/prometheus/alerts.yml",
            dir.join("alerts.yml").to_str().unwrap(),
        );
    std::fs::write(tmp.join("prometheus.yml"), cfg).unwrap();
    run_ok(
        Command::new(&promtool)
            .args(["check", "config"])
            .arg(tmp.join("prometheus.yml")),
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// GET over HTTP/1.0 (no chunked bodies): (status, body).
fn get(url: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, buf.split_once("\r\n\r\n")?.1.to_string()))
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Evaluate `q` now: the result vector (`Err`: Prometheus's error).
fn query(prom: &str, q: &str) -> Result<Vec<serde_json::Value>, String> {
    let (_, body) = get(&format!("{prom}/api/v1/query?query={}", encode(q))).ok_or("no answer")?;
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(body);
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(timeout: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// The queries (and variable queries) of a Grafana dashboard.
fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        // A datasource variable's query names a plugin, not PromQL.
        serde_json::Value::Object(m) if m.get("type").is_some_and(|t| t == "datasource") => {}
        serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| match (k.as_str(), x) {
            ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
            _ => walk(x, out),
        }),
        serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
        _ => {}
    }
}

/// The per-stream panels' queries of `fleetdp dashboard --config
/// deploy/demo.toml` (the rows it adds to the shipped dashboard).
fn generated_queries() -> Vec<String> {
    let out = harness::stdout_of(
        Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["dashboard", "--config"])
            .arg(deploy().join("demo.toml")),
    );
    let dash: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let mut all = Vec::new();
    walk(&dash["panels"], &mut all);
    let mut shipped = Vec::new();
    walk(
        &serde_json::from_str::<serde_json::Value>(
            &std::fs::read_to_string(deploy().join("grafana/fleetdp.json")).unwrap(),
        )
        .unwrap()["panels"],
        &mut shipped,
    );
    all.retain(|q| !shipped.contains(q));
    all
}

/// Every query of the Grafana dashboard (`$stream` set to a demo stream,
/// `$declared` to its grouped stream, `$group` and `$dim1`…`$dim4` to all;
/// Grafana's `label_values(m, l)` as the PromQL it stands for) and every
/// alert expression.
fn queries() -> (Vec<String>, Vec<String>) {
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(deploy().join("grafana/fleetdp.json")).unwrap(),
    )
    .unwrap();
    let mut dashboard = Vec::new();
    walk(&dash, &mut dashboard);
    let dashboard = dashboard
        .into_iter()
        .map(|q| {
            let q = q
                .replace("$stream", "cabin_temp_c")
                .replace("$declared", "battery_v")
                .replace("$group", ".*")
                .replace("$dim1", ".*")
                .replace("$dim2", ".*")
                .replace("$dim3", ".*")
                .replace("$dim4", ".*");
            match q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
            {
                Some(args) => {
                    let (metric, label) = args.rsplit_once(',').unwrap();
                    format!("group by ({}) ({metric})", label.trim())
                }
                None => q,
            }
        })
        .collect();
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy().join("prometheus/alerts.yml")).unwrap(),
    )
    .unwrap();
    let alerts = rules["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    (dashboard, alerts)
}

#[test]
fn a_real_prometheus_scrapes_the_demo_and_evaluates_every_query() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let (demo_port, prom_port) = (free_port(), free_port());
    let tmp = std::env::temp_dir().join(unique("fleetdp-prometheus"));
    std::fs::create_dir_all(&tmp).unwrap();
    let _demo = Kill(
        Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args([
                "demo",
                "--duration",
                "300s",
                "--round-seconds",
                "1",
                "--devices",
                "10000",
                "--listen",
            ])
            .arg(format!("127.0.0.1:{demo_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
         scrape_configs:\n  - job_name: fleetdp\n    static_configs:\n      - targets: [\"127.0.0.1:{demo_port}\"]\n",
        deploy().join("prometheus/alerts.yml").display()
    );
    std::fs::write(tmp.join("prometheus.yml"), config).unwrap();
    let log = std::fs::File::create(tmp.join("prometheus.log")).unwrap();
    let _prom = Kill(
        Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                tmp.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let prom = format!("http://127.0.0.1:{prom_port}");
    let mean = r#"fleetdp_release_value{stream="cabin_temp_c",statistic="mean"}"#;
    let fleet = r#"fleetdp_fleet_release_value{stream="cabin_temp_c",statistic="mean"}"#;
    // The grouped stream's groups carry their own labels, one pair per
    // dimension too (the dashboard's $dim1…$dim4).
    let by_group = r#"fleetdp_fleet_release_value{declared_stream="battery_v",group="firmware=4.1",dimension_1="firmware",value_1="4.1",statistic="mean"}"#;
    let scraped = wait_for(Duration::from_secs(120), || {
        query(&prom, mean).is_ok_and(|r| !r.is_empty())
            && query(&prom, fleet).is_ok_and(|r| !r.is_empty())
            && query(&prom, by_group).is_ok_and(|r| !r.is_empty())
            && query(&prom, "fleetdp_consumer_lag").is_ok_and(|r| !r.is_empty())
            && query(&prom, "rate(fleetdp_windows_released_total[1m])").is_ok_and(|r| !r.is_empty())
    });
    let log = || std::fs::read_to_string(tmp.join("prometheus.log")).unwrap_or_default();
    assert!(
        scraped,
        "Prometheus never saw the demo's releases; its log:\n{}",
        log()
    );
    assert_eq!(
        query(&prom, r#"up{job="fleetdp"}"#).unwrap()[0]["value"][1],
        "1",
        "the scrape target is up"
    );
    let (dashboard, alerts) = queries();
    assert!(dashboard.len() >= 8 && alerts.len() >= 6);
    for q in dashboard.iter().chain(&alerts) {
        if let Err(e) = query(&prom, q) {
            panic!("{q:?} does not evaluate: {e}");
        }
    }
    // The dashboard's panels of the demo's stream have data.
    for q in &dashboard {
        if q.contains("release_value") || q.contains("fleetdp_budget") {
            assert!(!query(&prom, q).unwrap().is_empty(), "{q:?} is empty");
        }
    }
    // The generated dashboard's stream panels evaluate, and the demo's
    // cabin temperature (released first) has data in each.
    let generated = generated_queries();
    assert!(generated.len() >= 10, "{generated:?}");
    for q in &generated {
        let r = query(&prom, q).unwrap_or_else(|e| panic!("{q:?} does not evaluate: {e}"));
        if q.contains("cabin_temp_c") {
            assert!(!r.is_empty(), "{q:?} is empty");
        }
    }
    // Every alert rule evaluates without error (health "ok").
    let healthy = wait_for(Duration::from_secs(30), || {
        get(&format!("{prom}/api/v1/rules")).is_some_and(|(_, body)| {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let rules: Vec<&serde_json::Value> = v["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            rules.len() >= 6 && rules.iter().all(|r| r["health"] == "ok")
        })
    });
    assert!(
        healthy,
        "a rule does not evaluate: {:?}",
        get(&format!("{prom}/api/v1/rules"))
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
