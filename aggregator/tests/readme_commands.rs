//! The README's "Against a real cluster" commands, each run as written against
//! a copy of `deploy/fleetdp.toml` pointed at the test broker (found:
//! the README's `simulate` against the shipped configuration dead-lettered
//! 67% of its messages). Only what a test must change is changed: the
//! configuration's brokers, topics, group and listener; `simulate`'s size
//! and `tail`'s end (`--max`, `--idle`). Every command must succeed, the
//! service must dead-letter nothing and release windows that `tail` shows.
//! Needs a broker a child process can reach (tests/run.sh starts tansu).

use crate::harness;

use harness::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The `fleetdp …` commands of the README's block after `marker`, without
/// their comments.
fn readme_commands(marker: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let at = readme.find(marker).expect("the README's section");
    let block = &readme[at..];
    let block = &block[block.find("```sh\n").unwrap() + 6..];
    let block = &block[..block.find("```").unwrap()];
    block
        .lines()
        .filter(|l| l.starts_with("fleetdp "))
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .collect()
}

fn fleetdp(dir: &Path, line: &str, extra: &[&str]) -> Command {
    let mut words = line.split_whitespace().skip(1);
    let mut c = Command::new(env!("CARGO_BIN_EXE_fleetdp"));
    c.current_dir(dir).args(words.by_ref()).args(extra);
    c
}

fn run_ok(dir: &Path, line: &str, extra: &[&str]) -> String {
    String::from_utf8(stdout_of(&mut fleetdp(dir, line, extra))).unwrap()
}

#[test]
fn the_readme_commands_run_against_the_shipped_configuration() {
    let broker = Broker::start();
    if !broker.is_external() {
        eprintln!("SKIPPED: needs a broker a child process can reach (FLEETDP_TEST_BROKERS)");
        return;
    }
    let commands = readme_commands("## Against a real cluster");
    // A command this test does not run would go untested.
    for c in &commands {
        let sub = c.split_whitespace().nth(1).unwrap();
        assert!(
            [
                "keygen",
                "plan",
                "run",
                "simulate",
                "tail",
                "advise",
                "dashboard"
            ]
            .contains(&sub),
            "the README shows `{c}`, which this test does not run"
        );
    }
    let find = |sub: &str| {
        commands
            .iter()
            .find(|c| c.starts_with(&format!("fleetdp {sub} ")))
            .unwrap_or_else(|| panic!("no `fleetdp {sub}` in the README: {commands:?}"))
            .clone()
    };
    let rt = runtime();
    let t = rt.block_on(Topics::created(&broker, "readme", 1));
    let port = free_port();
    let dir = std::env::temp_dir().join(unique("fleetdp-readme"));
    std::fs::create_dir_all(dir.join("deploy")).unwrap();
    let text =
        shipped_config(&broker, &t).replace("\"0.0.0.0:9898\"", &format!("\"127.0.0.1:{port}\""));
    assert!(
        !text.contains("0.0.0.0:9898"),
        "the test could not change the listener"
    );
    std::fs::write(dir.join("deploy/fleetdp.toml"), text).unwrap();

    // keygen, plan --strict: as written.
    run_ok(&dir, &find("keygen"), &[]);
    let plan = run_ok(&dir, &find("plan"), &[]);
    assert!(plan.contains("cabin_temp_c"), "{plan}");

    let dashboard: serde_json::Value =
        serde_json::from_str(&run_ok(&dir, &find("dashboard"), &[])).unwrap();
    assert!(
        dashboard.to_string().contains("suffix: °C"),
        "no unit on the axes"
    );

    // run, until stopped.
    let log = dir.join("run.log");
    let mut service = fleetdp(&dir, &find("run"), &[])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let metrics = || http_get(&format!("http://127.0.0.1:{port}/metrics"));
    let start = Instant::now();
    while !matches!(
        http_get(&format!("http://127.0.0.1:{port}/readyz")),
        Some((200, _))
    ) {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "never ready: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // simulate: the README's fleet of 20,000 devices for 3 s instead of 5
    // minutes (windows of 2,000 readings of distinct devices fill anyway).
    let simulate = find("simulate").replace("--duration 5m", "--duration 3s");
    assert_ne!(simulate, find("simulate"), "the README's simulate changed");
    stdout_of(&mut fleetdp(&dir, &simulate, &[]));

    // tail: the first releases as they land.
    let tail = run_ok(
        &dir,
        &find("tail"),
        &["--from-beginning", "--max", "2", "--idle", "60s"],
    );
    assert!(
        tail.lines().filter(|l| l.contains("cabin_temp_c")).count() >= 2,
        "tail showed no releases:\n{tail}"
    );

    // Nothing dead-lettered, releases counted.
    let (_, text) = metrics().expect("/metrics");
    let total = |family: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(family) && !l.starts_with('#'))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert!(total("fleetdp_messages_total") > 0.0, "{text}");
    assert_eq!(
        total("fleetdp_dead_letters_total"),
        0.0,
        "dead letters:\n{}",
        text.lines()
            .filter(|l| l.starts_with("fleetdp_dead_letters_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(total("fleetdp_windows_released_total") >= 2.0, "{text}");

    // advise, as written: proposes bounds from the input it reads.
    let advice = run_ok(&dir, &find("advise"), &[]);
    assert!(advice.contains("\nlower = "), "{advice}");

    // SIGTERM: finish, commit, exit 0.
    // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(s) = service.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "run did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.success(),
        "run exited {status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
