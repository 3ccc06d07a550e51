//! Release key rotation, through the binary and the broker: a lane is
//! resumed only under the key its state was written with, or under the key
//! that declares it replaces it (`privacy.rotate_from`); then no window is
//! ever published with two different values, not even while two instances
//! holding different keys share the group (docs/operations.md, Rotating
//! the release key).

use crate::harness;

use fleetdp::dp::rng::ReleaseKey;
use harness::child::Service;
use harness::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const PRIVACY: &str = "epsilon_per_device = 1.0\nhorizon = \"24h\"";
const STREAM: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nstatistics = [\"count\", \"mean\"]";

fn rotating_from(old: &ReleaseKey) -> String {
    format!("{PRIVACY}\nrotate_from = \"{}\"", old.id())
}

/// Five readings of fresh devices (named `tag…`) that belong on input
/// partition `p` of two: one count window.
async fn window(broker: &Broker, t: &Topics, p: i32, tag: &str) {
    let now = now_ms();
    let on_p = |d: &String| fleetdp::Partitioner::Murmur2.partition(d.as_bytes(), 2) == Some(p);
    let msgs: Vec<Out> = (0..)
        .map(|i| format!("{tag}{i}"))
        .filter(on_p)
        .take(5)
        .enumerate()
        .map(|(i, d)| temp_reading(Some(p), &d, 20.0 + i as f64, now + i as i64))
        .collect();
    produce(broker, &t.input, &msgs).await;
}

/// The window releases on the output topic: per record key
/// (`temp/partition/seq`), each distinct payload with its key headers.
type Published = BTreeMap<String, BTreeSet<(Vec<u8>, String, String)>>;

fn published(broker: &Broker, t: &Topics) -> Published {
    let mut out = Published::new();
    for r in tokio::task::block_in_place(|| read_all(broker, &t.output)) {
        if r.is_fleet() {
            continue;
        }
        let header = |h: &str| r.headers.get(h).cloned().unwrap_or_default();
        let key = String::from_utf8(r.key.clone()).unwrap();
        out.entry(key).or_default().insert((
            r.payload.clone(),
            header("fleetdp-release-key-id"),
            header("fleetdp-release-key-from"),
        ));
    }
    out
}

/// Every window was published with one value, however many copies.
fn once_each(p: &Published) {
    let twice: Vec<_> = p.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "windows published with two values: {twice:?}"
    );
}

async fn releases_reach(broker: &Broker, t: &Topics, keys: &[&str]) -> bool {
    wait_until(WAIT, || {
        let p = published(broker, t);
        keys.iter().all(|k| p.contains_key(*k))
    })
    .await
}

#[test]
fn a_lane_written_under_another_key_is_refused_and_a_declared_rotation_resumes_it() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "rotate", 1).await;
        let (old, new) = (ReleaseKey::ephemeral(), ReleaseKey::ephemeral());
        let a = Service::start_with(&broker, &t, [PRIVACY, "", STREAM], "", &old.to_hex());
        assert!(a.ready_within(WAIT).await, "never ready: {}", a.log());
        window(&broker, &t, 0, "a").await;
        window(&broker, &t, 0, "b").await;
        assert!(
            releases_reach(&broker, &t, &["temp/0/0", "temp/0/1"]).await,
            "{}",
            a.log()
        );
        let (status, log) = a.stop(libc::SIGTERM);
        assert!(status.success(), "{log}");
        assert!(
            log.contains(&old.id()),
            "the start line names the key id: {log}"
        );
        assert!(
            !log.contains(&old.to_hex()),
            "the key itself is never logged"
        );

        // Another key, undeclared: refused, naming both ids and the way.
        window(&broker, &t, 0, "c").await;
        let mut b = Service::start_with(
            &broker,
            &t.regroup(),
            [PRIVACY, "", STREAM],
            "",
            &new.to_hex(),
        );
        let status = b.exited_within(WAIT).await;
        let log = b.log();
        assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
        for needle in [
            format!("release key {}", old.id()),
            format!("this instance holds release key {}", new.id()),
            "privacy.rotate_from".to_string(),
        ] {
            assert!(log.contains(&needle), "{needle:?} not in: {log}");
        }
        assert_eq!(
            published(&broker, &t).len(),
            2,
            "the refused instance released"
        );

        // Declared: the lane resumes under the new key after its last
        // release; nothing is released twice.
        let c = Service::start_with(
            &broker,
            &t.regroup(),
            [&rotating_from(&old), "", STREAM],
            "",
            &new.to_hex(),
        );
        assert!(
            releases_reach(&broker, &t, &["temp/0/2"]).await,
            "{}",
            c.log()
        );
        let p = published(&broker, &t);
        once_each(&p);
        assert_eq!(p.len(), 3, "{p:?}");
        let headers = |k: &str| {
            p[k].iter()
                .map(|x| (x.1.clone(), x.2.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(headers("temp/0/1"), [(old.id(), String::new())]);
        assert_eq!(headers("temp/0/2"), [(new.id(), old.id())]);
    });
}

#[test]
fn two_instances_with_different_keys_never_publish_a_window_twice() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "rotate-two", 2).await;
        let (old, new) = (ReleaseKey::ephemeral(), ReleaseKey::ephemeral());
        let mut a = Service::start_with(&broker, &t, [PRIVACY, "", STREAM], "", &old.to_hex());
        assert!(a.ready_within(WAIT).await, "never ready: {}", a.log());
        for p in 0..2 {
            window(&broker, &t, p, &format!("a{p}-")).await;
        }
        assert!(
            releases_reach(&broker, &t, &["temp/0/0", "temp/1/0"]).await,
            "{}",
            a.log()
        );

        // The new key joins the same group: the partitions are split, then
        // the old-key instance sees a new-key release and stops.
        let b = Service::start_with(
            &broker,
            &t,
            [&rotating_from(&old), "", STREAM],
            "",
            &new.to_hex(),
        );
        assert!(b.ready_within(WAIT).await, "never ready: {}", b.log());
        // Round b, written while both instances share the group. The old
        // key may release its partition's window, or charge it and stop on
        // seeing the new key's release first: then that window is skipped
        // (docs/operations.md, Rotating the release key), never released
        // by the new key. Either way the old instance stops.
        for p in 0..2 {
            window(&broker, &t, p, &format!("b{p}-")).await;
        }
        let status = a.exited_within(WAIT).await;
        let log = a.log();
        assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
        assert!(
            log.contains("was replaced: a release on the output topic was written under key"),
            "{log}"
        );
        // Round c: the new key holds both partitions and releases both.
        for p in 0..2 {
            window(&broker, &t, p, &format!("c{p}-")).await;
        }
        assert!(
            releases_reach(&broker, &t, &["temp/0/2", "temp/1/2"]).await,
            "round c: {:?}\nold: {log}\nnew: {}",
            published(&broker, &t).keys(),
            b.log()
        );
        // Every round-b window was released or skipped as charged, none
        // lost (released twice is what once_each below rules out).
        let (p, new_log) = (published(&broker, &t), b.log());
        for part in 0..2 {
            let skipped = new_log.lines().any(|l| {
                l.contains("are skipped") && l.contains(&format!("partition={part} windows=1"))
            });
            assert!(
                p.contains_key(&format!("temp/{part}/1")) || skipped,
                "round b, partition {part}: released {:?}, skipped {skipped}\n{new_log}",
                p.keys()
            );
        }

        // Every window once; the old key stopped releasing once the new one
        // had; the new key's releases declare what they replace.
        once_each(&p);
        for (key, versions) in &p {
            for (_, id, from) in versions {
                match id {
                    i if *i == old.id() => assert!(from.is_empty(), "{key}"),
                    i if *i == new.id() => assert_eq!(*from, old.id(), "{key}"),
                    other => panic!("{key}: written under an unknown key {other:?}"),
                }
            }
        }
        assert!(
            p.values().flatten().any(|v| v.1 == new.id()),
            "the new key released nothing: {p:?}"
        );
        drop(b);
    });
}

#[cfg(feature = "crash-points")]
#[test]
fn a_window_the_old_key_charged_is_never_released_under_the_new_one() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "rotate-charged", 1).await;
        let (old, new) = (ReleaseKey::ephemeral(), ReleaseKey::ephemeral());
        // The old key charges window 0 and dies before releasing it.
        let env = [("FLEETDP_CRASH_AT", "before_release:1")];
        let mut a = Service::start_env(
            &broker,
            &t,
            [PRIVACY, "", STREAM],
            ("", &old.to_hex()),
            (&env, &[]),
        );
        window(&broker, &t, 0, "a").await;
        let status = a.exited_within(WAIT).await;
        assert!(
            status.is_some_and(|s| !s.success()),
            "did not crash: {}",
            a.log()
        );
        assert!(published(&broker, &t).is_empty());

        let b = Service::start_with(
            &broker,
            &t.regroup(),
            [&rotating_from(&old), "", STREAM],
            "",
            &new.to_hex(),
        );
        assert!(b.ready_within(WAIT).await, "never ready: {}", b.log());
        window(&broker, &t, 0, "b").await;
        assert!(
            releases_reach(&broker, &t, &["temp/0/1"]).await,
            "{}",
            b.log()
        );
        let p = published(&broker, &t);
        assert!(
            !p.contains_key("temp/0/0"),
            "the old key's window was released by the new one: {p:?}"
        );
        assert!(b
            .log()
            .contains("windows charged under the previous key and not released are skipped"));
    });
}

#[test]
fn keygen_prints_the_id_and_a_bad_rotate_from_is_refused() {
    let dir = std::env::temp_dir().join(unique("keygen"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("release.key");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args(["keygen", "--out"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let key = ReleaseKey::from_hex(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("its id is {}", key.id())), "{said}");
    std::fs::remove_dir_all(&dir).unwrap();

    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("rotate-bad");
        for (rotate_from, says) in [
            (key.id(), "names this instance's own release key"),
            (
                "not-an-id".to_string(),
                "privacy.rotate_from: must be a release key id",
            ),
        ] {
            let privacy = format!("{PRIVACY}\nrotate_from = \"{rotate_from}\"");
            let mut s = Service::start_with(&broker, &t, [&privacy, "", STREAM], "", &key.to_hex());
            let status = s.exited_within(WAIT).await;
            let log = s.log();
            assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
            assert!(log.contains(says), "{says:?} not in: {log}");
        }
    });
}
