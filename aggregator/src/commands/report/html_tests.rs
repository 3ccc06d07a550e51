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
    // Private keys (battery per build, learnt by key selection).
    let text = std::fs::read_to_string(root().join("deploy/demo.toml")).unwrap();
    let private = text
        .replace(
            "[dimensions]\n",
            "[dimensions]\nbuild = { private = true, max_keys = 4 }\n",
        )
        .replace(
            "group_by = [\"firmware\"]",
            "group_by = [\"build\"]\nkey_selection_share = 0.1\nkey_selection_delta = 1e-6",
        );
    let v = Config::parse(&private)
        .and_then(Config::validate)
        .unwrap_or_else(|e| panic!("demo.toml with private keys: {e:#}"));
    out.push(("demo.toml (private keys)".into(), v));
    // The device-limit alarm on the demo's first stream.
    let alarm = text.replacen(
        "running_share = 0.1",
        "running_share = 0.1\ndevice_alarm_share = 0.02",
        1,
    );
    assert_ne!(alarm, text, "the demo's running share moved");
    let v = Config::parse(&alarm)
        .and_then(Config::validate)
        .unwrap_or_else(|e| panic!("demo.toml with an alarm: {e:#}"));
    out.push(("demo.toml (device alarm)".into(), v));
    out
}

/// The running totals' rows and the private-key selection's figures are on
/// the page, and one device's timeline adds up to the stream's spend.
fn running_keys_and_timeline(name: &str, r: &PlanReport, page: &str) {
    let unit = if r.measure == "pure" { "ε" } else { "ρ" };
    for s in &r.streams {
        for run in &s.running {
            assert!(
                page.contains(&format!("running {}: noise std", run.name)),
                "{name}"
            );
            let cell = |x: f64| format!("<td>{}</td>", sig(x));
            assert!(page.contains(&cell(run.spent_per_horizon)), "{name}");
            for e in &run.error {
                for x in [e.std, Some(e.std_summed_windows), e.std_plain_tree]
                    .into_iter()
                    .flatten()
                {
                    assert!(page.contains(&cell(x)), "{name}: running {x}");
                }
            }
        }
        if let Some(k) = s.groups.as_ref().and_then(|g| g.private_keys.as_ref()) {
            let row = format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                k.max_keys,
                sig(k.spent_per_horizon),
                sig(k.delta),
                k.threshold,
                k.devices_for_50_percent,
                k.devices_for_99_percent
            );
            assert!(page.contains(&row), "{name}: no selection row {row}");
        }
        // In this stream's own section (streams may spend alike).
        let section = page
            .split("<h2>Stream ")
            .find(|x| x.starts_with(&format!("{}</h2>", escape(&s.name))))
            .unwrap();
        let spent = format!("{unit} spent: {} after", sig(s.spent_per_horizon));
        assert!(
            section.contains(&spent),
            "{name}: no timeline ending at {spent}"
        );
    }
    let running: usize = r.streams.iter().map(|s| s.running.len()).sum();
    assert_eq!(
        page.matches("class=\"picture running\"").count(),
        running,
        "{name}"
    );
    assert_eq!(
        page.matches("class=\"picture timeline\"").count(),
        r.streams.len(),
        "{name}"
    );
    for line in page.split("<polyline").skip(1) {
        let points = line
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(
            points.split(' ').count() >= 2,
            "{name}: a line of one point"
        );
    }
}

/// Every number of the JSON plan is on the page as `sig` writes it, and
/// each chart's marked point is the plan's own half-width.
#[test]
fn the_page_states_every_number_of_the_json_plan() {
    // Private keys, running totals, a histogram's --strict line and
    // warnings, each seen in at least one configuration.
    let mut seen = (false, false, false, false);
    for (name, v) in configurations() {
        let r = PlanReport::new(&v);
        let page = review_page(&r, &v);
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert!(page.contains(&sig(r.spent_per_horizon)), "{name}");
        assert!(page.contains(&format!("<b>{}</b>", r.relation)), "{name}");
        // The odds on the demo's scale (ε at δ under zCDP).
        let eps = r.epsilon_at_delta.unwrap_or(r.spent_per_horizon);
        let (factor, strength) = super::super::odds(eps);
        let odds = format!("e<sup>ε</sup> ≈ {factor}</b>: {strength}");
        assert!(page.contains(&odds), "{name}: no {odds}");
        for (s, js) in r.streams.iter().zip(json["streams"].as_array().unwrap()) {
            assert_eq!(js["name"], s.name.as_str());
            stream_numbers(&name, &v, &page, s);
        }
        running_keys_and_timeline(&name, &r, &page);
        seen.3 |= !r.warnings.is_empty();
        for w in &r.warnings {
            let item = format!("<li class=\"warning\">{}</li>", escape(&w.message));
            assert!(page.contains(&item), "{name}: warning not on the page");
        }
        let groups = r.streams.iter().filter_map(|s| s.groups.as_ref());
        seen.0 |= groups.clone().any(|g| g.private_keys.is_some());
        seen.1 |= r.streams.iter().any(|s| !s.running.is_empty());
        seen.2 |= r.streams.iter().any(|s| {
            let targeted = s.statistics.iter().any(|x| x.target_95.is_some());
            let histogram = s.statistics.iter().any(|x| x.name == "histogram");
            s.window_seconds.is_none() && histogram && !targeted
        });
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
    assert_eq!(
        seen,
        (true, true, true, true),
        "(private keys, running, histogram line, warnings)"
    );
}

/// A stream's header, table cells and charts state its JSON numbers.
fn stream_numbers(name: &str, v: &Validated, page: &str, s: &StreamReport) {
    assert!(
        page.contains(&format!("Stream {}", escape(&s.name))),
        "{name}"
    );
    let head = format!(
        "k = {} readings a window and joins at most W = {} windows a horizon",
        s.max_readings_per_device, s.max_windows_per_device
    );
    let spend = format!(
        "Spend: {} a window, {} a horizon.",
        sig(s.spent_per_window),
        sig(s.spent_per_horizon)
    );
    assert!(page.contains(&head) && page.contains(&spend), "{name}");
    for st in &s.statistics {
        let cells = [
            st.rank_half_width_95
                .map(|r| format!("<td>{} ranks</td>", sig(r))),
            st.target_95.map(|t| format!("<td>{}</td>", sig(t))),
            st.variance_target_95
                .map(|t| format!("<td>{} (variance)</td>", sig(t))),
        ];
        for cell in cells.into_iter().flatten() {
            assert!(page.contains(&cell), "{name}: no {cell}");
        }
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
        charted(name, v, page, s, st);
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
    for link in [PROOF, RUNNING_PROOF, SELECTION_PROOF, ALARM_PROOF] {
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
    if s.window_seconds.is_none() && matches!(st.name.as_str(), "mean" | "std" | "histogram") {
        let p = v
            .plan
            .streams
            .iter()
            .find(|p| p.declared_name() == s.name)
            .unwrap();
        // A mean's or std's bound is a share of the range; a histogram's,
        // the readings a bin expects.
        let b = match st.name.as_str() {
            "histogram" => s.window_size as f64 / (p.spec.histogram_edges.len() - 1) as f64,
            _ => USEFUL_SHARE * (p.spec.upper - p.spec.lower),
        };
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
