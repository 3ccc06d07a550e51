//! One writer of fleet records per cluster (docs/DESIGN.md §6): every
//! instance combines, but only the one holding input partition 0 (the
//! leader) writes. The others hold what they combined until the leader's
//! record for the same key shows on the output topic; a new leader first
//! reads the topic to its end, then writes the held records the topic does
//! not already have. Without a writer of their own, timer-made partial
//! records of two instances could disagree.
//!
//! The rule a consumer relies on holds across writers: a record of a key is
//! only ever followed by one holding a strict superset of its partitions
//! ([`Gate::offer`] compares with the topic's latest record, whoever wrote
//! it). Memory is bounded: per fleet stream at most `fleet.max_pending`
//! held records and as many remembered keys (the oldest seq goes first).
//!
//! Privacy: which instance writes is decided by the group's assignment,
//! never by the input; the records are those the combiner built.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Where an instance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Not holding input partition 0: combines and holds.
    Following,
    /// Holds input partition 0 and reads the topic to its end before
    /// writing (records written before the handover must be seen first).
    Taking,
    /// Writes.
    Leading,
}

/// Decides which combined records are written, and when.
pub(crate) struct Gate {
    role: Role,
    /// Per fleet stream: held records by seq.
    held: HashMap<String, BTreeMap<u64, proto::FleetRelease>>,
    /// Per fleet stream: the partitions of the latest record of each recent
    /// seq on the topic (read back, or written here).
    on_topic: HashMap<String, BTreeMap<u64, BTreeSet<i32>>>,
    /// Per fleet stream bound of both maps (`fleet.max_pending`).
    cap: usize,
}

impl Gate {
    /// A follower until [`Gate::take_over`] (the assignment decides).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            role: Role::Following,
            held: HashMap::new(),
            on_topic: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// Whether this instance writes now.
    pub(crate) fn leading(&self) -> bool {
        self.role == Role::Leading
    }

    /// Whether it holds partition 0 but still reads to the topic's end.
    pub(crate) fn taking(&self) -> bool {
        self.role == Role::Taking
    }

    /// Records held now.
    #[cfg(test)]
    fn holding(&self) -> usize {
        self.held.values().map(BTreeMap::len).sum()
    }

    /// Input partition 0 was assigned here: read the topic to its end,
    /// then [`Gate::lead`].
    pub(crate) fn take_over(&mut self) {
        if self.role == Role::Following {
            self.role = Role::Taking;
        }
    }

    /// Input partition 0 was revoked: hold from now on.
    pub(crate) fn step_down(&mut self) {
        self.role = Role::Following;
    }

    /// The topic is read to its end after [`Gate::take_over`]: the held
    /// records the topic does not already have (or has with fewer
    /// partitions), in seq order, to write now.
    pub(crate) fn lead(&mut self) -> Vec<proto::FleetRelease> {
        if self.role != Role::Taking {
            return vec![];
        }
        self.role = Role::Leading;
        let held = std::mem::take(&mut self.held);
        let mut out = vec![];
        for f in held.into_values().flat_map(BTreeMap::into_values) {
            out.extend(self.admit(f));
        }
        out
    }

    /// A record the combiner built: to write now (leading), or held.
    pub(crate) fn offer(&mut self, f: proto::FleetRelease) -> Option<proto::FleetRelease> {
        if self.role == Role::Leading {
            return self.admit(f);
        }
        if self.newer_than_topic(&f) {
            let held = self.held.entry(f.stream.clone()).or_default();
            held.insert(f.window_seq, f);
            while held.len() > self.cap {
                held.pop_first();
            }
        }
        None
    }

    /// A fleet record read from the topic (any instance's): held records
    /// it makes redundant go.
    pub(crate) fn seen(&mut self, f: &proto::FleetRelease) {
        let parts: BTreeSet<i32> = f.partitions.iter().copied().collect();
        let known = self
            .on_topic
            .get(&f.stream)
            .and_then(|m| m.get(&f.window_seq));
        // The latest record a consumer keeps (records of a key only grow).
        if known.is_none_or(|old| parts.is_superset(old)) {
            self.note(&f.stream, f.window_seq, parts);
        }
        let redundant = self
            .held
            .get(&f.stream)
            .and_then(|h| h.get(&f.window_seq))
            .is_some_and(|h| !self.newer_than_topic(h));
        if redundant {
            if let Some(h) = self.held.get_mut(&f.stream) {
                h.remove(&f.window_seq);
            }
        }
    }

    /// Whether `f` may follow the topic's latest record of its key: the
    /// first one, or a strict superset of its partitions.
    fn newer_than_topic(&self, f: &proto::FleetRelease) -> bool {
        let parts: BTreeSet<i32> = f.partitions.iter().copied().collect();
        match self
            .on_topic
            .get(&f.stream)
            .and_then(|m| m.get(&f.window_seq))
        {
            Some(old) => parts.len() > old.len() && parts.is_superset(old),
            None => true,
        }
    }

    /// Write `f` if it may follow the topic's latest record (noted as it).
    fn admit(&mut self, f: proto::FleetRelease) -> Option<proto::FleetRelease> {
        if !self.newer_than_topic(&f) {
            return None;
        }
        let parts = f.partitions.iter().copied().collect();
        self.note(&f.stream, f.window_seq, parts);
        Some(f)
    }

    fn note(&mut self, stream: &str, seq: u64, parts: BTreeSet<i32>) {
        let m = self.on_topic.entry(stream.to_string()).or_default();
        m.insert(seq, parts);
        while m.len() > self.cap {
            m.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, parts: &[i32]) -> proto::FleetRelease {
        proto::FleetRelease {
            stream: "temp".into(),
            window_seq: seq,
            partitions: parts.to_vec(),
            complete: parts.len() == 3,
            ..Default::default()
        }
    }

    fn seqs(fs: &[proto::FleetRelease]) -> Vec<(u64, Vec<i32>)> {
        fs.iter()
            .map(|f| (f.window_seq, f.partitions.clone()))
            .collect()
    }

    #[test]
    fn a_follower_writes_nothing_and_drops_what_the_leader_wrote() {
        let mut g = Gate::new(10);
        assert!(!g.leading());
        assert_eq!(g.offer(record(0, &[0, 1, 2])), None);
        assert_eq!(g.offer(record(1, &[0, 1, 2])), None);
        assert_eq!(g.holding(), 2);
        g.seen(&record(0, &[0, 1, 2]));
        assert_eq!(g.holding(), 1, "seq 0 is on the topic");
        // A leader's partial does not make a complete held record redundant.
        g.seen(&record(1, &[0, 1]));
        assert_eq!(g.holding(), 1);
        g.take_over();
        assert!(g.taking() && !g.leading());
        assert_eq!(g.offer(record(2, &[0])), None, "held while taking over");
        assert_eq!(seqs(&g.lead()), [(1, vec![0, 1, 2]), (2, vec![0])]);
        assert!(g.leading());
        assert_eq!(g.holding(), 0);
    }

    #[test]
    fn a_record_never_follows_one_it_does_not_strictly_extend() {
        let mut g = Gate::new(10);
        // Another instance's partial of seq 0 is on the topic.
        g.seen(&record(0, &[0, 1]));
        // This instance's timer made a different partial, and the same one.
        assert_eq!(g.offer(record(0, &[0, 2])), None);
        assert_eq!(g.holding(), 0, "disagreeing partials are never held");
        g.take_over();
        assert!(g.lead().is_empty());
        assert_eq!(g.offer(record(0, &[0, 1])), None, "a copy");
        assert_eq!(g.offer(record(0, &[1, 2])), None, "not a superset");
        assert!(g.offer(record(0, &[0, 1, 2])).is_some(), "the complete one");
        assert_eq!(g.offer(record(0, &[0, 1, 2])), None, "written once");
        // Its own record read back changes nothing.
        g.seen(&record(0, &[0, 1, 2]));
        assert_eq!(g.offer(record(0, &[0, 1, 2])), None);
    }

    #[test]
    fn a_held_record_overtaken_before_the_handover_is_not_written() {
        let mut g = Gate::new(10);
        assert_eq!(g.offer(record(4, &[0])), None);
        g.take_over();
        // The old leader's record lands while this one reads to the end.
        g.seen(&record(4, &[0, 1]));
        assert!(g.lead().is_empty());
        // Stepping down holds again; taking over again writes the rest.
        g.step_down();
        assert_eq!(g.offer(record(5, &[0, 1, 2])), None);
        g.take_over();
        assert_eq!(seqs(&g.lead()), [(5, vec![0, 1, 2])]);
    }

    #[test]
    fn held_records_and_remembered_keys_are_bounded_per_stream() {
        let mut g = Gate::new(3);
        for seq in 0..10 {
            g.offer(record(seq, &[0, 1, 2]));
            g.seen(&record(100 + seq, &[0]));
        }
        let mut other = record(0, &[0]);
        other.stream = "other".into();
        g.offer(other);
        assert_eq!(g.holding(), 4, "3 for temp, 1 for other");
        assert_eq!(g.on_topic["temp"].len(), 3);
        g.take_over();
        let out = g.lead();
        let temp: Vec<u64> = out
            .iter()
            .filter(|f| f.stream == "temp")
            .map(|f| f.window_seq)
            .collect();
        assert_eq!(temp, [7, 8, 9], "the newest seqs are kept");
        assert!(g.on_topic.values().all(|m| m.len() <= 3));
    }
}
