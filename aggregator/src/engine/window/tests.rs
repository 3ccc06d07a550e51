use super::*;

/// Keys are stored in the state topic: the function must never change
/// under a dependency update (pinned values; a change needs a new
/// [`DEVICE_KEY_SCHEME`]).
#[test]
fn device_keys_are_stable() {
    let got: Vec<u64> = ["", "a", "device-000042", &"x".repeat(300)]
        .iter()
        .map(|d| device_key(d))
        .collect();
    assert_eq!(got, PINNED);
}
const PINNED: [u64; 4] = [
    232177599295442350,
    6457959414642172395,
    5447221867655961863,
    5437776271325206279,
];

/// A one-stream windower: horizon 1000 ms, midpoint 50; count windows
/// of `n` (`window_ms` None) or time windows.
fn rules(
    n: usize,
    k: u32,
    w: u32,
    timeout: Option<i64>,
    window_ms: Option<i64>,
) -> Vec<StreamRules> {
    vec![StreamRules {
        name: "s".into(),
        window_size: n,
        max_readings_per_device: k,
        max_windows_per_device: w,
        midpoint: 50,
        timeout_ms: timeout,
        window_ms,
        count_devices: false,
        group: None,
    }]
}

fn windower(n: usize, k: u32, w: u32, timeout: Option<i64>) -> Windower {
    Windower::new(rules(n, k, w, timeout, None), 1000, 3000)
}

#[test]
fn windows_of_n_with_contiguous_seqs_and_tiling_offsets() {
    let mut w = windower(3, 1, 100, None);
    let mut closed = Vec::new();
    for off in 0..9 {
        assert_eq!(
            w.admit(
                0,
                0,
                off,
                device_key(&format!("d{off}")),
                off,
                10,
                10,
                &mut closed
            ),
            Admission::Accepted
        );
    }
    assert_eq!(closed.len(), 3);
    for (i, c) in closed.iter().enumerate() {
        assert_eq!(c.seq, i as u64);
        assert_eq!(
            (c.first_offset, c.last_offset),
            (3 * i as i64, 3 * i as i64 + 2)
        );
        assert_eq!(c.values.len(), 3);
    }
    assert_eq!(w.committable(0, 9), 9);
    w.admit(0, 0, 9, device_key("x"), 1, 10, 0, &mut closed);
    assert_eq!(w.committable(0, 10), 9);
}

#[test]
fn per_window_and_per_horizon_caps() {
    let mut w = windower(2, 1, 2, None);
    let mut closed = Vec::new();
    assert_eq!(
        w.admit(0, 0, 0, device_key("a"), 1, 0, 0, &mut closed),
        Admission::Accepted
    );
    assert_eq!(
        w.admit(0, 0, 1, device_key("a"), 1, 0, 0, &mut closed),
        Admission::DroppedWindowCap
    );
    assert_eq!(
        w.admit(0, 0, 2, device_key("b"), 1, 0, 0, &mut closed),
        Admission::Accepted
    ); // window 0 closes
    assert_eq!(
        w.admit(0, 0, 3, device_key("a"), 1, 0, 0, &mut closed),
        Admission::Accepted
    ); // a: 2nd window
    assert_eq!(
        w.admit(0, 0, 4, device_key("c"), 1, 0, 0, &mut closed),
        Admission::Accepted
    ); // window 1 closes
    assert_eq!(
        w.admit(0, 0, 5, device_key("a"), 1, 0, 0, &mut closed),
        Admission::DroppedHorizonCap
    );
    // Next horizon (event time ≥ 1000): a may contribute again.
    assert_eq!(
        w.admit(0, 0, 6, device_key("a"), 1, 1000, 0, &mut closed),
        Admission::Accepted
    );
    assert_eq!(closed.len(), 2);
}

#[test]
fn alternating_horizons_cannot_reset_the_cap() {
    let mut w = windower(1, 1, 1, None);
    let mut closed = Vec::new();
    assert_eq!(
        w.admit(0, 0, 0, device_key("a"), 1, 1000, 0, &mut closed),
        Admission::Accepted
    );
    assert_eq!(
        w.admit(0, 0, 1, device_key("a"), 1, 0, 0, &mut closed),
        Admission::DroppedHorizonCap
    );
    assert_eq!(
        w.admit(0, 0, 2, device_key("a"), 1, 1500, 0, &mut closed),
        Admission::DroppedHorizonCap
    );
    assert_eq!(closed[0].charges, vec![(device_key("a"), 1)]);
}

#[test]
fn restored_charges_keep_the_cap_across_a_restart() {
    let mut w = windower(1, 1, 2, None);
    let mut closed = Vec::new();
    w.admit(0, 0, 0, device_key("a"), 1, 0, 0, &mut closed);
    w.admit(0, 0, 1, device_key("a"), 1, 0, 0, &mut closed);
    let charges: Vec<_> = closed.iter().map(|c| (c.seq, c.charges.clone())).collect();
    // A new process: resume after window 1 and restore its charges.
    let mut w2 = windower(1, 1, 2, None);
    w2.resume(
        0,
        0,
        Resume {
            last_seq: 1,
            last_offset: 1,
            last_index: 0,
            reference_event_ms: 0,
        },
    );
    w2.restore_charges(0, 0, charges.clone());
    w2.restore_charges(0, 0, charges.clone()); // idempotent
    let mut closed2 = Vec::new();
    assert_eq!(
        w2.admit(0, 0, 2, device_key("a"), 1, 0, 0, &mut closed2),
        Admission::DroppedHorizonCap
    );
    assert_eq!(
        w2.admit(0, 0, 3, device_key("b"), 1, 0, 0, &mut closed2),
        Admission::Accepted
    );
}

#[test]
fn timeout_pads_with_the_midpoint() {
    let mut w = windower(4, 1, 100, Some(500));
    let mut closed = Vec::new();
    w.admit(0, 0, 0, device_key("a"), 7, 0, 0, &mut closed);
    w.admit(0, 0, 1, device_key("b"), 8, 100, 0, &mut closed);
    w.admit(0, 0, 2, device_key("c"), 9, 600, 0, &mut closed);
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].values, vec![7, 8, 50, 50]);
    assert_eq!(closed[0].padded, 2);
    assert_eq!(w.committable(0, 3), 2);
}

#[test]
fn resume_skips_released_offsets_and_continues_seq() {
    let mut w = windower(2, 1, 100, None);
    w.resume(
        0,
        0,
        Resume {
            last_seq: 4,
            last_offset: 9,
            last_index: 0,
            reference_event_ms: 5000,
        },
    );
    let mut closed = Vec::new();
    assert_eq!(
        w.admit(0, 0, 9, device_key("a"), 1, 5000, 0, &mut closed),
        Admission::AlreadyReleased
    );
    assert!(w.is_too_old(0, 0, 20, 1000));
    assert!(!w.is_too_old(0, 0, 20, 2000));
    assert!(
        !w.is_too_old(0, 0, 9, 1000),
        "a released offset is skipped, not too old"
    );
    w.admit(0, 0, 10, device_key("a"), 1, 5000, 0, &mut closed);
    w.admit(0, 0, 11, device_key("b"), 1, 5000, 0, &mut closed);
    assert_eq!(closed[0].seq, 5);
}

#[test]
fn windows_retire_once_their_horizons_are_beyond_lateness() {
    // horizon 1000 ms, lateness 3000 ms, n = 1.
    let mut w = windower(1, 1, 100, None);
    let mut closed = Vec::new();
    w.admit(0, 0, 0, device_key("a"), 1, 500, 0, &mut closed); // horizon 0
    w.admit(0, 0, 1, device_key("a"), 1, 1500, 0, &mut closed); // horizon 1
    w.admit(0, 0, 2, device_key("a"), 1, 3999, 0, &mut closed); // oldest accepted 999: nothing retires
    assert!(closed.iter().all(|c| c.retired.is_empty()));
    w.admit(0, 0, 3, device_key("a"), 1, 4000, 0, &mut closed); // oldest accepted 1000: horizon 0 retires
    assert_eq!(closed[3].retired, vec![0]);
    assert_eq!(closed[3].reference_event_ms, 4000);
    // An older event time does not move the reference back.
    w.admit(0, 0, 4, device_key("b"), 1, 3500, 0, &mut closed);
    assert_eq!(closed[4].reference_event_ms, 4000);
    w.admit(0, 0, 5, device_key("a"), 1, 5000, 0, &mut closed); // oldest accepted 2000: horizon 1 retires
    assert_eq!(closed[5].retired, vec![1]);
    assert!(w.is_too_old(0, 0, 6, 1999));
    assert!(!w.is_too_old(0, 0, 6, 2000));
}

/// The repro: n = 2, k = 2, W = 1, horizon 1000 ms. A at 999
/// and 1001 share window 0 with A at 1002 going to window 1: before the
/// fix window 0 was charged to horizon 0 only, so A's readings of
/// horizon 1 sat in two windows.
#[test]
fn a_window_straddling_a_horizon_is_charged_to_both() {
    let mut w = windower(2, 2, 1, None);
    let mut closed = Vec::new();
    let a = device_key("a");
    let mut admit = |w: &mut Windower, off, dk, ev| w.admit(0, 0, off, dk, 1, ev, ev, &mut closed);
    assert_eq!(admit(&mut w, 0, a, 999), Admission::Accepted);
    assert_eq!(admit(&mut w, 1, a, 1001), Admission::Accepted); // window 0 closes
    assert_eq!(admit(&mut w, 2, a, 1002), Admission::DroppedHorizonCap);
    assert_eq!(admit(&mut w, 3, device_key("b"), 1003), Admission::Accepted);
    assert_eq!(closed[0].charges, vec![(a, 0), (a, 1)]);
    // Restored from those charges, horizon 1 is used up too.
    let charges: Vec<_> = closed.iter().map(|c| (c.seq, c.charges.clone())).collect();
    let mut w2 = windower(2, 2, 1, None);
    w2.restore_charges(0, 0, charges.clone());
    let mut c2 = Vec::new();
    assert_eq!(
        w2.admit(0, 0, 9, a, 1, 1500, 1500, &mut c2),
        Admission::DroppedHorizonCap
    );
}

/// Out of order inside one window: a device's first reading there is of
/// the newer horizon; a later one of the older horizon is dropped (its
/// count is no longer kept), never admitted uncharged.
#[test]
fn an_older_horizon_inside_a_window_charged_newer_is_dropped() {
    let mut w = windower(3, 2, 1, None);
    let mut closed = Vec::new();
    let a = device_key("a");
    assert_eq!(
        w.admit(0, 0, 0, a, 1, 1001, 0, &mut closed),
        Admission::Accepted
    );
    assert_eq!(
        w.admit(0, 0, 1, a, 1, 999, 0, &mut closed),
        Admission::DroppedHorizonCap
    );
}

fn timed(len: i64, k: u32, w: u32) -> Windower {
    Windower::new(rules(0, k, w, None, Some(len)), 1000, 50)
}

#[test]
fn time_windows_follow_event_time_and_close_on_the_clock() {
    // Windows of 100 ms, lateness 50 ms, started at t = 120: window 0
    // (end 100 + 50 = 150 > 120) is the first still open.
    let mut w = timed(100, 1, 100);
    w.start_time_lanes(0, 120);
    let mut closed = Vec::new();
    let mut admit = |w: &mut Windower, off, d: &str, ev, msg| {
        w.admit(0, 0, off, device_key(d), 7, ev, msg, &mut closed)
    };
    assert_eq!(admit(&mut w, 0, "a", 90, 95), Admission::Accepted); // window 0
    assert_eq!(admit(&mut w, 1, "b", 210, 212), Admission::Accepted); // window 2
    assert_eq!(admit(&mut w, 2, "c", 50, 151), Admission::DroppedLate); // arrived after 150
    assert_eq!(
        admit(&mut w, 4, "b", 110, 215),
        Admission::DroppedOutOfOrder
    );
    assert_eq!(admit(&mut w, 5, "e", 150, 149), Admission::Accepted); // window 1
    assert!(closed.is_empty(), "time windows never close on a reading");
    assert_eq!(w.committable(0, 6), 0);
    // Due at 150 (window 0), 250 (window 1), 350 (window 2).
    w.close_due(149, |_| i64::MAX, |_| 0, 100, &mut closed);
    assert!(closed.is_empty());
    w.close_due(260, |_| 240, |_| 0, 100, &mut closed); // read until 240 < 250: window 1 waits
    assert_eq!(closed.len(), 1);
    w.close_due(260, |_| 255, |_| 0, 100, &mut closed);
    w.close_due(1000, |_| 1000, |_| 0, 100, &mut closed);
    let got: Vec<_> = closed
        .iter()
        .map(|c| {
            (
                c.seq,
                c.values.clone(),
                c.first_event_ms,
                c.last_event_ms,
                c.padded,
                c.timed,
            )
        })
        .collect();
    let mut want = vec![
        (0, vec![7], 0, 100, 0, true),
        (1, vec![7], 100, 200, 0, true),
        (2, vec![7], 200, 300, 0, true),
    ];
    // Windows 3..=8 are due by 1000 and released empty.
    want.extend((3..9).map(|s| (s, vec![], s as i64 * 100, s as i64 * 100 + 100, 0, true)));
    assert_eq!(got, want);
    // A released window accepts nothing more.
    assert_eq!(
        w.admit(0, 0, 9, device_key("z"), 1, 850, 860, &mut closed),
        Admission::DroppedLate
    );
    assert_eq!(w.committable(0, 10), 10);
}

#[test]
fn time_windows_resume_after_the_ledger_and_bound_each_call() {
    let mut w = timed(100, 1, 100);
    w.resume(
        0,
        0,
        Resume {
            last_seq: 4,
            last_offset: 3,
            last_index: 0,
            reference_event_ms: 500,
        },
    );
    let mut closed = Vec::new();
    // Replayed input up to the last release's last offset, then a
    // reading of a released window arriving later.
    assert_eq!(
        w.admit(0, 0, 0, device_key("a"), 1, 450, 460, &mut closed),
        Admission::AlreadyReleased
    );
    assert_eq!(
        w.admit(0, 0, 4, device_key("b"), 1, 450, 460, &mut closed),
        Admission::DroppedLate
    );
    assert_eq!(
        w.admit(0, 0, 5, device_key("a"), 1, 520, 530, &mut closed),
        Admission::Accepted
    );
    w.close_due(10_000, |_| 10_000, |_| 0, 3, &mut closed);
    assert_eq!(
        closed.iter().map(|c| c.seq).collect::<Vec<_>>(),
        vec![5, 6, 7]
    );
    assert_eq!(closed[0].values, vec![1]);
}

/// Issue: a partition whose input happened to be read later (one more
/// message to handle when the lag probe asked) released its windows after
/// another partition's windows of the same due moment, so the order on the
/// output topic depended on the input. Lanes that share an output partition
/// now close a due moment together, in (end, stream, partition) order.
#[test]
fn time_windows_sharing_an_output_partition_close_in_due_order() {
    let mut w = timed(100, 1, 100);
    for p in 0..3 {
        w.start_time_lanes(p, 120);
    }
    let mut closed = Vec::new();
    // Partition 1 has read up to 260, partitions 0 and 2 up to 360: all
    // share output partition 0, so only window 0 (due 150) and window 1
    // (due 250) close, and for every partition.
    let read = |p: i32| if p == 1 { 260 } else { 360 };
    w.close_due(1000, read, |_| 0, 100, &mut closed);
    let got = |c: &[ClosedWindow]| c.iter().map(|c| (c.seq, c.partition)).collect::<Vec<_>>();
    assert_eq!(
        got(&closed),
        vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    );
    closed.clear();
    // With an output partition each, partitions 0 and 2 go on alone (as
    // before).
    w.close_due(1000, read, |p| p, 100, &mut closed);
    assert_eq!(got(&closed), vec![(2, 0), (2, 2)]);
}

/// A count window's published event-time span is the earliest and
/// latest event time it holds, whatever the arrival order.
#[test]
fn the_event_time_span_is_min_and_max_of_the_readings() {
    let mut w = windower(3, 1, 100, None);
    let mut closed = Vec::new();
    for (off, (d, t)) in [("a", 50), ("b", 10), ("c", 30)].into_iter().enumerate() {
        w.admit(0, 0, off as i64, device_key(d), 1, t, t, &mut closed);
    }
    assert_eq!(
        (closed[0].first_event_ms, closed[0].last_event_ms),
        (10, 50)
    );
    assert_eq!(closed[0].reference_event_ms, 50);
}

/// Device churn over many horizons keeps the table bounded: devices whose
/// horizon is over are swept once per horizon (they used to stay forever).
#[test]
fn device_churn_over_horizons_keeps_the_table_bounded() {
    // Horizon 1 s, lateness 3 s, windows of 10.
    let mut w = windower(10, 1, 100, None);
    let mut closed = Vec::new();
    let mut peak = 0;
    for h in 0..50i64 {
        for d in 0..200u64 {
            let dev = (h as u64) * 1000 + d;
            w.admit(
                0,
                0,
                h * 1000 + d as i64,
                dev,
                1,
                h * 1000 + d as i64,
                h * 1000,
                &mut closed,
            );
        }
        peak = peak.max(w.devices_in(0, 0));
    }
    // 200 new devices per horizon; at most the horizons within lateness
    // (and the one being swept) stay.
    assert!(peak <= 200 * 6, "table grew to {peak} devices");
    assert!(closed.len() >= 900);
}

/// A reading of a swept horizon is dropped, never charged afresh (its
/// device's count for that horizon is gone from the table).
#[test]
fn a_reading_of_a_swept_horizon_is_not_charged_again() {
    // Horizon 1 s, lateness 0, windows of 2, W = 1.
    let mut w = Windower::new(rules(2, 1, 1, None, None), 1000, 0);
    let mut closed = Vec::new();
    let d = 42;
    assert_eq!(
        w.admit(0, 0, 0, d, 1, 100, 100, &mut closed),
        Admission::Accepted
    );
    assert_eq!(
        w.admit(0, 0, 1, 7, 1, 150, 150, &mut closed),
        Admission::Accepted
    );
    // Two readings of horizon 2 close a window whose lateness reference
    // leaves horizon 0 behind: its devices are swept.
    w.admit(0, 0, 2, 8, 1, 2500, 2500, &mut closed);
    w.admit(0, 0, 3, 9, 1, 2600, 2600, &mut closed);
    assert_eq!(closed.len(), 2);
    // The device's horizon-0 reading (judged before the close, in the same
    // message) must not find a fresh count.
    assert_eq!(
        w.admit(0, 0, 3, d, 1, 120, 2600, &mut closed),
        Admission::DroppedLate
    );
}

/// The packed device counts change no decision: a random workload (count
/// and time windows, several horizons, straddling windows, a restore)
/// gives the same admissions and windows with field widths so small that
/// most entries spill and the bases move all the time.
#[test]
fn packed_counts_decide_as_whole_values() {
    use rand::{Rng, SeedableRng};
    for (seed, timed_len) in [(1u64, None), (2, Some(100i64)), (3, None), (4, Some(250))] {
        let make = |layout| {
            let r = rules(7, 2, 3, Some(400), timed_len);
            let mut w = Windower::new(r, 1000, 300);
            w.layout = layout;
            w
        };
        let (mut wide, mut tiny) = (make(Layout::DEFAULT), make(Layout::TINY));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut now = 0i64;
        for off in 0..6_000i64 {
            now += rng.gen_range(0..12);
            let ev = (now - rng.gen_range(0..350)).max(0);
            let dk = rng.gen_range(0..60u64);
            let got: Vec<Admission> = [&mut wide, &mut tiny]
                .into_iter()
                .zip([&mut a, &mut b])
                .map(|(w, out)| w.admit(0, 0, off, dk, off % 90, ev, now, out))
                .collect();
            assert_eq!(got[0], got[1], "reading {off}");
            if off % 17 == 0 {
                wide.close_due(now, |_| now, |_| 0, 100, &mut a);
                tiny.close_due(now, |_| now, |_| 0, 100, &mut b);
            }
            if off == 3_000 {
                // Restart: both restore the charges of their released windows.
                for (w, out) in [(&mut wide, &a), (&mut tiny, &b)] {
                    let charges: Vec<_> = out.iter().map(|c| (c.seq, c.charges.clone())).collect();
                    w.restore_charges(0, 0, charges);
                }
            }
        }
        assert_eq!(a, b, "seed {seed}");
        assert!(a.len() > 50, "{} windows", a.len());
    }
}

/// A lane counts at most `device_limit` devices: a further device is
/// dropped (counted devices keep being served) until a horizon sweep
/// makes room.
#[test]
fn the_device_limit_drops_new_devices_until_a_sweep() {
    // Horizon 1 s, lateness 0, windows of 2.
    let mut w = Windower::new(rules(2, 1, 5, None, None), 1000, 0).with_device_limit(3);
    let mut closed = Vec::new();
    let mut admit =
        |w: &mut Windower, off: i64, d: u64, ev: i64| w.admit(0, 0, off, d, 1, ev, ev, &mut closed);
    for d in 1..=3 {
        assert_eq!(admit(&mut w, d as i64, d, 100), Admission::Accepted);
    }
    assert_eq!(admit(&mut w, 4, 4, 110), Admission::DroppedDeviceLimit);
    assert_eq!(admit(&mut w, 5, 2, 120), Admission::Accepted);
    assert_eq!(w.devices_in(0, 0), 3);
    // Horizon 1: the close of a window with its readings sweeps horizon 0.
    assert_eq!(admit(&mut w, 6, 1, 1100), Admission::Accepted);
    assert_eq!(admit(&mut w, 7, 3, 1200), Admission::Accepted);
    assert_eq!(admit(&mut w, 8, 4, 1300), Admission::Accepted);
}

/// Three groups of one stream (count windows of 1), `G` = 2.
fn grouped_windower() -> Windower {
    let rules = (0..3)
        .map(|i| StreamRules {
            group: Some(LaneGroup {
                first: 0,
                count: 3,
                index: i,
                max_groups: 2,
            }),
            ..rules(1, 1, 100, None, None).remove(0)
        })
        .collect();
    Windower::new(rules, 1000, 3000)
}

/// The group cap survives a restart: the groups of released windows are
/// rebuilt from their charges, so a device in two groups before the
/// restart is refused a third one after it, and still admitted in its own.
#[test]
fn restored_charges_rebuild_the_group_cap() {
    let mut w = grouped_windower();
    let mut closed = Vec::new();
    let a = device_key("a");
    for group in 0..2 {
        assert_eq!(
            w.admit(group, 0, group as i64, a, 1, 10, 10, &mut closed),
            Admission::Accepted
        );
    }
    assert_eq!(
        w.admit(2, 0, 2, a, 1, 10, 10, &mut closed),
        Admission::DroppedGroupCap
    );
    let mut w2 = grouped_windower();
    for c in &closed {
        let at = Resume {
            last_seq: c.seq,
            last_offset: c.last_offset,
            last_index: 0,
            reference_event_ms: 10,
        };
        w2.resume(c.stream, 0, at);
        w2.restore_charges(c.stream, 0, vec![(c.seq, c.charges.clone())]);
    }
    let mut closed2 = Vec::new();
    assert_eq!(
        w2.admit(2, 0, 3, a, 1, 11, 11, &mut closed2),
        Admission::DroppedGroupCap
    );
    assert_eq!(
        w2.admit(1, 0, 4, a, 1, 11, 11, &mut closed2),
        Admission::Accepted
    );
    // Without the restore the third group would have been admitted.
    let mut fresh = grouped_windower();
    assert_eq!(
        fresh.admit(2, 0, 3, a, 1, 11, 11, &mut closed2),
        Admission::Accepted
    );
}

/// The group table is swept once the lanes that exist have moved past a
/// horizon — a group with no lane on the partition does not hold it back —
/// and a lane made later cannot count a device in a swept horizon.
#[test]
fn the_group_table_is_swept_and_swept_horizons_stay_refused() {
    let mut w = grouped_windower();
    let mut closed = Vec::new();
    for i in 0..100 {
        let d = device_key(&format!("d{i}"));
        assert_eq!(
            w.admit(0, 0, i, d, 1, 10, 10, &mut closed),
            Admission::Accepted
        );
    }
    assert_eq!(w.groups[&(0, 0)].len(), 100);
    // Ten horizons later (lateness 3 horizons): horizon 0 is over.
    let late = device_key("late");
    assert_eq!(
        w.admit(0, 0, 100, late, 1, 10_000, 10_000, &mut closed),
        Admission::Accepted
    );
    assert_eq!(w.groups[&(0, 0)].len(), 1, "horizon 0's devices swept");
    // A new lane (group 2) would take an old reading; the table refuses it.
    assert_eq!(
        w.admit(2, 0, 101, device_key("d0"), 1, 10, 10, &mut closed),
        Admission::DroppedGroupCap
    );
}

/// What a restart restores of lane (`stream`, `partition`) from the
/// windows `closed` released: where it resumes and the charges of each
/// released window (`None`: it released none).
#[allow(clippy::type_complexity)]
pub(crate) fn released(
    closed: &[ClosedWindow],
    stream: usize,
    partition: i32,
) -> Option<(Resume, Vec<(u64, Vec<(u64, i64)>)>)> {
    let mine: Vec<&ClosedWindow> = closed
        .iter()
        .filter(|c| c.stream == stream && c.partition == partition)
        .collect();
    let last = mine.iter().max_by_key(|c| c.seq)?;
    let at = Resume {
        last_seq: last.seq,
        last_offset: last.last_offset,
        last_index: last.last_index,
        reference_event_ms: last.reference_event_ms,
    };
    Some((
        at,
        mine.iter().map(|c| (c.seq, c.charges.clone())).collect(),
    ))
}

/// Two grouped streams (three groups with `G` = 2 or 3, so spilled groups
/// too; two groups with `G` = 1) and an ungrouped one, on three partitions.
fn hosting_windower(timed: Option<i64>, g: u32, limit: usize, layout: Layout) -> Windower {
    let grouped = |first: usize, count: usize, max_groups: u32| {
        (0..count).map(move |i| StreamRules {
            group: Some(LaneGroup {
                first,
                count,
                index: i as u32,
                max_groups,
            }),
            ..rules(5, 2, 3, Some(400), timed).remove(0)
        })
    };
    let r = grouped(0, 3, g)
        .chain(grouped(3, 2, 1))
        .chain(rules(5, 2, 3, Some(400), timed))
        .collect();
    let mut w = Windower::new(r, 1000, 300).with_device_limit(limit);
    w.layout = layout;
    w
}

/// The whole device slot changes no decision (module `hosted`): a random
/// workload run twice, once with every entry in the tables and once with
/// registry devices' entries in their replica slots, gives the same
/// admission for every reading, the same lane device counts and the same
/// windows. It moves devices between groups, has devices without a slot
/// (the tables) and devices that get one later, lets one device's slot be held by
/// the other grouped stream, sweeps horizons (lazily, in slots), fills
/// lanes to the device limit, drops and restores partitions, restores a
/// partition still held (its slots moved back first), loses and regains
/// slots as a replica's fresh copy does (a slot of live entries is kept),
/// runs out of tags, and uses field widths that spill.
#[test]
fn hosting_changes_nothing() {
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    let cases = [
        (1u64, None, 2, usize::MAX, Layout::DEFAULT),
        (2, Some(100i64), 2, usize::MAX, Layout::DEFAULT),
        (3, Some(250), 3, 6, Layout::TINY),
        (4, None, 3, 4, Layout::TINY),
        (5, Some(100), 2, 8, Layout::DEFAULT),
        (6, Some(250), 1, usize::MAX, Layout::TINY),
    ];
    for (seed, timed, g, limit, layout) in cases {
        let mut plain = hosting_windower(timed, g, limit, layout);
        let mut hosting = hosting_windower(timed, g, limit, layout);
        let mut slots: HashMap<u64, Hosted> = HashMap::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut hosted_readings = 0;
        let mut now = 0i64;
        let home: Vec<usize> = (0..60).map(|_| rng.gen_range(0..6)).collect();
        for off in 0..12_000i64 {
            now += rng.gen_range(0..8);
            let ev = (now - rng.gen_range(0..350)).max(0);
            let dk = rng.gen_range(0..60u64);
            let p = (dk % 3) as i32;
            let stream = if rng.gen_ratio(4, 5) {
                home[dk as usize]
            } else {
                rng.gen_range(0..6)
            };
            // Most devices have a replica slot (a registry row), some get
            // one later; a device's slot comes with every reading of it,
            // however it is routed (the processor's rule).
            if dk % 5 != 0 || rng.gen_ratio(1, 500) {
                slots.entry(dk).or_default();
            }
            let host = slots.get_mut(&dk);
            if host.is_some() && plain.rules[stream].group.is_some() {
                hosted_readings += 1;
            }
            let want = plain.admit_at(stream, p, (off, 0), dk, off % 90, ev, now, &mut a);
            let offer = Offer {
                stream,
                partition: p,
                offset: off,
                index: 0,
                device: dk,
                units: off % 90,
                event_ms: ev,
                msg_ms: now,
            };
            let got = hosting.admit_hosted(offer, &mut b, host);
            assert_eq!(got, want, "seed {seed}, reading {off}");
            if off % 13 == 0 && timed.is_some() {
                plain.close_due(now, |_| now, |_| 0, 100, &mut a);
                hosting.close_due(now, |_| now, |_| 0, 100, &mut b);
            }
            match rng.gen_range(0..1_000) {
                // A replica's fresh copy: slots of dead or no entries may
                // go (devices removed from the registry), live ones stay.
                0..=2 => slots.retain(|_, h| hosting.holds(h) || rng.gen_ratio(1, 2)),
                // A revoked partition, assigned again and restored from
                // its released windows; or a restore while it is held.
                3 | 4 => {
                    let q = rng.gen_range(0..3);
                    let held = rng.gen_ratio(1, 2);
                    for (w, out) in [(&mut plain, &a), (&mut hosting, &b)] {
                        if !held {
                            w.drop_partition(q);
                        }
                        for s in 0..6 {
                            let Some((at, charges)) = released(out, s, q) else {
                                continue;
                            };
                            w.resume(s, q, at);
                            for (dk, h) in slots.iter_mut() {
                                w.evict(*dk, h, s, q);
                            }
                            w.restore_charges(s, q, charges);
                        }
                    }
                }
                5 if off > 8_000 => hosting.tags.exhaust(),
                _ => {}
            }
            if off % 101 == 0 {
                for s in 0..6 {
                    for q in 0..3 {
                        assert_eq!(
                            hosting.lane_device_count(s, q),
                            plain.lane_device_count(s, q),
                            "seed {seed}, reading {off}: devices of lane {s}/{q}"
                        );
                    }
                }
            }
        }
        assert_eq!(a, b, "seed {seed}");
        assert!(a.len() > 100, "seed {seed}: {} windows", a.len());
        assert!(hosted_readings > 3_000, "seed {seed}: {hosted_readings}");
    }
}

/// The device-limit alarm's query: at each close, the devices whose counts
/// are of the horizon of the lane's lateness reference, not those of an
/// earlier horizon the lane still holds (nor a device that moved on).
#[test]
fn a_close_counts_the_devices_of_its_reference_horizon() {
    let mut r = rules(2, 1, 5, None, None);
    r[0].count_devices = true;
    // Horizon 1 s, lateness 3 s: horizon 0 stays in the table.
    let mut w = Windower::new(r, 1000, 3000);
    let mut closed = Vec::new();
    for (off, (d, ev)) in [(1, 100), (2, 200), (3, 300), (4, 400), (1, 1100), (5, 1200)]
        .into_iter()
        .enumerate()
    {
        let a = w.admit(0, 0, off as i64, d, 1, ev, ev, &mut closed);
        assert_eq!(a, Admission::Accepted);
    }
    let counts: Vec<_> = closed.iter().map(|c| c.horizon_devices).collect();
    assert_eq!(counts, [Some((0, 2)), Some((0, 4)), Some((1, 2))]);
    assert_eq!(w.devices_in(0, 0), 5);
    // Without an alarm nothing is counted.
    let mut w = windower(2, 1, 5, None);
    let mut closed = Vec::new();
    w.admit(0, 0, 0, 1, 1, 100, 100, &mut closed);
    w.admit(0, 0, 1, 2, 1, 100, 100, &mut closed);
    assert_eq!(closed[0].horizon_devices, None);
}
