//! The windower's lanes by (stream, input partition): kept in one vector,
//! found through an index map, with the last lane found remembered. A
//! reading's lane is looked up several times (its prefetch, its lateness,
//! its admission), nearly always the lane of the reading before it, so
//! most looks cost a comparison instead of a hash and a probe
//! (docs/performance.md, "Where a reading's time goes"). Where a lane is
//! kept decides nothing: no privacy decision reads this module.

use super::counts::{DeviceCounts, Layout};
use super::lane::Lane;
use super::FastMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A lane's key: (planned stream, input partition).
pub(super) type LaneKey = (usize, i32);

#[derive(Debug, Default)]
pub(super) struct Lanes {
    list: Vec<(LaneKey, Lane)>,
    /// Each key's position in `list`.
    index: FastMap<LaneKey, usize>,
    /// The key found last and its position, packed in one word ([`pack`];
    /// 0: none), reset whenever positions move. An atomic, not a `Cell`,
    /// so the windower stays `Sync`, and one word, so a key and a position
    /// are always read together; relaxed loads and stores cost what plain
    /// ones do.
    last: AtomicU64,
}

/// Bits of a packed position (the low ones; the key is above them).
const POSITION_BITS: u32 = 24;

/// A lane key's bits in [`Lanes::last`]: its stream (16 bits) and its
/// partition (24 bits); `None` for a key past them, which is then never
/// remembered (a plan has far fewer streams, Kafka far fewer partitions).
#[inline]
fn key_bits((stream, partition): LaneKey) -> Option<u64> {
    let s = u16::try_from(stream).ok()?;
    let p = u32::try_from(partition).ok().filter(|&p| p < 1 << 24)?;
    Some(u64::from(s) << 24 | u64::from(p))
}

/// `key` at position `i`, packed (`None`: too large to remember). The
/// position is stored plus one, so that 0 is no lane.
#[inline]
fn pack(key: LaneKey, i: usize) -> Option<u64> {
    let i = u64::try_from(i + 1)
        .ok()
        .filter(|&i| i < 1 << POSITION_BITS)?;
    Some(key_bits(key)? << POSITION_BITS | i)
}

impl Lanes {
    /// The position of lane `key`, if it exists.
    #[inline]
    fn find(&self, key: LaneKey) -> Option<usize> {
        let last = self.last.load(Relaxed);
        let at = last & ((1 << POSITION_BITS) - 1);
        if at != 0 && key_bits(key) == Some(last >> POSITION_BITS) {
            return Some(at as usize - 1);
        }
        let i = *self.index.get(&key)?;
        self.remember(key, i);
        Some(i)
    }

    #[inline]
    fn remember(&self, key: LaneKey, i: usize) {
        self.last.store(pack(key, i).unwrap_or(0), Relaxed);
    }

    #[inline]
    pub(super) fn get(&self, key: LaneKey) -> Option<&Lane> {
        self.find(key).map(|i| &self.list[i].1)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, key: LaneKey) -> Option<&mut Lane> {
        self.find(key).map(|i| &mut self.list[i].1)
    }

    /// The lane `key`, made (empty, its counts packed by `layout`) if new.
    #[inline]
    pub(super) fn get_or_make(&mut self, key: LaneKey, layout: Layout) -> &mut Lane {
        let i = match self.find(key) {
            Some(i) => i,
            None => {
                let i = self.list.len();
                self.list.push((
                    key,
                    Lane {
                        devices: DeviceCounts::with_layout(layout),
                        ..Lane::default()
                    },
                ));
                self.index.insert(key, i);
                self.remember(key, i);
                i
            }
        };
        &mut self.list[i].1
    }

    /// Every lane, in the order they were made.
    pub(super) fn iter(&self) -> impl Iterator<Item = (LaneKey, &Lane)> + '_ {
        self.list.iter().map(|(k, l)| (*k, l))
    }

    /// Keep only the lanes `keep` says yes to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(LaneKey) -> bool) {
        self.list.retain(|(k, _)| keep(*k));
        self.index = self
            .list
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (*k, i))
            .collect();
        self.last.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes found by key stay the same lanes across lookups of other
    /// keys, new lanes and a retain that moves the rest.
    #[test]
    fn a_key_finds_its_own_lane_whatever_was_looked_up_or_dropped_before() {
        let mut lanes = Lanes::default();
        // Keys past what is remembered too: found through the map alone.
        let big = [(1 << 16, 0), (0, 1 << 24), (0, -1)];
        let keys: Vec<LaneKey> = (0..6)
            .flat_map(|s| [(s, 0), (s, 1), (s, 7)])
            .chain(big)
            .collect();
        for (n, &k) in keys.iter().enumerate() {
            lanes.get_or_make(k, Layout::DEFAULT).next_seq = n as u64;
            // The one just made and one made before it, in both orders.
            assert_eq!(lanes.get(k).map(|l| l.next_seq), Some(n as u64));
            assert_eq!(
                lanes.get(keys[n / 2]).map(|l| l.next_seq),
                Some(n as u64 / 2)
            );
        }
        assert!(lanes.get((9, 0)).is_none());
        assert_eq!(lanes.get(keys[4]).map(|l| l.next_seq), Some(4));
        // Drop partition 1: the lane found last moves, and is still found.
        lanes.retain(|(_, p)| p != 1);
        for (n, &k) in keys.iter().enumerate() {
            let want = (k.1 != 1).then_some(n as u64);
            assert_eq!(lanes.get(k).map(|l| l.next_seq), want, "{k:?}");
            assert_eq!(lanes.get_mut(k).map(|l| l.next_seq), want, "{k:?}");
        }
        assert_eq!(lanes.iter().count(), 15);
        assert_eq!(lanes.get_or_make(keys[1], Layout::DEFAULT).next_seq, 0);
        assert_eq!(lanes.get(keys[0]).map(|l| l.next_seq), Some(0));
        assert_eq!(lanes.iter().count(), 16);
    }
}
