//! deploy/ stays true to the service: every metric the Grafana dashboard and
//! the Prometheus alert rules name is in a real `/metrics` scrape of a
//! running pipeline; the HTTP endpoints answer; the compose file and the
//! Kubernetes manifests are structurally consistent (files they mount exist,
//! configurations they carry validate, probes hit /healthz and /readyz).

use crate::harness;

use fleetdp::config::Config;
use fleetdp::sim::{FleetSpec, Signal};
use harness::schema::schema_errors;
use harness::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `fleetdp_*` metric names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut cur = String::new();
    let mut quoted = false;
    for ch in expr.chars().chain(std::iter::once(' ')) {
        if ch == '"' {
            quoted = !quoted;
        }
        if !quoted && (ch.is_ascii_alphanumeric() || ch == '_' || ch == ':') {
            cur.push(ch);
        } else {
            if cur.starts_with("fleetdp_") {
                out.insert(cur.clone());
            }
            cur.clear();
        }
    }
    out
}

fn exprs_in_json(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        // A datasource variable's query names a plugin, not PromQL.
        serde_json::Value::Object(m) if m.get("type").is_some_and(|t| t == "datasource") => {}
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs_in_json(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| exprs_in_json(x, out)),
        _ => {}
    }
}

/// What [`scrape`] read from a running pipeline.
struct Scrape {
    /// Sample names on `/metrics`.
    names: BTreeSet<String>,
    /// The `/metrics` text.
    text: String,
    /// `/api/status`.
    status: serde_json::Value,
}

/// One scrape per test binary (a pipeline run each is slow).
fn scraped() -> &'static Scrape {
    static ONCE: std::sync::OnceLock<Scrape> = std::sync::OnceLock::new();
    ONCE.get_or_init(scrape)
}

/// A scrape of a pipeline that released windows, dead-lettered bad input
/// and measured its lag; also checks the other endpoints.
fn scrape() -> Scrape {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("deploy");
        broker
            .create_topics(&[(&t.input, 2), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let stream = r#"
[[stream]]
name = "cabin_temp_c"
lower = -20.0
upper = 60.0
resolution = 0.1
window_size = 20
max_windows_per_device = 1000
statistics = ["mean", "histogram", "quantiles"]
histogram_edges = [-20, 0, 20, 40, 60]
quantiles = [0.5]
running_share = 0.2
device_alarm_share = 0.05
budget_share = 0.5
unit = "°C"
"#;
        let v = config(
            &broker,
            &t,
            "epsilon_per_device = 2.4\nhorizon = \"24h\"",
            "",
            stream,
        );
        let msgs = fleet_messages(
            FleetSpec {
                devices: 50,
                signals: vec![Signal::CabinTemp],
                bad_fraction: 0.05,
                ..FleetSpec::default()
            },
            1000,
        );
        produce(&broker, &t.input, &msgs).await;
        let p =
            fleetdp::pipeline::Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes([5; 32]));
        let state = std::sync::Arc::new(fleetdp::http::HttpState {
            metrics: fleetdp::http::recorder().unwrap(),
            board: p.board.clone(),
            config: p.config(),
            counters: p.counters.clone(),
            review: fleetdp::report::review_page(
                &fleetdp::report::PlanReport::new(&p.config()),
                &p.config(),
            ),
        });
        let addr = fleetdp::http::serve("127.0.0.1:0", state).await.unwrap();
        let base = format!("http://{addr}");
        let (healthz, readyz_before) = tokio::task::block_in_place(|| {
            (
                http_get(&format!("{base}/healthz")),
                http_get(&format!("{base}/readyz")),
            )
        });
        assert_eq!(healthz.map(|r| r.0), Some(200));
        assert_eq!(
            readyz_before.map(|r| r.0),
            Some(503),
            "not ready before any assignment"
        );
        let counters = p.counters.clone();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let h = tokio::spawn(async move { p.run(rx, fleetdp::pipeline::Options::default()).await });
        assert!(
            wait_until(Duration::from_secs(120), || counters
                .messages
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1000)
            .await
        );
        // Ready once the lag probe (every 5 s) has seen the partitions caught up.
        let ready = {
            let mut ok = false;
            for _ in 0..60 {
                if tokio::task::block_in_place(|| http_get(&format!("{base}/readyz"))).map(|r| r.0)
                    == Some(200)
                {
                    ok = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            ok
        };
        assert!(ready, "/readyz never turned ready");
        let (metrics, page, status) = tokio::task::block_in_place(|| {
            (
                http_get(&format!("{base}/metrics")).unwrap(),
                http_get(&format!("{base}/")).unwrap(),
                http_get(&format!("{base}/api/status")).unwrap(),
            )
        });
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        assert_eq!(metrics.0, 200);
        assert!(page.1.contains("<title>FleetDP status</title>"));
        let s: serde_json::Value = serde_json::from_str(&status.1).unwrap();
        assert_eq!(s["streams"][0]["name"], "cabin_temp_c");
        assert!(s["streams"][0]["series"]["mean"]
            .as_array()
            .is_some_and(|a| !a.is_empty()));
        Scrape {
            names: metrics
                .1
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
                .collect(),
            text: metrics.1,
            status: s,
        }
    })
}

/// A sample name's metric family (`x_bucket` of histogram `x` is `x`).
fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .filter(|f| fleetdp::telemetry::METRICS.contains(f))
        .unwrap_or(name)
}

#[test]
fn dashboard_and_alert_rules_name_only_exported_metrics() {
    let exported = &scraped().names;
    for must in [
        "fleetdp_release_value",
        "fleetdp_consumer_lag",
        "fleetdp_dead_letters_total",
        "fleetdp_budget_remaining_per_horizon",
    ] {
        assert!(
            exported.contains(must),
            "{must} is not exported: {exported:?}"
        );
    }
    // Grafana.
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(deploy().join("grafana/fleetdp.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    exprs_in_json(&dash, &mut exprs);
    assert!(exprs.len() >= 8, "the dashboard has queries");
    // Prometheus rules.
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy().join("prometheus/alerts.yml")).unwrap(),
    )
    .unwrap();
    let mut alerts = BTreeSet::new();
    for g in rules["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            alerts.insert(r["alert"].as_str().unwrap().to_string());
            exprs.push(r["expr"].as_str().unwrap().to_string());
        }
    }
    for a in [
        "FleetDPDown",
        "FleetDPConsumerLag",
        "FleetDPDeadLetterRate",
        "FleetDPStreamStalled",
        "FleetDPBudgetExhausted",
        "FleetDPKafkaErrors",
        "FleetDPInputSilent",
        "FleetDPNotReady",
        "FleetDPNoFleetWriter",
        "FleetDPAbsent",
    ] {
        assert!(alerts.contains(a), "alert {a} missing");
    }
    for e in &exprs {
        for name in metric_names(e) {
            assert!(
                exported.contains(&name),
                "{name} (in {e:?}) is not exported by the service"
            );
            assert!(
                fleetdp::telemetry::METRICS.contains(&family(&name)),
                "{name} (in {e:?}) is not in the service's list of metrics (telemetry::METRICS)"
            );
        }
    }
    // What the service exports is what its one list names.
    for name in exported {
        let family = family(name);
        assert!(
            !family.starts_with("fleetdp_") || fleetdp::telemetry::METRICS.contains(&family),
            "{name} is exported but not in telemetry::METRICS"
        );
    }
}

/// Issue: no family on `/metrics` had `# HELP`, there were no process
/// metrics, and plan figures showed float dust (`4.800000000000001`).
#[test]
fn metrics_follow_the_exposition_conventions() {
    let text = &scraped().text;
    let mut helped = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (family, help) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(!help.trim().is_empty(), "empty help: {line}");
            helped.insert(family.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let family = rest.split(' ').next().unwrap();
            assert!(
                helped.contains(family),
                "{family} has no # HELP before its # TYPE"
            );
        }
    }
    for process in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            scraped().names.contains(process),
            "{process} is not exported"
        );
    }
    // Caught up at the scrape: the readiness gauge says so.
    assert!(text.contains("\nfleetdp_ready 1\n"), "{text}");
    // No value carries float dust: 15 or more significant digits (a
    // millisecond timestamp in seconds has 13; sums of latencies are the
    // recorder's own and left alone).
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        if name.ends_with("_sum") || name.starts_with("process_") {
            continue;
        }
        let value = line.rsplit(' ').next().unwrap();
        let digits = value
            .split(['e', 'E'])
            .next()
            .unwrap()
            .chars()
            .filter(char::is_ascii_digit)
            .collect::<String>();
        let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
        assert!(significant <= 14, "float dust: {line}");
    }
}

/// `/api/status` is what its shipped JSON Schema describes, and the schema
/// refuses a field it does not name; `budget_share` is the share, not ε.
#[test]
fn api_status_matches_its_schema() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../proto/schema/status.schema.json")).unwrap();
    let status = &scraped().status;
    let stream = &status["streams"][0];
    assert_eq!(stream["budget_share"], 0.5, "{stream}");
    // 2.4 × 0.5, without float dust.
    assert_eq!(stream["budget_per_horizon"], 1.2, "{stream}");
    assert_eq!(status["ready"], true);
    assert_eq!(status["not_ready"], serde_json::Value::Null);
    let mut drifted = status.clone();
    drifted["streams"][0]["epsilon"] = 1.into();
    let Some(errors) = schema_errors(&schema, &[status.clone(), drifted]) else {
        return;
    };
    assert!(errors[0].is_empty(), "{:?} in {status}", errors[0]);
    assert!(
        errors[1].iter().any(|e| e.contains("epsilon")),
        "{errors:?}"
    );
}

/// Issue: the dashboard named a datasource uid (an import into a
/// Grafana whose Prometheus has another uid broke every panel), its band
/// fill targeted a refId where Grafana matches a display name, windows/s
/// lay flat at 0 on the messages/s axis, and no value panel said its unit.
#[test]
fn the_dashboard_imports_anywhere_and_reads_right() {
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(deploy().join("grafana/fleetdp.json")).unwrap(),
    )
    .unwrap();
    let vars = dash["templating"]["list"].as_array().unwrap();
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "no datasource variable"
    );
    fn datasources(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
        match v {
            serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| {
                if k == "datasource" {
                    out.push(x.clone());
                } else {
                    datasources(x, out);
                }
            }),
            serde_json::Value::Array(a) => a.iter().for_each(|x| datasources(x, out)),
            _ => {}
        }
    }
    let mut used = Vec::new();
    datasources(&dash, &mut used);
    assert!(!used.is_empty());
    for ds in &used {
        assert_eq!(ds["uid"], "${datasource}", "a fixed datasource: {ds}");
    }
    // The unit variable reads a label the service exports.
    let unit = vars
        .iter()
        .find(|v| v["name"] == "unit")
        .expect("a unit variable");
    assert!(unit["query"]
        .as_str()
        .unwrap()
        .contains("fleetdp_window_size"));
    assert!(
        scraped()
            .text
            .lines()
            .any(|l| l.starts_with("fleetdp_window_size{") && l.contains("unit=\"°C\"")),
        "fleetdp_window_size carries no unit label"
    );
    for p in dash["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap();
        let targets = p["targets"].as_array().unwrap();
        let exprs: Vec<&str> = targets
            .iter()
            .map(|t| t["expr"].as_str().unwrap())
            .collect();
        // One quantity per axis: windows and messages never share a panel.
        assert!(
            !(exprs.iter().any(|e| e.contains("windows_released"))
                && exprs.iter().any(|e| e.contains("messages_total"))),
            "{title}: windows/s and messages/s on one axis"
        );
        // A released value of $stream says its unit.
        if exprs
            .iter()
            .any(|e| e.contains("release_value{stream=\"$stream\""))
        {
            assert!(title.contains("($unit)"), "{title}: no unit");
        }
        // A band fills to a series Grafana can find: a display name of the
        // panel (a legend without per-series templating).
        let names: Vec<&str> = targets
            .iter()
            .filter_map(|t| t["legendFormat"].as_str())
            .collect();
        for o in p["fieldConfig"]["overrides"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for prop in o["properties"].as_array().unwrap() {
                if prop["id"] == "custom.fillBelowTo" {
                    let to = prop["value"].as_str().unwrap();
                    assert!(
                        names.contains(&to) && !to.contains("{{"),
                        "{title}: fills below {to:?}, not a display name of {names:?}"
                    );
                }
            }
        }
    }
}

/// The stack's simulated fleet fits its configuration: each device
/// reports in `active` rounds of every `cycle` (`--duty`), one reading per
/// stream per round, so a device meets at most `active` windows a day when
/// a window holds about a round's readings of a partition — `W` must allow
/// them (else the caps drop readings), a round must fill a window (else it
/// waits for the next day's devices) and `window_timeout` must wait longer
/// than a round (else every window is padded).
fn fills_its_windows(compose: &serde_yaml::Value, cfg: &fleetdp::config::Config) {
    let words = |service: &str| -> Vec<String> {
        compose["services"][service]["command"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };
    let flag = |words: &[String], name: &str| -> String {
        let at = words.iter().position(|w| w == name);
        words[at.unwrap_or_else(|| panic!("no {name} in {words:?}")) + 1].clone()
    };
    let sim = words("simulator");
    let devices: f64 = flag(&sim, "--devices").parse().unwrap();
    let round = humantime::parse_duration(&flag(&sim, "--round")).unwrap();
    let duty = flag(&sim, "--duty");
    let (active, cycle) = duty.split_once('/').unwrap();
    let (active, cycle): (f64, f64) = (active.parse().unwrap(), cycle.parse().unwrap());
    let partitions: f64 = flag(&words("fleetdp"), "--create-topics").parse().unwrap();
    let horizon = humantime::parse_duration(&cfg.privacy.horizon).unwrap();
    assert_eq!(
        horizon,
        round * cycle as u32,
        "a duty cycle is the horizon: a device's rounds a day are its windows a day"
    );
    let per_round = devices * active / cycle / partitions;
    for s in &cfg.streams {
        assert!(
            f64::from(s.max_windows_per_device) >= active,
            "{}: W = {} below the {active} rounds a device reports in",
            s.name,
            s.max_windows_per_device
        );
        let n = s.window_size as f64;
        assert!(
            (0.8..=1.0).contains(&(n / per_round)),
            "{}: n = {n} against {per_round:.0} readings a round on a partition",
            s.name
        );
        let timeout = humantime::parse_duration(s.window_timeout.as_deref().unwrap()).unwrap();
        assert!(
            timeout >= 2 * round,
            "{}: window_timeout {timeout:?}",
            s.name
        );
    }
}

#[test]
fn compose_stack_is_consistent() {
    let dir = deploy();
    let c: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("compose.yaml")).unwrap()).unwrap();
    let services = c["services"].as_mapping().unwrap();
    for s in ["kafka", "fleetdp", "simulator", "prometheus", "grafana"] {
        assert!(services.contains_key(s), "service {s} missing");
    }
    assert_eq!(
        c["services"]["kafka"]["environment"]["KAFKA_PROCESS_ROLES"], "broker,controller",
        "Kafka in KRaft mode"
    );
    // Every mounted file exists; the Dockerfile exists.
    for (name, svc) in services {
        for v in svc["volumes"].as_sequence().into_iter().flatten() {
            let host = v.as_str().unwrap().split(':').next().unwrap();
            assert!(dir.join(host).exists(), "{name:?}: {host} does not exist");
        }
        if let Some(b) = svc.get("build") {
            let df = dir
                .join(b["context"].as_str().unwrap())
                .join(b["dockerfile"].as_str().unwrap());
            assert!(df.exists(), "{name:?}: {} missing", df.display());
        }
    }
    // FleetDP's config validates, serves on the port Prometheus scrapes.
    let cfg = Config::load(&dir.join("fleetdp.compose.toml")).unwrap();
    assert_eq!(cfg.kafka.brokers, "kafka:9092");
    assert_eq!(cfg.http.listen, "0.0.0.0:9898");
    fills_its_windows(&c, &cfg);
    cfg.validate().unwrap();
    let prom: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(dir.join("prometheus/prometheus.yml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        prom["scrape_configs"][0]["static_configs"][0]["targets"][0],
        "fleetdp:9898"
    );
    assert!(c["services"]["fleetdp"]["ports"][0]
        .as_str()
        .unwrap()
        .ends_with(":9898"));
}

#[test]
fn kubernetes_manifests_are_consistent() {
    use serde::Deserialize;
    let read = |file: &str| -> Vec<serde_yaml::Value> {
        let text = std::fs::read_to_string(deploy().join("k8s").join(file)).unwrap();
        serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde_yaml::Value::deserialize(d).unwrap())
            .collect()
    };
    let main = read("fleetdp.yaml");
    // The key apart: re-applying fleetdp.yaml never overwrites it.
    assert!(
        main.iter().all(|d| d["kind"] != "Secret"),
        "a Secret in fleetdp.yaml"
    );
    let docs: Vec<serde_yaml::Value> = main
        .into_iter()
        .chain(read("release-key.example.yaml"))
        .collect();
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    for k in [
        "Namespace",
        "Deployment",
        "ConfigMap",
        "Secret",
        "Service",
        "ServiceMonitor",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ] {
        find(k);
    }
    kubernetes_day_two(&docs, &find);
    let dep = find("Deployment");
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["ports"][0]["name"], "http");
    assert_eq!(c["ports"][0]["containerPort"], 9898);
    assert_eq!(find("Service")["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(
        find("ServiceMonitor")["spec"]["endpoints"][0]["path"],
        "/metrics"
    );
    // Reviewed: the restricted Pod Security Standard, a pinned image, no
    // rolling update (two keys or plans side by side), the key in a file.
    let pod = &dep["spec"]["template"]["spec"];
    let sc = &pod["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_ne!(sc["runAsUser"], 0);
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    let image = c["image"].as_str().unwrap();
    assert!(
        image.contains(':') && !image.ends_with(":latest"),
        "image {image} is not pinned"
    );
    assert_eq!(dep["spec"]["strategy"]["type"], "Recreate");
    assert!(
        c.get("env").is_none(),
        "the key goes in as a file, not the environment"
    );
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v.get("secret").is_some())
        .expect("a Secret volume");
    assert_eq!(
        volume["secret"]["secretName"],
        find("Secret")["metadata"]["name"]
    );
    // 0440 (YAML 1.1, as Kubernetes reads it): the pod's group reads it.
    assert_eq!(volume["secret"]["defaultMode"].as_u64(), Some(0o440));
    assert_eq!(sc["fsGroup"], sc["runAsGroup"]);
    let mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the key volume is mounted");
    let labels = &dep["spec"]["selector"]["matchLabels"];
    assert_eq!(
        &find("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        labels
    );
    assert_eq!(&find("Service")["spec"]["selector"], labels);
    // The ConfigMap's configuration validates and reads the key the Secret
    // provides, where it is mounted.
    let toml = find("ConfigMap")["data"]["fleetdp.toml"].as_str().unwrap();
    let cfg = Config::parse(toml).unwrap();
    let key = find("Secret")["stringData"]
        .as_mapping()
        .unwrap()
        .keys()
        .next()
        .unwrap();
    assert_eq!(
        cfg.privacy.key_file.as_deref(),
        Some(Path::new(&format!(
            "{}/{}",
            mount["mountPath"].as_str().unwrap(),
            key.as_str().unwrap()
        )))
    );
    let config_mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert!(c["args"][2].as_str().unwrap().starts_with(config_mount));
    assert_eq!(cfg.http.listen, "0.0.0.0:9898");
    cfg.validate().unwrap();
}

/// What a cluster admin checks before accepting the manifests as they are:
/// a namespace enforcing the restricted Pod Security Standard that holds
/// every object; the key in a versioned, immutable Secret; a configuration
/// change rolls the pods (the pod template carries the configuration's
/// hash); no service-account token; a disruption budget that lets a drain
/// evict a pod that is not ready; a NetworkPolicy letting in only the
/// status port; a ServiceMonitor kube-prometheus-stack selects.
fn kubernetes_day_two<'a>(
    docs: &'a [serde_yaml::Value],
    find: &dyn Fn(&str) -> &'a serde_yaml::Value,
) {
    let ns = find("Namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    for d in docs.iter().filter(|d| d["kind"] != "Namespace") {
        assert_eq!(
            d["metadata"]["namespace"], ns["metadata"]["name"],
            "{:?} outside the namespace",
            d["kind"]
        );
    }
    let secret = find("Secret");
    assert_eq!(
        secret["immutable"], true,
        "the key's Secret is edited in place"
    );
    let name = secret["metadata"]["name"].as_str().unwrap();
    assert!(
        name.rsplit_once("-v")
            .is_some_and(|(_, v)| v.parse::<u32>().is_ok()),
        "the key's Secret {name} is not versioned"
    );
    let dep = find("Deployment");
    let template = &dep["spec"]["template"];
    let toml = find("ConfigMap")["data"]["fleetdp.toml"].as_str().unwrap();
    let hash = blake3::hash(toml.as_bytes()).to_hex().to_string();
    assert_eq!(
        template["metadata"]["annotations"]["fleetdp.io/config-checksum"].as_str(),
        Some(hash.as_str()),
        "the pod template's config checksum is stale: a configuration change would not roll the pods"
    );
    assert_eq!(template["spec"]["automountServiceAccountToken"], false);
    let pdb = find("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    let np = find("NetworkPolicy");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        np["spec"]["policyTypes"],
        serde_yaml::to_value(["Ingress", "Egress"]).unwrap()
    );
    let ingress = np["spec"]["ingress"].as_sequence().unwrap();
    let ports: Vec<&serde_yaml::Value> = ingress
        .iter()
        .flat_map(|r| r["ports"].as_sequence().unwrap())
        .collect();
    assert!(
        ports.iter().all(|p| p["port"] == 9898),
        "ingress beyond the status port: {ports:?}"
    );
    assert!(find("ServiceMonitor")["metadata"]["labels"]["release"].is_string());
}

/// What a platform review of the image and the compose stack checks: the
/// build context leaves out build output, test tools, git history and
/// release keys; the image and the compose service probe FleetDP; the
/// compose services restart (FleetDP exits non-zero for that) and start in
/// order (the simulator once FleetDP is healthy).
#[test]
fn image_and_compose_pass_review() {
    let root = deploy().join("..");
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore");
    for must in ["target/", ".tools/", ".git/", "*.key"] {
        assert!(
            ignore.lines().any(|l| l.trim() == must),
            ".dockerignore lacks {must}"
        );
    }
    let docker = std::fs::read_to_string(deploy().join("Dockerfile")).unwrap();
    assert!(
        docker.lines().any(|l| l.starts_with("HEALTHCHECK")) && docker.contains("/healthz"),
        "the image has no HEALTHCHECK on /healthz"
    );
    // .git stays out of the context, so the commit comes in as a build
    // argument, in both stages (build.rs reads it; the label shows it).
    let args = docker
        .lines()
        .filter(|l| l.trim() == "ARG FLEETDP_COMMIT=unknown")
        .count();
    let build = docker
        .lines()
        .find(|l| l.contains("cargo build"))
        .unwrap_or("");
    assert!(
        args == 2
            && build.contains("FLEETDP_COMMIT=\"$FLEETDP_COMMIT\"")
            && docker.contains("image.revision"),
        "the image does not carry the build commit"
    );
    let c: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(deploy().join("compose.yaml")).unwrap())
            .unwrap();
    let s = &c["services"];
    for svc in ["fleetdp", "simulator"] {
        assert!(s[svc]["restart"].is_string(), "{svc}: no restart policy");
        assert!(
            s[svc]["build"]["args"]["FLEETDP_COMMIT"].is_string(),
            "{svc}: the image build gets no FLEETDP_COMMIT"
        );
    }
    assert!(
        s["fleetdp"]["healthcheck"]["test"].is_sequence(),
        "fleetdp: no healthcheck"
    );
    assert_eq!(
        s["simulator"]["depends_on"]["fleetdp"]["condition"], "service_healthy",
        "the simulator starts before FleetDP is ready"
    );
}

/// The workspace's `rust-version` is honest: at least every locked
/// dependency's own (for Linux), and every member inherits it. Issue: it
/// said 1.80 while the locked dependencies needed 1.89.
#[test]
fn the_rust_version_covers_the_locked_dependencies() {
    let out = stdout_of(
        std::process::Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--locked", "--offline"])
            .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
            .current_dir(deploy().join("..")),
    );
    let m: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let version = |v: &str| -> Vec<u64> {
        let mut v: Vec<u64> = v.split('.').map(|x| x.parse().unwrap()).collect();
        v.resize(3, 0);
        v
    };
    let used: BTreeSet<&str> = m["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    let members: BTreeSet<&str> = m["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let cargo = std::fs::read_to_string(deploy().join("../Cargo.toml")).unwrap();
    let declared = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("workspace rust-version");
    for p in m["packages"].as_array().unwrap() {
        let id = p["id"].as_str().unwrap();
        let Some(rv) = p["rust_version"].as_str() else {
            assert!(
                !members.contains(id),
                "member {} does not inherit rust-version",
                p["name"]
            );
            continue;
        };
        if members.contains(id) {
            assert_eq!(rv, declared, "member {} inherits rust-version", p["name"]);
        } else if used.contains(id) {
            assert!(
                version(rv) <= version(declared),
                "{} needs Rust {rv}; the workspace says {declared}",
                p["name"]
            );
        }
    }
}

/// `deploy/k8s/prometheus-rule.yaml` is `alerts.yml` as a PrometheusRule,
/// for the Prometheus Operator: the same groups, in FleetDP's namespace,
/// with the label kube-prometheus-stack selects rules by. Generated:
/// `FLEETDP_BLESS=1` rewrites it from alerts.yml. Issue: the rules never
/// loaded on the Prometheus Operator.
#[test]
fn the_prometheus_rule_is_the_alert_rules() {
    let alerts: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy().join("prometheus/alerts.yml")).unwrap(),
    )
    .unwrap();
    let path = deploy().join("k8s/prometheus-rule.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut rule: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    if std::env::var("FLEETDP_BLESS").is_ok() && rule["spec"]["groups"] != alerts["groups"] {
        rule["spec"]["groups"] = alerts["groups"].clone();
        let head: String = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, head + &serde_yaml::to_string(&rule).unwrap()).unwrap();
    }
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "fleetdp");
    assert!(rule["metadata"]["labels"]["release"].is_string());
    assert!(
        rule["spec"]["groups"] == alerts["groups"],
        "deploy/k8s/prometheus-rule.yaml differs from alerts.yml: FLEETDP_BLESS=1 cargo test -p fleetdp --test integration deploy::the_prometheus_rule rewrites it"
    );
}

/// Every alert has a runbook: its `runbook_url` names the section of
/// docs/troubleshooting.md titled by the alert's name, and that section
/// exists. Issue: no alert had one.
#[test]
fn every_alert_has_a_runbook_that_exists() {
    let alerts: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy().join("prometheus/alerts.yml")).unwrap(),
    )
    .unwrap();
    let page = std::fs::read_to_string(deploy().join("../docs/troubleshooting.md")).unwrap();
    // GitHub's anchors: lower case, punctuation dropped, spaces as dashes.
    let anchors: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let mut rules = 0;
    for group in alerts["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let name = rule["alert"].as_str().unwrap();
            let anchor = name.to_lowercase();
            assert_eq!(
                rule["annotations"]["runbook_url"].as_str(),
                Some(format!("docs/troubleshooting.md#{anchor}").as_str()),
                "{name}"
            );
            assert!(
                anchors.contains(&anchor),
                "docs/troubleshooting.md has no section {name}"
            );
            rules += 1;
        }
    }
    assert!(rules >= 11, "{rules} alerts");
}

/// The Kubernetes manifests validate against the API schemas of the
/// oldest Kubernetes the restricted Pod Security and PDB settings need
/// (1.27) and of the newest kubernetes-validate knows, strictly (no
/// unknown field). kubernetes-validate (PyPI) is installed by tests/run.sh
/// beside FLEETDP_PYTHON; without it (a bare `cargo test`) the test says
/// so and passes, unless FLEETDP_REQUIRE_PYTHON_CLIENT is set. The
/// Prometheus Operator's kinds (ServiceMonitor, PrometheusRule) have no
/// schema there: their fields are checked by the tests above.
#[test]
fn the_manifests_validate_against_the_kubernetes_schemas() {
    let python = std::env::var("FLEETDP_PYTHON").unwrap_or_default();
    let tool = std::path::Path::new(&python).with_file_name("kubernetes-validate");
    if !tool.exists() {
        assert!(
            std::env::var("FLEETDP_REQUIRE_PYTHON_CLIENT").is_err(),
            "kubernetes-validate is not installed beside {python} (tests/run.sh installs it)"
        );
        return eprintln!("skipped: no kubernetes-validate (tests/run.sh installs it)");
    }
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(deploy().join("k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    assert!(files.len() >= 3, "{files:?}");
    for version in ["1.27.0", "1.37.0"] {
        let out = std::process::Command::new(&tool)
            .args(["--strict", "-k", version])
            .args(&files)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubernetes-validate {version}:\n{said}"
        );
        let passed = said
            .lines()
            .filter(|l| l.starts_with("INFO") && l.contains(" passed "))
            .count();
        assert!(
            passed >= 7,
            "kubernetes-validate {version} checked too little:\n{said}"
        );
        let unknown: Vec<&str> = said
            .lines()
            .filter(|l| l.contains("Couldn't find schema"))
            .filter(|l| !l.contains("monitoring.coreos.com/v1"))
            .collect();
        assert!(unknown.is_empty(), "kinds without a schema: {unknown:?}");
    }
}

/// checkov's Kubernetes checks pass on deploy/k8s, with the checks
/// deploy/checkov.yaml skips (each with its reason there), and its
/// Dockerfile checks on the image; no network (`--skip-download`).
/// tests/run.sh installs checkov (FLEETDP_CHECKOV); without it the test
/// says so and passes, unless FLEETDP_REQUIRE_PYTHON_CLIENT is set.
#[test]
fn the_manifests_and_the_image_pass_checkov() {
    let tool = std::env::var("FLEETDP_CHECKOV").unwrap_or_default();
    if tool.is_empty() || !std::path::Path::new(&tool).exists() {
        assert!(
            std::env::var("FLEETDP_REQUIRE_PYTHON_CLIENT").is_err(),
            "checkov is not installed at {tool:?} (tests/run.sh installs it)"
        );
        return eprintln!("skipped: no checkov (tests/run.sh installs it)");
    }
    let k8s = deploy().join("k8s").canonicalize().unwrap();
    let config = deploy().join("checkov.yaml").canonicalize().unwrap();
    let skipped = std::fs::read_to_string(&config).unwrap();
    let lines: Vec<&str> = skipped.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("- CKV") {
            assert!(
                lines[i - 1].trim_start().starts_with('#'),
                "{l}: skipped without a reason"
            );
        }
    }
    let dockerfile = deploy().join("Dockerfile").canonicalize().unwrap();
    let runs: [(&str, Vec<&std::ffi::OsStr>, usize); 2] = [
        (
            "kubernetes",
            vec![
                "--config-file".as_ref(),
                config.as_os_str(),
                "-d".as_ref(),
                k8s.as_os_str(),
            ],
            85,
        ),
        (
            "dockerfile",
            vec!["-f".as_ref(), dockerfile.as_os_str()],
            60,
        ),
    ];
    for (framework, args, least) in runs {
        let out = std::process::Command::new(&tool)
            .args(&args)
            .args([
                "--framework",
                framework,
                "--compact",
                "--quiet",
                "--skip-download",
            ])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let figure = |what: &str| -> usize {
            let at = said
                .find(what)
                .unwrap_or_else(|| panic!("{framework}: no {what:?} in:\n{said}"));
            let digits: String = said[at + what.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().unwrap()
        };
        assert_eq!(figure("Failed checks: "), 0, "checkov {framework}:\n{said}");
        assert!(
            figure("Passed checks: ") >= least,
            "checkov {framework} ran too few checks:\n{said}"
        );
        assert!(out.status.success(), "checkov {framework}:\n{said}");
    }
}

/// The Deployment's memory limit holds what `limits.max_devices_per_lane`
/// lets the service keep (docs/operations.md#sizing): every lane one pod
/// can hold (each stream on each of the input partitions the manifest is
/// sized for, all on one pod once the others are gone) full, at the
/// per-device bytes the churn bench measures (37.3 at its peak; 40 here),
/// plus a fixed allowance for the Kafka clients' buffers and the rest.
/// Past that limit the service drops readings as `device_limit` (and
/// alerts) instead of being killed for memory.
#[test]
fn the_memory_limit_holds_every_lane_at_its_device_limit() {
    const PARTITIONS: u64 = 12;
    const BYTES_PER_DEVICE: u64 = 40;
    const ALLOWANCE: u64 = 256 << 20;
    let text = std::fs::read_to_string(deploy().join("k8s/fleetdp.yaml")).unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let find = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap();
    let toml: toml::Value = find("ConfigMap")["data"]["fleetdp.toml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let devices = toml["limits"]["max_devices_per_lane"]
        .as_integer()
        .expect("the ConfigMap sets the limit") as u64;
    let streams = toml["stream"].as_array().unwrap().len() as u64;
    assert!(
        text.contains(&format!("{PARTITIONS}-partition input")),
        "the manifest's comment names what it is sized for"
    );
    let container = &find("Deployment")["spec"]["template"]["spec"]["containers"][0];
    let limit = container["resources"]["limits"]["memory"].as_str().unwrap();
    let limit: u64 = match limit.strip_suffix("Gi") {
        Some(g) => g.parse::<u64>().unwrap() << 30,
        None => limit.strip_suffix("Mi").unwrap().parse::<u64>().unwrap() << 20,
    };
    let need = streams * PARTITIONS * devices * BYTES_PER_DEVICE + ALLOWANCE;
    assert!(
        need <= limit,
        "{need} bytes needed at the device limit, the container may use {limit}"
    );
}
