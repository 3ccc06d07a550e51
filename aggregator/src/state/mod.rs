//! The durable protocol: the one owner of what FleetDP keeps in Kafka to
//! survive restarts and hand partitions over (docs/DESIGN.md §6).
//!
//! Records (state topic, compacted; the kind in the [`RECORD_KIND`] header):
//! - [`CHARGES`], key `stream/partition/seq` (the release key) and, for a
//!   window of more than [`MAX_CHARGES_PER_RECORD`] devices, further records
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

mod distinct;
mod fingerprint;
mod lane;
mod restore;

pub use distinct::Distinct;
pub use fingerprint::{fingerprint, unplanned_lanes, PlanChange};
pub use lane::LaneState;
pub(crate) use lane::{Carried, Lanes, Step};
pub use restore::{read_charges, restore, Charges, Restored, WindowAt};

use crate::clients::kafka::Producer;
use crate::clients::kafka::{produce_acked, Record, CONTENT_TYPE};
use crate::engine::window::{
    charge_records, ClosedWindow, DEVICE_KEY_SCHEME, MAX_CHARGES_PER_RECORD,
};
use crate::faults::{crash_point, CrashPoint};
use anyhow::Result;
use prost::Message as _;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;

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
/// [`RECORD_KIND`] of a fleet-wide release on the output topic
/// ([`crate::runtime::fleet`]; derived, never part of a restore).
pub const FLEET: &str = "fleet";

/// Whether an output-topic message is a fleet-wide release.
pub fn is_fleet<M: rdkafka::message::Message>(msg: &M) -> bool {
    crate::clients::kafka::header(msg, RECORD_KIND) == Some(FLEET)
}

/// A record of the output topic.
#[derive(Debug, Clone)]
pub enum OutputRecord {
    Window(proto::WindowRelease),
    Fleet(proto::FleetRelease),
}

/// An output-topic message decoded by its kind ([`RECORD_KIND`]) and
/// content type; `None` without a payload. Whoever reads the output topic
/// (restore, the fleet task, `fleetdp tail`) tells the kinds apart here: a
/// fleet record read as a window release would decode (JSON ignores
/// unknown fields) into a wrong one.
pub fn decode_output<M: rdkafka::message::Message>(
    msg: &M,
) -> Option<anyhow::Result<OutputRecord>> {
    let payload = msg.payload()?;
    let ct = crate::clients::kafka::header(msg, CONTENT_TYPE);
    Some(if is_fleet(msg) {
        crate::clients::kafka::decode_fleet(payload, ct).map(OutputRecord::Fleet)
    } else {
        crate::clients::kafka::decode_release(payload, ct).map(OutputRecord::Window)
    })
}

/// The key of record `record` of a window's charges.
pub(crate) fn charges_key(stream: &str, partition: i32, seq: u64, record: u32) -> String {
    let key = proto::window_record_key(stream, partition, seq);
    if record == 0 {
        key
    } else {
        format!("{key}/{record}")
    }
}

/// `stream/partition/seq[/record]` → its parts (stream names hold no `/`).
pub(crate) fn parse_charges_key(key: &str) -> Option<(String, i32, u64, u32)> {
    let mut it = key.split('/');
    let (stream, partition, seq) = (it.next()?, it.next()?, it.next()?);
    let record = match it.next() {
        Some(r) => r.parse().ok().filter(|&r| r > 0)?,
        None => 0,
    };
    if it.next().is_some() || stream.is_empty() {
        return None;
    }
    Some((
        stream.to_string(),
        partition.parse().ok()?,
        seq.parse().ok()?,
        record,
    ))
}

/// The state records of one closed window, ready to write.
pub(crate) struct WindowRecords {
    /// The release's key, also its first charges record's key.
    record_key: String,
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
        let records = charge_records(w.charges.len());
        // Charges records carry the plan's digest, not its settings (one
        // copy per window is enough: the ledger entry's, which names them).
        let charged_under = proto::v1::PlanFingerprint {
            settings: Default::default(),
            ..plan.clone()
        };
        let mut lane = Some(lane);
        let charges = (0..records)
            .map(|r| {
                let chunk = w
                    .charges
                    .chunks(MAX_CHARGES_PER_RECORD)
                    .nth(r as usize)
                    .unwrap_or(&[]);
                // Record 0 holds the lane's state.
                let lane_state = lane.take().unwrap_or_default();
                let payload = proto::v1::WindowCharges {
                    stream: stream.to_string(),
                    partition: w.partition,
                    window_seq: w.seq,
                    device_keys: chunk.iter().map(|c| c.0).collect(),
                    horizons: chunk.iter().map(|c| c.1).collect(),
                    running_state: lane_state.running,
                    quantile_track: lane_state.quantile_track,
                    device_key_scheme: DEVICE_KEY_SCHEME.into(),
                    plan: Some(charged_under.clone()),
                    record: r,
                    records,
                    last_offset: w.last_offset,
                    last_index: w.last_index,
                }
                .encode_to_vec();
                (charges_key(stream, w.partition, w.seq, r), payload)
            })
            .collect();
        Self {
            record_key: proto::window_record_key(stream, w.partition, w.seq),
            lane_key: format!("{stream}/{}", w.partition),
            charges,
            ledger: proto::v1::LedgerEntry {
                stream: stream.to_string(),
                partition: w.partition,
                last_seq: w.seq,
                last_offset: w.last_offset,
                last_index: w.last_index,
                reference_event_time_ms: w.reference_event_ms,
                plan: Some(plan.clone()),
                ..Default::default()
            },
            retired: w
                .retired
                .iter()
                .zip(&w.retired_records)
                .flat_map(|(&s, &n)| (0..n).map(move |r| charges_key(stream, w.partition, s, r)))
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
}

fn kind(k: &'static str) -> OwnedHeaders {
    OwnedHeaders::new().insert(Header {
        key: RECORD_KIND,
        value: Some(k),
    })
}

/// Write a window's records and its release in the protocol's order
/// (module doc). Returns once the release is acknowledged.
pub(crate) async fn write_window(
    producer: &Producer,
    state_topic: &str,
    mut rec: WindowRecords,
    release: ReleaseRecord<'_>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let key = rec.record_key.as_bytes();
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
    crash_point(CrashPoint::BeforeRelease);
    let headers = OwnedHeaders::new().insert(Header {
        key: CONTENT_TYPE,
        value: Some(release.content_type),
    });
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
    let entry = rec.ledger.encode_to_vec();
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

/// A key table's record as written.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeysRecord {
    pub stream: String,
    pub partition: i32,
    #[serde(flatten)]
    pub bindings: crate::engine::keys::Bindings,
}

/// Write a key table's bindings (acknowledged).
pub(crate) async fn write_keys(
    producer: &Producer,
    state_topic: &str,
    record: &KeysRecord,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let key = format!("{}/{}/keys", record.stream, record.partition);
    let payload = serde_json::to_vec(record)?;
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
        .flat_map(|(s, p, seq, n)| (0..*n).map(move |r| charges_key(s, *p, *seq, r)));
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
mod tests {
    use super::*;

    #[test]
    fn charges_keys_round_trip() {
        assert_eq!(charges_key("temp", 3, 7, 0), "temp/3/7");
        assert_eq!(charges_key("temp", 3, 7, 2), "temp/3/7/2");
        for r in [0, 1, 5] {
            assert_eq!(
                parse_charges_key(&charges_key("a.b-c", 1, 9, r)),
                Some(("a.b-c".to_string(), 1, 9, r))
            );
        }
        for bad in ["hello", "a/1", "a/x/1", "a/1/2/0", "a/1/2/3/4", "/1/2"] {
            assert_eq!(parse_charges_key(bad), None, "{bad}");
        }
    }

    /// The kind header decides: a JSON fleet record without it would pass
    /// for a window release (JSON ignores unknown fields), which is why
    /// every reader of the output topic goes through `decode_output`.
    #[test]
    fn output_records_are_told_apart_by_their_kind() {
        use rdkafka::message::{OwnedMessage, Timestamp};
        let fleet = proto::FleetRelease {
            stream: "temp".into(),
            window_seq: 7,
            partitions: vec![0, 1],
            ..Default::default()
        };
        let payload = serde_json::to_vec(&fleet).unwrap();
        let msg = |kind: Option<&str>| {
            let mut h = OwnedHeaders::new().insert(Header {
                key: CONTENT_TYPE,
                value: Some("application/json"),
            });
            if let Some(k) = kind {
                h = h.insert(Header {
                    key: RECORD_KIND,
                    value: Some(k),
                });
            }
            OwnedMessage::new(
                Some(payload.clone()),
                None,
                "out".into(),
                Timestamp::NotAvailable,
                0,
                0,
                Some(h),
            )
        };
        match decode_output(&msg(Some(FLEET))) {
            Some(Ok(OutputRecord::Fleet(f))) => assert_eq!(f, fleet),
            other => panic!("{other:?}"),
        }
        match decode_output(&msg(None)) {
            Some(Ok(OutputRecord::Window(w))) => {
                assert_eq!((w.stream.as_str(), w.window_seq), ("temp", 7))
            }
            other => panic!("{other:?}"),
        }
    }
}
