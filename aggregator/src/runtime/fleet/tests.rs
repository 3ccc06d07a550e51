//! The combiner's decisions: what completes a seq, the change-one timer,
//! the add-remove rule without one, the bound on waiting seqs, releases of
//! another plan, and records read back from the topic.

use super::*;
use crate::config::Config;
use crate::dp::rng::ReleaseKey;
use std::sync::Arc;

const CHANGE_ONE: &str = r#"
[kafka]
brokers = "b"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = 4.0
horizon = "24h"
[fleet]
max_wait = "10s"
max_pending = 3
[[stream]]
name = "t"
lower = 0.0
upper = 100.0
resolution = 0.5
window_size = 4
max_windows_per_device = 10
statistics = ["count", "sum", "mean", "std", "quantiles"]
quantiles = [0.5]
"#;

fn validated(text: &str) -> Arc<Validated> {
    Arc::new(Config::parse(text).unwrap().validate().unwrap())
}

fn add_remove() -> Arc<Validated> {
    let text = CHANGE_ONE
        .replace(
            "horizon = \"24h\"",
            "horizon = \"24h\"\nrelation = \"add-remove\"",
        )
        .replace("window_size = 4", "window = \"1m\"");
    validated(&text)
}

/// Partition `p`'s release of `seq`, values `values` (grid units).
fn release(v: &Validated, p: i32, seq: u64, values: &[i64]) -> proto::WindowRelease {
    release_of(v, 0, p, seq, values)
}

/// [`release`] of planned stream `index`.
fn release_of(
    v: &Validated,
    index: usize,
    p: i32,
    seq: u64,
    values: &[i64],
) -> proto::WindowRelease {
    let s = &v.plan.streams[index];
    let key = ReleaseKey::from_bytes([1; 32]);
    let track = crate::dp::release::QuantileTrack::default();
    // With its raw moments, as the pipeline publishes it.
    let (stats, moments) = s.release_with_moments(&key, p, seq, values, &track, None);
    proto::WindowRelease {
        moments: moments.map(|m| proto::v1::RawMoments {
            count: m.count,
            centred_sum: m.centred_sum,
            centred_sum_sq: m.centred_sum_sq,
            boundary: m.boundary,
            sum: m.sum,
        }),
        stream: s.spec.name.clone(),
        partition: p,
        window_seq: seq,
        n: if s.spec.window_size > 0 {
            values.len() as u64
        } else {
            0
        },
        statistics: stats
            .iter()
            .map(|x| proto::Statistic {
                name: x.name.clone(),
                values: x.values.clone(),
                level: x.level,
                mechanism: x.mechanism.clone(),
                sensitivity: x.sensitivity,
                scale: x.scale,
                spent: x.spent,
                half_width: x.half_width,
                rank_half_width: x.rank_half_width,
                bin_edges: vec![],
            })
            .collect(),
        guarantee: Some(v.guarantee(s)),
        released_at_ms: 1000 + p as i64 + seq as i64 * 10,
        ..Default::default()
    }
}

#[test]
fn a_seq_is_combined_once_every_partition_released_it() {
    let v = validated(CHANGE_ONE);
    let mut c = Combiner::new(v.clone(), 3);
    let t0 = Instant::now();
    for p in [2, 0] {
        let (how, out) = c.offer(release(&v, p, 0, &[80, 90, 100, 110]), t0);
        assert_eq!((how, out.len()), (Offered::Kept, 0));
    }
    let (_, out) = c.offer(release(&v, 1, 0, &[80, 90, 100, 110]), t0);
    let f = &out[0];
    assert!(f.complete && f.partitions == [0, 1, 2] && f.input_partitions == 3);
    assert_eq!((f.n, f.released_at_ms), (12, 1002));
    let count = &f.statistics[0];
    assert_eq!((count.values[0], count.half_width), (12.0, Some(0.0)));
    // Equal n: the mean of the partitions' (differently noised) means.
    let mean = &f.statistics[2];
    let parts: f64 = (0..3)
        .map(|p| release(&v, p, 0, &[80, 90, 100, 110]).statistics[2].values[0])
        .sum();
    assert!((mean.values[0] - parts / 3.0).abs() < 1e-9);
    assert!(mean.half_width.unwrap() > 0.0 && mean.combination == "weighted_mean");
    assert_eq!(f.statistics[3].combination, "pooled");
    // A copy of a release of that seq (a replay) adds nothing.
    let (how, out) = c.offer(release(&v, 1, 0, &[80, 90, 100, 110]), t0);
    assert_eq!((how, out.len()), (Offered::Done, 0));
    assert_eq!(c.waiting(), 0);
}

#[test]
fn a_partition_past_the_seq_never_holds_it_up() {
    let v = validated(CHANGE_ONE);
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    // Partition 1 is already at seq 5 (its seq 4 came before the look-back).
    assert!(c.offer(release(&v, 1, 5, &[1, 2, 3, 4]), t0).1.is_empty());
    let (_, out) = c.offer(release(&v, 0, 4, &[1, 2, 3, 4]), t0);
    assert_eq!(out.len(), 1);
    assert!(!out[0].complete && out[0].partitions == [0] && out[0].window_seq == 4);
}

#[test]
fn change_one_publishes_a_partial_record_after_the_wait_then_the_whole() {
    let v = validated(CHANGE_ONE);
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    c.offer(release(&v, 0, 0, &[1, 2, 3, 4]), t0);
    assert!(c.due(t0 + Duration::from_secs(9)).is_empty());
    let partial = c.due(t0 + Duration::from_secs(10));
    assert_eq!(partial.len(), 1);
    assert!(!partial[0].complete && partial[0].partitions == [0]);
    assert!(
        c.due(t0 + Duration::from_secs(20)).is_empty(),
        "once per set"
    );
    let (_, out) = c.offer(
        release(&v, 1, 0, &[5, 6, 7, 8]),
        t0 + Duration::from_secs(30),
    );
    assert!(out[0].complete && out[0].partitions == [0, 1], "superseded");
}

#[test]
fn add_remove_never_publishes_on_a_timer_only_past_the_bound() {
    let v = add_remove();
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    for seq in 0..3 {
        c.offer(release(&v, 0, seq, &[1, 2, 3]), t0);
    }
    assert!(c.due(t0 + Duration::from_secs(3600)).is_empty());
    assert_eq!(c.waiting(), 3);
    // A fourth waiting seq is over `max_pending = 3`: the oldest goes out.
    let (_, out) = c.offer(release(&v, 0, 3, &[1, 2, 3]), t0);
    assert_eq!(out.len(), 1);
    assert!(out[0].window_seq == 0 && !out[0].complete);
    assert_eq!(c.waiting(), 3);
    // Under add-remove the window sizes are not public: n is 0 and the
    // count is the noisy one, with its interval.
    assert_eq!(out[0].n, 0);
    assert!(out[0].statistics[0].half_width.unwrap() > 0.0);
}

#[test]
fn releases_of_another_plan_or_stream_are_not_combined() {
    let v = validated(CHANGE_ONE);
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    let mut other = release(&v, 0, 0, &[1, 2, 3, 4]);
    other.guarantee.as_mut().unwrap().per_window *= 2.0;
    assert_eq!(c.offer(other, t0).0, Offered::Foreign);
    let mut unknown = release(&v, 0, 0, &[1, 2, 3, 4]);
    unknown.stream = "nope".into();
    assert_eq!(c.offer(unknown, t0).0, Offered::Foreign);
    let outside = release(&v, 7, 0, &[1, 2, 3, 4]);
    assert_eq!(c.offer(outside, t0).0, Offered::Foreign);
    assert_eq!(c.waiting(), 0);
}

#[test]
fn a_complete_record_read_back_ends_the_wait() {
    let v = validated(CHANGE_ONE);
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    c.offer(release(&v, 0, 0, &[1, 2, 3, 4]), t0);
    let known = c.seen(&proto::FleetRelease {
        stream: "t".into(),
        window_seq: 0,
        complete: true,
        ..Default::default()
    });
    assert!(known);
    assert_eq!(c.waiting(), 0);
    // Another plan's stream (anyone may write to the topic): not kept.
    let foreign = proto::FleetRelease {
        stream: "not-planned".into(),
        complete: true,
        ..Default::default()
    };
    assert!(
        !c.seen(&foreign),
        "a foreign stream is not one of the plan's"
    );
    let (how, out) = c.offer(release(&v, 1, 0, &[1, 2, 3, 4]), t0);
    assert_eq!((how, out.len()), (Offered::Done, 0));
}

/// Neighbouring streams release the same windows with other values: the
/// combiner's decisions (which seqs, which partitions, when, complete or
/// not) and every public field of its records must not differ, under both
/// relations — only the combined values may.
#[test]
fn decisions_and_public_fields_ignore_the_released_values() {
    for v in [validated(CHANGE_ONE), add_remove()] {
        let run = |values: &[i64]| {
            let mut c = Combiner::new(v.clone(), 2);
            let t0 = Instant::now();
            let mut out = Vec::new();
            for (step, (p, seq)) in [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (0, 3)]
                .iter()
                .enumerate()
            {
                let at = t0 + Duration::from_secs(step as u64 * 4);
                // Without the raw moments: the box intervals they give are
                // noisy figures themselves (they vary by window, as
                // output.md says); the decisions and every other public
                // field must not.
                let mut r = release(&v, *p, *seq, values);
                r.moments = None;
                out.extend(c.offer(r, at).1);
                out.extend(c.due(at));
            }
            out.extend(c.due(t0 + Duration::from_secs(60)));
            out.into_iter()
                .map(|f| {
                    let shape: Vec<_> = f
                        .statistics
                        .iter()
                        .map(|s| (s.name.clone(), s.combination.clone(), s.half_width, s.std))
                        .collect();
                    (
                        f.window_seq,
                        f.partitions,
                        f.complete,
                        f.n,
                        f.released_at_ms,
                        f.guarantee,
                        shape,
                    )
                })
                .collect::<Vec<_>>()
        };
        let (a, b) = (run(&[10, 20, 30, 40]), run(&[200, 0, 200, 0]));
        assert!(!a.is_empty());
        assert_eq!(a, b, "{:?}", v.plan.privacy.relation);
    }
}

/// Private keys: slot releases are combined by the key they carry, whatever
/// slot each partition bound it to; a key one partition lacks, `other`, and
/// past the bound a key's partial wait, publish nothing.
#[test]
fn private_keys_combine_by_their_key_and_only_complete() {
    let text = CHANGE_ONE
        .replace(
            "horizon = \"24h\"",
            "horizon = \"24h\"\nrelation = \"add-remove\"",
        )
        .replace("window_size = 4", "window = \"1m\"")
        .replace(
            "[[stream]]",
            "[dimensions]\nfw = { private = true, max_keys = 2 }\n[[stream]]",
        )
        + "group_by = [\"fw\"]\nbudget_share = 0.5\n"
        + "[[stream]]\nname = \"u\"\nlower = 0.0\nupper = 100.0\nresolution = 0.5\nwindow = \"1m\"\n\
           max_windows_per_device = 10\nbudget_share = 0.5\nstatistics = [\"count\", \"sum\"]\n";
    let v = validated(&text);
    let index = |name: &str| {
        v.plan
            .streams
            .iter()
            .position(|s| s.spec.name == name)
            .unwrap()
    };
    let slot = |stream: &str, p: i32, seq: u64, key: &str| {
        let mut r = release_of(&v, index(stream), p, seq, &[1, 2, 3]);
        r.group = HashMap::from([("fw".to_string(), key.to_string())]);
        r
    };
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    // b7 is slot #1 on partition 0 and #2 on partition 1.
    let (how, out) = c.offer(slot("t[fw=#1]", 0, 5, "b7"), t0);
    assert_eq!((how, out.len()), (Offered::Kept, 0));
    let (_, out) = c.offer(slot("t[fw=#2]", 1, 5, "b7"), t0);
    assert_eq!(out.len(), 1);
    let f = &out[0];
    assert_eq!(f.stream, "t[fw=b7]");
    assert!(f.complete && f.partitions == [0, 1]);
    assert_eq!(
        f.group,
        HashMap::from([("fw".to_string(), "b7".to_string())])
    );
    // Read back, the record ends any wait for it.
    c.seen(f);
    assert_eq!(c.offer(slot("t[fw=#1]", 0, 5, "b7"), t0).0, Offered::Done);
    // A plan stream waits for partition 1 meanwhile.
    let u = |p: i32, seq: u64| release_of(&v, index("u"), p, seq, &[1, 2, 3]);
    assert!(c.offer(u(0, 6), t0).1.is_empty());
    // b9 only on partition 0: kept waiting, never published, not even past
    // the bound or on a timer.
    for seq in 6..12 {
        let (_, out) = c.offer(slot("t[fw=#2]", 0, seq, "b9"), t0);
        assert!(out.is_empty(), "seq {seq}: {out:?}");
    }
    assert!(c.due(t0 + Duration::from_secs(3600)).is_empty());
    // Those waits never pushed the plan stream's seq out partial: it
    // completes when partition 1 releases it.
    let (_, out) = c.offer(u(1, 6), t0);
    assert_eq!(out.len(), 1);
    assert!(out[0].stream == "u" && out[0].complete, "{:?}", out[0]);
    assert_eq!(
        c.offer(slot("t[fw=other]", 0, 5, "other"), t0).0,
        Offered::PerPartition
    );
}

/// The latest record per key, as a compacting consumer keeps it.
fn latest(records: &[proto::FleetRelease]) -> BTreeMap<u64, Vec<i32>> {
    records
        .iter()
        .map(|f| (f.window_seq, f.partitions.clone()))
        .collect()
}

/// Issue: after a restart, 4 of 8 complete records were followed by
/// records of fewer partitions — the combiner re-read only its look-back,
/// found some partitions' releases of finished seqs, and republished them.
/// A restarted combiner reads the whole look-back (releases and the
/// records already written) before deciding, and a record is only ever
/// followed by a strict superset of its partitions.
#[test]
fn a_restart_never_regresses_a_fleet_record() {
    for v in [validated(CHANGE_ONE), add_remove()] {
        let t0 = Instant::now();
        // Before the restart: 4 partitions, seqs 0..4, every record complete.
        let mut before = Combiner::new(v.clone(), 4);
        let mut topic: Vec<Result<proto::WindowRelease, proto::FleetRelease>> = vec![];
        for seq in 0..4 {
            for p in 0..4 {
                let r = release(&v, p, seq, &[1, 2, 3, 4]);
                topic.push(Ok(r.clone()));
                for f in before.offer(r, t0).1 {
                    assert!(f.complete);
                    topic.push(Err(f));
                }
            }
        }
        // Then partition 0 and 1 move on to seq 4.
        for p in 0..2 {
            topic.push(Ok(release(&v, p, 4, &[1, 2, 3, 4])));
        }
        // The restart's look-back starts in the middle of seq 1's releases.
        let cut = topic
            .iter()
            .position(|m| matches!(m, Ok(r) if r.window_seq == 1 && r.partition == 2))
            .unwrap();
        let mut written: Vec<proto::FleetRelease> = topic
            .iter()
            .filter_map(|m| m.as_ref().err().cloned())
            .collect();
        // Fleet records sit on output partition 0 and the releases on
        // others: read, say, the releases first, then the records.
        let (releases, records): (Vec<_>, Vec<_>) = topic[cut..].iter().partition(|m| m.is_ok());
        let lookback: Vec<_> = releases.into_iter().chain(records).collect();
        let mut after = Combiner::new(v.clone(), 4).catching_up();
        let mut out = vec![];
        for m in &lookback {
            match m {
                Ok(r) => out.extend(after.offer(r.clone(), t0).1),
                Err(f) => {
                    after.seen(f);
                }
            }
            out.extend(after.due(t0 + Duration::from_secs(3600)));
        }
        assert!(out.is_empty(), "decided while catching up: {out:?}");
        out.extend(after.caught_up());
        out.extend(after.due(t0 + Duration::from_secs(3600)));
        let mut kept = latest(&written);
        written.extend(out);
        let now = latest(&written);
        for (seq, parts) in &kept {
            assert_eq!(now[seq], *parts, "seq {seq} regressed");
        }
        // Without the catch-up the same look-back republishes seq 1 with
        // partitions 2 and 3 only (what a restart used to do).
        let mut naive = Combiner::new(v.clone(), 4);
        let mut regressed = vec![];
        for m in &lookback {
            match m {
                Ok(r) => regressed.extend(naive.offer(r.clone(), t0).1),
                Err(f) => {
                    naive.seen(f);
                }
            }
        }
        kept.retain(|_, p| p.len() == 4);
        assert!(
            regressed
                .iter()
                .any(|f| kept.contains_key(&f.window_seq) && !f.complete),
            "the control reproduces the regression: {regressed:?}"
        );
    }
}

/// Issue: past `fleet.max_pending`, each partition's release of an evicted
/// seq got a record of its own (5 of 8 seqs ended partial), and evicted
/// seqs were never completed. Past the bound a seq goes out once with what
/// it has; once every partition released it, its releases are read back
/// from where they are on the topic and it gets one complete record. No
/// record of a seq is followed by one with fewer partitions.
#[test]
fn past_the_bound_a_seq_gets_one_partial_then_one_complete_record() {
    let v = add_remove();
    let mut c = Combiner::new(v.clone(), 2);
    let t0 = Instant::now();
    // The output topic: a release's offset is its index.
    let mut topic: Vec<proto::WindowRelease> = vec![];
    let mut out = vec![];
    let mut offer = |c: &mut Combiner, r: proto::WindowRelease, out: &mut Vec<_>| {
        topic.push(r.clone());
        out.extend(c.offer_at(r, Some((0, topic.len() as i64 - 1)), t0).1);
        for f in c.take_refetches() {
            let back =
                f.at.iter()
                    .map(|&(_, o)| topic[o as usize].clone())
                    .collect();
            out.extend(c.refetched(&f, back));
        }
    };
    // Partition 0 runs 8 seqs ahead (max_pending = 3), then partition 1.
    for seq in 0..8 {
        offer(&mut c, release(&v, 0, seq, &[1, 2, 3]), &mut out);
    }
    for seq in 0..8 {
        offer(&mut c, release(&v, 1, seq, &[1, 2, 3]), &mut out);
    }
    let mut last: BTreeMap<u64, usize> = BTreeMap::new();
    for f in &out {
        if let Some(&n) = last.get(&f.window_seq) {
            assert!(
                f.partitions.len() > n,
                "seq {} regressed: {out:?}",
                f.window_seq
            );
        }
        last.insert(f.window_seq, f.partitions.len());
    }
    // Every seq ends complete; an evicted one had one partial record first.
    assert_eq!(last.len(), 8);
    assert!(last.values().all(|&n| n == 2), "{last:?}");
    let seq0: Vec<usize> = out
        .iter()
        .filter(|f| f.window_seq == 0)
        .map(|f| f.partitions.len())
        .collect();
    assert_eq!(seq0, vec![1, 2]);
    assert!(out.iter().rfind(|f| f.window_seq == 0).unwrap().complete);
}

/// The fleet-wide count and sum of add-remove windows hold their stated
/// 95% intervals through the combiner itself (the partitions' releases as
/// the pipeline publishes them, raw moments and all, offered one by one):
/// four non-empty partitions of unlike sizes, with and without running
/// totals, pure DP and zCDP. The truth is the pooled windows' count and
/// sum. At 20,000 seqs a 95% interval covers at least 3.3 standard errors
/// under 95% but for one run in 2,000, so a 94% interval (the independent
/// check's measurement) fails.
///
/// Issue: the fleet count's interval held in 93.3–94% of windows.
#[test]
fn add_remove_fleet_count_and_sum_cover_their_truth_through_the_combiner() {
    const SEQS: u64 = 20_000;
    let floor = 0.95 - 3.3 * (0.95 * 0.05 / SEQS as f64).sqrt();
    let sizes = [3usize, 17, 40, 120];
    let windows: Vec<Vec<i64>> = sizes
        .iter()
        .map(|&n| (0..n as i64).map(|i| (i * 37) % 201).collect())
        .collect();
    let count = windows.iter().map(Vec::len).sum::<usize>() as f64;
    // Grid units of 0.5 over [0, 100].
    let sum = windows.iter().flatten().sum::<i64>() as f64 * 0.5;
    for (budget, running) in [
        ("epsilon_per_device = 4.0", "0.0"),
        ("epsilon_per_device = 4.0", "0.3"),
        (
            "rho_per_device = 0.5\nmeasure = \"zcdp\"\ndelta = 1e-6",
            "0.3",
        ),
    ] {
        let text = CHANGE_ONE
            .replace(
                "epsilon_per_device = 4.0",
                &format!("{budget}\nrelation = \"add-remove\""),
            )
            .replace("window_size = 4", &format!("window = \"1m\"\nrunning_share = {running}"))
            .replace("max_pending = 3", "max_pending = 10")
            .replace(
                "statistics = [\"count\", \"sum\", \"mean\", \"std\", \"quantiles\"]\nquantiles = [0.5]",
                "statistics = [\"count\", \"sum\"]",
            );
        let v = validated(&text);
        let mut c = Combiner::new(v.clone(), sizes.len() as i32);
        let t0 = Instant::now();
        let mut covered = [0u64; 2];
        for seq in 0..SEQS {
            let mut out = Vec::new();
            for (p, w) in windows.iter().enumerate() {
                out.extend(c.offer(release(&v, p as i32, seq, w), t0).1);
            }
            let [f] = &out[..] else {
                panic!("seq {seq}: {} fleet records", out.len())
            };
            assert!(f.complete);
            for (i, truth) in [count, sum].into_iter().enumerate() {
                let s = &f.statistics[i];
                let h = s.half_width.expect("an interval");
                covered[i] += u64::from((s.values[0] - truth).abs() <= h + 1e-9);
            }
        }
        for (i, name) in ["count", "sum"].iter().enumerate() {
            let rate = covered[i] as f64 / SEQS as f64;
            assert!(
                rate >= floor,
                "{budget}, running_share {running}: the fleet {name} covers {rate} < {floor}"
            );
        }
    }
}
