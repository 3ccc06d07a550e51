//! `DeviceReading` and `ReadingBatch` (fleetdp.proto) decoded straight
//! into [`RawReading`]s, labels into one [`Labels`] buffer. The generated
//! types would decode each label into a map of owned strings, two
//! allocations a label and a map node, then have it copied out.
//!
//! Acceptance is prost's, by construction: the fields are read with prost's
//! own primitives as the generated code calls them — `string::merge`,
//! `double::merge` and `int64::merge` (wire type checked, last value wins),
//! a label entry as prost reads a map entry (whatever the field's wire type
//! says, its length-delimited body with key 1 and value 2, unknown fields
//! skipped, the recursion limit counted), `message::merge_repeated` for the
//! batch, `skip_field` for unknown fields. Two shortcuts take only what
//! those read alike, else step aside: a well-formed label string is copied
//! straight in, and a label entry in the form encoders write (key then
//! value, one length byte each, UTF-8, nothing else) is read in one step.
//! A label name given twice keeps its last value, as the map did.
//! A message of one reading in the form encoders write is read in place
//! instead ([`borrowed`]): its strings are not copied.
//! `tests/wire.rs` decodes random and damaged messages both ways and
//! requires the same verdicts and readings.

use crate::labels::Labels;
use crate::{Found, RawReading};
use prost::bytes::{Buf, BufMut};
use prost::encoding::{self as enc, DecodeContext, WireType};
use prost::DecodeError;

/// The encoding half of `prost::Message`, which these decode-only types
/// never use.
macro_rules! decode_only {
    () => {
        fn encode_raw(&self, _: &mut impl BufMut) {
            unreachable!("decoded only")
        }

        fn encoded_len(&self) -> usize {
            unreachable!("decoded only")
        }
    };
}

/// `bytes` as a string if they are UTF-8, as `std::str::from_utf8` says.
/// Device ids, stream names and label strings are short and nearly always
/// ASCII, which is checked a word at a time inline; the general check
/// walks a short string byte by byte behind a call (≈ 5% of a reading's
/// time in process).
#[inline]
pub(crate) fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

/// One `DeviceReading` as it decodes.
#[derive(Debug, Default)]
pub(crate) struct WireReading {
    device_id: String,
    stream: String,
    value: Option<f64>,
    event_time_ms: Option<i64>,
    labels: Labels,
}

impl From<WireReading> for RawReading {
    fn from(w: WireReading) -> Self {
        let mut labels = w.labels;
        labels.sort();
        RawReading {
            device_id: Some(w.device_id),
            stream: Some(w.stream),
            value: w.value,
            event_time_ms: w.event_time_ms,
            labels,
        }
    }
}

/// A `DeviceReading` read in place: its strings are slices of the
/// payload, its labels (if any) copied into one buffer. Only a message in
/// the form encoders write is taken — single-byte keys of the five fields
/// with their own wire types, each length within the payload, strings
/// UTF-8, label entries as [`canonical_entry`] takes them — with prost's
/// reading of it (a field given twice keeps its last value, a label name
/// given twice its last value, varints decoded by prost's
/// `decode_varint`); anything else (unknown fields, a wrong wire type,
/// another form of label entry, damage) is `None`, and the caller decodes
/// it in full, which gives the verdict.
///
/// The reading is written into the caller's `r` (a fresh [`Found`]; left
/// partly written on `None`), so the 128-byte value is not copied on its
/// way out (docs/performance.md, "Where a reading's time goes").
pub(crate) fn borrowed<'a>(payload: &'a [u8], r: &mut Found<'a>) -> Option<()> {
    let mut rest = payload;
    while let Some((&key, tail)) = rest.split_first() {
        rest = tail;
        match key {
            0x0A | 0x12 => {
                let len = usize::try_from(enc::decode_varint(&mut rest).ok()?).ok()?;
                let text = utf8(rest.get(..len)?)?;
                rest = &rest[len..];
                if key == 0x0A {
                    r.device_id = text.into();
                } else {
                    r.stream = text;
                }
            }
            0x19 => {
                let (bytes, tail) = rest.split_first_chunk::<8>()?;
                r.value = Some(f64::from_le_bytes(*bytes));
                rest = tail;
            }
            0x20 => r.event_time_ms = Some(enc::decode_varint(&mut rest).ok()? as i64),
            0x2A => {
                let (key, value, used) = canonical_entry(rest)?;
                let (key, value) = (r.labels.append(key), r.labels.append(value));
                r.labels.push_spans(key, value);
                rest = &rest[used..];
            }
            _ => return None,
        }
    }
    r.labels.sort();
    Some(())
}

/// One `ReadingBatch` as it decodes.
#[derive(Debug, Default)]
pub(crate) struct WireBatch {
    pub(crate) readings: Vec<WireReading>,
}

/// A label entry being read: its key and value go to `labels`' buffer.
#[derive(Debug)]
struct Entry<'a> {
    labels: &'a mut Labels,
    key: [u32; 2],
    value: [u32; 2],
}

impl Entry<'_> {
    /// Read a string field and append it. A well-formed one (length within
    /// the buffer, UTF-8) is copied straight in; anything else is handed to
    /// prost's `string::merge`, which refuses it as it would.
    fn string(
        &mut self,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<[u32; 2], DecodeError> {
        if wire_type == WireType::LengthDelimited {
            let mut peek = buf.chunk();
            if peek.len() == buf.remaining() {
                if let Ok(len) = enc::decode_varint(&mut peek) {
                    let text = usize::try_from(len)
                        .ok()
                        .and_then(|n| peek.get(..n))
                        .and_then(utf8);
                    if let Some(text) = text {
                        let skip = buf.remaining() - peek.len() + text.len();
                        let at = self.labels.append(text);
                        buf.advance(skip);
                        return Ok(at);
                    }
                }
            }
        }
        let mut s = String::new();
        enc::string::merge(wire_type, &mut s, buf, ctx)?;
        Ok(self.labels.append(&s))
    }
}

impl prost::Message for Entry<'_> {
    decode_only!();

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => self.key = self.string(wire_type, buf, ctx)?,
            2 => self.value = self.string(wire_type, buf, ctx)?,
            _ => enc::skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    }

    fn clear(&mut self) {
        unreachable!("decoded only")
    }
}

impl WireReading {
    /// Take a label entry in the form encoders write — its key (field 1)
    /// then its value (field 2), each one length byte and UTF-8, nothing
    /// else — straight into the labels (`buf` just past the field's key).
    /// Anything else is left to the general path (`false`, nothing read),
    /// which reads it as prost would. What this path takes, prost reads
    /// alike: the same key and value, no error (the recursion limit is not
    /// near: an entry sits at most two messages deep).
    fn canonical_label(&mut self, buf: &mut impl Buf) -> bool {
        let b = buf.chunk();
        if b.len() != buf.remaining() {
            return false;
        }
        let Some((key, value, used)) = canonical_entry(b) else {
            return false;
        };
        let key = self.labels.append(key);
        let value = self.labels.append(value);
        self.labels.push_spans(key, value);
        buf.advance(used);
        true
    }
}

/// A label entry in the form encoders write at the start of `b` (just past
/// the field's key): its length, then its key (field 1) and value (field
/// 2), each one length byte and UTF-8, nothing else. Returns the key, the
/// value and the bytes the entry took.
fn canonical_entry(b: &[u8]) -> Option<(&str, &str, usize)> {
    let (&n, rest) = b.split_first()?;
    let n = usize::from(n);
    if n >= 0x80 || rest.len() < n {
        return None;
    }
    let e = &rest[..n];
    let field = |at: usize, tag: u8| -> Option<(&str, usize)> {
        let (&t, &len) = (e.get(at)?, e.get(at + 1)?);
        let end = (at + 2).checked_add(usize::from(len))?;
        if t != tag || len >= 0x80 {
            return None;
        }
        Some((utf8(e.get(at + 2..end)?)?, end))
    };
    let (key, at) = field(0, 0x0A)?;
    let (value, end) = field(at, 0x12)?;
    (end == n).then_some((key, value, 1 + n))
}

impl prost::Message for WireReading {
    decode_only!();

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let (r, field) = match tag {
            1 => (
                enc::string::merge(wire_type, &mut self.device_id, buf, ctx),
                "device_id",
            ),
            2 => (
                enc::string::merge(wire_type, &mut self.stream, buf, ctx),
                "stream",
            ),
            3 => (
                enc::double::merge(wire_type, self.value.get_or_insert(0.0), buf, ctx),
                "value",
            ),
            4 => (
                enc::int64::merge(wire_type, self.event_time_ms.get_or_insert(0), buf, ctx),
                "event_time_ms",
            ),
            5 => {
                if wire_type == WireType::LengthDelimited && self.canonical_label(buf) {
                    return Ok(());
                }
                // A map entry is read whatever the wire type says.
                let mut e = Entry {
                    labels: &mut self.labels,
                    key: [0; 2],
                    value: [0; 2],
                };
                let r = enc::message::merge(WireType::LengthDelimited, &mut e, buf, ctx);
                if r.is_ok() {
                    let (key, value) = (e.key, e.value);
                    self.labels.push_spans(key, value);
                }
                (r, "labels")
            }
            _ => return enc::skip_field(wire_type, tag, buf, ctx),
        };
        r.map_err(|mut e| {
            e.push("DeviceReading", field);
            e
        })
    }

    fn clear(&mut self) {
        *self = WireReading::default();
    }
}

impl prost::Message for WireBatch {
    decode_only!();

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => enc::message::merge_repeated(wire_type, &mut self.readings, buf, ctx).map_err(
                |mut e| {
                    e.push("ReadingBatch", "readings");
                    e
                },
            ),
            _ => enc::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn clear(&mut self) {
        self.readings.clear();
    }
}

#[cfg(test)]
mod tests {
    /// [`super::utf8`] says what `std::str::from_utf8` says: every
    /// sequence of up to four pieces (ASCII, valid multi-byte characters,
    /// stray and cut bytes) behind ASCII prefixes of 0 to 19 bytes, so
    /// each piece falls on every place within a word.
    #[test]
    fn utf8_is_the_standard_check() {
        let pool: &[&[u8]] = &[
            b"a",
            b"Z",
            "\u{e9}".as_bytes(),
            "\u{20ac}".as_bytes(),
            b"\x80",
            b"\xff",
            b"\xc3",
        ];
        let mut checked = 0;
        for prefix in 0..20 {
            for code in 0..pool.len().pow(4) {
                let mut bytes = vec![b'd'; prefix];
                let (mut c, mut parts) = (code, code % 5);
                while parts > 0 {
                    bytes.extend_from_slice(pool[c % pool.len()]);
                    (c, parts) = (c / pool.len(), parts - 1);
                }
                assert_eq!(
                    super::utf8(&bytes),
                    std::str::from_utf8(&bytes).ok(),
                    "{bytes:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 40_000);
    }
}
