//! Restore: what a newly assigned input partition needs from the state
//! topic (ledger entries, live charges, lane state) and from the
//! output topic (releases acknowledged after their ledger entry), read back
//! in the format [`super`] writes.
//!
//! Charges are the bulk (one per device per window) and are read twice:
//! [`restore`] notes where each live charges record is (and what is there
//! besides), the caller decides which windows count (released, same plan),
//! and [`read_charges`] reads just those records again and hands each to
//! the caller as it arrives, so no more than one record's charges is held
//! beside the device table being rebuilt.

use super::charges::{self, parse_charges_key, Read};
use super::{ledger, KeysRecord, LaneState, CHARGES, KEYS, LEDGER, RECORD_KIND};
use crate::clients::kafka::{header, read_topic, ReadProgress};
use crate::engine::window::Resume;
use anyhow::{anyhow, Result};
use rdkafka::config::ClientConfig;
use rdkafka::message::Message;
use std::collections::{BTreeMap, HashMap};

/// Where the live charges of the given input partitions are: per (stream,
/// partition), by seq, each window's records.
pub type Charges = HashMap<(String, i32), BTreeMap<u64, WindowAt>>;

/// A window's charges records in the state topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowAt {
    /// Records the window declares.
    pub records: u32,
    /// Each record found: (state partition, offset) of its latest version.
    pub found: Vec<(i32, i64)>,
}

/// What a newly assigned partition restores.
#[derive(Debug, Default)]
pub struct Restored {
    /// Per (stream, input partition): where it resumes.
    pub resume: HashMap<(String, i32), Resume>,
    /// The live charges of the assigned partitions.
    pub charges: Charges,
    /// The lane's state recorded with each live window.
    pub lanes: HashMap<(String, i32, u64), LaneState>,
    /// Where each live window's lane resumes after it, from its first
    /// charges record (a declared key rotation skips windows the old key
    /// charged).
    pub window_ends: HashMap<(String, i32, u64), Resume>,
    /// The plan each live window was charged under, where recorded.
    pub window_plans: HashMap<(String, i32, u64), proto::v1::PlanFingerprint>,
    /// The plan of each lane's latest ledger entry, where recorded.
    pub lane_plans: HashMap<(String, i32), proto::v1::PlanFingerprint>,
    /// Records of the state or output topic that are not FleetDP's or do
    /// not decode: skipped (each logged with its position).
    pub skipped: u64,
    /// Per (stream, partition): distinct devices in its live charges
    /// (estimated; sizes the table the second pass fills).
    pub devices: HashMap<(String, i32), super::Distinct>,
    /// Per (declared stream, partition): private-key bindings.
    pub keys: HashMap<(String, i32), crate::engine::keys::Bindings>,
}

/// A window's charges records as read: the count it declares, and each
/// record's position (state partition, offset) by record number.
type WindowRecords = (u32, BTreeMap<u32, (i32, i64)>);

/// Log a record restore skips; `at` names its topic, partition and offset.
fn skip(skipped: &mut u64, at: String, why: &str) {
    *skipped += 1;
    tracing::warn!(record = %at, why, "restore skips a record that is not FleetDP's or does not decode");
}

/// A window: (stream, input partition, seq).
type Window = (String, i32, u64);

/// What the state topic holds for the assigned partitions, gathered record
/// by record, each kind by its own method.
#[derive(Default)]
struct StateScan {
    /// Per lane: its latest ledger entry.
    entries: HashMap<(String, i32), proto::v1::LedgerEntry>,
    /// Per window: the record count it declares and the records read.
    records: HashMap<Window, WindowRecords>,
    lanes: HashMap<Window, LaneState>,
    window_plans: HashMap<Window, proto::v1::PlanFingerprint>,
    /// Per window: where its lane resumes after it (its last reading and
    /// the lateness reference after it; 0 in records of earlier builds).
    window_last: HashMap<Window, Resume>,
    skipped: u64,
    devices: HashMap<(String, i32), super::Distinct>,
    keys: HashMap<(String, i32), crate::engine::keys::Bindings>,
}

impl StateScan {
    /// One state-topic record, by its kind (a record without the header
    /// whose key and payload are charges is taken as charges, as earlier
    /// builds may write).
    fn record<M: Message>(&mut self, msg: &M, partitions: &[i32], topic: &str) -> Result<()> {
        let at = || format!("state at {topic}/{}@{}", msg.partition(), msg.offset());
        super::check_format(msg, at)?;
        match header(msg, RECORD_KIND) {
            // An advisor run's spend: not the service's state.
            Some(super::ADVISE) => {}
            Some(KEYS) => self.keys_record(msg.payload(), partitions, at),
            Some(LEDGER) => self.ledger_entry(msg.payload(), at),
            Some(kind) if kind != CHARGES => {
                skip(&mut self.skipped, at(), "unknown fleetdp-record kind")
            }
            _ => return self.charges_record(msg, partitions, at),
        }
        Ok(())
    }

    fn keys_record(&mut self, payload: Option<&[u8]>, partitions: &[i32], at: impl Fn() -> String) {
        let Some(r) = payload.and_then(KeysRecord::decode) else {
            return skip(&mut self.skipped, at(), "not a keys record");
        };
        if partitions.contains(&r.partition) {
            self.keys.insert((r.stream, r.partition), r.bindings);
        }
    }

    /// A lane's ledger entry: the latest seq wins.
    fn ledger_entry(&mut self, payload: Option<&[u8]>, at: impl Fn() -> String) {
        let Some(payload) = payload else {
            return;
        };
        let Some(e) = ledger::decode(payload) else {
            return skip(&mut self.skipped, at(), "not a ledger entry");
        };
        let lane = (e.stream.clone(), e.partition);
        if self
            .entries
            .get(&lane)
            .is_none_or(|old| old.last_seq <= e.last_seq)
        {
            self.entries.insert(lane, e);
        }
    }

    /// A window's charges record (key `stream/partition/seq[/record]`), or
    /// its tombstone. Charges keyed by another device-key scheme cannot be
    /// matched to devices: an error, not a skip.
    fn charges_record<M: Message>(
        &mut self,
        msg: &M,
        partitions: &[i32],
        at: impl Fn() -> String,
    ) -> Result<()> {
        let Some((stream, partition, seq, record)) = msg
            .key()
            .and_then(|k| std::str::from_utf8(k).ok())
            .and_then(parse_charges_key)
        else {
            skip(
                &mut self.skipped,
                at(),
                "key is not stream/partition/seq[/record]",
            );
            return Ok(());
        };
        if !partitions.contains(&partition) {
            return Ok(());
        }
        let window = (stream, partition, seq);
        let c = match charges::decode(msg.payload(), record, &at)? {
            Read::Charges(c) => c,
            Read::Retired => {
                self.retire(window, record);
                return Ok(());
            }
            Read::Skip(why) => {
                skip(&mut self.skipped, at(), why);
                return Ok(());
            }
        };
        let entry = self.records.entry(window.clone()).or_default();
        entry.0 = c.records.max(1);
        entry.1.insert(record, (msg.partition(), msg.offset()));
        let sketch = self
            .devices
            .entry((window.0.clone(), window.1))
            .or_default();
        c.device_keys.iter().for_each(|&k| sketch.add(k));
        if record == 0 {
            let end = Resume {
                last_seq: seq,
                last_offset: c.last_offset,
                last_index: c.last_index,
                reference_event_ms: c.reference_event_time_ms,
            };
            self.window_last.insert(window.clone(), end);
            match c.plan {
                Some(plan) => self.window_plans.insert(window.clone(), plan),
                None => self.window_plans.remove(&window),
            };
            let lane = LaneState {
                running: c.running_state,
                quantile_track: c.quantile_track,
            };
            self.lanes.insert(window, lane);
        }
        Ok(())
    }

    /// A tombstone: the window's charges (this record) are retired; record
    /// 0 takes the window's plan and lane state with it.
    fn retire(&mut self, window: Window, record: u32) {
        if let Some((_, parts)) = self.records.get_mut(&window) {
            parts.remove(&record);
            if parts.is_empty() {
                self.records.remove(&window);
            }
        }
        if record == 0 {
            self.window_plans.remove(&window);
            self.lanes.remove(&window);
        }
    }

    /// The windows' charges records by lane. A partial set (a crash while
    /// retiring it) keeps what is there: charges that remain can only drop
    /// more readings, never fewer.
    fn charges(&mut self) -> Charges {
        let mut charges: Charges = HashMap::new();
        for ((stream, partition, seq), (declared, parts)) in std::mem::take(&mut self.records) {
            if parts.len() as u32 != declared {
                tracing::warn!(
                    stream = %stream,
                    partition,
                    seq,
                    declared,
                    found = parts.len(),
                    "a window's charges are incomplete in the state topic; keeping the records found"
                );
            }
            charges.entry((stream, partition)).or_default().insert(
                seq,
                WindowAt {
                    records: declared,
                    found: parts.into_values().collect(),
                },
            );
        }
        charges
    }
}

/// Per lane, the releases on the output topic from the oldest recorded
/// release onwards (all of it for an output partition with no entry): seq
/// → (last offset, last event time).
type Seen = HashMap<(String, i32), BTreeMap<u64, (i64, i64)>>;

fn releases_after(
    config: &ClientConfig,
    output_topic: &str,
    scan: &mut StateScan,
    stop: &tokio::sync::watch::Receiver<bool>,
    progress: ReadProgress<'_>,
) -> Result<Seen> {
    let mut from: HashMap<i32, i64> = HashMap::new();
    for e in scan.entries.values() {
        let o = from.entry(e.output_partition).or_insert(i64::MAX);
        *o = (*o).min(e.output_offset + 1);
    }
    let mut seen = Seen::new();
    read_topic(
        config,
        output_topic,
        |p, low| Some(from.get(&p).copied().unwrap_or(low)),
        stop,
        progress,
        |msg| {
            super::check_format(msg, || {
                format!(
                    "release at {output_topic}/{}@{}",
                    msg.partition(),
                    msg.offset()
                )
            })?;
            match super::decode_output(msg) {
                Some(Ok(super::OutputRecord::Window(r))) => {
                    seen.entry((r.stream.clone(), r.partition))
                        .or_default()
                        .insert(r.window_seq, (r.last_offset, r.last_event_time_ms));
                }
                // Fleet-wide releases: derived, not part of a lane's state.
                Some(Ok(super::OutputRecord::Fleet(_))) | None => {}
                Some(Err(_)) => {
                    let at = format!("{output_topic}/{}@{}", msg.partition(), msg.offset());
                    skip(&mut scan.skipped, at, "not a release");
                }
            }
            Ok(())
        },
    )?;
    Ok(seen)
}

/// Where each lane of `partitions` resumes: after its ledger entry, moved
/// on over the contiguous run of releases that follow it (a gap stops it:
/// what follows is re-released from replay).
fn resume_points(
    scan: &StateScan,
    seen: Seen,
    partitions: &[i32],
) -> HashMap<(String, i32), Resume> {
    let mut resume: HashMap<(String, i32), Resume> = scan
        .entries
        .iter()
        .map(|(lane, e)| {
            let at = Resume {
                last_seq: e.last_seq,
                last_offset: e.last_offset,
                last_index: e.last_index,
                reference_event_ms: e.reference_event_time_ms,
            };
            (lane.clone(), at)
        })
        .collect();
    for (lane, seqs) in seen {
        let mut cur = resume.get(&lane).copied();
        for (seq, (published_offset, last_event)) in seqs {
            // Where its last reading was: from its charges record (written
            // before the release); else the whole message counts as released.
            let (last_offset, last_index) = scan
                .window_last
                .get(&(lane.0.clone(), lane.1, seq))
                .map_or((published_offset, u32::MAX), |e| {
                    (e.last_offset, e.last_index)
                });
            cur = match cur {
                // Already covered by the ledger entry.
                Some(c) if seq <= c.last_seq => Some(c),
                Some(c) if seq == c.last_seq + 1 => Some(Resume {
                    last_seq: seq,
                    last_offset,
                    last_index,
                    reference_event_ms: c.reference_event_ms.max(last_event),
                }),
                // A gap: resume before it.
                Some(_) => break,
                None => Some(Resume {
                    last_seq: seq,
                    last_offset,
                    last_index,
                    reference_event_ms: last_event,
                }),
            };
        }
        if let Some(c) = cur {
            resume.insert(lane, c);
        }
    }
    resume.retain(|(_, p), _| partitions.contains(p));
    resume
}

/// Restore the state of input `partitions`: the ledger entries and live
/// window charges from the (compacted) state topic, then the output topic
/// from the oldest recorded release onwards (all of it for an output
/// partition with no entry), for releases acknowledged after their entry
/// was written. Each (stream, partition) resumes after the end of its
/// contiguous run of released seqs; a gap is re-released from replay and
/// what follows repeats bit for bit (keyed noise).
pub fn restore(
    config: &ClientConfig,
    output_topic: &str,
    state_topic: &str,
    partitions: &[i32],
    stop: &tokio::sync::watch::Receiver<bool>,
    progress: ReadProgress<'_>,
) -> Result<Restored> {
    let mut scan = StateScan::default();
    read_topic(
        config,
        state_topic,
        |_, low| Some(low),
        stop,
        progress,
        |msg| scan.record(msg, partitions, state_topic),
    )?;
    let charges = scan.charges();
    let seen = releases_after(config, output_topic, &mut scan, stop, progress)?;
    let resume = resume_points(&scan, seen, partitions);
    let window_ends = std::mem::take(&mut scan.window_last);
    let lane_plans = std::mem::take(&mut scan.entries)
        .into_iter()
        .filter(|((_, p), _)| partitions.contains(p))
        .filter_map(|(lane, e)| Some((lane, e.plan?)))
        .collect();
    Ok(Restored {
        resume,
        charges,
        lanes: scan.lanes,
        window_ends,
        window_plans: scan.window_plans,
        lane_plans,
        skipped: scan.skipped,
        devices: scan.devices,
        keys: scan.keys,
    })
}

/// Read the charges records at `wanted` (state partition, offset → the
/// window it belongs to, as the caller names it) and hand each to `apply`
/// as it is read: `(window, its charges)`. A record that is no longer at
/// its position (compacted away since [`restore`] read it: a newer version
/// then follows, which is not wanted) is not seen; every wanted record
/// that is read decodes, as it did before.
pub fn read_charges<W: Clone>(
    config: &ClientConfig,
    state_topic: &str,
    wanted: &HashMap<(i32, i64), W>,
    stop: &tokio::sync::watch::Receiver<bool>,
    progress: ReadProgress<'_>,
    mut apply: impl FnMut(W, Vec<(u64, i64)>),
) -> Result<()> {
    if wanted.is_empty() {
        return Ok(());
    }
    let mut from: HashMap<i32, i64> = HashMap::new();
    for &(p, o) in wanted.keys() {
        let f = from.entry(p).or_insert(o);
        *f = (*f).min(o);
    }
    read_topic(
        config,
        state_topic,
        // Partitions with nothing wanted are not read.
        |p, low| from.get(&p).map(|&o| o.max(low)),
        stop,
        progress,
        |msg| {
            let Some(w) = wanted.get(&(msg.partition(), msg.offset())) else {
                return Ok(());
            };
            let charged = msg.payload().and_then(charges::charged).ok_or_else(|| {
                anyhow!(
                    "state at {state_topic}/{}@{}: a charges record changed between two reads",
                    msg.partition(),
                    msg.offset()
                )
            })?;
            apply(w.clone(), charged);
            Ok(())
        },
    )
}
