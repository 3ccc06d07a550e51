//! The durable protocol: the one owner of what FleetDP keeps in Kafka to
//! survive restarts and hand partitions over (docs/DESIGN.md §6).
//!
//! Records (state topic, compacted; the kind in the [`RECORD_KIND`] header):
//! - [`CHARGES`], key `stream/partition/seq` (the release's record key) and, for a
//!   window of more than [`MAX_CHARGES_PER_RECORD`](crate::engine::window::MAX_CHARGES_PER_RECORD) devices, further records
//!   `stream/partition/seq/i`: the devices a window charged (keyed device
//!   ids and horizons) and the lane's state after it ([`LaneState`]: running
//!   totals, adaptive quantile track); tombstones (no
//!   payload) once no accepted reading can be charged against it any more;
//! - [`LEDGER`], key `stream/partition`: the lane's last released window
//!   (seq, last input offset, lateness reference, where its release is).
//!
//! Write order per window, each step durable before the next (the crash
//! points of [`crate::faults`] sit between them):
//! 1. charges (so a release never exists without the caps it used up);
//! 2. the release on the output topic (bit-identical on a retry: keyed noise);
//! 3. the ledger entry and tombstones of retired windows (bookkeeping that
//!    only saves work on restore; not awaited).
//!
//! Restore ([`restore()`]) reads both topics back: a crash between any two
//! steps resumes at the last released window and replays the rest.
//!
//! Each record kind has its own file with its keys, encoding and decoding:
//! `charges.rs`, `ledger.rs`, `keys.rs`, and the output topic's kinds in
//! `output.rs`; what a lane carries rides in its window's first charges
//! record (`lane.rs`). This module writes them in the order above;
//! `restore.rs` reads them back, each kind through its file's decoder.

mod charges;
mod distinct;
mod fingerprint;
mod key_ids;
mod keys;
mod lane;
mod ledger;
mod output;
mod restore;
pub mod topics;

pub use distinct::Distinct;
pub use fingerprint::{fingerprint, unplanned_lanes, PlanChange};
pub use key_ids::{KeyIds, KeyVerdict, KEY_FIX};
pub use keys::KeysRecord;
pub use lane::LaneState;
pub(crate) use lane::{Carried, Lanes, Step};
pub use output::{decode_output, is_fleet, OutputRecord};
pub use restore::{read_charges, restore, Charges, Restored, WindowAt};

use crate::clients::kafka::Producer;
use crate::clients::kafka::{produce_acked, Record, CONTENT_TYPE};
use crate::engine::window::ClosedWindow;
use crate::faults::{crash_point, CrashPoint};
use anyhow::Result;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;

/// The format of the records this build writes (the header
/// [`FORMAT_HEADER`] on every state record and window release). Format 1:
/// records without the header, written before it existed. Format 2 adds
/// the release key id and the charges' lateness reference. This build
/// reads formats 1 to 2 and refuses a record of a later format by name
/// rather than misread it (docs/operations.md#upgrades-and-rollbacks).
/// Printed by `fleetdp --version`.
pub const STATE_FORMAT: u32 = 2;
/// Header carrying a record's [`STATE_FORMAT`].
pub const FORMAT_HEADER: &str = "fleetdp-state-format";

/// Refuse a record of a later format than this build reads (`at` names
/// it). A record without the header is format 1.
pub(crate) fn check_format<M: rdkafka::message::Message>(
    msg: &M,
    at: impl Fn() -> String,
) -> Result<()> {
    let Some(text) = crate::clients::kafka::header(msg, FORMAT_HEADER) else {
        return Ok(());
    };
    match text.parse::<u32>() {
        Ok(f) if f <= STATE_FORMAT => Ok(()),
        // No restart cures it: a configuration error (exit 78).
        _ => Err(crate::config::configuration(anyhow::anyhow!(
            "{}: written by a newer FleetDP (state format {text}; this build reads formats 1 to {STATE_FORMAT}), \
             which this build cannot read without misreading it: run the newer build, or follow the rollback \
             procedure (docs/operations.md#upgrades-and-rollbacks)",
            at()
        ))),
    }
}

/// Header telling the state topic's record kinds apart (and, on the output
/// topic, fleet-wide releases from window releases, which have none).
pub const RECORD_KIND: &str = "fleetdp-record";
/// [`RECORD_KIND`] of a window's charges (or their tombstone).
pub const CHARGES: &str = "charges";
/// [`RECORD_KIND`] of a ledger entry.
pub const LEDGER: &str = "ledger";
/// [`RECORD_KIND`] of a private-key table's bindings (key
/// `stream/partition/keys`, JSON [`crate::engine::keys::Bindings`] with the stream
/// and partition): written, acknowledged, before anything routed by them
/// is released, so a restart never selects a horizon's keys again.
pub const KEYS: &str = "keys";
/// [`RECORD_KIND`] of an advisor run's spend (`fleetdp advise`, key
/// `advise/<stream>/<horizon>/<run>`): not the service's state, skipped by
/// restore.
pub const ADVISE: &str = "advise";
/// Header of a window release: the id of the release key its noise was
/// drawn with ([`KeyIds`]).
pub const KEY_ID: &str = "fleetdp-release-key-id";
/// Header of a window release written under a declared key rotation
/// (`privacy.rotate_from`): the id of the key it replaces. An instance
/// holding that key stops on seeing it.
pub const KEY_FROM: &str = "fleetdp-release-key-from";
/// [`RECORD_KIND`] of a fleet-wide release on the output topic
/// ([`crate::runtime::fleet`]; derived, never part of a restore).
pub const FLEET: &str = "fleet";

/// The state records of one closed window, ready to write.
pub(crate) struct WindowRecords {
    /// The release's key, also its first charges record's key.
    pub(crate) record_key: String,
    /// The ledger entry's key: `stream/partition`.
    lane_key: String,
    /// The window's charges records: (key, payload), each under the
    /// producer's message size.
    charges: Vec<(String, Vec<u8>)>,
    ledger: proto::v1::LedgerEntry,
    /// Keys of earlier windows whose charges retire (tombstones).
    retired: Vec<String>,
}

impl WindowRecords {
    /// Records of window `w` of `stream`, with the lane's state after it
    /// and the plan it ran under.
    pub fn new(
        stream: &str,
        w: &ClosedWindow,
        lane: LaneState,
        plan: &proto::v1::PlanFingerprint,
    ) -> Self {
        Self {
            record_key: proto::window_record_key(stream, w.partition, w.seq),
            lane_key: ledger::key(stream, w.partition),
            charges: charges::encode(stream, w, lane, plan),
            ledger: ledger::entry(stream, w, plan),
            retired: w
                .retired
                .iter()
                .zip(&w.retired_records)
                .flat_map(|(&s, &n)| charges::keys_of((stream, w.partition), s, n))
                .collect(),
        }
    }
}

/// Where and how a window's release is published.
pub(crate) struct ReleaseRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub payload: &'a [u8],
    pub content_type: &'a str,
    /// The record's timestamp (`None`: the producer's clock).
    pub timestamp_ms: Option<i64>,
    /// The release key it was drawn with, and the one that replaces.
    pub key: &'a KeyIds,
}

/// A state record's headers: its kind and the format.
fn kind(k: &'static str) -> OwnedHeaders {
    format_header(OwnedHeaders::new()).insert(Header {
        key: RECORD_KIND,
        value: Some(k),
    })
}

/// `h` with the [`FORMAT_HEADER`].
fn format_header(h: OwnedHeaders) -> OwnedHeaders {
    h.insert(Header {
        key: FORMAT_HEADER,
        value: Some(STATE_FORMAT_TEXT),
    })
}

/// [`STATE_FORMAT`] as the header writes it.
const STATE_FORMAT_TEXT: &str = "2";

/// A window's charges records, the protocol's first step (module doc);
/// returns once every one is acknowledged. [`write_release`] follows.
pub(crate) async fn write_charges(
    producer: &Producer,
    state_topic: &str,
    rec: &WindowRecords,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    crash_point(CrashPoint::BeforeState);
    for (charges_key, payload) in &rec.charges {
        produce_acked(
            producer,
            Record {
                topic: state_topic,
                key: charges_key.as_bytes(),
                payload: Some(payload),
                partition: None,
                headers: kind(CHARGES),
                timestamp_ms: None,
            },
            stop,
        )
        .await?;
    }
    Ok(())
}

/// A window's release, then its ledger entry and the tombstones of
/// retired charges: the protocol's steps after [`write_charges`] (module
/// doc). Returns once the release is acknowledged.
pub(crate) async fn write_release(
    producer: &Producer,
    state_topic: &str,
    mut rec: WindowRecords,
    release: ReleaseRecord<'_>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let key = rec.record_key.as_bytes();
    crash_point(CrashPoint::BeforeRelease);
    let mut headers = format_header(OwnedHeaders::new())
        .insert(Header {
            key: CONTENT_TYPE,
            value: Some(release.content_type),
        })
        .insert(Header {
            key: KEY_ID,
            value: Some(&release.key.mine),
        });
    if let Some(from) = &release.key.rotated_from {
        headers = headers.insert(Header {
            key: KEY_FROM,
            value: Some(from),
        });
    }
    (rec.ledger.output_partition, rec.ledger.output_offset) = produce_acked(
        producer,
        Record {
            topic: release.topic,
            key,
            payload: Some(release.payload),
            partition: Some(release.partition),
            headers,
            timestamp_ms: release.timestamp_ms,
        },
        stop,
    )
    .await?;
    crash_point(CrashPoint::AfterRelease);
    let entry = ledger::encode(&rec.ledger);
    let records = std::iter::once((rec.lane_key.as_str(), Some(entry.as_slice()), LEDGER))
        .chain(rec.retired.iter().map(|k| (k.as_str(), None, CHARGES)));
    for (k, payload, what) in records {
        let mut r = FutureRecord::to(state_topic).key(k).headers(kind(what));
        if let Some(p) = payload {
            r = r.payload(p);
        }
        if let Err((e, _)) = producer.send_result(r) {
            tracing::warn!(error = %e, "state bookkeeping not sent");
        }
    }
    Ok(())
}

/// Write a key table's bindings (acknowledged).
pub(crate) async fn write_keys(
    producer: &Producer,
    state_topic: &str,
    record: &KeysRecord,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let key = record.key();
    let payload = record.encode()?;
    produce_acked(
        producer,
        Record {
            topic: state_topic,
            key: key.as_bytes(),
            payload: Some(&payload),
            partition: None,
            headers: kind(KEYS),
            timestamp_ms: None,
        },
        stop,
    )
    .await?;
    Ok(())
}

/// Retire the charges of windows `(stream, partition, seq, records)` now
/// (acknowledged tombstones): used when the operator drops an old plan's
/// charges.
pub(crate) async fn retire(
    producer: &Producer,
    state_topic: &str,
    windows: &[(String, i32, u64, u32)],
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let keys = windows
        .iter()
        .flat_map(|(s, p, seq, n)| charges::keys_of((s, *p), *seq, *n));
    for key in keys {
        produce_acked(
            producer,
            Record {
                topic: state_topic,
                key: key.as_bytes(),
                payload: None,
                partition: None,
                headers: kind(CHARGES),
                timestamp_ms: None,
            },
            stop,
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod format_tests {
    #[test]
    fn the_header_and_the_version_say_the_format() {
        assert_eq!(super::STATE_FORMAT_TEXT, super::STATE_FORMAT.to_string());
        let says = format!("state format {})", super::STATE_FORMAT);
        assert!(crate::VERSION.ends_with(&says), "{}", crate::VERSION);
    }
}
