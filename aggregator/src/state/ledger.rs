//! The ledger record kind ([`LEDGER`]): per lane (key `stream/partition`),
//! its last released window — seq, last input offset and index, lateness
//! reference, the plan it ran under and where its release is on the output
//! topic. Its encoding and decoding; restore keeps the latest seq per lane.
//!
//! [`LEDGER`]: super::LEDGER

use crate::engine::window::ClosedWindow;
use prost::Message as _;

/// The ledger entry's key: `stream/partition`.
pub(super) fn key(stream: &str, partition: i32) -> String {
    format!("{stream}/{partition}")
}

/// Window `w`'s ledger entry, before its release's position is known
/// (the writer fills `output_partition` and `output_offset` once the
/// release is acknowledged).
pub(super) fn entry(
    stream: &str,
    w: &ClosedWindow,
    plan: &proto::v1::PlanFingerprint,
) -> proto::v1::LedgerEntry {
    proto::v1::LedgerEntry {
        stream: stream.to_string(),
        partition: w.partition,
        last_seq: w.seq,
        last_offset: w.last_offset,
        last_index: w.last_index,
        reference_event_time_ms: w.reference_event_ms,
        plan: Some(plan.clone()),
        ..Default::default()
    }
}

/// A ledger entry as written.
pub(super) fn encode(e: &proto::v1::LedgerEntry) -> Vec<u8> {
    e.encode_to_vec()
}

/// A ledger entry read back (`None`: it does not decode).
pub(super) fn decode(payload: &[u8]) -> Option<proto::v1::LedgerEntry> {
    proto::v1::LedgerEntry::decode(payload).ok()
}
