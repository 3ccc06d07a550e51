//! The charges record kind ([`CHARGES`]): the devices a window charged
//! (keyed device ids and horizons) and, in its first record, the lane's
//! state after it; key `stream/partition/seq` (the release's record key)
//! and `stream/partition/seq/i` for a window of more than
//! [`MAX_CHARGES_PER_RECORD`] devices; a tombstone (no payload) once no
//! accepted reading can be charged against the window any more. Its
//! encoding, its decoding with the checks restore relies on, and its keys.
//!
//! [`CHARGES`]: super::CHARGES

use super::LaneState;
use crate::engine::window::{
    charge_records, ClosedWindow, DEVICE_KEY_SCHEME, MAX_CHARGES_PER_RECORD,
};
use anyhow::{anyhow, Result};
use prost::Message as _;

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

/// Window `w`'s charges records of `stream`: (key, payload), each under the
/// producer's message size; record 0 holds the lane's state after it. They
/// carry the plan's digest, not its settings (one copy per window is
/// enough: the ledger entry's, which names them).
pub(super) fn encode(
    stream: &str,
    w: &ClosedWindow,
    lane: LaneState,
    plan: &proto::v1::PlanFingerprint,
) -> Vec<(String, Vec<u8>)> {
    let records = charge_records(w.charges.len());
    let charged_under = proto::v1::PlanFingerprint {
        settings: Default::default(),
        ..plan.clone()
    };
    let mut lane = Some(lane);
    (0..records)
        .map(|r| {
            let chunk = w
                .charges
                .chunks(MAX_CHARGES_PER_RECORD)
                .nth(r as usize)
                .unwrap_or(&[]);
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
                reference_event_time_ms: w.reference_event_ms,
            }
            .encode_to_vec();
            (charges_key(stream, w.partition, w.seq, r), payload)
        })
        .collect()
}

/// The keys of window `seq`'s `records` charges records (what a tombstone
/// retires).
pub(super) fn keys_of(
    (stream, partition): (&str, i32),
    seq: u64,
    records: u32,
) -> impl Iterator<Item = String> + '_ {
    (0..records).map(move |r| charges_key(stream, partition, seq, r))
}

/// A charges record as restore reads it.
pub(super) enum Read {
    /// A record of a window's charges.
    Charges(Box<proto::v1::WindowCharges>),
    /// A tombstone: the record is retired.
    Retired,
    /// Not a charges record FleetDP wrote: skipped, for this reason.
    Skip(&'static str),
}

/// Decode the charges record `payload` (`None`: a tombstone) whose key says
/// it is record `record`. Charges keyed by another device-key scheme
/// cannot be matched to devices: an error (`at` names the record), not a
/// skip.
pub(super) fn decode(payload: Option<&[u8]>, record: u32, at: impl Fn() -> String) -> Result<Read> {
    let Some(payload) = payload else {
        return Ok(Read::Retired);
    };
    let Ok(c) = proto::v1::WindowCharges::decode(payload) else {
        return Ok(Read::Skip("charges do not decode"));
    };
    if c.device_key_scheme != DEVICE_KEY_SCHEME {
        // No restart cures it: a configuration error (exit 78).
        return Err(crate::config::configuration(anyhow!(
            "{}: charges keyed by device-key scheme {:?}, this build uses {:?}; \
             they cannot be matched to devices (see docs/operations.md, Operator's playbook: state topic deleted)",
            at(),
            c.device_key_scheme,
            DEVICE_KEY_SCHEME
        )));
    }
    if c.device_keys.len() != c.horizons.len() || c.record != record {
        return Ok(Read::Skip(
            "device keys and horizons differ in length, or the record number is not its key's",
        ));
    }
    Ok(Read::Charges(Box::new(c)))
}

/// The (device key, horizon) charges of a record already checked by
/// [`decode`] (`None`: it no longer decodes).
pub(super) fn charged(payload: &[u8]) -> Option<Vec<(u64, i64)>> {
    let c = proto::v1::WindowCharges::decode(payload).ok()?;
    Some(c.device_keys.into_iter().zip(c.horizons).collect())
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

    /// A window of more charges than a record holds: its records decode to
    /// every charge, in order, with the lane's state in record 0 only; a
    /// record under another key's number, or of another device-key scheme,
    /// is refused.
    #[test]
    fn a_window_s_records_decode_to_its_charges() {
        let charges: Vec<(u64, i64)> = (0..(MAX_CHARGES_PER_RECORD as u64 * 2 + 7))
            .map(|d| (d * 7919, (d % 3) as i64))
            .collect();
        let w = ClosedWindow {
            partition: 2,
            last_offset: 40,
            last_index: 1,
            charges: charges.clone(),
            ..crate::state::lane::tests::window(9)
        };
        let lane = LaneState {
            running: b"{}".to_vec(),
            quantile_track: b"[]".to_vec(),
        };
        let plan = proto::v1::PlanFingerprint::default();
        let records = encode("t", &w, lane.clone(), &plan);
        assert_eq!(records.len(), 3);
        let mut read = Vec::new();
        for (r, (key, payload)) in records.iter().enumerate() {
            assert_eq!(parse_charges_key(key), Some(("t".into(), 2, 9, r as u32)));
            let Ok(Read::Charges(c)) = decode(Some(payload.as_slice()), r as u32, String::new)
            else {
                panic!("record {r} does not decode");
            };
            let state = (c.running_state.clone(), c.quantile_track.clone());
            let want = if r == 0 {
                (lane.running.clone(), lane.quantile_track.clone())
            } else {
                (vec![], vec![])
            };
            assert_eq!(state, want, "record {r}");
            assert_eq!(charged(payload).unwrap().len(), c.device_keys.len());
            read.extend(charged(payload).unwrap());
        }
        assert_eq!(read, charges);
        assert!(matches!(decode(None, 0, String::new), Ok(Read::Retired)));
        assert!(matches!(
            decode(Some(records[1].1.as_slice()), 2, String::new),
            Ok(Read::Skip(_))
        ));
        let mut other = proto::v1::WindowCharges::decode(records[0].1.as_slice()).unwrap();
        other.device_key_scheme = "blake3".into();
        assert!(decode(Some(other.encode_to_vec().as_slice()), 0, String::new).is_err());
    }
}
