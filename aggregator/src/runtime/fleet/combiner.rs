//! The fleet combiner's decisions, without Kafka: which partitions' releases
//! of a window seq are combined, and when (docs/DESIGN.md §6).
//!
//! A seq is combined once every input partition has released it or a later
//! seq (lanes release in seq order, so a partition past it never releases
//! it). That rule reads only which releases exist, so under add-remove,
//! where every started lane releases every seq, the covered partitions are
//! those whose lanes had started: no input decides them. Under change-one a
//! timer (`fleet.max_wait`) publishes a partial record early (release
//! timing is public there) and a later one supersedes it; under add-remove
//! only the bound on waiting seqs (`fleet.max_pending`, a count of public
//! seqs) ever cuts a wait short.
//!
//! A record for a seq is only ever followed by one holding a strict
//! superset of its partitions ([`Combiner::allow`]): a consumer that keeps
//! the latest record per key never sees a figure regress. Records read back
//! from the topic count too, and a restarted combiner first reads its whole
//! look-back ([`Combiner::catching_up`]) — the releases and the records it
//! or another instance already wrote — before it decides anything, so
//! releases of a seq whose other partitions lie before the look-back never
//! republish it partially. The bound on waiting seqs is per fleet stream
//! (each group its own): past it the oldest seq goes out once with the
//! partitions it has and its releases leave memory; only where they are on
//! the output topic is kept ([`Evicted`], at most [`MAX_EVICTED`] seqs).
//! Once every partition has released it, the fleet task reads those
//! releases back ([`Combiner::take_refetches`]) and the seq gets one
//! complete record ([`Combiner::refetched`]): a consumer keeping the
//! latest record per key ends with the complete figure. Releases of seqs
//! older than what the combiner still remembers (`max_pending` seqs per
//! stream, beside the evicted ones) are not combined again: their records
//! can no longer be compared.
//!
//! Private keys: a slot is bound per partition (one partition's `#1` may be
//! another's `#2`), so slot releases are combined by the key they carry in
//! `group`, as a fleet stream `<stream>[<dimension>=<key>,…]` of its own,
//! and only once every input partition has released that key for the seq:
//! a key some partition has not selected gets no fleet-wide record (a
//! partial one would read as the fleet's), nor does `other` (its readings
//! differ per partition). Which keys are bound is a DP output, so this is
//! post-processing.

use super::record::build;
use crate::config::Validated;
use crate::dp::relation::Relation;
use crate::dp::release::FleetCache;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

/// A seq waiting for partitions.
struct Pending {
    parts: BTreeMap<i32, proto::WindowRelease>,
    /// Where each part is on the output topic (output partition, offset),
    /// when the caller said ([`Combiner::offer_at`]).
    at: BTreeMap<i32, (i32, i64)>,
    first_seen: Instant,
    /// Partitions in the last record published for it, if any.
    published: Option<usize>,
}

/// Seqs evicted past `fleet.max_pending` and remembered at most (each a
/// few integers per partition); past it the oldest keeps its partial record.
pub(crate) const MAX_EVICTED: usize = 10_000;

/// A seq evicted past the bound: where its releases are on the output
/// topic, per input partition.
type Evicted = BTreeMap<i32, (i32, i64)>;

/// Releases to read back from the output topic: every partition of an
/// evicted seq has released it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refetch {
    pub stream: usize,
    pub seq: u64,
    /// (output partition, offset) of each partition's release.
    pub at: Vec<(i32, i64)>,
}

/// What the combiner did with a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    Kept,
    /// Its seq was already published complete.
    Done,
    /// Not a stream of this plan, or released under another plan (its
    /// guarantee differs): never combined with this plan's releases.
    Foreign,
    /// Private keys' `other` group: its readings differ per partition, so
    /// it is released per partition only.
    PerPartition,
}

/// A fleet stream of a private key (module doc): its name and group, and
/// the planned stream whose parameters its slot releases share.
struct Keyed {
    name: String,
    group: HashMap<String, String>,
    plan: usize,
}

/// Decides and builds fleet-wide releases.
pub(crate) struct Combiner {
    v: std::sync::Arc<Validated>,
    input_partitions: i32,
    timer: Option<Duration>,
    max_pending: usize,
    caches: Vec<FleetCache>,
    /// Each stream's guarantee under this plan: a release carrying another
    /// was made under another plan.
    guarantees: Vec<proto::Guarantee>,
    pending: BTreeMap<(usize, u64), Pending>,
    /// Highest seq each (stream, partition) has released.
    progress: HashMap<(usize, i32), u64>,
    /// Seqs published complete, per stream (the newest `max_pending`).
    done: Vec<BTreeSet<u64>>,
    /// Fleet streams of private keys, indexed from the plan's stream count
    /// on (`caches`, `guarantees`, `done`, `published` and `waiting_in`
    /// grow with them).
    keyed: Vec<Keyed>,
    /// Per stream, the partitions of the latest record of each recent seq
    /// (published here or read back; the newest `max_pending`).
    published: Vec<BTreeMap<u64, BTreeSet<i32>>>,
    /// Seqs waiting per stream (the bound is per stream).
    waiting_in: Vec<usize>,
    /// Per stream, the seq below which everything not waiting is settled:
    /// done, or out of the memory of what was published (a release of such
    /// a seq is not combined again: its record might be a smaller one).
    floor: Vec<u64>,
    /// Reading the look-back: releases and records are noted, nothing is
    /// decided until [`Combiner::caught_up`].
    catching_up: bool,
    /// Seqs evicted past the bound, oldest first by eviction.
    evicted: BTreeMap<(usize, u64), Evicted>,
    evicted_order: std::collections::VecDeque<(usize, u64)>,
    /// Evicted seqs every partition has now released.
    refetch: Vec<Refetch>,
}

impl Combiner {
    pub(crate) fn new(v: std::sync::Arc<Validated>, input_partitions: i32) -> Self {
        let streams = v.plan.streams.len();
        let f = v.fleet;
        let timer = (v.plan.privacy.relation == Relation::ChangeOne).then_some(f.max_wait);
        Self {
            input_partitions,
            timer,
            max_pending: f.max_pending,
            caches: (0..streams).map(|_| FleetCache::default()).collect(),
            guarantees: v.plan.streams.iter().map(|s| v.guarantee(s)).collect(),
            pending: BTreeMap::new(),
            progress: HashMap::new(),
            done: vec![BTreeSet::new(); streams],
            keyed: Vec::new(),
            published: vec![BTreeMap::new(); streams],
            waiting_in: vec![0; streams],
            floor: vec![0; streams],
            catching_up: false,
            evicted: BTreeMap::new(),
            evicted_order: Default::default(),
            refetch: Vec::new(),
            v,
        }
    }

    /// A combiner that first reads its look-back (a restarted one): no
    /// record is built until [`Combiner::caught_up`].
    pub(crate) fn catching_up(mut self) -> Self {
        self.catching_up = true;
        self
    }

    /// The look-back is read: decide every waiting seq as `Combiner::offer`
    /// would have, knowing every record already on the topic.
    pub(crate) fn caught_up(&mut self) -> Vec<proto::FleetRelease> {
        self.catching_up = false;
        let streams: BTreeSet<usize> = self.pending.keys().map(|k| k.0).collect();
        let mut out = vec![];
        for s in streams {
            out.extend(self.complete_up_to(s, u64::MAX));
        }
        out.extend(self.over_cap());
        let evicted: BTreeSet<usize> = self.evicted.keys().map(|k| k.0).collect();
        for s in evicted {
            self.evicted_ready(s, u64::MAX);
        }
        out
    }

    /// Whether a record may follow what was published for its seq: only a
    /// strict superset of the latest record's partitions (or the first
    /// record); noted as the latest when it may.
    fn allow(&mut self, s: usize, f: Option<proto::FleetRelease>) -> Option<proto::FleetRelease> {
        let f = f?;
        let parts: BTreeSet<i32> = f.partitions.iter().copied().collect();
        if let Some(old) = self.published[s].get(&f.window_seq) {
            if !(parts.len() > old.len() && parts.is_superset(old)) {
                return None;
            }
        }
        self.note_published(s, f.window_seq, parts);
        Some(f)
    }

    fn note_published(&mut self, s: usize, seq: u64, parts: BTreeSet<i32>) {
        let p = &mut self.published[s];
        p.insert(seq, parts);
        while p.len() > self.max_pending {
            if let Some((q, _)) = p.pop_first() {
                self.floor[s] = self.floor[s].max(q + 1);
            }
        }
    }

    /// Add a waiting seq's part, counting the seq in its stream.
    fn wait_for(
        &mut self,
        k: (usize, u64),
        r: proto::WindowRelease,
        at: Option<(i32, i64)>,
        now: Instant,
    ) {
        let w = self.pending.entry(k).or_insert_with(|| Pending {
            parts: BTreeMap::new(),
            at: BTreeMap::new(),
            first_seen: now,
            published: None,
        });
        if w.parts.is_empty() {
            self.waiting_in[k.0] += 1;
        }
        if let Some(at) = at {
            w.at.insert(r.partition, at);
        }
        w.parts.insert(r.partition, r);
    }

    /// A release of an evicted seq: note where it is.
    fn evicted_part(&mut self, k: (usize, u64), partition: i32, at: Option<(i32, i64)>) {
        if let (Some(e), Some(at)) = (self.evicted.get_mut(&k), at) {
            e.insert(partition, at);
        }
    }

    /// Evicted seqs of stream `s` up to `seq` that every partition has now
    /// released or passed: ask for their releases to be read back.
    fn evicted_ready(&mut self, s: usize, seq: u64) {
        let ready: Vec<(usize, u64)> = self
            .evicted
            .range((s, 0)..=(s, seq))
            .filter(|(&(_, q), e)| {
                (0..self.input_partitions).all(|part| {
                    e.contains_key(&part)
                        || (!self.is_keyed(s)
                            && self.progress.get(&(s, part)).is_some_and(|&hi| hi > q))
                })
            })
            .map(|(k, _)| *k)
            .collect();
        for k in ready {
            let e = self.evicted.remove(&k).expect("listed");
            self.evicted_order.retain(|x| *x != k);
            self.refetch.push(Refetch {
                stream: k.0,
                seq: k.1,
                at: e.into_values().collect(),
            });
        }
    }

    /// Evicted seqs whose releases are all out: read them back from the
    /// output topic and hand them to [`Combiner::refetched`].
    pub(crate) fn take_refetches(&mut self) -> Vec<Refetch> {
        std::mem::take(&mut self.refetch)
    }

    /// The releases of an evicted seq, read back: its complete record (if
    /// it holds more partitions than the one published at eviction).
    pub(crate) fn refetched(
        &mut self,
        r: &Refetch,
        releases: Vec<proto::WindowRelease>,
    ) -> Option<proto::FleetRelease> {
        let k = (r.stream, r.seq);
        let w = Pending {
            parts: releases
                .into_iter()
                .filter(|x| x.window_seq == r.seq)
                .map(|x| (x.partition, x))
                .collect(),
            at: BTreeMap::new(),
            first_seen: Instant::now(),
            published: None,
        };
        self.mark_done(k);
        if w.parts.is_empty() {
            return None;
        }
        // Only a record holding more than the published one follows it.
        let f = self.build(k, &w);
        self.allow(k.0, f)
    }

    /// A seq no longer waits.
    fn stop_waiting(&mut self, k: (usize, u64)) -> Option<Pending> {
        let w = self.pending.remove(&k)?;
        self.waiting_in[k.0] -= 1;
        Some(w)
    }

    /// Records for stream `s`'s seqs up to `seq` that every partition has
    /// released or passed.
    fn complete_up_to(&mut self, s: usize, seq: u64) -> Vec<proto::FleetRelease> {
        let ready: Vec<(usize, u64)> = self
            .pending
            .range((s, 0)..=(s, seq))
            .filter(|(&(_, q), w)| {
                (0..self.input_partitions).all(|part| {
                    w.parts.contains_key(&part)
                        || (!self.is_keyed(s)
                            && self.progress.get(&(s, part)).is_some_and(|&hi| hi > q))
                })
            })
            .map(|(k, _)| *k)
            .collect();
        let mut out = vec![];
        for k in ready {
            let w = self.stop_waiting(k).expect("listed");
            if w.published != Some(w.parts.len()) {
                let f = self.build(k, &w);
                out.extend(self.allow(k.0, f));
            }
            self.mark_done(k);
        }
        out
    }

    /// Seqs waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.pending.len()
    }

    fn stream_of(&self, name: &str) -> Option<usize> {
        self.v
            .plan
            .streams
            .iter()
            .position(|s| s.spec.name == name)
            .or_else(|| {
                let n = self.v.plan.streams.len();
                self.keyed
                    .iter()
                    .position(|k| k.name == name)
                    .map(|i| n + i)
            })
    }

    /// A fleet stream of a private key is not the plan's: its index.
    fn is_keyed(&self, s: usize) -> bool {
        s >= self.v.plan.streams.len()
    }

    /// The fleet stream of a slot's release (`None`: `other`), made if new.
    fn keyed_stream(&mut self, s: usize, r: &proto::WindowRelease) -> Option<usize> {
        let plan = &self.v.plan.streams[s];
        let of = plan.group.as_ref()?;
        let private = plan.spec.groups.as_ref()?.private.as_ref()?;
        let mut key = Vec::new();
        for (dimension, slot) in of.values() {
            let value = r.group.get(dimension)?;
            // The private dimension's `other`, or a slot not named by the
            // release: nothing to combine by.
            if dimension == private.dimension && (!slot.starts_with('#') || value.starts_with('#'))
            {
                return None;
            }
            key.push(format!("{dimension}={value}"));
        }
        let name = crate::dp::release::group_stream_name(&of.base, &key.join(","));
        if let Some(i) = self.stream_of(&name) {
            return Some(i);
        }
        self.keyed.push(Keyed {
            name,
            group: r.group.clone(),
            plan: s,
        });
        self.caches.push(FleetCache::default());
        self.guarantees.push(self.guarantees[s].clone());
        self.done.push(BTreeSet::new());
        self.published.push(BTreeMap::new());
        self.waiting_in.push(0);
        self.floor.push(0);
        Some(self.v.plan.streams.len() + self.keyed.len() - 1)
    }

    /// A partition's release; returns the fleet records it completes.
    #[cfg(test)]
    pub(crate) fn offer(
        &mut self,
        r: proto::WindowRelease,
        now: Instant,
    ) -> (Offered, Vec<proto::FleetRelease>) {
        self.offer_at(r, None, now)
    }

    /// A partition's release found at `at` (output partition, offset) on
    /// the output topic; returns the fleet records it completes.
    pub(crate) fn offer_at(
        &mut self,
        r: proto::WindowRelease,
        at: Option<(i32, i64)>,
        now: Instant,
    ) -> (Offered, Vec<proto::FleetRelease>) {
        let Some(s) = self.stream_of(&r.stream) else {
            return (Offered::Foreign, vec![]);
        };
        let s = if self.v.plan.streams[s].selection.is_some() {
            if r.guarantee.as_ref() != Some(&self.guarantees[s]) {
                return (Offered::Foreign, vec![]);
            }
            match self.keyed_stream(s, &r) {
                Some(k) => k,
                None => return (Offered::PerPartition, vec![]),
            }
        } else {
            s
        };
        if r.guarantee.as_ref() != Some(&self.guarantees[s])
            || !(0..self.input_partitions).contains(&r.partition)
        {
            return (Offered::Foreign, vec![]);
        }
        let (p, seq) = (r.partition, r.window_seq);
        let hi = self.progress.entry((s, p)).or_insert(seq);
        *hi = (*hi).max(seq);
        if !self.evicted.is_empty() {
            self.evicted_part((s, seq), p, at);
            if !self.catching_up {
                self.evicted_ready(s, seq);
            }
            if self.evicted.contains_key(&(s, seq))
                || self.refetch.iter().any(|r| (r.stream, r.seq) == (s, seq))
            {
                return (Offered::Kept, vec![]);
            }
        }
        let forgotten = seq < self.floor[s] && !self.pending.contains_key(&(s, seq));
        if self.done[s].contains(&seq) || forgotten {
            return (Offered::Done, vec![]);
        }
        self.wait_for((s, seq), r, at, now);
        if self.catching_up {
            return (Offered::Kept, self.over_cap());
        }
        // This release may complete its seq or earlier ones of the stream.
        let mut out = self.complete_up_to(s, seq);
        out.extend(self.over_cap());
        (Offered::Kept, out)
    }

    /// A fleet record read back from the topic (this or another instance's):
    /// a complete one ends the wait for its seq. Whether it is one of this
    /// plan's fleet streams: a caller keeps nothing of any other (the topic
    /// may hold anyone's records; what is kept must stay bounded).
    pub(crate) fn seen(&mut self, f: &proto::FleetRelease) -> bool {
        let Some(s) = self.stream_of(&f.stream) else {
            return false;
        };
        // The latest record a consumer keeps: a later one must hold more.
        let parts: BTreeSet<i32> = f.partitions.iter().copied().collect();
        let known = self.published[s].get(&f.window_seq);
        if known.is_none_or(|old| parts.is_superset(old)) {
            self.note_published(s, f.window_seq, parts);
        }
        if f.complete {
            self.stop_waiting((s, f.window_seq));
            if self.evicted.remove(&(s, f.window_seq)).is_some() {
                self.evicted_order.retain(|x| *x != (s, f.window_seq));
            }
            self.mark_done((s, f.window_seq));
        }
        true
    }

    /// Change-one: partial records for seqs waiting longer than
    /// `fleet.max_wait` (each once per set of partitions).
    pub(crate) fn due(&mut self, now: Instant) -> Vec<proto::FleetRelease> {
        let Some(wait) = self.timer.filter(|_| !self.catching_up) else {
            return vec![];
        };
        let late: Vec<(usize, u64)> = self
            .pending
            .iter()
            .filter(|(&(s, _), w)| {
                !self.is_keyed(s)
                    && now.duration_since(w.first_seen) >= wait
                    && w.published != Some(w.parts.len())
            })
            .map(|(k, _)| *k)
            .collect();
        let mut out = vec![];
        for k in late {
            let w = self.pending.get_mut(&k).expect("listed");
            w.published = Some(w.parts.len());
            let w = &self.pending[&k];
            let f = build(
                &self.v,
                &mut self.caches[k.0],
                self.input_partitions,
                k,
                &w.parts,
                None,
            );
            out.extend(self.allow(k.0, f));
        }
        out
    }

    /// Past `fleet.max_pending` waiting seqs of one fleet stream: its
    /// oldest goes out once with the partitions it has (not while catching
    /// up: those were decided before the restart), and its later releases
    /// are not combined again.
    fn over_cap(&mut self) -> Vec<proto::FleetRelease> {
        let mut out = vec![];
        loop {
            let Some(s) =
                (0..self.waiting_in.len()).find(|&s| self.waiting_in[s] > self.max_pending)
            else {
                return out;
            };
            let k = *self
                .pending
                .range((s, 0)..=(s, u64::MAX))
                .next()
                .expect("a stream over the bound waits")
                .0;
            let w = self.stop_waiting(k).expect("listed");
            // A private key's partial record is never published.
            if !self.catching_up && w.published != Some(w.parts.len()) && !self.is_keyed(k.0) {
                let f = self.build(k, &w);
                out.extend(self.allow(k.0, f));
            }
            self.evict(k, w.at);
        }
    }

    /// Remember where an evicted seq's releases are (the oldest evicted
    /// seq past [`MAX_EVICTED`] is settled as it stands).
    fn evict(&mut self, k: (usize, u64), at: Evicted) {
        self.evicted.insert(k, at);
        self.evicted_order.push_back(k);
        while self.evicted_order.len() > MAX_EVICTED {
            if let Some(old) = self.evicted_order.pop_front() {
                self.evicted.remove(&old);
                self.mark_done(old);
            }
        }
    }

    fn mark_done(&mut self, (s, seq): (usize, u64)) {
        let d = &mut self.done[s];
        d.insert(seq);
        while d.len() > self.max_pending {
            if let Some(q) = d.pop_first() {
                self.floor[s] = self.floor[s].max(q + 1);
            }
        }
    }

    fn build(&mut self, k: (usize, u64), w: &Pending) -> Option<proto::FleetRelease> {
        let keyed =
            k.0.checked_sub(self.v.plan.streams.len())
                .map(|i| &self.keyed[i]);
        let keyed = keyed.map(|x| (x.plan, x.name.clone(), x.group.clone()));
        build(
            &self.v,
            &mut self.caches[k.0],
            self.input_partitions,
            k,
            &w.parts,
            keyed,
        )
    }
}
