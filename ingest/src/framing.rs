//! Confluent Schema Registry wire framing: a magic byte 0, a 4-byte
//! big-endian schema id, and for Protobuf the message-index array (a
//! zig-zag varint count, then that many zig-zag varint indexes; a single 0
//! byte stands for `[0]`), before the serialized payload. A topic written
//! by Confluent's serializers is read by stripping the frame: JSON payloads
//! then go through FleetDP's JSON forms or the `[input]` mapping; Protobuf
//! payloads must be FleetDP's own messages, the index choosing which
//! (`[0]` `DeviceReading`, `[1]` `ReadingBatch`: their order in
//! `proto/fleetdp.proto`). The schema id is read, not looked up: the
//! payload's shape is FleetDP's or the mapping's.

use crate::{Reason, Rejection};
use serde::Deserialize;

/// How input messages are framed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Framing {
    /// The payload as it is.
    #[default]
    None,
    /// Confluent Schema Registry wire format.
    Confluent,
}

/// Most message indexes a frame may carry (nesting depth of the message
/// in its schema; FleetDP's messages are top-level).
const MAX_INDEXES: u64 = 16;

/// A framed payload taken apart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    pub schema_id: u32,
    /// Protobuf only: the message indexes, the first `count` (kept in
    /// place: no allocation per message).
    slots: [i64; MAX_INDEXES as usize],
    count: usize,
    pub body: &'a [u8],
}

impl Frame<'_> {
    /// Protobuf only: the message indexes.
    pub(crate) fn indexes(&self) -> &[i64] {
        &self.slots[..self.count]
    }
}

fn bad(what: &str) -> Rejection {
    Rejection::new(
        Reason::Undecodable,
        format!("Schema Registry framing: {what}"),
    )
}

/// Strip the frame of `payload`; `protobuf`: read the message indexes too.
pub(crate) fn unframe(payload: &[u8], protobuf: bool) -> Result<Frame<'_>, Rejection> {
    let [magic, a, b, c, d, rest @ ..] = payload else {
        return Err(bad("shorter than the 5-byte header"));
    };
    if *magic != 0 {
        return Err(bad(&format!(
            "magic byte {magic}, expected 0 (is the topic written by a Schema Registry serializer?)"
        )));
    }
    let schema_id = u32::from_be_bytes([*a, *b, *c, *d]);
    if !protobuf {
        return Ok(Frame {
            schema_id,
            slots: [0; MAX_INDEXES as usize],
            count: 0,
            body: rest,
        });
    }
    let mut at = rest;
    let count = zigzag(&mut at).ok_or_else(|| bad("message-index count is not a varint"))?;
    if !(0..=MAX_INDEXES as i64).contains(&count) {
        return Err(bad(&format!(
            "{count} message indexes (allowed 0 to {MAX_INDEXES})"
        )));
    }
    // A count of 0 is the common shorthand for `[0]`.
    let mut slots = [0; MAX_INDEXES as usize];
    for slot in slots.iter_mut().take(count as usize) {
        *slot = zigzag(&mut at).ok_or_else(|| bad("message index is not a varint"))?;
    }
    Ok(Frame {
        schema_id,
        slots,
        count: (count as usize).max(1),
        body: at,
    })
}

/// A zig-zag varint (at most 10 bytes) from the front of `at`.
fn zigzag(at: &mut &[u8]) -> Option<i64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = at.split_first()?;
        *at = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    None
}

/// Frame `body` as Confluent's serializers do (tests, the simulator).
pub fn frame(schema_id: u32, indexes: Option<&[i64]>, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&schema_id.to_be_bytes());
    if let Some(ix) = indexes {
        let put = |out: &mut Vec<u8>, x: i64| {
            let mut z = ((x << 1) ^ (x >> 63)) as u64;
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(b);
                    break;
                }
                out.push(b | 0x80);
            }
        };
        if ix == [0] {
            out.push(0);
        } else {
            put(&mut out, ix.len() as i64);
            for &x in ix {
                put(&mut out, x);
            }
        }
    }
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_say_why() {
        for ix in [None, Some(&[0][..]), Some(&[1][..]), Some(&[2, 0, 7][..])] {
            let f = frame(4242, ix, b"body");
            let got = unframe(&f, ix.is_some()).unwrap();
            assert_eq!(got.schema_id, 4242);
            assert_eq!(got.body, b"body");
            assert_eq!(got.indexes(), ix.unwrap_or_default());
        }
        for (payload, protobuf, says) in [
            (&b"\x00\x00\x01"[..], false, "shorter"),
            (&b"{\"a\":1}"[..], false, "magic byte 123"),
            (
                &b"\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
                true,
                "varint",
            ),
            (&b"\x00\x00\x00\x00\x01\x7e"[..], true, "63 message indexes"),
        ] {
            let e = unframe(payload, protobuf).unwrap_err();
            assert_eq!(e.reason, Reason::Undecodable);
            assert!(e.detail.contains(says), "{e}");
        }
    }
}
