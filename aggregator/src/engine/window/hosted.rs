//! The whole device slot (docs/DESIGN.md §4, group-by): a registry-routed
//! device's `G` entry and its counts in its current group's lane, kept in
//! its slot of the consuming loop's registry replica, which routing reads
//! anyway. A reading of such a device then makes one random read (that
//! slot, fetched two messages ahead) instead of three (replica, lane table,
//! group table).
//!
//! Privacy argument: hosting only moves entries; every decision reads and
//! writes the same whole values it would in the tables (the lane's
//! [`DeviceHorizon`], the stream's `G` entry), so it is the same decision.
//! That rests on four rules, each kept here:
//!
//! 1. **One place.** A device's entry of a (grouped stream, partition)
//!    table, and its counts of a lane, are at every moment either in the
//!    table or in its slot, never both: an entry moves into the slot
//!    ([`Windower::host`]) by being taken out of its table, and back by
//!    being put in.
//! 2. **Tags.** A slot names the (grouped stream, partition) whose entries
//!    it holds by a tag, fresh for each such pair and never reused; a tag
//!    dies when its partition is dropped, so a slot of a dead tag holds
//!    nothing (its tables were dropped with it) and may be claimed. A slot
//!    held by another live tag leaves the reading to the tables.
//! 3. **Sweeps.** Tables forget horizons eagerly; a slot's entries are
//!    swept lazily: an entry of a horizon its table or lane swept reads as
//!    absent, exactly what the sweep left in the table.
//! 4. **Counting.** A lane counts its hosted devices by horizon
//!    (`counts::HostedCount`), so the per-lane device limit sees the devices of
//!    its table and of slots together, as before hosting.
//!
//! Restore replaces a lane's counts and merges restored `G` entries into a
//! table: the processor first moves the slots of that (grouped stream,
//! partition) back into the tables ([`Windower::evict`]), and
//! [`Windower::install_restored`] refuses to run while any is hosted.
//! Tests: `hosting_changes_nothing` (engine/window/tests.rs) runs random
//! admissions, closes, sweeps, group moves, restores and dropped partitions
//! with and without hosting and requires identical outcomes and windows.

use super::counts::{DeviceHorizon, HostedCount};
use super::group_cap::Entry;
use super::{FastMap, LaneGroup, Windower};

/// No lane's counts in a slot.
const NO_LANE: u16 = u16::MAX;
const _: () = assert!(crate::dp::release::MAX_GROUPS_PER_STREAM < NO_LANE as usize);

/// A device's window state kept in its replica slot (48 bytes: with the
/// slot's key and registry row, one 64-byte cache line).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hosted {
    /// Whose entries these are (0: none).
    tag: u32,
    /// The group (index among its stream's groups) whose lane's counts are
    /// in `counts`; [`NO_LANE`]: none.
    lane: u16,
    has_group: bool,
    has_counts: bool,
    group: Entry,
    counts: DeviceHorizon,
}

impl Default for Hosted {
    fn default() -> Self {
        Hosted {
            tag: 0,
            lane: NO_LANE,
            has_group: false,
            has_counts: false,
            group: Entry::default(),
            counts: DeviceHorizon::fresh(0),
        }
    }
}

const _: () = assert!(std::mem::size_of::<Hosted>() == 48);

/// The tags of (grouped stream's first lane, partition) pairs.
#[derive(Debug, Default)]
pub(super) struct Tags {
    by_pair: FastMap<(usize, i32), u32>,
    /// Live tags: their pair and how many slots carry them.
    live: FastMap<u32, ((usize, i32), usize)>,
    /// The next fresh tag; at `u32::MAX` no more are made (and readings of
    /// pairs without one use the tables).
    next: u32,
}

impl Tags {
    /// The pair's tag, made if new (`None`: tags ran out).
    fn of(&mut self, pair: (usize, i32)) -> Option<u32> {
        if let Some(&t) = self.by_pair.get(&pair) {
            return Some(t);
        }
        if self.next == u32::MAX {
            return None;
        }
        self.next = self.next.max(1);
        let t = self.next;
        self.next += 1;
        self.by_pair.insert(pair, t);
        self.live.insert(t, (pair, 0));
        Some(t)
    }

    /// Every tag of `partition` dies.
    pub(super) fn drop_partition(&mut self, partition: i32) {
        self.by_pair.retain(|&(_, p), _| p != partition);
        self.live.retain(|_, ((_, p), _)| *p != partition);
    }

    /// Slots carrying the pair's tag.
    fn slots(&self, pair: (usize, i32)) -> usize {
        self.by_pair
            .get(&pair)
            .and_then(|t| self.live.get(t))
            .map_or(0, |(_, n)| *n)
    }

    #[cfg(test)]
    pub(super) fn exhaust(&mut self) {
        self.next = u32::MAX;
    }
}

impl Windower {
    /// Whether slot `h` holds live entries (a replica keeps such a slot
    /// when it copies its rows afresh).
    pub(crate) fn holds(&self, h: &Hosted) -> bool {
        h.tag != 0 && self.tags.live.contains_key(&h.tag)
    }

    /// [`Windower::prefetch`], unless slot `h` already holds the device's
    /// counts of `stream`'s group (then admitting it reads no table; a
    /// slot of a dead tag is taken for one, a hint only either way).
    #[inline]
    pub(crate) fn prefetch_unless_hosted(
        &self,
        stream: usize,
        partition: i32,
        device: u64,
        h: Option<&Hosted>,
    ) {
        let held = match (h, self.rules[stream].group) {
            (Some(h), Some(g)) => h.tag != 0 && h.lane == g.index as u16,
            _ => false,
        };
        if !held {
            self.prefetch(stream, partition, device);
        }
    }

    /// Slots holding entries of `stream`'s grouped stream on `partition`
    /// (to be moved back before a restore: [`Windower::evict`]).
    pub(crate) fn hosted_slots(&self, stream: usize, partition: i32) -> usize {
        self.rules[stream]
            .group
            .map_or(0, |g| self.tags.slots((g.first, partition)))
    }

    /// Panics if `stream`'s grouped stream has entries hosted on
    /// `partition`: a restore must not meet them (module doc).
    pub(super) fn check_nothing_hosted(&self, stream: usize, partition: i32) {
        assert_eq!(
            self.hosted_slots(stream, partition),
            0,
            "restoring a lane whose grouped stream has entries in replica slots: evict them first"
        );
    }

    /// Make slot `h` of device `dk` hold the device's entries of lane
    /// (`stream`, `partition`) of group `g`, moving them out of the tables
    /// (and the counts of another lane it held back into theirs). `false`:
    /// the slot holds another live pair's entries (or tags ran out), and
    /// the tables serve this reading.
    pub(super) fn host(
        &mut self,
        h: &mut Hosted,
        dk: u64,
        stream: usize,
        partition: i32,
        g: LaneGroup,
    ) -> bool {
        let pair = (g.first, partition);
        let Some(tag) = self.tags.of(pair) else {
            return false;
        };
        if h.tag != tag {
            if self.holds(h) {
                return false;
            }
            // A free slot, or one of a dead tag (its tables are gone).
            *h = Hosted {
                tag,
                ..Hosted::default()
            };
            self.tags.live.get_mut(&tag).expect("live").1 += 1;
            if let Some(t) = self.groups.get_mut(&pair) {
                if let Some(e) = t.take(dk) {
                    (h.group, h.has_group) = (e, true);
                }
            }
        }
        let index = g.index as u16;
        let moved = h.lane != index;
        if moved {
            self.evict_counts(h, dk, g.first, partition);
        }
        let lane = self.lanes.get_or_make((stream, partition), self.layout);
        lane.tag = tag;
        if moved {
            h.lane = index;
            if lane.devices.len() > 0 {
                if let Some(c) = lane.devices.take(dk) {
                    (h.counts, h.has_counts) = (c, true);
                    lane.hosted.add(c.horizon);
                }
            }
        }
        true
    }

    /// Put the counts slot `h` holds back into their lane's table (of
    /// group stream `first`, `partition`); swept ones are dropped, as the
    /// sweep dropped them from the table and from the lane's count.
    fn evict_counts(&mut self, h: &mut Hosted, dk: u64, first: usize, partition: i32) {
        if h.lane == NO_LANE {
            return;
        }
        let stream = first + h.lane as usize;
        if h.has_counts {
            if let Some(lane) = self.lanes.get_mut((stream, partition)) {
                if h.counts.horizon >= lane.swept_before {
                    lane.hosted.remove(h.counts.horizon);
                    lane.devices.put(dk, h.counts, lane.next_seq);
                }
            }
        }
        (h.lane, h.has_counts) = (NO_LANE, false);
    }

    /// Move whatever slot `h` of device `dk` holds for `stream`'s grouped
    /// stream on `partition` back into the tables, and free it (before a
    /// restore of that pair: [`Windower::install_restored`]).
    pub(crate) fn evict(&mut self, dk: u64, h: &mut Hosted, stream: usize, partition: i32) {
        let Some(g) = self.rules[stream].group else {
            return;
        };
        let pair = (g.first, partition);
        // Tags are never 0, so a free slot matches no pair.
        if self.tags.by_pair.get(&pair) != Some(&h.tag) {
            return;
        }
        self.evict_counts(h, dk, g.first, partition);
        if h.has_group {
            self.groups.entry(pair).or_default().put(dk, h.group);
        }
        self.tags.live.get_mut(&h.tag).expect("live").1 -= 1;
        *h = Hosted::default();
    }

    /// The hosted path of `admit_one`: run `judge` on the device's counts
    /// in its slot (fresh for a device new to the lane, refused as the
    /// table would when the lane is full) and keep the lane's count of
    /// hosted devices by horizon.
    pub(super) fn judge_hosted<R>(
        (has_counts, counts): (&mut bool, &mut DeviceHorizon),
        lane_hosted: &mut HostedCount,
        room: bool,
        swept_before: i64,
        fresh: DeviceHorizon,
        judge: impl FnOnce(&mut DeviceHorizon) -> R,
    ) -> Option<R> {
        if *has_counts && counts.horizon < swept_before {
            // Swept lazily: the lane's count already left it out.
            *has_counts = false;
        }
        if !*has_counts {
            if !room {
                return None;
            }
            (*counts, *has_counts) = (fresh, true);
            lane_hosted.add(fresh.horizon);
        }
        let before = counts.horizon;
        let r = judge(counts);
        if counts.horizon != before {
            lane_hosted.remove(before);
            lane_hosted.add(counts.horizon);
        }
        Some(r)
    }
}

/// A slot split into what a reading's admission changes: its counts and
/// its `G` entry, borrowed apart so one closure may change both.
pub(super) struct HostedParts<'a> {
    pub(super) counts: (&'a mut bool, &'a mut DeviceHorizon),
    pub(super) group: HeldGroup<'a>,
}

/// A slot's `G` entry.
pub(super) struct HeldGroup<'a> {
    has: &'a mut bool,
    entry: &'a mut Entry,
}

impl HeldGroup<'_> {
    /// [`GroupTable::admit_held`](super::group_cap::GroupTable::admit_held) on
    /// this entry.
    pub(super) fn admit(
        &mut self,
        t: &mut super::group_cap::GroupTable,
        dk: u64,
        horizon: i64,
        group: u32,
        g: u32,
    ) -> bool {
        let mut held = self.has.then_some(*self.entry);
        let ok = t.admit_held(&mut held, dk, horizon, group, g);
        if let Some(e) = held {
            (*self.entry, *self.has) = (e, true);
        }
        ok
    }
}

impl Hosted {
    /// A slot carrying `tag` (tests of the replica).
    #[cfg(test)]
    pub(crate) fn tagged(tag: u32) -> Self {
        Hosted {
            tag,
            ..Hosted::default()
        }
    }

    /// Its tag (tests of the replica).
    #[cfg(test)]
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }

    /// Whether the slot holds the counts of group `index`'s lane whose
    /// grouped stream and partition have tag `tag` (0: none yet).
    #[inline]
    pub(super) fn holds_lane(&self, tag: u32, index: u32) -> bool {
        tag != 0 && self.tag == tag && self.lane == index as u16
    }

    pub(super) fn parts(&mut self) -> HostedParts<'_> {
        HostedParts {
            counts: (&mut self.has_counts, &mut self.counts),
            group: HeldGroup {
                has: &mut self.has_group,
                entry: &mut self.group,
            },
        }
    }
}
