//! What `fleetdp plan` does with any configuration file: 10⁴ seeded TOML
//! texts, each a valid configuration with some settings replaced by edge
//! values (durations from 1 ns to 3·10⁸ years, nan/inf/negative numbers,
//! sizes past every documented bound, odd names), go through the parser,
//! validation and the plan report exactly as `fleetdp plan` runs them. Each
//! must be refused with an error naming a setting, or produce its report,
//! within 1 s of the test thread's CPU time (not the wall clock: the suite
//! runs tests side by side on two cores, and a loaded run took 1.8 s of
//! wall time for a plan that costs 0.4 s) and without a panic. The privacy core's own property test is
//! `aggregator/dp/tests/plan_property.rs`.

use fleetdp::config::Config;
use fleetdp::report::PlanReport;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

const CONFIGS: u64 = 10_000;
const BOUND: Duration = Duration::from_secs(1);

fn pick<'a>(rng: &mut ChaCha8Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.gen_range(0..xs.len())]
}

/// `normal` or, with probability `p`, one of `edges`.
fn value<'a>(rng: &mut ChaCha8Rng, p: f64, normal: &'a str, edges: &[&'a str]) -> &'a str {
    if rng.gen_bool(p) {
        pick(rng, edges)
    } else {
        normal
    }
}

const DURATIONS: &[&str] = &[
    "\"1ns\"",
    "\"0s\"",
    "\"1ms\"",
    "\"300000000years\"",
    "\"10years\"",
    "\"often\"",
    "\"\"",
    "5",
    "\"-1h\"",
];
const NUMBERS: &[&str] = &[
    "0", "-1", "nan", "inf", "-inf", "1e-300", "1e300", "1e-15", "0.5", "1.5",
];
const COUNTS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "10000001",
    "1099511627776",
    "18446744073709551615",
    "4294967296",
    "1.5",
];

fn config(rng: &mut ChaCha8Rng) -> String {
    let p = *[0.02, 0.08, 0.3].get(rng.gen_range(0..3)).unwrap();
    let add_remove = rng.gen_bool(0.5);
    let zcdp = rng.gen_bool(0.5);
    let mut t = String::new();
    t += "[kafka]\nbrokers = \"127.0.0.1:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\ndead_letter_topic = \"dlq\"\n";
    t += &format!(
        "dead_letters_in_flight = {}\n",
        value(rng, p, "1", &["0", "1000001", "-5"])
    );
    t += "[privacy]\n";
    if add_remove {
        t += "relation = \"add-remove\"\n";
    }
    if zcdp {
        t += &format!(
            "measure = \"zcdp\"\nrho_per_device = {}\ndelta = {}\n",
            value(rng, p, "0.5", NUMBERS),
            value(rng, p, "1e-6", NUMBERS)
        );
    } else {
        t += &format!("epsilon_per_device = {}\n", value(rng, p, "2.0", NUMBERS));
    }
    t += &format!(
        "horizon = {}\nkey_env = \"UNUSED\"\n",
        value(rng, p, "\"24h\"", DURATIONS)
    );
    t += &format!(
        "[http]\nready_max_lag = {}\nstall_timeout = {}\n",
        value(rng, p, "100000", &["-1", "0", "9223372036854775807"]),
        value(rng, p, "\"2m\"", DURATIONS)
    );
    t += &format!(
        "[limits]\nmax_message_bytes = {}\nmax_readings_per_message = {}\nmax_lateness = {}\nmax_clock_skew = {}\n",
        value(rng, p, "1048576", COUNTS),
        value(rng, p, "10000", COUNTS),
        value(rng, p, "\"1h\"", DURATIONS),
        value(rng, p, "\"5m\"", DURATIONS)
    );
    let grouped = rng.gen_bool(0.3);
    let private = grouped && rng.gen_bool(0.4);
    if grouped {
        let firmware = if private {
            format!(
                "{{ private = {}, max_keys = {} }}",
                value(rng, p, "true", &["false", "1"]),
                value(rng, p, "4", COUNTS)
            )
        } else {
            value(
                rng,
                p,
                "[\"4.1\", \"4.2\"]",
                &["[]", "[\"other\"]", "[\"a b\"]", "[\"x\", \"x\"]"],
            )
            .to_string()
        };
        t += &format!(
            "[dimensions]\nfirmware = {}\nregion = {}\n",
            firmware,
            value(rng, p, "[\"eu\", \"us\", \"apac\"]", &["[\"\"]", "[1]"]),
        );
        if rng.gen_bool(0.3) {
            t += &format!(
                "[registry]\ntopic = {}\nmax_devices = {}\n",
                value(rng, p, "\"devices\"", &["\"\"", "\"in\""]),
                value(rng, p, "1000", COUNTS)
            );
        }
    }
    for i in 0..rng.gen_range(1..=3) {
        let stats = pick(
            rng,
            &[
                "[\"mean\"]",
                "[\"count\"]",
                "[\"sum\", \"std\"]",
                "[\"mean\", \"histogram\", \"quantiles\"]",
                "[\"variance\", \"quantiles\"]",
            ],
        );
        t += &format!(
            "[[stream]]\nname = {}\nlower = {}\nupper = {}\nresolution = {}\n",
            value(
                rng,
                p,
                &format!("\"s{i}\""),
                &["\"\"", "\"a/0\"", "\"ünï\""]
            ),
            value(rng, p, "-40.0", NUMBERS),
            value(rng, p, "85.0", NUMBERS),
            value(rng, p, "0.1", &["0", "-0.1", "1e-9", "nan", "0.3", "1e300"]),
        );
        if add_remove {
            t += &format!("window = {}\n", value(rng, p, "\"5m\"", DURATIONS));
        } else {
            t += &format!("window_size = {}\n", value(rng, p, "100", COUNTS));
            if rng.gen_bool(p) {
                t += &format!("window_timeout = {}\n", pick(rng, DURATIONS));
            }
        }
        t += &format!(
            "max_readings_per_device = {}\nmax_windows_per_device = {}\nbudget_share = {}\nstatistics = {stats}\n",
            value(rng, p, "1", COUNTS),
            value(rng, p, "24", COUNTS),
            value(rng, p, "0.3", NUMBERS),
        );
        if stats.contains("histogram") {
            t += &format!(
                "histogram_edges = {}\n",
                value(
                    rng,
                    p,
                    "[-40, 0, 20, 85]",
                    &["[]", "[85, 0, -40]", "[nan, 1]"]
                )
            );
        }
        if stats.contains("quantiles") {
            t += &format!(
                "quantiles = {}\n",
                value(rng, p, "[0.5, 0.9]", &["[]", "[-0.1]", "[nan]", "[1.5]"])
            );
        }
        if grouped && rng.gen_bool(0.7) {
            t += &format!(
                "group_by = {}\nmax_groups_per_device = {}\n",
                value(
                    rng,
                    p,
                    "[\"firmware\", \"region\"]",
                    &["[]", "[\"model\"]", "[\"firmware\", \"firmware\"]"]
                ),
                value(rng, p, "2", COUNTS)
            );
            if private && rng.gen_bool(0.5) {
                t += &format!(
                    "key_selection_share = {}\nkey_selection_delta = {}\n",
                    value(rng, p, "0.2", NUMBERS),
                    value(rng, p, "1e-7", NUMBERS)
                );
            }
        }
        if !add_remove && rng.gen_bool(0.3) {
            t += &format!(
                "running_share = {}\nrunning_lifetime = {}\n",
                value(rng, p, "0.2", NUMBERS),
                value(rng, p, "65536", COUNTS)
            );
        }
    }
    t
}

/// The CPU time this thread has used (planning runs on it alone).
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[test]
fn every_configuration_is_planned_or_refused_quickly() {
    let mut rng = ChaCha8Rng::seed_from_u64(11_24);
    let (mut planned, mut refused) = (0u64, 0u64);
    let mut slowest = Duration::ZERO;
    for c in 0..CONFIGS {
        let text = config(&mut rng);
        let started = thread_cpu();
        let outcome = std::panic::catch_unwind(|| -> Result<String, String> {
            let v = Config::parse(&text)
                .and_then(Config::validate)
                .map_err(|e| format!("{e:#}"))?;
            let report = PlanReport::new(&v);
            Ok(report.to_text() + &serde_json::to_string(&report).unwrap())
        });
        let took = thread_cpu() - started;
        slowest = slowest.max(took);
        match outcome {
            Err(_) => panic!("config {c} panicked:\n{text}"),
            Ok(Ok(report)) => {
                assert!(
                    report.contains("s0") || report.contains("stream"),
                    "{report}"
                );
                planned += 1;
            }
            Ok(Err(e)) => {
                // The error names what is wrong: a section, a key or a stream.
                assert!(
                    [
                        "kafka",
                        "privacy",
                        "http",
                        "limits",
                        "stream",
                        "configuration",
                        "window",
                        "epsilon",
                        "rho",
                        "delta",
                        "horizon",
                        "dimensions",
                        "registry"
                    ]
                    .iter()
                    .any(|w| e.contains(w)),
                    "config {c}: an error that names nothing: {e}\n{text}"
                );
                refused += 1;
            }
        }
        assert!(took <= BOUND, "config {c} took {took:?}:\n{text}");
    }
    eprintln!("{planned} planned, {refused} refused; slowest {slowest:?}");
    assert!(
        planned >= 1000 && refused >= 1000,
        "{planned} planned, {refused} refused"
    );
}
