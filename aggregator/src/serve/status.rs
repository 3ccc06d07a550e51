//! What the HTTP listener shows: the latest releases per stream (for the
//! status page and the released-value gauges), consumer lag and readiness.
//!
//! Side channel (docs/DESIGN.md §8): everything here is either a released (noisy)
//! value, or a function of public facts — offsets, partitions, the plan —
//! never of values; the side-channel test compares two runs on neighbouring
//! inputs.

use crate::config::Validated;
use crate::dp::rational;
use crate::telemetry;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

/// Points kept per series for the page.
const HISTORY: usize = 120;

/// One released point of a statistic.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub partition: i32,
    pub window_seq: u64,
    pub released_at_ms: i64,
    pub value: f64,
    pub half_width: Option<f64>,
    /// Quantiles: the rank interval's half-width in readings, if one holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_half_width: Option<f64>,
}

/// The `/api/status` document.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub relation: String,
    pub budget_per_horizon: f64,
    pub spent_per_horizon: f64,
    pub measure: String,
    pub horizon_seconds: u64,
    /// `privacy.horizon` as the configuration writes it (`"24h"`).
    pub horizon: String,
    pub windows_released: u64,
    /// Exact input counts: `null` under add-remove or `hide_exact_counts`.
    pub messages: Option<u64>,
    pub dead_letters: Option<BTreeMap<&'static str, u64>>,
    /// Readings dropped by reason (caps, time windows, the device limit):
    /// exact counts, `null` like `messages`.
    pub dropped: Option<BTreeMap<&'static str, u64>>,
    pub assigned: Vec<i32>,
    pub lag: Option<BTreeMap<i32, i64>>,
    pub ready: bool,
    /// Why not ready (what `/readyz` answers), `null` when ready.
    pub not_ready: Option<String>,
    pub streams: Vec<StreamStatus>,
}

/// One stream in [`Status`].
#[derive(Debug, Clone, Serialize)]
pub struct StreamStatus {
    pub name: String,
    /// The declared stream (`name` is a group's stream for grouped ones).
    pub declared: String,
    /// A grouped stream's group key (`firmware=4.2`).
    pub group: Option<String>,
    /// `G` (1 without groups).
    pub max_groups_per_device: u32,
    pub window_size: u64,
    pub window_seconds: Option<f64>,
    /// This stream's budget per device per horizon (ε, or ρ under zCDP):
    /// `budget_share` × the service's budget.
    pub budget_per_horizon: f64,
    /// The stream's share of the service's budget (0 to 1).
    pub budget_share: f64,
    /// What its plan spends per device per horizon (≤ `budget_per_horizon`).
    pub spent_per_horizon: f64,
    /// ε or ρ per window, and the most windows a device joins per horizon.
    pub spent_per_window: f64,
    pub max_windows_per_device: u32,
    /// The readings' unit (`unit` setting; empty if none).
    pub unit: String,
    /// The histogram's bin edges (empty without a histogram): bin `i` of
    /// `histogram[i]` and `running_histogram[i]` is `[edges[i], edges[i+1])`.
    pub histogram_edges: Vec<f64>,
    /// Statistic label → recent released points, per partition (running
    /// totals as `running_sum`, `running_histogram[i]`).
    pub series: BTreeMap<String, Vec<Point>>,
    /// Statistic label → recent fleet-wide points (`partition` is the
    /// number of partitions combined).
    pub fleet: BTreeMap<String, Vec<Point>>,
}

#[derive(Debug, Default)]
struct Board {
    /// (stream, statistic label) → recent points.
    series: BTreeMap<(String, String), VecDeque<Point>>,
    /// (stream, statistic label) → recent fleet-wide points.
    fleet: BTreeMap<(String, String), VecDeque<Point>>,
    /// Input partition → next offset to handle.
    positions: BTreeMap<i32, i64>,
    /// Input partition → lag (messages behind the high watermark).
    lag: BTreeMap<i32, i64>,
    /// Input partition → the latest moment (ms) up to which every message
    /// appended is known to be handled (a lag probe that asked then found
    /// lag 0, or whose high watermark the position has since passed).
    read_until: BTreeMap<i32, i64>,
    /// Input partition → (high watermark, moment asked) of a lag probe that
    /// found the pipeline behind: once the position reaches that watermark,
    /// everything appended before the moment is handled. Without it a probe
    /// that happened to find one message unhandled would hold the
    /// partition's time windows back a whole probe interval, so when a
    /// window is released would depend on how much input there was
    /// (docs/DESIGN.md §8).
    behind: BTreeMap<i32, (i64, i64)>,
    /// Input partition → when its position last moved (or it was
    /// assigned), ms: input waiting behind a position that has not moved
    /// for `http.stall_timeout` is a stuck consumer, not a ready one.
    moved_at: BTreeMap<i32, i64>,
    /// The latest consumer error: (kind, the setting to check).
    last_error: Option<(&'static str, &'static str)>,
    assigned: Vec<i32>,
    releases: u64,
    /// What restoring newly assigned partitions has read so far, while it runs.
    restoring: Option<String>,
}

/// Shared between the pipeline (writer) and the HTTP handlers (readers).
#[derive(Debug, Default)]
pub struct StatusBoard {
    board: Mutex<Board>,
    /// Readiness bound: an assigned partition at most this far behind.
    pub ready_max_lag: i64,
    /// The consuming loop's last heartbeat (ms since the epoch; 0: not
    /// started). It beats at least every second while healthy, idle or not.
    heartbeat_ms: AtomicI64,
    /// Liveness bound: a heartbeat older than this is a stalled loop (ms;
    /// 0: never stalled).
    stall_ms: i64,
    /// Probe bodies say no exact input count (lag, records restored): under
    /// add-remove or `http.hide_exact_counts`, as `/api/status`.
    hide_counts: bool,
}

/// The label of a statistic's component: `mean`, `histogram[3]`, `quantile(0.5)`.
fn labels(name: &str, values: usize, level: Option<f64>) -> Vec<String> {
    if values > 1 {
        (0..values).map(|i| format!("{name}[{i}]")).collect()
    } else if name == "quantile" {
        vec![format!("quantile({})", level.unwrap_or(f64::NAN))]
    } else {
        vec![name.to_string()]
    }
}

/// Append `p` to a bounded series.
fn push(q: &mut VecDeque<Point>, p: Point) {
    q.push_back(p);
    if q.len() > HISTORY {
        q.pop_front();
    }
}

/// A release's running totals as points: label (`running_sum`,
/// `running_histogram[i]`), value and a band of ±1.96 std (a normal
/// approximation of the running noise, as `fleetdp_release_half_width`
/// states it).
fn running_points(running: &[proto::v1::RunningTotal]) -> Vec<(String, f64, Option<f64>)> {
    running
        .iter()
        .flat_map(|t| {
            t.values.iter().enumerate().map(move |(i, v)| {
                let label = if t.values.len() > 1 {
                    format!("running_{}[{i}]", t.name)
                } else {
                    format!("running_{}", t.name)
                };
                (label, *v, Some(1.96 * t.std))
            })
        })
        .collect()
}

impl StatusBoard {
    pub fn new(ready_max_lag: i64, stall: std::time::Duration) -> Self {
        Self {
            board: Mutex::default(),
            ready_max_lag,
            heartbeat_ms: AtomicI64::new(0),
            stall_ms: stall.as_millis().min(i64::MAX as u128) as i64,
            hide_counts: false,
        }
    }

    /// Probe bodies without exact input counts (`true` under add-remove or
    /// `http.hide_exact_counts`): a partition is "behind by more than the
    /// bound", a restore says what it reads but not how much.
    pub fn hiding_exact_counts(mut self, hide: bool) -> Self {
        self.hide_counts = hide;
        self
    }

    /// The consuming loop is alive at `now_ms`.
    pub fn beat(&self, now_ms: i64) {
        self.heartbeat_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Live: the consuming loop has not started yet, or beat within the
    /// stall bound. Returns the reason when not.
    pub fn health(&self, now_ms: i64) -> Result<(), String> {
        let last = self.heartbeat_ms.load(Ordering::Relaxed);
        let age = now_ms.saturating_sub(last);
        if last == 0 || self.stall_ms == 0 || age <= self.stall_ms {
            Ok(())
        } else {
            Err(format!(
                "the consuming loop has not moved for {:.1} s (bound http.stall_timeout = {:.1} s)",
                age as f64 / 1e3,
                self.stall_ms as f64 / 1e3
            ))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A release was acknowledged: remember it and set its gauges.
    pub fn record_release(&self, r: &proto::WindowRelease) {
        let mut b = self.lock();
        b.releases += 1;
        let part = r.partition;
        telemetry::release_position(&r.stream, part, r.window_seq, r.released_at_ms);
        let statistics = r.statistics.iter().flat_map(|s| {
            labels(&s.name, s.values.len(), s.level)
                .into_iter()
                .enumerate()
                .map(move |(i, label)| (label, s.values[i], s.half_width, s.rank_half_width))
        });
        let running = running_points(&r.running)
            .into_iter()
            .map(|(label, value, half_width)| (label, value, half_width, None));
        for (label, value, half_width, rank_half_width) in statistics.chain(running) {
            telemetry::release_value(&r.stream, part, &label, value, half_width);
            let q = b.series.entry((r.stream.clone(), label)).or_default();
            let point = Point {
                partition: r.partition,
                window_seq: r.window_seq,
                released_at_ms: r.released_at_ms,
                value,
                half_width,
                rank_half_width,
            };
            push(q, point);
        }
    }

    /// A fleet-wide release was written: remember it and set its gauges. A
    /// record superseding a partial one of the same seq replaces its point.
    pub fn record_fleet(&self, f: &proto::FleetRelease) {
        let mut b = self.lock();
        let statistics = f.statistics.iter().flat_map(|s| {
            labels(&s.name, s.values.len(), s.level)
                .into_iter()
                .enumerate()
                .map(move |(i, label)| (label, s.values[i], s.half_width))
        });
        for (label, value, half_width) in statistics.chain(running_points(&f.running)) {
            telemetry::fleet_value(&f.stream, &label, value, half_width);
            let q = b.fleet.entry((f.stream.clone(), label)).or_default();
            if q.back().is_some_and(|p| p.window_seq == f.window_seq) {
                q.pop_back();
            }
            let point = Point {
                partition: f.partitions.len() as i32,
                window_seq: f.window_seq,
                released_at_ms: f.released_at_ms,
                value,
                half_width,
                rank_half_width: None,
            };
            push(q, point);
        }
    }

    /// Partitions gained and lost by a rebalance (incremental).
    pub fn rebalanced(&self, assigned: &[i32], revoked: &[i32]) {
        let mut b = self.lock();
        b.assigned.retain(|p| !revoked.contains(p));
        let now_ms = crate::clock::now_ms();
        for p in assigned {
            if !b.assigned.contains(p) {
                b.assigned.push(*p);
                b.moved_at.insert(*p, now_ms);
            }
        }
        b.assigned.sort_unstable();
        let now = b.assigned.clone();
        b.positions.retain(|p, _| now.contains(p));
        b.lag.retain(|p, _| now.contains(p));
        b.read_until.retain(|p, _| now.contains(p));
        b.behind.retain(|p, _| now.contains(p));
        b.moved_at.retain(|p, _| now.contains(p));
    }

    /// A consumer error that stopped progress (kind and the setting to
    /// check, [`crate::clients::kafka::error_kind`]).
    pub fn consumer_error(&self, kind: (&'static str, &'static str)) {
        self.lock().last_error = Some(kind);
    }

    /// The next offset the pipeline will handle on `partition`.
    pub fn set_position(&self, partition: i32, next_offset: i64) {
        let mut b = self.lock();
        if b.positions.insert(partition, next_offset) != Some(next_offset) {
            b.moved_at.insert(partition, crate::clock::now_ms());
            b.last_error = None;
        }
        if let Some(&(high, asked)) = b.behind.get(&partition) {
            if next_offset >= high {
                b.behind.remove(&partition);
                let t = b.read_until.entry(partition).or_insert(asked);
                *t = (*t).max(asked);
            }
        }
    }

    /// Assigned partitions and their positions, for the lag probe.
    pub fn positions(&self) -> Vec<(i32, Option<i64>)> {
        let b = self.lock();
        b.assigned
            .iter()
            .map(|p| (*p, b.positions.get(p).copied()))
            .collect()
    }

    /// The lag probe's result for a partition: asked at `asked_ms`, the
    /// high watermark was `high` and the pipeline `lag` messages behind it.
    pub fn set_lag(&self, partition: i32, lag: i64, high: i64, asked_ms: i64) {
        let mut b = self.lock();
        b.lag.insert(partition, lag);
        if lag == 0 {
            let t = b.read_until.entry(partition).or_insert(asked_ms);
            *t = (*t).max(asked_ms);
        } else {
            b.behind.insert(partition, (high, asked_ms));
        }
        drop(b);
        telemetry::lag(partition, lag);
    }

    /// Every message appended to `partition` before this moment (ms) has
    /// been handled (`i64::MIN`: not known yet).
    pub fn read_until(&self, partition: i32) -> i64 {
        self.lock()
            .read_until
            .get(&partition)
            .copied()
            .unwrap_or(i64::MIN)
    }

    /// Ready: partitions assigned, and each within `ready_max_lag` of its
    /// high watermark. Returns the reason when not.
    pub fn ready(&self) -> Result<(), String> {
        self.ready_locked(&self.lock())
    }

    /// Restoring state for newly assigned partitions (`Some`: how far it
    /// is) or done (`None`). Not ready while it runs.
    pub fn restoring(&self, progress: Option<String>) {
        self.lock().restoring = progress;
    }

    /// Input waiting on `p` and nothing handled for the stall bound: stuck
    /// (a codec this build lacks, lost authorisation, …). How long, if so.
    fn stalled(&self, b: &Board, p: i32, now_ms: i64) -> Option<i64> {
        let idle = now_ms - b.moved_at.get(&p).copied().unwrap_or(now_ms);
        let waiting = b.lag.get(&p).is_some_and(|&l| l > 0);
        (self.stall_ms > 0 && idle > self.stall_ms && waiting).then_some(idle)
    }

    /// Each assigned partition and whether it is stalled now (the gauge
    /// `fleetdp_partition_stalled`; `/readyz` names the first).
    pub fn stalls(&self) -> Vec<(i32, bool)> {
        let b = self.lock();
        let now_ms = crate::clock::now_ms();
        b.assigned
            .iter()
            .map(|&p| (p, self.stalled(&b, p, now_ms).is_some()))
            .collect()
    }

    fn ready_locked(&self, b: &Board) -> Result<(), String> {
        self.health(crate::clock::now_ms())?;
        if let Some(r) = &b.restoring {
            if self.hide_counts {
                // "counting device charges: 40 of at most 90 records": the
                // step, not the counts.
                let step = r.split(':').next().unwrap_or("");
                return Err(format!("restoring state: {step}"));
            }
            return Err(format!("restoring state: {r}"));
        }
        if b.assigned.is_empty() {
            return Err("no partitions assigned".into());
        }
        let now_ms = crate::clock::now_ms();
        for p in &b.assigned {
            if let Some(idle) = self.stalled(b, *p, now_ms) {
                let cause = match b.last_error {
                    Some((kind, check)) => format!("; last consumer error: {kind} (check {check})"),
                    None => String::new(),
                };
                return Err(format!(
                    "partition {p}: input waiting but none handled for {:.0} s (bound http.stall_timeout){cause}",
                    idle as f64 / 1e3
                ));
            }
            match b.lag.get(p) {
                None => return Err(format!("partition {p}: lag not measured yet")),
                Some(&l) if l > self.ready_max_lag && self.hide_counts => {
                    return Err(format!(
                        "partition {p}: more messages behind than the bound ({})",
                        self.ready_max_lag
                    ))
                }
                Some(&l) if l > self.ready_max_lag => {
                    return Err(format!(
                        "partition {p}: {l} messages behind (bound {})",
                        self.ready_max_lag
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The document behind the status page (`/api/status`).
    pub fn to_json(
        &self,
        v: &Validated,
        counters: &crate::telemetry::Counters,
    ) -> serde_json::Value {
        serde_json::to_value(self.status(v, counters)).expect("the status serialises")
    }

    /// What `/api/status` shows: released (noisy) values, plan figures and,
    /// under change-one, operational counts (docs/DESIGN.md §8).
    pub fn status(&self, v: &Validated, counters: &crate::telemetry::Counters) -> Status {
        let b = self.lock();
        let budget = v.plan.privacy.budget.per_horizon;
        let streams = v
            .plan
            .streams
            .iter()
            .map(|s| StreamStatus {
                name: s.spec.name.clone(),
                declared: s.declared_name().to_string(),
                group: s.group.as_ref().map(|g| g.key.clone()),
                max_groups_per_device: s.group.as_ref().map_or(1, |g| g.max_groups_per_device),
                window_size: s.spec.window_size,
                window_seconds: s.spec.window_ms.map(|ms| ms as f64 / 1e3),
                budget_per_horizon: telemetry::tidy(s.spec.budget_share * budget),
                budget_share: s.spec.budget_share,
                spent_per_horizon: telemetry::tidy(rational::to_f64(&s.per_horizon())),
                spent_per_window: telemetry::tidy(rational::to_f64(&s.per_window)),
                max_windows_per_device: s.spec.max_windows_per_device,
                unit: v.unit_of(s.declared_name()),
                histogram_edges: s.spec.histogram_edges.clone(),
                series: of_stream(&b.series, &s.spec.name),
                fleet: of_stream(&b.fleet, &s.spec.name),
            })
            .collect();
        // Under add-remove exact counts of the input reveal presence: the
        // page and its JSON never carry them (null).
        let exact = v.plan.privacy.relation == crate::dp::relation::Relation::ChangeOne
            && !v.config.http.hide_exact_counts;
        let ready = self.ready_locked(&b);
        Status {
            relation: v.plan.privacy.relation.to_string(),
            budget_per_horizon: budget,
            spent_per_horizon: telemetry::tidy(rational::to_f64(&v.plan.per_horizon)),
            measure: format!("{:?}", v.plan.privacy.budget.measure).to_lowercase(),
            horizon_seconds: v.horizon.as_secs(),
            horizon: v.horizon_text().to_string(),
            windows_released: crate::telemetry::Counters::get(&counters.windows_released),
            messages: exact.then(|| crate::telemetry::Counters::get(&counters.messages)),
            dead_letters: exact.then(|| {
                ingest::Reason::ALL
                    .iter()
                    .map(|r| (r.as_str(), counters.dead_letters(*r)))
                    .collect()
            }),
            dropped: exact.then(|| {
                use crate::telemetry::Counters as C;
                BTreeMap::from([
                    ("per_window_cap", C::get(&counters.dropped_window_cap)),
                    ("per_horizon_cap", C::get(&counters.dropped_horizon_cap)),
                    ("group_cap", C::get(&counters.dropped_group_cap)),
                    ("time_window", C::get(&counters.dropped_time_window)),
                    ("device_limit", C::get(&counters.dropped_device_limit)),
                ])
            }),
            assigned: b.assigned.clone(),
            lag: exact.then(|| b.lag.clone()),
            ready: ready.is_ok(),
            not_ready: ready.err(),
            streams,
        }
    }
}

/// One stream's series by label.
fn of_stream(
    all: &BTreeMap<(String, String), VecDeque<Point>>,
    stream: &str,
) -> BTreeMap<String, Vec<Point>> {
    all.iter()
        .filter(|((name, _), _)| name == stream)
        .map(|((_, label), q)| (label.clone(), q.iter().cloned().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_loop_that_stops_beating_is_unhealthy_and_not_ready() {
        let b = StatusBoard::new(10, Duration::from_secs(5));
        assert_eq!(b.health(1_000_000), Ok(()), "not started yet");
        b.beat(1_000_000);
        assert_eq!(b.health(1_004_000), Ok(()));
        let why = b.health(1_006_000).unwrap_err();
        assert!(why.contains("6.0 s"), "{why}");
        b.rebalanced(&[0], &[]);
        b.set_lag(0, 0, 10, 1_000_000);
        b.beat(crate::clock::now_ms() - 10_000);
        assert!(b.ready().unwrap_err().contains("not moved"));
        b.beat(crate::clock::now_ms());
        assert_eq!(b.ready(), Ok(()));
    }

    /// Restoring state is not ready, whatever the lag, and says how far it is.
    #[test]
    fn restoring_is_not_ready_and_shows_its_progress() {
        let b = StatusBoard::new(10, Duration::from_secs(5));
        b.rebalanced(&[0], &[]);
        b.set_lag(0, 0, 10, 1_000_000);
        b.beat(crate::clock::now_ms());
        assert_eq!(b.ready(), Ok(()));
        b.restoring(Some(
            "counting device charges: 40 of at most 90 records of s".into(),
        ));
        let why = b.ready().unwrap_err();
        assert!(
            why.contains("restoring state: counting device charges: 40 of at most 90"),
            "{why}"
        );
        b.restoring(None);
        assert_eq!(b.ready(), Ok(()));
    }

    /// Issue: under `hide_exact_counts`, `/readyz` answered "partition 0:
    /// 1234 messages behind" — the exact input count hidden from `/metrics`.
    #[test]
    fn hidden_counts_stay_out_of_the_probe_bodies() {
        for hide in [false, true] {
            let b = StatusBoard::new(10, Duration::from_secs(5)).hiding_exact_counts(hide);
            b.rebalanced(&[0], &[]);
            b.set_lag(0, 1234, 1244, 1_000_000);
            b.beat(crate::clock::now_ms());
            let why = b.ready().unwrap_err();
            assert_eq!(why.contains("1234"), !hide, "{why}");
            assert!(
                why.contains("partition 0") && why.contains("bound"),
                "{why}"
            );
            b.restoring(Some(
                "counting device charges: 40 of at most 90 records of s".into(),
            ));
            let why = b.ready().unwrap_err();
            assert!(why.contains("counting device charges"), "{why}");
            assert_eq!(why.contains("40"), !hide, "{why}");
        }
    }

    /// A probe that found the pipeline a message behind: once the position
    /// passes the watermark it saw, the moment it asked counts as read
    /// (before: only the next probe that found no lag moved it, a whole
    /// probe interval later for one more message of input).
    #[test]
    fn a_probe_that_found_lag_counts_once_the_position_passes_its_watermark() {
        let b = StatusBoard::new(10, Duration::from_secs(5));
        b.rebalanced(&[0, 1], &[]);
        b.set_position(0, 7);
        b.set_lag(0, 3, 10, 5_000);
        assert_eq!(b.read_until(0), i64::MIN, "still behind");
        b.set_position(0, 9);
        assert_eq!(b.read_until(0), i64::MIN, "still behind");
        b.set_position(0, 10);
        assert_eq!(b.read_until(0), 5_000);
        // Never backwards; the other partition is its own.
        b.set_lag(0, 0, 10, 4_000);
        assert_eq!(b.read_until(0), 5_000);
        assert_eq!(b.read_until(1), i64::MIN);
        // A revoked partition forgets what it was behind.
        b.set_lag(1, 2, 20, 6_000);
        b.rebalanced(&[], &[1]);
        b.rebalanced(&[1], &[]);
        b.set_position(1, 25);
        assert_eq!(b.read_until(1), i64::MIN);
    }

    /// Issue: input the consumer could not decode (zstd without the codec)
    /// stalled the service while `/readyz` answered 200. Input waiting and
    /// a position that has not moved for the stall bound is not ready, and
    /// says what to check; a moving position is ready again.
    #[test]
    fn input_waiting_behind_a_stuck_position_is_not_ready() {
        let b = StatusBoard::new(1_000_000, Duration::from_millis(50));
        b.rebalanced(&[0], &[]);
        b.set_position(0, 5);
        b.set_lag(0, 3, 8, crate::clock::now_ms());
        b.beat(crate::clock::now_ms());
        assert_eq!(b.ready(), Ok(()), "within the bound");
        b.consumer_error(("decompression", "the producers' compression.type"));
        std::thread::sleep(Duration::from_millis(80));
        b.beat(crate::clock::now_ms());
        let why = b.ready().unwrap_err();
        assert!(
            why.contains("partition 0: input waiting but none handled")
                && why.contains("decompression")
                && why.contains("compression.type"),
            "{why}"
        );
        // Nothing waiting: an idle consumer is ready.
        b.set_lag(0, 0, 8, crate::clock::now_ms());
        assert_eq!(b.ready(), Ok(()));
        b.set_lag(0, 3, 11, crate::clock::now_ms());
        assert!(b.ready().is_err());
        // It moves again: ready.
        b.set_position(0, 11);
        assert_eq!(b.ready(), Ok(()));
    }
}
