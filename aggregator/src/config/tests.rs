use super::*;

pub const SAMPLE: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"
input_topic = "readings"
output_topic = "releases"
dead_letter_topic = "readings.dlq"

[privacy]
epsilon_per_device = 1.0
horizon = "24h"
key_env = "FLEETDP_TEST_KEY"

[[stream]]
name = "cabin_temp_c"
lower = -40.0
upper = 85.0
resolution = 0.1
window_size = 1000
max_readings_per_device = 1
max_windows_per_device = 24
statistics = ["mean", "std", "histogram", "quantiles"]
histogram_edges = [-40, 0, 10, 20, 30, 40, 85]
quantiles = [0.5, 0.9]
"#;

#[test]
fn sample_validates() {
    let v = Config::parse(SAMPLE).unwrap().validate().unwrap();
    assert_eq!(v.horizon, Duration::from_secs(86_400));
    assert_eq!(v.plan.streams.len(), 1);
}

/// Quantiles weigh their candidates by the lane's recent releases unless a
/// stream opts out; a stream without quantiles has no prior to weigh (and
/// asking for one is refused, naming the field).
#[test]
fn adaptive_quantiles_is_the_default_where_quantiles_are_released() {
    let adaptive = |text: &str| -> Result<bool> {
        let v = Config::parse(text)?.validate()?;
        Ok(v.plan.streams[0].spec.adaptive_quantiles)
    };
    assert!(adaptive(SAMPLE).unwrap());
    let off = SAMPLE.replace(
        "quantiles = [0.5, 0.9]",
        "quantiles = [0.5, 0.9]
adaptive_quantiles = false",
    );
    assert!(!adaptive(&off).unwrap());
    let none = SAMPLE
        .replace(", \"quantiles\"]", "]")
        .replace("quantiles = [0.5, 0.9]", "");
    assert!(!adaptive(&none).unwrap());
    let asked = none.replace(
        "histogram_edges",
        "adaptive_quantiles = true
histogram_edges",
    );
    let e = adaptive(&asked).unwrap_err().to_string();
    assert!(e.contains("adaptive_quantiles"), "{e}");
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (
            SAMPLE.replace("horizon = \"24h\"", "horizon = \"often\""),
            "privacy.horizon",
        ),
        (
            SAMPLE.replace("epsilon_per_device = 1.0", ""),
            "privacy.epsilon_per_device",
        ),
        (
            SAMPLE.replace(
                "epsilon_per_device = 1.0",
                "epsilon_per_device = 1.0\nmeasure = \"zcdp\"",
            ),
            "privacy.epsilon_per_device",
        ),
        (
            SAMPLE.replace("output_topic = \"releases\"", "output_topic = \"readings\""),
            "kafka",
        ),
        (
            SAMPLE.replace("resolution = 0.1", "resolution = 0.3"),
            "lower",
        ),
        (
            SAMPLE.replace("window_size = 1000", "window_size = 1000\nwindow_sise = 3"),
            "window_sise",
        ),
        (
            SAMPLE.replace(
                "max_windows_per_device = 24",
                "max_windows_per_device = 24\nbudget_share = 1.5",
            ),
            "budget_share",
        ),
    ];
    for (text, field) in cases {
        let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(field), "expected {field:?} in: {msg}");
    }
}

#[test]
fn add_remove_needs_time_windows_that_divide_the_horizon() {
    let ar = SAMPLE.replace(
        "horizon = \"24h\"",
        "horizon = \"24h\"\nrelation = \"add-remove\"",
    );
    let err = format!("{:#}", Config::parse(&ar).unwrap().validate().unwrap_err());
    assert!(err.contains("window") && err.contains("presence"), "{err}");
    let timed = ar.replace("window_size = 1000", "window = \"5m\"");
    let v = Config::parse(&timed).unwrap().validate().unwrap();
    assert_eq!(v.plan.streams[0].spec.window_ms, Some(300_000));
    let err = format!(
        "{:#}",
        Config::parse(&timed.replace("\"5m\"", "\"7m\""))
            .unwrap()
            .validate()
            .unwrap_err()
    );
    assert!(err.contains("divides privacy.horizon"), "{err}");
    // Durations read as the operator wrote them, not as `86400s` or `1day`.
    assert!(err.contains("privacy.horizon (\"24h\")"), "{err}");
    for (from, to, field) in [
        ("\"5m\"", "\"often\"", "stream 'cabin_temp_c': window"),
        ("\"5m\"", "\"0s\"", "stream 'cabin_temp_c': window"),
    ] {
        let err = format!(
            "{:#}",
            Config::parse(&timed.replace(from, to))
                .unwrap()
                .validate()
                .unwrap_err()
        );
        assert!(err.contains(field), "{err}");
    }
    let soon = SAMPLE.replace(
        "window_size = 1000",
        "window_size = 1000\nwindow_timeout = \"soon\"",
    );
    let err = format!(
        "{:#}",
        Config::parse(&soon).unwrap().validate().unwrap_err()
    );
    assert!(
        err.contains("stream 'cabin_temp_c': window_timeout"),
        "{err}"
    );
}

/// Settings that used to pass validation and then panic, abort on a
/// huge allocation, hang, or collide: each refused, naming its field.
#[test]
fn crashing_settings_are_refused_with_their_field() {
    let cases = [
        ("horizon = \"24h\"", "horizon = \"1ns\"", "privacy.horizon"),
        (
            "horizon = \"24h\"",
            "horizon = \"300000000years\"",
            "privacy.horizon",
        ),
        (
            "[[stream]]",
            "[limits]\nmax_lateness = \"300000000years\"\n[[stream]]",
            "limits.max_lateness",
        ),
        (
            "[[stream]]",
            "[limits]\nmax_clock_skew = \"0s\"\n[[stream]]",
            "limits.max_clock_skew",
        ),
        (
            "window_size = 1000",
            "window_size = 1099511627776",
            "window_size",
        ),
        (
            "window_size = 1000",
            "window_size = 1000\nwindow_timeout = \"1ns\"",
            "window_timeout",
        ),
        (
            "max_readings_per_device = 1",
            "max_readings_per_device = 4000000000",
            "max_readings_per_device",
        ),
        (
            "max_windows_per_device = 24",
            "max_windows_per_device = 4000000000",
            "max_windows_per_device",
        ),
        (
            "epsilon_per_device = 1.0",
            "epsilon_per_device = 1e-15",
            "epsilon_per_device",
        ),
        ("name = \"cabin_temp_c\"", "name = \"a/0\"", "name"),
        (
            "[[stream]]",
            "[limits]\nmax_message_bytes = 1099511627776\n[[stream]]",
            "limits.max_message_bytes",
        ),
        (
            "[[stream]]",
            "[limits]\nmax_readings_per_message = 1000000000000\n[[stream]]",
            "limits.max_readings_per_message",
        ),
    ];
    for (from, to, field) in cases {
        let text = SAMPLE.replace(from, to);
        assert_ne!(text, SAMPLE, "{to}");
        let started = std::time::Instant::now();
        let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(field), "{to}: expected {field:?} in: {msg}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{to}: slow"
        );
    }
}

#[test]
fn debug_never_shows_client_property_values() {
    let text = SAMPLE.replace(
        "dead_letter_topic = \"readings.dlq\"",
        "dead_letter_topic = \"readings.dlq\"\n[kafka.properties]\n\"sasl.password\" = \"hunter2\"",
    );
    let c = Config::parse(&text).unwrap();
    let shown = format!("{c:?}");
    assert!(
        shown.contains("sasl.password") && !shown.contains("hunter2"),
        "{shown}"
    );
}

#[test]
fn key_is_required() {
    let mut c = Config::parse(SAMPLE).unwrap();
    c.privacy.key_env = None;
    assert!(format!("{:#}", c.release_key().unwrap_err()).contains("no release key"));
    c.privacy.key_env = Some("FLEETDP_SURELY_UNSET_VAR".into());
    assert!(format!("{:#}", c.release_key().unwrap_err()).contains("FLEETDP_SURELY_UNSET_VAR"));
}

/// The keys a section accepts, as serde lists them when it meets an
/// unknown one (so the list cannot drift from the structs).
fn keys_of(section: &str) -> Vec<String> {
    let header = if section == "stream" {
        "[[stream]]\n".to_string()
    } else {
        format!("[{section}]\n")
    };
    let text = if SAMPLE.contains(&header) {
        SAMPLE.replacen(&header, &format!("{header}zz_not_a_key = 1\n"), 1)
    } else {
        // A section the sample leaves to its defaults.
        SAMPLE.replacen(
            "[[stream]]\n",
            &format!("{header}zz_not_a_key = 1\n\n[[stream]]\n"),
            1,
        )
    };
    let err = Config::parse(&text).unwrap_err().to_string();
    // serde lists "one of `a`, `b`" or, for two, "`a` or `b`".
    let list = err
        .split("expected one of ")
        .nth(1)
        .or_else(|| err.split("expected ").nth(1))
        .unwrap_or_else(|| panic!("no key list for [{section}]: {err}"));
    let list = list.lines().next().unwrap().replace(" or ", ",");
    list.split(',')
        .map(|k| k.trim().trim_matches('`').to_string())
        .filter(|k| !k.is_empty())
        .collect()
}

/// Every key the configuration accepts is in the configuration reference
/// (a new setting without documentation fails here).
#[test]
fn every_configuration_key_is_in_the_reference() {
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/configuration.md"
    ))
    .unwrap();
    let mut missing = Vec::new();
    let mut total = 0;
    for section in [
        "kafka", "privacy", "http", "limits", "fleet", "input", "stream", "registry",
    ] {
        let keys = keys_of(section);
        assert!(keys.len() >= 2, "[{section}] keys: {keys:?}");
        for k in keys {
            total += 1;
            if !reference.contains(&format!("`{k}`")) {
                missing.push(format!("{section}.{k}"));
            }
        }
    }
    assert!(total >= 40, "found {total} keys");
    assert!(
        missing.is_empty(),
        "keys missing from docs/configuration.md: {missing:?}"
    );
}

/// `[input]` and `[fleet]` are bounded at start, each error naming its field.
#[test]
fn input_and_fleet_settings_are_checked() {
    let with = |table: &str| format!("{SAMPLE}\n{table}");
    let input = |body: &str| with(&format!("[input]\n{body}"));
    let ok = input("device_id = \"vin\"\nevent_time = \"/ts\"\nevent_time_unit = \"rfc3339\"\n[input.streams]\ncabin_temp_c = \"cabin.temp\"");
    let v = Config::parse(&ok).unwrap().validate().unwrap();
    let m = v.mapping.expect("a mapping");
    assert_eq!(m.streams[0].0, "cabin_temp_c");
    assert_eq!(m.streams[0].1.as_str(), "cabin.temp");
    let cases = [
        (
            input("device_id = \"\"\nevent_time = \"ts\"\n[input.streams]\ncabin_temp_c = \"t\""),
            "input.device_id",
        ),
        (
            input("device_id = \"vin\"\nevent_time = \"a..b\"\n[input.streams]\ncabin_temp_c = \"t\""),
            "input.event_time",
        ),
        (
            input("device_id = \"vin\"\nevent_time = \"ts\"\nevent_time_unit = \"minutes\"\n[input.streams]\ncabin_temp_c = \"t\""),
            "input.event_time_unit",
        ),
        (
            input("device_id = \"vin\"\nevent_time = \"ts\"\n[input.streams]\nspeed = \"v\""),
            "input.streams.speed",
        ),
        (
            input("device_id = \"vin\"\nevent_time = \"ts\"\n[input.streams]\ncabin_temp_c = \"/\""),
            "input.streams.cabin_temp_c",
        ),
        (
            input("device_id = \"vin\"\nevent_time = \"ts\"\n[input.streams]"),
            "input.streams",
        ),
        (with("[fleet]\nmax_wait = \"8d\""), "fleet.max_wait"),
        (with("[fleet]\nlookback = \"forever\""), "fleet.lookback"),
        (with("[fleet]\nmax_pending = 0"), "fleet.max_pending"),
        (with("[fleet]\nmax_pending = 1000001"), "fleet.max_pending"),
    ];
    for (text, field) in cases {
        let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(field), "expected {field:?} in: {msg}");
    }
}

/// `[dimensions]`, `group_by` and `[registry]` are bounded at start, each
/// error naming its field; a valid grouping plans one stream per group.
#[test]
fn groups_are_validated_and_planned() {
    let grouped = SAMPLE.replace(
        "[[stream]]\n",
        "[dimensions]\nfirmware = [\"4.1\", \"4.2\"]\n\n[[stream]]\ngroup_by = [\"firmware\"]\nmax_groups_per_device = 2\n",
    );
    let v = Config::parse(&grouped).unwrap().validate().unwrap();
    let names: Vec<&str> = v
        .plan
        .streams
        .iter()
        .map(|s| s.spec.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "cabin_temp_c[firmware=4.1]",
            "cabin_temp_c[firmware=4.2]",
            "cabin_temp_c[firmware=other]"
        ]
    );
    assert_eq!(v.guarantee(&v.plan.streams[1]).max_groups_per_device, 2);
    // `fleetdp plan` shows the declared stream once, with its groups and
    // what a device pays over its G groups (the whole plan's spend here).
    let r = crate::commands::report::PlanReport::new(&v);
    assert_eq!(r.streams.len(), 1);
    assert_eq!(r.streams[0].name, "cabin_temp_c");
    assert_eq!(r.streams[0].groups.as_ref().unwrap().keys.len(), 3);
    assert!((r.streams[0].spent_per_horizon - r.spent_per_horizon).abs() < 1e-12);
    assert!(r
        .to_text()
        .contains("3 groups (firmware=4.1, firmware=4.2, firmware=other)"));
    let registry = "[registry]\ntopic = \"devices\"\n\n[[stream]]\n";
    let cases = [
        (
            grouped.replace("\"4.1\", ", "\"other\", "),
            "dimensions.firmware",
        ),
        (
            grouped.replace("[\"firmware\"]\nmax", "[\"model\"]\nmax"),
            "group_by",
        ),
        (
            grouped.replace("max_groups_per_device = 2", "max_groups_per_device = 0"),
            "max_groups_per_device",
        ),
        (
            SAMPLE.replace("[[stream]]\n", "[[stream]]\nmax_groups_per_device = 2\n"),
            "max_groups_per_device",
        ),
        (SAMPLE.replacen("[[stream]]\n", registry, 1), "registry"),
        (
            grouped.replacen("[[stream]]\n", &registry.replace("devices", "readings"), 1),
            "registry.topic",
        ),
        (
            grouped.replacen("[[stream]]\n", registry, 1).replacen(
                "input_topic",
                "otlp_topic = \"devices\"\ninput_topic",
                1,
            ),
            "registry.topic",
        ),
        (
            grouped.replacen(
                "[[stream]]\n",
                &registry.replace("topic = \"devices\"", "topic = \"d\"\nmax_devices = 0"),
                1,
            ),
            "registry.max_devices",
        ),
        // Private keys route from two horizons on: lateness and skew must
        // fit in a horizon; their settings only with a private dimension.
        (
            grouped
                .replace(
                    "firmware = [\"4.1\", \"4.2\"]",
                    "firmware = { private = true, max_keys = 2 }",
                )
                .replace("horizon = \"24h\"", "horizon = \"30m\""),
            "at most privacy.horizon (\"30m\")",
        ),
        (
            grouped.replace("max_groups_per_device = 2", "key_selection_share = 0.2"),
            "key_selection_share",
        ),
        (
            grouped
                .replace(
                    "firmware = [\"4.1\", \"4.2\"]",
                    "firmware = { private = true, max_keys = 2 }",
                )
                .replace("max_groups_per_device = 2", "key_selection_delta = 0.7"),
            "key_selection_delta",
        ),
    ];
    for (text, field) in cases {
        let e = Config::parse(&text)
            .and_then(Config::validate)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
}

/// `[input] avro_schema` / `avro_schema_id` and `input_format = "avro"`:
/// refused at start naming the field, unless they fit together.
#[test]
fn avro_settings_are_checked() {
    let dir = std::env::temp_dir().join(format!("fleetdp-avro-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.avsc");
    std::fs::write(&good, ingest::EXAMPLE_AVRO_SCHEMA).unwrap();
    let bad = dir.join("bad.avsc");
    std::fs::write(&bad, "{\"type\": \"record\"").unwrap();
    let long = dir.join("long.avsc");
    std::fs::write(&long, "\"long\"").unwrap();
    let text = |format: &str, rct: bool, extra: &str| {
        format!(
            "{}\n[input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\n{extra}\n[input.streams]\ncabin_temp_c = \"cabin.temp_c\"",
            SAMPLE.replacen(
                "[kafka]\n",
                &format!("[kafka]\ninput_format = \"{format}\"\nread_content_type = {rct}\n"),
                1
            )
        )
    };
    let schema = |p: &std::path::Path| format!("avro_schema = {:?}", p.display().to_string());
    let v = Config::parse(&text(
        "avro",
        false,
        &(schema(&good) + "\navro_schema_id = 3"),
    ))
    .unwrap()
    .validate()
    .unwrap();
    assert_eq!(v.avro.expect("a schema").name(), "acme.v1.Telemetry");
    // Content types decide: a protobuf default with headers read is fine.
    assert!(Config::parse(&text("protobuf", true, &schema(&good)))
        .unwrap()
        .validate()
        .is_ok());
    let cases = [
        (text("avro", false, ""), "kafka.input_format"),
        (text("protobuf", false, &schema(&good)), "input.avro_schema"),
        (
            text("avro", false, &schema(&dir.join("absent.avsc"))),
            "input.avro_schema",
        ),
        (text("avro", false, &schema(&bad)), "input.avro_schema"),
        (text("avro", false, &schema(&long)), "record"),
        (
            text("avro", false, "avro_schema_id = 3"),
            "input.avro_schema_id",
        ),
        (
            text("avro", false, &(schema(&good) + "\navro_schema_id = -1")),
            "avro_schema_id",
        ),
    ];
    for (text, field) in cases {
        let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(field), "expected {field:?} in: {msg}");
    }
    // Schemas from a registry: framed input, one source of schemas, http.
    let url = |u: &str| format!("schema_registry_url = {u:?}");
    let framed = |t: String| t.replacen("[kafka]\n", "[kafka]\ninput_framing = \"confluent\"\n", 1);
    let v = Config::parse(&framed(text("avro", false, &url("http://127.0.0.1:8081"))))
        .unwrap()
        .validate()
        .unwrap();
    assert!(v.schema_registry.is_some() && v.avro.is_none());
    for bad in [
        text("avro", false, &url("http://127.0.0.1:8081")),
        framed(text("avro", false, &url("https://registry:8081"))),
        framed(text(
            "avro",
            false,
            &(url("http://r:1") + "\n" + &schema(&good)),
        )),
        framed(text("protobuf", false, &url("http://r:1"))),
    ] {
        let err = Config::parse(&bad).and_then(|c| c.validate()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("input.schema_registry_url"), "{msg}");
    }
    // Protobuf topics are pointed at the descriptor-set path.
    let protobuf = framed(text("protobuf", false, &url("http://r:1")));
    let err = Config::parse(&protobuf)
        .and_then(|c| c.validate())
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("input.protobuf_descriptor_set"),
        "{err:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
