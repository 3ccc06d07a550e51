//! Restoring assigned partitions: a step that reads the state topic
//! ([`crate::state::restore`]) for the partitions a rebalance assigned and
//! returns, per (stream, partition), where it resumes (after its last
//! released window, so an instance taking over never re-numbers or
//! re-noises a window), its device counts and what it carries across
//! windows — ready for the consuming loop to install. It reads the loop's
//! processor and changes nothing of it.

use super::now_ms;
use super::Pipeline;
use crate::clients::kafka::{Producer, Stopped};
use crate::engine::keys::Bindings;
use crate::engine::process::Processor;
use crate::engine::window::{RestoredLane, Resume};
use crate::faults::{crash_point, CrashPoint};
use crate::state::{self, Carried, PlanChange, Restored};
use anyhow::{Context as _, Result};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;

/// What every plan-change refusal tells the operator to do.
const PLAN_CHANGE_FIX: &str =
    "restore the previous settings, or, at a horizon boundary, restart with \
     `fleetdp run --allow-plan-change` (see docs/operations.md, Operator's playbook: changing the plan)";

/// The charges records to read back: (state partition, offset) → (stream,
/// input partition, seq, records of that window).
type Wanted = HashMap<(i32, i64), (usize, i32, u64, u32)>;

/// A shared [`crate::clients::kafka::ReadProgress`] callback.
type Progress = std::sync::Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

/// A window of an old plan whose charges are retired: (stream, partition,
/// seq, its charges records).
pub(super) type Dropped = (String, i32, u64, u32);

/// One restored lane, to install.
pub(super) struct Resumed {
    /// (plan index of its stream, input partition).
    pub(super) lane: (usize, i32),
    /// Where it resumes: after its last released window.
    pub(super) resume: Resume,
    /// Its device counts, from its live windows' charges.
    pub(super) devices: RestoredLane,
    /// What it carries across windows (state/lane.rs).
    pub(super) carried: Carried,
}

/// What the state topic gives back for newly assigned partitions.
pub(super) struct Assignment {
    pub(super) lanes: Vec<Resumed>,
    /// Per (declared stream, partition): private-key bindings.
    pub(super) keys: HashMap<(String, i32), Bindings>,
    /// Windows of an old plan dropped with `--allow-plan-change`, to retire
    /// once the rest is installed ([`Restoring::retire_dropped`]).
    pub(super) dropped: Vec<Dropped>,
}

/// The restoring step's view of the service: the pipeline, the loop's
/// processor (read only) and how to write and stop.
pub(super) struct Restoring<'a> {
    pub(super) p: &'a Pipeline,
    pub(super) processor: &'a Processor,
    pub(super) producer: &'a Producer,
    pub(super) stop: &'a watch::Receiver<bool>,
    /// Partitions of the input topic (recorded in the plan fingerprint).
    pub(super) input_partitions: i32,
    pub(super) allow_plan_change: bool,
}

impl Restoring<'_> {
    /// Restore `assigned` from the state and output topics.
    pub(super) async fn restore(&self, assigned: &[i32]) -> Result<Assignment> {
        let mut restored = self.read_state(assigned).await?;
        self.p.counters.restore_skipped(restored.skipped);
        crash_point(CrashPoint::DuringRebalance);
        // A lane is resumed under the key it was written with, or the one
        // this instance declares it replaces (state/key_ids.rs); no restart
        // cures another key: a configuration error (exit 78).
        let rotated = self.p.key_ids.check(&mut restored, assigned).map_err(|e| {
            crate::config::configuration(anyhow::anyhow!(
                "{e}; this instance holds release key {}. {}",
                self.p.key_ids.mine,
                state::KEY_FIX
            ))
        })?;
        for ((stream, partition), windows) in rotated {
            tracing::warn!(
                stream = %stream,
                partition,
                windows,
                "release key rotated (privacy.rotate_from): windows charged under the previous key and not \
                 released are skipped, never released under this key"
            );
        }
        // Windows of an old plan dropped with --allow-plan-change.
        let mut dropped = self.check_unplanned(
            assigned,
            &restored.charges,
            &restored.lane_plans,
            &restored.window_plans,
        )?;
        // The device counts being rebuilt per lane, and the charges records
        // they need.
        let (mut counts, mut lanes) = (HashMap::new(), Vec::new());
        let mut wanted = Wanted::new();
        let ledger = std::mem::take(&mut restored.resume);
        for ((stream, partition), r) in &ledger {
            let (true, Some(i)) = (
                assigned.contains(partition),
                self.processor.stream_index(stream),
            ) else {
                continue;
            };
            let lane = (stream.clone(), *partition);
            let (devices, carried) =
                self.restore_lane(i, &lane, *r, &mut restored, &mut dropped, &mut wanted)?;
            counts.insert((i, *partition), devices);
            lanes.push(((i, *partition), *r, carried));
        }
        let mut counts = self.read_charges(counts, wanted).await?;
        let lanes = lanes
            .into_iter()
            .map(|(lane, resume, carried)| Resumed {
                lane,
                resume,
                devices: counts.remove(&lane).expect("every lane's counts are read"),
                carried,
            })
            .collect();
        Ok(Assignment {
            lanes,
            keys: restored.keys,
            dropped,
        })
    }

    /// Resume one lane (stream `i`) after its ledger entry `r`: its plan
    /// checked against the running one, its released windows' charges
    /// noted in `wanted` (windows of another plan go to `dropped` with
    /// `--allow-plan-change`), its state across windows restored. Returns
    /// its device counts still to fill and what it carries.
    fn restore_lane(
        &self,
        i: usize,
        lane: &(String, i32),
        r: Resume,
        restored: &mut Restored,
        dropped: &mut Vec<Dropped>,
        wanted: &mut Wanted,
    ) -> Result<(RestoredLane, Carried)> {
        let (stream, partition) = (&lane.0, lane.1);
        // The plan the lane's state was written under must be this one
        // (state/fingerprint.rs), unless the operator declares a change
        // at a horizon boundary: then the old plan's charges belong to
        // finished horizons and are not restored.
        let now = state::fingerprint(&self.p.v, i, self.input_partitions, &self.p.key_ids.mine);
        let changed = |plan: Option<&proto::v1::PlanFingerprint>| {
            plan.and_then(|p| PlanChange::between(p, &now))
        };
        let lane_plan = restored.lane_plans.get(lane);
        if let Some(c) = changed(lane_plan) {
            if !self.allow_plan_change {
                // No restart cures it: a configuration error (exit 78).
                return Err(crate::config::configuration(anyhow::anyhow!(
                    "stream '{stream}' partition {partition}: the plan changed since its state was written ({}). \
                     Within a horizon this would give devices fresh caps or another spend per window; {PLAN_CHANGE_FIX}",
                    c.describe()
                )));
            }
            tracing::warn!(
                stream = %stream,
                partition,
                change = %c.describe(),
                "plan changed (--allow-plan-change): charges of the old plan are not restored"
            );
        }
        // Only released windows count; later ones are charged again by
        // replay; windows charged under another plan only with the
        // switch. Their records are read later, one at a time.
        let mut lane_charges = restored.charges.remove(lane).unwrap_or_default();
        let _later = lane_charges.split_off(&r.last_seq.saturating_add(1));
        let expected = restored.devices.get(lane).map_or(0, |d| d.estimate());
        let mut restorer = self.processor.windower().restorer(i, expected as usize);
        for (seq, at) in lane_charges {
            // A window charged under the lane's recorded plan (the same
            // digest) shares its verdict; its record names no settings.
            let window = restored.window_plans.get(&(stream.clone(), partition, seq));
            let window = match (window, lane_plan) {
                (Some(w), Some(l)) if !w.digest.is_empty() && w.digest == l.digest => Some(l),
                (w, _) => w,
            };
            if let Some(ch) = changed(window) {
                if !self.allow_plan_change {
                    return Err(crate::config::configuration(anyhow::anyhow!(
                        "stream '{stream}' partition {partition}: window {seq} was charged under another plan ({}); \
                         {PLAN_CHANGE_FIX}",
                        ch.describe()
                    )));
                }
                dropped.push((stream.clone(), partition, seq, at.records));
                continue;
            }
            // Live now; its records add their charges as they are read.
            restorer.add(seq, at.records, &[]);
            for pos in at.found {
                wanted.insert(pos, (i, partition, seq, at.records));
            }
        }
        let state = restored.lanes.get(&(stream.clone(), partition, r.last_seq));
        let plan = &self.p.v.plan.streams[i];
        let carried = Carried::from_record(plan, (partition, r.last_seq), state)?;
        Ok((restorer, carried))
    }

    /// Retire the charges of an old plan's windows dropped with
    /// `--allow-plan-change`, so later restarts do not meet them again.
    pub(super) async fn retire_dropped(&self, dropped: &[Dropped]) -> Result<()> {
        if dropped.is_empty() {
            return Ok(());
        }
        let mut stop = self.stop.clone();
        let topic = self.p.v.config.kafka.state_topic();
        state::retire(self.producer, &topic, dropped, &mut stop).await?;
        tracing::warn!(
            windows = dropped.len(),
            "charges of the old plan retired (--allow-plan-change)"
        );
        Ok(())
    }

    /// Refuse (or, with `--allow-plan-change`, retire with a warning) the
    /// live charges of lanes the running plan does not have: a stream
    /// renamed or removed, or its `group_by`, dimensions or key sets
    /// changed, would otherwise hand its devices fresh caps
    /// (state/fingerprint.rs). Releases and ledger entries of such lanes
    /// charge nobody and stay. Returns the windows to retire.
    fn check_unplanned(
        &self,
        assigned: &[i32],
        charges: &state::Charges,
        lane_plans: &HashMap<(String, i32), proto::v1::PlanFingerprint>,
        window_plans: &HashMap<(String, i32, u64), proto::v1::PlanFingerprint>,
    ) -> Result<Vec<Dropped>> {
        let recorded = |lane: &(String, i32)| {
            lane_plans.get(lane).cloned().or_else(|| {
                window_plans
                    .iter()
                    .find(|((s, p, _), _)| (s, p) == (&lane.0, &lane.1))
                    .map(|(_, f)| f.clone())
            })
        };
        let lanes = charges
            .iter()
            .filter(|((_, p), windows)| assigned.contains(p) && !windows.is_empty())
            .map(|(lane, _)| lane.clone());
        let planned = |name: &str| self.processor.stream_index(name).is_some();
        let unplanned =
            state::unplanned_lanes(&self.p.v, self.input_partitions, lanes, planned, recorded);
        let mut retire = Vec::new();
        for (lane, c) in unplanned {
            let (stream, partition) = &lane;
            if !self.allow_plan_change {
                return Err(crate::config::configuration(anyhow::anyhow!(
                    "lane '{stream}' partition {partition}: the state topic holds live charges of it, but the \
                     running plan has no such lane: the plan changed since its state was written ({}). Within a \
                     horizon this would give its devices fresh caps; {PLAN_CHANGE_FIX}",
                    c.describe()
                )));
            }
            tracing::warn!(
                lane = %stream,
                partition,
                change = %c.describe(),
                "plan changed (--allow-plan-change): the charges of a lane the plan no longer has are retired"
            );
            for (seq, at) in &charges[&lane] {
                retire.push((stream.clone(), *partition, *seq, at.records));
            }
        }
        Ok(retire)
    }

    /// The release ledger and where the charges of `assigned` are.
    async fn read_state(&self, assigned: &[i32]) -> Result<Restored> {
        let kc = &self.p.v.config.kafka;
        let (base, output, state_topic, parts) = (
            self.p.client_config(),
            kc.output_topic.clone(),
            kc.state_topic(),
            assigned.to_vec(),
        );
        let progress = self.progress("reading the ledger and releases");
        self.retrying(move |stop| {
            state::restore(&base, &output, &state_topic, &parts, stop, &*progress)
                .context("restoring state (kafka.state_topic, kafka.output_topic)")
        })
        .await
    }

    /// Rebuild the lanes' device counts from the `wanted` charges records,
    /// each counted as it is read.
    async fn read_charges(
        &self,
        lanes: HashMap<(usize, i32), RestoredLane>,
        wanted: Wanted,
    ) -> Result<HashMap<(usize, i32), RestoredLane>> {
        if wanted.is_empty() {
            return Ok(lanes);
        }
        let (base, state_topic) = (self.p.client_config(), self.p.v.config.kafka.state_topic());
        let (wanted, start) = (std::sync::Arc::new(wanted), std::sync::Arc::new(lanes));
        let progress = self.progress("counting device charges");
        self.retrying(move |stop| {
            // A retry starts again from the lanes as they were.
            let mut lanes: HashMap<(usize, i32), RestoredLane> = (*start).clone();
            let apply = |(i, p, seq, records), c: Vec<(u64, i64)>| {
                if let Some(l) = lanes.get_mut(&(i, p)) {
                    l.add(seq, records, &c);
                }
            };
            state::read_charges(&base, &state_topic, &wanted, stop, &*progress, apply)
                .context("restoring charges (kafka.state_topic)")?;
            Ok(lanes)
        })
        .await
    }

    /// A progress report for one step of restoring: shown in `/readyz`'s
    /// body while it runs and logged every 10 s.
    fn progress(&self, step: &'static str) -> Progress {
        let board = self.p.board.clone();
        let logged = std::sync::Mutex::new(None::<std::time::Instant>);
        std::sync::Arc::new(move |topic: &str, read: u64, expected: u64| {
            let mut last = logged.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                *last = Some(std::time::Instant::now());
                tracing::info!(step, topic, read, expected, "restoring state");
            }
            board.restoring(Some(format!(
                "{step}: {read} of at most {expected} records of {topic}"
            )));
        })
    }

    /// Run the blocking read `f` off the loop, which keeps beating while it
    /// runs; retried with backoff while the broker is unreachable (a
    /// rebalance can land while it flaps); an error after the retries is
    /// fatal, and a stop ends it promptly.
    async fn retrying<T: Send + 'static>(
        &self,
        f: impl Fn(&tokio::sync::watch::Receiver<bool>) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let f = std::sync::Arc::new(f);
        let mut backoff = Duration::from_millis(500);
        let mut attempt = 1;
        loop {
            let (stop, f) = (self.stop.clone(), f.clone());
            let mut task = tokio::task::spawn_blocking(move || f(&stop));
            // Restoring is progress: the loop stays live while it runs.
            let mut beat = tokio::time::interval(Duration::from_secs(1));
            let r = loop {
                tokio::select! {
                    r = &mut task => break r?,
                    _ = beat.tick() => self.p.board.beat(now_ms()),
                }
            };
            match r {
                Ok(v) => return Ok(v),
                Err(e) if e.downcast_ref::<Stopped>().is_some() => return Err(e),
                // A refusal no retry cures.
                Err(e) if e.downcast_ref::<crate::config::Configuration>().is_some() => {
                    return Err(e)
                }
                Err(e) if attempt < 8 => {
                    tracing::warn!(error = %format!("{e:#}"), attempt, "restoring state failed; retrying");
                    let mut stop = self.stop.clone();
                    if *stop.borrow() {
                        return Err(Stopped("the state topic".into()).into());
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.changed() => return Err(Stopped("the state topic".into()).into()),
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
