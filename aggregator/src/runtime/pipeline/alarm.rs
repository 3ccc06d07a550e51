//! The device-limit alarm of each lane this instance releases (dp
//! `alarm.rs`; docs/privacy.md#the-device-limit-alarm): one AboveThreshold
//! instance per (lane, horizon), halted at its first "above", and the
//! gauge `fleetdp_device_limit_alarm{stream, partition}` that says whether
//! the lane's current instance fired.
//!
//! Privacy argument: an instance may run once only. This instance runs a
//! lane's instances only for horizons after the one it first closed a
//! window of the lane in, and forgets the lane when its partition is
//! revoked: a restart, or a partition moved here and back, never runs an
//! instance another run (or this one, before) may have run. The cost is a
//! blind horizon after each start or move, stated in the manual. The
//! query and the moment of each check come from the windower's close,
//! which the release already publishes.

use crate::config::Validated;
use crate::dp::alarm::AlarmPlan;
use crate::dp::rng::ReleaseKey;
use crate::engine::window::ClosedWindow;
use crate::telemetry::name;
use std::collections::HashMap;

/// A lane's alarm: the horizon it first closed a window in here, and its
/// current instance.
struct Lane {
    first_horizon: i64,
    horizon: i64,
    fired: bool,
}

/// The alarms of the lanes this instance releases.
#[derive(Default)]
pub(super) struct Alarms {
    lanes: HashMap<(usize, i32), Lane>,
}

impl Alarms {
    /// Check `w`'s lane at its close (a stream without an alarm, or a
    /// window without a count, passes); sets the lane's gauge.
    pub(super) fn check(&mut self, v: &Validated, key: &ReleaseKey, w: &ClosedWindow) {
        let stream = &v.plan.streams[w.stream];
        let (Some(plan), Some((horizon, count))) = (&stream.alarm, w.horizon_devices) else {
            return;
        };
        let lane = self.lanes.entry((w.stream, w.partition)).or_insert(Lane {
            first_horizon: horizon,
            horizon,
            fired: false,
        });
        if horizon > lane.horizon {
            *lane = Lane {
                horizon,
                fired: false,
                ..*lane
            };
        }
        let armed = horizon > lane.first_horizon && horizon == lane.horizon;
        if armed && !lane.fired {
            let threshold = AlarmPlan::threshold(v.config.limits.max_devices_per_lane);
            let id = (stream.spec.name.as_str(), w.partition);
            lane.fired = plan.fires(key, id, horizon, w.seq, count, threshold);
        }
        metrics::gauge!(
            name::DEVICE_ALARM,
            "stream" => stream.spec.name.clone(),
            "partition" => w.partition.to_string()
        )
        .set(f64::from(u8::from(lane.fired)));
    }

    /// A revoked partition's lanes: forgotten (if it comes back, its
    /// lanes wait a horizon again).
    pub(super) fn drop_partition(&mut self, partition: i32) {
        self.lanes.retain(|(_, p), _| *p != partition);
    }
}

#[cfg(test)]
mod tests {
    //! Which checks a lane's alarm runs: none in the horizon it was first
    //! seen in here (or seen again in, after a revoke), one instance per
    //! later horizon, halted at its first "above".

    use super::*;
    use crate::config::Config;

    const PLAN: &str = r#"
[kafka]
brokers = "b"
input_topic = "in"
output_topic = "out"
dead_letter_topic = "dlq"
[privacy]
epsilon_per_device = 100.0
horizon = "1h"
[limits]
max_devices_per_lane = 40
[[stream]]
name = "t"
lower = 0.0
upper = 100.0
resolution = 1.0
window_size = 10
max_windows_per_device = 10
statistics = ["mean"]
device_alarm_share = 0.5
"#;

    /// Window `seq` of lane (0, `partition`) closing with `count` devices
    /// of horizon `h`.
    fn closed(partition: i32, seq: u64, h: i64, count: u64) -> ClosedWindow {
        ClosedWindow {
            stream: 0,
            partition,
            seq,
            values: vec![50; 10],
            first_offset: 0,
            last_offset: 0,
            last_index: 0,
            first_event_ms: 0,
            last_event_ms: 0,
            padded: 0,
            timed: false,
            charges: vec![],
            horizon_devices: Some((h, count)),
            reference_event_ms: 0,
            retired: vec![],
            retired_records: vec![],
        }
    }

    fn fired(a: &Alarms, partition: i32) -> Option<bool> {
        a.lanes.get(&(0, partition)).map(|l| l.fired)
    }

    #[test]
    fn the_first_horizon_is_blind_later_ones_fire_once_and_a_revoke_blinds_again() {
        let v = Config::parse(PLAN).unwrap().validate().unwrap();
        let key = ReleaseKey::ephemeral();
        let mut a = Alarms::default();
        // ε = 12.5 an instance: the noise is well under one device.
        a.check(&v, &key, &closed(0, 0, 7, 40));
        assert_eq!(fired(&a, 0), Some(false), "blind where first seen");
        a.check(&v, &key, &closed(0, 1, 8, 10));
        assert_eq!(fired(&a, 0), Some(false));
        a.check(&v, &key, &closed(0, 2, 8, 40));
        assert_eq!(fired(&a, 0), Some(true));
        // Halted: it stays fired though the count falls.
        a.check(&v, &key, &closed(0, 3, 8, 0));
        assert_eq!(fired(&a, 0), Some(true));
        // The next horizon is a new instance.
        a.check(&v, &key, &closed(0, 4, 9, 5));
        assert_eq!(fired(&a, 0), Some(false));
        // Revoked and assigned again: blind for the horizon it returns in.
        a.drop_partition(0);
        assert_eq!(fired(&a, 0), None);
        a.check(&v, &key, &closed(0, 5, 9, 40));
        assert_eq!(fired(&a, 0), Some(false), "blind after a move");
        a.check(&v, &key, &closed(0, 6, 10, 40));
        assert_eq!(fired(&a, 0), Some(true));
        // Another partition's lane is its own.
        a.check(&v, &key, &closed(1, 0, 10, 40));
        assert_eq!(fired(&a, 1), Some(false));
    }
}
