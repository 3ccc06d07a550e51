//! Input offsets as plain data: per partition, the next offset to handle,
//! what is in flight (releases and dead letters not yet acknowledged) and
//! what was last committed, and the rule for what may be committed.
//!
//! The rule (docs/DESIGN.md §6): an input offset is committed only when
//! everything before it is safely handled: no open window holds a reading
//! from before it (the windower's [`crate::engine::window::Windower::committable`]),
//! no release holding such a reading is unacknowledged, and no dead letter
//! from before it is unacknowledged. Acknowledgements may arrive in any
//! order; the commit never passes the oldest one outstanding.

use std::collections::{BTreeMap, BTreeSet};

/// Offsets of the partitions this instance holds.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    /// Next offset to handle.
    next: BTreeMap<i32, i64>,
    /// Last offset committed (as sent).
    committed: BTreeMap<i32, i64>,
    /// First input offsets of releases in flight, with counts (several
    /// windows of different streams can start at one offset).
    releases: BTreeMap<i32, BTreeMap<i64, usize>>,
    /// Offsets of dead letters in flight.
    dead_letters: BTreeMap<i32, BTreeSet<i64>>,
}

impl Offsets {
    /// The message at `offset` of `partition` is handled (applied, or
    /// handed to the dead-letter producer).
    pub fn handled(&mut self, partition: i32, offset: i64) {
        self.next.insert(partition, offset + 1);
    }

    /// The next offset to handle on each partition.
    pub fn positions(&self) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.next.iter().map(|(&p, &o)| (p, o))
    }

    /// A release holding input from `first_offset` on was sent.
    pub fn release_sent(&mut self, partition: i32, first_offset: i64) {
        *self
            .releases
            .entry(partition)
            .or_default()
            .entry(first_offset)
            .or_default() += 1;
    }

    /// That release was acknowledged.
    pub fn release_acked(&mut self, partition: i32, first_offset: i64) {
        if let Some(m) = self.releases.get_mut(&partition) {
            if let Some(c) = m.get_mut(&first_offset) {
                *c -= 1;
                if *c == 0 {
                    m.remove(&first_offset);
                }
            }
        }
    }

    /// The message at `offset` was sent to the dead-letter topic.
    pub fn dead_letter_sent(&mut self, partition: i32, offset: i64) {
        self.dead_letters
            .entry(partition)
            .or_default()
            .insert(offset);
    }

    /// That dead letter was acknowledged.
    pub fn dead_letter_acked(&mut self, partition: i32, offset: i64) {
        if let Some(set) = self.dead_letters.get_mut(&partition) {
            set.remove(&offset);
        }
    }

    /// The oldest offset of `partition` still in flight.
    fn in_flight(&self, partition: i32) -> Option<i64> {
        let release = self
            .releases
            .get(&partition)
            .and_then(|m| m.keys().next().copied());
        let dead = self
            .dead_letters
            .get(&partition)
            .and_then(|m| m.first().copied());
        match (release, dead) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Offsets to commit now: per partition, the next offset capped by
    /// what is in flight and by `open(partition, next)` (the windower's
    /// limit), where it differs from the last commit. They are recorded as
    /// committed; call [`Offsets::commit_failed`] if sending them fails.
    pub fn due(&mut self, open: impl Fn(i32, i64) -> i64) -> Vec<(i32, i64)> {
        let mut out = Vec::new();
        for (&p, &next) in &self.next {
            let mut at = open(p, next).min(next);
            if let Some(o) = self.in_flight(p) {
                at = at.min(o);
            }
            if self.committed.get(&p) != Some(&at) {
                self.committed.insert(p, at);
                out.push((p, at));
            }
        }
        out
    }

    /// A commit failed: the next [`Offsets::due`] sends every partition.
    pub fn commit_failed(&mut self) {
        self.committed.clear();
    }

    /// Forget a partition's position (revoked, or assigned anew: it resumes
    /// from the group's committed offset). In-flight entries stay until
    /// their acknowledgements arrive.
    pub fn forget(&mut self, partition: i32) {
        self.next.remove(&partition);
        self.committed.remove(&partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No open window holds anything back.
    fn none_open(_: i32, next: i64) -> i64 {
        next
    }

    #[test]
    fn commits_the_next_offset_once() {
        let mut o = Offsets::default();
        o.handled(0, 9);
        o.handled(1, 4);
        assert_eq!(o.due(none_open), vec![(0, 10), (1, 5)]);
        assert_eq!(o.due(none_open), vec![], "unchanged: nothing sent");
        o.handled(1, 5);
        assert_eq!(o.due(none_open), vec![(1, 6)]);
    }

    #[test]
    fn an_open_window_holds_the_commit_back() {
        let mut o = Offsets::default();
        o.handled(0, 99);
        assert_eq!(o.due(|_, _| 40), vec![(0, 40)]);
        // The windower's limit never moves the commit past the position.
        o.handled(0, 100);
        assert_eq!(o.due(|_, _| 500), vec![(0, 101)]);
    }

    #[test]
    fn a_release_in_flight_holds_the_commit_back_until_acknowledged() {
        let mut o = Offsets::default();
        o.release_sent(0, 10);
        o.handled(0, 30);
        assert_eq!(o.due(none_open), vec![(0, 10)]);
        o.release_acked(0, 10);
        assert_eq!(o.due(none_open), vec![(0, 31)]);
    }

    #[test]
    fn out_of_order_acknowledgements_never_pass_the_oldest_outstanding() {
        let mut o = Offsets::default();
        o.release_sent(0, 10);
        o.release_sent(0, 20);
        o.dead_letter_sent(0, 15);
        o.handled(0, 30);
        // The later ones are acknowledged first.
        o.release_acked(0, 20);
        o.dead_letter_acked(0, 15);
        assert_eq!(o.due(none_open), vec![(0, 10)]);
        o.release_acked(0, 10);
        assert_eq!(o.due(none_open), vec![(0, 31)]);
    }

    #[test]
    fn a_dead_letter_in_flight_holds_the_commit_back() {
        let mut o = Offsets::default();
        o.dead_letter_sent(0, 5);
        o.handled(0, 5);
        o.handled(0, 6);
        assert_eq!(o.due(none_open), vec![(0, 5)]);
        o.dead_letter_acked(0, 5);
        assert_eq!(o.due(none_open), vec![(0, 7)]);
    }

    #[test]
    fn releases_sharing_a_first_offset_are_counted() {
        let mut o = Offsets::default();
        o.release_sent(0, 10);
        o.release_sent(0, 10);
        o.handled(0, 20);
        o.release_acked(0, 10);
        assert_eq!(o.due(none_open), vec![(0, 10)], "one still out");
        o.release_acked(0, 10);
        assert_eq!(o.due(none_open), vec![(0, 21)]);
    }

    #[test]
    fn in_flight_entries_are_per_partition() {
        let mut o = Offsets::default();
        o.release_sent(1, 3);
        o.handled(0, 8);
        o.handled(1, 8);
        assert_eq!(o.due(none_open), vec![(0, 9), (1, 3)]);
    }

    #[test]
    fn a_revoked_partition_is_not_committed_and_a_reassigned_one_starts_over() {
        let mut o = Offsets::default();
        o.handled(0, 8);
        o.handled(1, 8);
        assert_eq!(o.due(none_open).len(), 2);
        o.forget(1);
        o.handled(0, 9);
        assert_eq!(o.due(none_open), vec![(0, 10)]);
        // Assigned again at the same position: committed anew (another
        // instance may have moved it meanwhile).
        o.handled(1, 8);
        assert_eq!(o.due(none_open), vec![(1, 9)]);
    }

    #[test]
    fn a_failed_commit_is_sent_again() {
        let mut o = Offsets::default();
        o.handled(0, 1);
        assert_eq!(o.due(none_open), vec![(0, 2)]);
        o.commit_failed();
        assert_eq!(o.due(none_open), vec![(0, 2)]);
    }
}
