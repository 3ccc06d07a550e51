//! `fleetdp dashboard`: the Grafana dashboard for one configuration — the
//! shipped fleet view (`deploy/grafana/fleetdp.json`) followed by a row per
//! declared stream whose value panels carry the stream's `unit` on their
//! axes. Grafana reads no variable in a field's unit, so a dashboard with
//! units is generated from the configuration rather than templated.

use crate::config::{StreamConfig, Validated};
use crate::dp::release::StatKind;
use crate::telemetry::name;
use serde_json::{json, Value};

const TEMPLATE: &str = include_str!("../../../deploy/grafana/fleetdp.json");
const DATASOURCE: &str = "${datasource}";
/// Panels per line and their size (Grafana's 24-column grid).
const PANEL_W: u64 = 12;
const PANEL_H: u64 = 8;

/// The dashboard for `v`'s streams.
pub fn generate(v: &Validated) -> Value {
    let mut dash: Value = serde_json::from_str(TEMPLATE).expect("the shipped dashboard parses");
    let panels = dash["panels"].as_array_mut().expect("panels");
    let mut id = panels
        .iter()
        .filter_map(|p| p["id"].as_u64())
        .max()
        .unwrap_or(0);
    let mut y = panels
        .iter()
        .map(|p| p["gridPos"]["y"].as_u64().unwrap_or(0) + p["gridPos"]["h"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    for s in &v.config.streams {
        let unit = s.unit.clone().unwrap_or_default();
        id += 1;
        let title = if unit.is_empty() {
            s.name.clone()
        } else {
            format!("{} ({unit})", s.name)
        };
        panels.push(
            json!({"id": id, "type": "row", "title": title, "collapsed": false,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}),
        );
        y += 1;
        let row = stream_panels(s, &unit);
        let n = row.len() as u64;
        for (i, mut p) in row.into_iter().enumerate() {
            id += 1;
            let i = i as u64;
            p["id"] = id.into();
            p["datasource"] = json!({"type": "prometheus", "uid": DATASOURCE});
            p["gridPos"] = json!({"x": (i % 2) * PANEL_W, "y": y + (i / 2) * PANEL_H, "w": PANEL_W, "h": PANEL_H});
            panels.push(p);
        }
        y += n.div_ceil(2) * PANEL_H;
    }
    dash["uid"] = "fleetdp-generated".into();
    dash["title"] = "FleetDP (generated for its streams)".into();
    dash
}

/// `suffix: °C`, Grafana's custom unit; `none` without one.
fn grafana_unit(unit: &str) -> String {
    if unit.is_empty() {
        "none".into()
    } else {
        format!("suffix: {unit}")
    }
}

/// The fleet-wide value selector of a stream's `statistic` (a grouped
/// stream: every group, by `declared_stream`).
fn selector(s: &StreamConfig, metric: &str, statistic: &str) -> String {
    let stream = if s.group_by.is_empty() {
        format!("stream=\"{}\"", s.name)
    } else {
        format!("declared_stream=\"{}\"", s.name)
    };
    format!("{metric}{{{stream},statistic{statistic}}}")
}

fn timeseries(title: String, unit: String, targets: Vec<Value>, overrides: Vec<Value>) -> Value {
    json!({"type": "timeseries", "title": title, "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": overrides}})
}

/// The value panels of one declared stream.
fn stream_panels(s: &StreamConfig, unit: &str) -> Vec<Value> {
    let grouped = !s.group_by.is_empty();
    let legend = if grouped { "{{group}}" } else { "fleet" };
    let value = |stat: &str| selector(s, name::FLEET_VALUE, stat);
    let half = |stat: &str| selector(s, name::FLEET_HALF_WIDTH, stat);
    let mut out = Vec::new();
    let has = |k: StatKind| s.statistics.contains(&k);
    for (kind, stat, u) in [
        (StatKind::Mean, "mean", grafana_unit(unit)),
        (StatKind::Sum, "sum", grafana_unit(unit)),
        (StatKind::Std, "std", grafana_unit(unit)),
        (StatKind::Count, "count", "none".to_string()),
        (StatKind::Clamped, "clamped", "percentunit".to_string()),
    ] {
        if !has(kind) {
            continue;
        }
        let sel = format!("=\"{stat}\"");
        let mut targets = vec![json!({"refId": "A", "expr": value(&sel), "legendFormat": legend})];
        let mut overrides = vec![];
        // One band per panel: a fill follows one named series, so grouped
        // streams show their groups without one.
        if !grouped && matches!(kind, StatKind::Mean | StatKind::Sum | StatKind::Count) {
            targets.push(json!({"refId": "B", "expr": format!("{} + {}", value(&sel), half(&sel)), "legendFormat": "upper"}));
            targets.push(json!({"refId": "C", "expr": format!("{} - {}", value(&sel), half(&sel)), "legendFormat": "lower"}));
            overrides = band_overrides();
        }
        let with_band = if overrides.is_empty() {
            ""
        } else {
            " with 95% band"
        };
        out.push(timeseries(
            format!("Fleet-wide {stat} of {}{with_band}", s.name),
            u,
            targets,
            overrides,
        ));
    }
    if has(StatKind::Quantiles) {
        let legend = if grouped {
            "{{statistic}} {{group}}"
        } else {
            "{{statistic}}"
        };
        let targets =
            vec![json!({"refId": "A", "expr": value("=~\"quantile.*\""), "legendFormat": legend})];
        out.push(timeseries(
            format!("Fleet-wide quantiles of {} (no interval)", s.name),
            grafana_unit(unit),
            targets,
            vec![],
        ));
    }
    if has(StatKind::Histogram) && !s.histogram_edges.is_empty() {
        out.push(histogram_panel(s, unit, value));
    }
    out
}

/// The overrides that draw the `upper` and `lower` series as a shaded
/// 95% band.
fn band_overrides() -> Vec<Value> {
    let band = |fill: bool| {
        let mut props = vec![
            json!({"id": "custom.lineWidth", "value": 0}),
            json!({"id": "color", "value": {"mode": "fixed", "fixedColor": "#9bb7e8"}}),
        ];
        if fill {
            props.push(json!({"id": "custom.fillBelowTo", "value": "lower"}));
        }
        props
    };
    vec![
        json!({"matcher": {"id": "byName", "options": "upper"}, "properties": band(true)}),
        json!({"matcher": {"id": "byName", "options": "lower"}, "properties": band(false)}),
    ]
}

/// A stream's histogram as a bar gauge: one target per bin, named by its
/// edges.
fn histogram_panel(s: &StreamConfig, unit: &str, value: impl Fn(&str) -> String) -> Value {
    let grouped = !s.group_by.is_empty();
    let targets: Vec<Value> = s
        .histogram_edges
        .windows(2)
        .enumerate()
        .map(|(i, e)| {
            let sel = format!("=\"histogram[{i}]\"");
            let name = format!("[{}, {}){}", e[0], e[1], if grouped { " {{group}}" } else { "" });
            json!({"refId": format!("H{i}"), "expr": value(&sel), "legendFormat": name, "instant": true})
        })
        .collect();
    json!({"type": "bargauge", "title": format!("Fleet-wide histogram of {} (readings per bin, bins in {})", s.name, if unit.is_empty() { "its values" } else { unit }),
        "targets": targets, "options": {"orientation": "vertical", "displayMode": "basic"},
        "fieldConfig": {"defaults": {"unit": "none"}, "overrides": []}})
}

#[cfg(test)]
mod tests;
