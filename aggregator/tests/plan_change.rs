//! Plan changes are recorded and enforced: the state carries the plan it
//! was written under (every setting that places or charges a reading:
//! horizon, relation, measure, W, k, n, window, spend, group_by and key
//! sets, the plan's streams, the input's partition count); a restart under another plan is refused
//! with the changed setting named, unless the operator declares a change at
//! a horizon boundary (`allow_plan_change`), which drops the old plan's
//! charges. It used to resume silently: a horizon changed from 1 h to 24 h
//! dropped every returning device as over its cap, for good, and a
//! repartitioned input handed devices fresh caps.

use crate::harness;

use fleetdp::pipeline::{Options, Pipeline};
use harness::*;
use std::time::Duration;

const KEY: [u8; 32] = [6; 32];
const STREAM: &str = "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\nwindow_size = 5\nmax_windows_per_device = 2\nstatistics = [\"mean\"]";

fn privacy(horizon: &str) -> String {
    format!("epsilon_per_device = 1.0\nhorizon = \"{horizon}\"")
}

/// Run until `windows` are released (Ok with the counters) or the pipeline
/// stops on its own (its error).
async fn run(
    v: fleetdp::config::Validated,
    allow_plan_change: bool,
    windows: u64,
) -> Result<std::sync::Arc<fleetdp::telemetry::Counters>, String> {
    run_until(v, allow_plan_change, move |c| {
        count(&c.windows_released) >= windows
    })
    .await
}

/// Run until `done` holds of the counters (Ok with them) or the pipeline
/// stops on its own (its error).
async fn run_until(
    v: fleetdp::config::Validated,
    allow_plan_change: bool,
    done: impl Fn(&fleetdp::telemetry::Counters) -> bool,
) -> Result<std::sync::Arc<fleetdp::telemetry::Counters>, String> {
    let p = Pipeline::new(v, fleetdp::dp::rng::ReleaseKey::from_bytes(KEY));
    let c = p.counters.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let opts = Options {
        allow_plan_change,
        ..Options::default()
    };
    let h = tokio::spawn(async move { p.run(rx, opts).await });
    let finished = wait_until(Duration::from_secs(120), || done(&c) || h.is_finished()).await;
    if h.is_finished() {
        return match h.await.unwrap() {
            Ok(()) => Err("stopped without an error".into()),
            // A refusal no restart cures exits with the configuration
            // error's code (78), not 1 ("restarting helps").
            Err(e) => Err(format!("exit {}: {e:#}", fleetdp::logs::error_code(&e))),
        };
    }
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    assert!(
        finished,
        "not done: released {}, accepted {}",
        count(&c.windows_released),
        count(&c.readings_accepted)
    );
    Ok(c)
}

fn readings(prefix: u64, event_ms: i64) -> Vec<Out> {
    // The same ten devices each time: their caps carry over.
    (0..10)
        .map(|i| {
            temp_reading(
                Some(0),
                &format!("d{i}"),
                20.0,
                event_ms + prefix as i64 + i,
            )
        })
        .collect()
}

#[test]
fn a_changed_horizon_is_refused_and_allowed_at_a_boundary() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("plan");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let now = now_ms() - 120_000;
        produce(&broker, &t.input, &readings(0, now)).await;
        let c = run(config(&broker, &t, &privacy("1h"), "", STREAM), false, 2)
            .await
            .unwrap();
        assert_eq!(count(&c.readings_accepted), 10);

        // The same plan resumes.
        produce(&broker, &t.input, &readings(100, now)).await;
        let t2 = t.regroup();
        run(config(&broker, &t2, &privacy("1h"), "", STREAM), false, 2)
            .await
            .unwrap();

        // Another horizon: refused, naming it.
        let t3 = t.regroup();
        let err = run(config(&broker, &t3, &privacy("24h"), "", STREAM), false, 1)
            .await
            .expect_err("a changed horizon must be refused");
        assert!(err.starts_with("exit 78: "), "{err}");
        assert!(err.contains("privacy.horizon"), "{err}");
        assert!(err.contains("--allow-plan-change"), "{err}");

        // Declared at a boundary: the returning devices are accepted under
        // the new plan (the old charges no longer count against them).
        produce(&broker, &t.input, &readings(200, now)).await;
        let t4 = t.regroup();
        let c = run(config(&broker, &t4, &privacy("24h"), "", STREAM), true, 2)
            .await
            .unwrap();
        assert_eq!(count(&c.dropped_horizon_cap), 0, "old charges were kept");

        // And recorded: the next restart under the new plan needs no switch.
        let t5 = t.regroup();
        produce(&broker, &t.input, &readings(300, now)).await;
        run(config(&broker, &t5, &privacy("24h"), "", STREAM), false, 2)
            .await
            .unwrap();
    });
}

#[test]
fn a_changed_partition_count_is_refused() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("parts");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        produce(&broker, &t.input, &readings(0, now_ms() - 60_000)).await;
        run(config(&broker, &t, &privacy("24h"), "", STREAM), false, 2)
            .await
            .unwrap();
        // The input "repartitioned": a topic of 2 partitions whose partition 0
        // lands on the same lanes.
        let mut t2 = t.regroup();
        t2.input = unique("parts-in2");
        broker.create_topics(&[(&t2.input, 2)]).await;
        let err = run(config(&broker, &t2, &privacy("24h"), "", STREAM), false, 1)
            .await
            .expect_err("a changed partition count must be refused");
        assert!(err.starts_with("exit 78: "), "{err}");
        assert!(err.contains("partition count"), "{err}");
    });
}

/// Issue: a stream that ran ungrouped, restarted with `group_by` in the same
/// horizon, released the same devices again in `temp[firmware=other]` (its
/// lanes had no state under their new names), spending twice. The plan
/// identity covers the grouping, and recorded lanes the plan no longer has
/// are refused; the same holds for a renamed stream.
#[test]
fn a_group_by_added_mid_horizon_is_refused_and_allowed_at_a_boundary() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::new("plan-group");
        broker
            .create_topics(&[(&t.input, 1), (&t.output, 1), (&t.dlq, 1), (&t.state, 1)])
            .await;
        let now = now_ms() - 120_000;
        produce(&broker, &t.input, &readings(0, now)).await;
        let c = run(config(&broker, &t, &privacy("24h"), "", STREAM), false, 2)
            .await
            .unwrap();
        assert_eq!(count(&c.readings_accepted), 10);

        let dims = "[dimensions]\nfirmware = [\"4.1\", \"4.2\"]";
        let grouped = format!("{STREAM}\ngroup_by = [\"firmware\"]");
        let err = run(
            config(&broker, &t.regroup(), &privacy("24h"), dims, &grouped),
            false,
            1,
        )
        .await
        .expect_err("group_by added within a horizon must be refused");
        assert!(err.starts_with("exit 78: "), "{err}");
        assert!(err.contains("stream.groups"), "{err}");
        assert!(err.contains("--allow-plan-change"), "{err}");

        // A renamed stream would start with fresh caps too.
        let renamed = STREAM.replace("name = \"temp\"", "name = \"cabin\"");
        let err = run(
            config(&broker, &t.regroup(), &privacy("24h"), "", &renamed),
            false,
            1,
        )
        .await
        .expect_err("a renamed stream must be refused");
        assert!(err.starts_with("exit 78: "), "{err}");
        assert!(err.contains("'temp'"), "{err}");
        assert!(
            err.contains("plan.streams") || err.contains("not declared"),
            "{err}"
        );

        // Declared at a boundary: released under the new plan.
        produce(&broker, &t.input, &readings(100, now)).await;
        run(
            config(&broker, &t.regroup(), &privacy("24h"), dims, &grouped),
            true,
            2,
        )
        .await
        .unwrap();
        // And recorded: the grouped plan resumes without the switch, with
        // the caps its lanes have used (each device has had its W = 2
        // windows of `temp[firmware=other]`: the two runs' 20 readings).
        produce(&broker, &t.input, &readings(200, now)).await;
        let c = run_until(
            config(&broker, &t.regroup(), &privacy("24h"), dims, &grouped),
            false,
            |c| count(&c.dropped_horizon_cap) >= 10,
        )
        .await
        .unwrap();
        assert_eq!(count(&c.readings_accepted), 0);
    });
}
