//! The generated dashboard for the demo's configuration: a row per stream,
//! units on the axes, bands that fill to a named series, histogram bins
//! named by their edges, every panel on the datasource variable, ids unique
//! and panels not overlapping.

use super::*;
use crate::config::Config;

fn demo() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml");
    generate(&Config::load(&path).unwrap().validate().unwrap())
}

fn panel<'a>(d: &'a Value, title: &str) -> &'a Value {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"].as_str().unwrap() == title)
        .unwrap_or_else(|| panic!("no panel {title:?}"))
}

#[test]
fn every_stream_gets_a_row_with_its_unit_on_the_axes() {
    let d = demo();
    for row in ["cabin_temp_c (°C)", "battery_v (V)", "speed_kmh (km/h)"] {
        assert_eq!(panel(&d, row)["type"], "row", "{row}");
    }
    let mean = panel(&d, "Fleet-wide mean of cabin_temp_c with 95% band");
    assert_eq!(mean["fieldConfig"]["defaults"]["unit"], "suffix: °C");
    let q = panel(&d, "Fleet-wide quantiles of cabin_temp_c (no interval)");
    assert_eq!(q["fieldConfig"]["defaults"]["unit"], "suffix: °C");
    assert_eq!(
        panel(&d, "Fleet-wide mean of speed_kmh with 95% band")["fieldConfig"]["defaults"]["unit"],
        "suffix: km/h"
    );
    // The grouped stream: every group by its declared name, no band.
    let battery = panel(&d, "Fleet-wide mean of battery_v");
    let expr = battery["targets"][0]["expr"].as_str().unwrap();
    assert!(expr.contains("declared_stream=\"battery_v\""), "{expr}");
    assert_eq!(battery["targets"][0]["legendFormat"], "{{group}}");
}

#[test]
fn bands_fill_to_a_named_series_and_bins_are_named_by_their_edges() {
    let d = demo();
    let mean = panel(&d, "Fleet-wide mean of cabin_temp_c with 95% band");
    let names: Vec<&str> = mean["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["legendFormat"].as_str().unwrap())
        .collect();
    let fills: Vec<&str> = mean["fieldConfig"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|o| o["properties"].as_array().unwrap())
        .filter(|p| p["id"] == "custom.fillBelowTo")
        .map(|p| p["value"].as_str().unwrap())
        .collect();
    assert_eq!(fills, ["lower"]);
    assert!(names.contains(&"lower") && names.contains(&"upper"));
    let hist = panel(
        &d,
        "Fleet-wide histogram of cabin_temp_c (readings per bin, bins in °C)",
    );
    let legends: Vec<&str> = hist["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["legendFormat"].as_str().unwrap())
        .collect();
    assert_eq!(
        legends,
        ["[-20, 0)", "[0, 10)", "[10, 20)", "[20, 30)", "[30, 40)", "[40, 60)"]
    );
}

#[test]
fn panels_are_unique_on_the_datasource_variable_and_do_not_overlap() {
    let d = demo();
    let panels = d["panels"].as_array().unwrap();
    let mut ids = std::collections::BTreeSet::new();
    let mut cells = std::collections::BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "id {} twice",
            p["id"]
        );
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], DATASOURCE, "{}", p["title"]);
        }
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24, "{}", p["title"]);
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "{} overlaps another panel",
                    p["title"]
                );
            }
        }
    }
    assert!(panels.len() > 20, "{} panels", panels.len());
}
