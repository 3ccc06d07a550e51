//! Group-by (dimensions): a stream released per group — per firmware, model
//! or region — with contribution bounding per device, and the sensitivity
//! of all groups' measurements of one window slot together.
//!
//! Contribution bounding (Tumult's `MaxGroupsPerID` and
//! `MaxRowsPerGroupPerID`, per horizon in a stream): a device's readings
//! count in the first `G` groups it is seen in during a horizon (by
//! arrival; a device that changes firmware mid-horizon touches two), and
//! within a (group, window) its first `k` readings; the rest is dropped and
//! counted. Every decision reads only the device's own readings and their
//! order, so another device's presence or values never change what is kept
//! of a device ([`bound_contributions`], the reference the service's windows
//! follow).
//!
//! Sensitivity: one device changes (change-one) or adds (add-remove) at
//! most `k` readings in each of at most `G` groups of a window slot, so the
//! vector of every group's measurement moves by at most `G·Δ₁` in L1 and
//! `√G·Δ₂` in L2, where `Δ` is the measurement's sensitivity for `k`
//! readings ([`grouped`]; checked by brute force in
//! `tests/groups_bruteforce.rs`). Over a horizon a device joins at most `W`
//! windows in each of its `G` groups: the accountant composes `G·W` windows
//! ([`crate::accountant::StreamClaim::groups_per_device`]) — parallel
//! composition across groups, so the cost depends on `G`, not on how many
//! groups exist. Which groups exist is public (a declared key set) or
//! selected privately ([`crate::keyselect`]).

use crate::stats::Sensitivity;
use num_bigint::BigInt;
use num_rational::BigRational;
use std::collections::{BTreeMap, HashMap};

/// Most groups one device may count in per horizon (`G`).
pub const MAX_GROUPS_PER_DEVICE: u32 = 1_000;

/// One reading of a grouped stream, as the bounding sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupedReading {
    pub device: u64,
    pub group: u32,
    /// The window (seq) the reading falls in.
    pub window: u64,
    /// Grid units.
    pub value: i64,
}

/// What bounding kept, per (group, window), and how many readings it dropped
/// for each rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bounded {
    pub kept: BTreeMap<(u32, u64), Vec<i64>>,
    /// Readings of a device's `G+1`-th and later groups.
    pub dropped_groups: u64,
    /// Readings past a device's `k` in a (group, window).
    pub dropped_per_group_window: u64,
}

/// Bound one horizon's readings, in arrival order: each device's first `g`
/// groups, its first `k` readings per (group, window).
pub fn bound_contributions(readings: &[GroupedReading], g: u32, k: u32) -> Bounded {
    let mut out = Bounded::default();
    let mut groups: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut per: HashMap<(u64, u32, u64), u32> = HashMap::new();
    for r in readings {
        let mine = groups.entry(r.device).or_default();
        if !mine.contains(&r.group) {
            if mine.len() as u32 >= g {
                out.dropped_groups += 1;
                continue;
            }
            mine.push(r.group);
        }
        let n = per.entry((r.device, r.group, r.window)).or_default();
        if *n >= k {
            out.dropped_per_group_window += 1;
            continue;
        }
        *n += 1;
        out.kept
            .entry((r.group, r.window))
            .or_default()
            .push(r.value);
    }
    out
}

/// The sensitivity of one window slot's measurements over all groups, from
/// the per-group sensitivity `per_group` (for `k` readings): L1 `G·Δ₁`, L2²
/// `G·Δ₂²`.
pub fn grouped(per_group: &Sensitivity, g: u32) -> Sensitivity {
    let g = BigRational::from_integer(BigInt::from(g));
    Sensitivity {
        l1: &per_group.l1 * &g,
        l2_sq: &per_group.l2_sq * &g,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(device: u64, group: u32, window: u64, value: i64) -> GroupedReading {
        GroupedReading {
            device,
            group,
            window,
            value,
        }
    }

    /// A device moving firmware mid-horizon counts in both groups up to
    /// `G`; a third group's readings are dropped; `k` holds per group-window.
    #[test]
    fn bounding_keeps_the_first_groups_and_readings() {
        let rs = [
            r(1, 0, 0, 10),
            r(1, 0, 0, 11), // second in (0, 0): k = 1 drops it
            r(1, 1, 0, 12), // moved group: G = 2 keeps it
            r(1, 2, 1, 13), // third group: dropped
            r(1, 0, 1, 14), // first group, next window: kept
            r(2, 2, 1, 15), // another device: its own budget
        ];
        let b = bound_contributions(&rs, 2, 1);
        assert_eq!(b.kept[&(0, 0)], vec![10]);
        assert_eq!(b.kept[&(1, 0)], vec![12]);
        assert_eq!(b.kept[&(0, 1)], vec![14]);
        assert_eq!(b.kept[&(2, 1)], vec![15]);
        assert_eq!((b.dropped_groups, b.dropped_per_group_window), (1, 1));
    }

    #[test]
    fn grouped_sensitivity_scales_l1_by_g_and_l2_by_root_g() {
        let s = Sensitivity {
            l1: BigRational::from_integer(3.into()),
            l2_sq: BigRational::from_integer(5.into()),
        };
        let g = grouped(&s, 4);
        assert_eq!(g.l1, BigRational::from_integer(12.into()));
        assert_eq!(g.l2_sq, BigRational::from_integer(20.into()));
    }
}
