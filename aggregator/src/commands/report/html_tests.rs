//! The review page states the plan `plan --format json` prints, charts
//! points from the same accuracy functions, needs no network, and its
//! proof links and backing files exist.

use super::super::charts::label;
use super::super::{StatisticReport, USEFUL_SHARE};
use super::*;
use crate::config::Config;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Every shipped configuration, as written and under add-remove (time
/// windows of an hour where it had count windows).
fn configurations() -> Vec<(String, Validated)> {
    let mut out = vec![];
    for name in ["demo.toml", "fleetdp.toml", "fleetdp.compose.toml"] {
        let text = std::fs::read_to_string(root().join("deploy").join(name)).unwrap();
        let v = Config::parse(&text).unwrap().validate().unwrap();
        out.push((name.to_string(), v));
        let add_remove: String = text
            .replace("relation = \"change-one\"", "relation = \"add-remove\"")
            .lines()
            .filter(|l| {
                !["window_timeout", "target_error"]
                    .iter()
                    .any(|k| l.trim_start().starts_with(k))
            })
            .map(|l| match l.trim_start().starts_with("window_size") {
                true => "window = \"1h\"".to_string(),
                false => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let v = Config::parse(&add_remove)
            .and_then(Config::validate)
            .unwrap_or_else(|e| panic!("{name} under add-remove: {e:#}"));
        out.push((format!("{name} (add-remove)"), v));
    }
    out
}

/// Every number of the JSON plan is on the page as `sig` writes it, and
/// each chart's marked point is the plan's own half-width.
#[test]
fn the_page_states_every_number_of_the_json_plan() {
    for (name, v) in configurations() {
        let r = PlanReport::new(&v);
        let page = review_page(&r, &v);
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert!(page.contains(&sig(r.spent_per_horizon)), "{name}");
        assert!(page.contains(&format!("<b>{}</b>", r.relation)), "{name}");
        for (s, js) in r.streams.iter().zip(json["streams"].as_array().unwrap()) {
            assert_eq!(js["name"], s.name.as_str());
            assert!(
                page.contains(&format!("Stream {}", escape(&s.name))),
                "{name}"
            );
            for st in &s.statistics {
                for x in [
                    st.sensitivity,
                    st.scale,
                    st.spent_per_window,
                    st.spent_per_horizon,
                ] {
                    assert!(
                        page.contains(&format!("<td>{}</td>", sig(x))),
                        "{name}: {x}"
                    );
                }
                charted(&name, &v, &page, s, st);
            }
        }
        for chart in page.split("<svg class=\"chart\"").skip(1) {
            let n: usize = chart.split('"').nth(5).unwrap().parse().unwrap();
            assert!(
                n >= 2 && chart.contains("<polyline"),
                "{name}: a chart without points"
            );
        }
        let stated = r.streams.iter().flat_map(|s| &s.statistics);
        let charted = stated.filter(|st| st.half_width_95.is_some()).count();
        assert!(charted > 0, "{name}: nothing to chart");
        assert!(
            page.matches("<svg class=\"chart\"").count() >= charted,
            "{name}"
        );
        for scheme in ["http:", "https:", "//", "src="] {
            let outside = page.replace("</", "").replace("http://www.w3.org", "");
            assert!(
                !outside.contains(scheme),
                "{name}: the page reaches out ({scheme})"
            );
        }
    }
}

/// Each proof link names a heading of docs/privacy.md; each backing file
/// exists.
#[test]
fn proof_links_resolve_and_backing_tests_exist() {
    let privacy = std::fs::read_to_string(root().join("docs/privacy.md")).unwrap();
    let anchors: Vec<String> = privacy
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(|h| {
            h.to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .collect::<String>()
                .replace(' ', "-")
        })
        .collect();
    for link in [PROOF, RUNNING_PROOF] {
        let (file, anchor) = link.split_once('#').unwrap();
        assert_eq!(file, "docs/privacy.md");
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{link}: no such heading"
        );
    }
    for (file, _) in BACKING {
        assert!(root().join(file).is_file(), "{file} does not exist");
    }
}

/// A change in the configuration changes the page.
#[test]
fn a_changed_configuration_changes_the_page() {
    let text = std::fs::read_to_string(root().join("deploy/demo.toml")).unwrap();
    let page = |t: &str| {
        let v = Config::parse(t).unwrap().validate().unwrap();
        review_page(&PlanReport::new(&v), &v)
    };
    let tighter = text.replace("epsilon_per_device = 2.0", "epsilon_per_device = 4.0");
    assert_ne!(text, tighter, "the demo's budget line moved");
    assert_ne!(page(&text), page(&tighter));
}

/// A statistic's half-width in the table, and its chart: the line it is
/// judged by, and, without targets, the dot at the plan's half-width.
fn charted(name: &str, v: &Validated, page: &str, s: &StreamReport, st: &StatisticReport) {
    let Some(hw) = st.half_width_95 else { return };
    assert!(page.contains(&format!("<td>{}</td>", sig(hw))), "{name}");
    if let Some(t) = st.target_95 {
        let line = format!("target_error ±{}</title>", sig(t));
        assert!(page.contains(&line), "{name}: no line at {}", sig(t));
        return;
    }
    if s.statistics.iter().any(|x| x.target_95.is_some()) {
        return;
    }
    if s.window_seconds.is_none() && matches!(st.name.as_str(), "mean" | "std") {
        let p = v
            .plan
            .streams
            .iter()
            .find(|p| p.declared_name() == s.name)
            .unwrap();
        let b = USEFUL_SHARE * (p.spec.upper - p.spec.lower);
        let line = format!("--strict bound ±{}</title>", sig(b));
        assert!(
            page.contains(&line),
            "{name}: no --strict line at {}",
            sig(b)
        );
    }
    // The chart's dot for this configuration sits at the plan's
    // half-width: the points come from the same functions.
    let dot = format!("this configuration: ±{}</title>", sig(hw));
    assert!(
        page.contains(&dot),
        "{name}: {} has no dot at ±{}",
        label(st),
        sig(hw)
    );
}
