//! Counting the readings of a protobuf `ReadingBatch` from its wire format,
//! before anything is decoded: a 900 KB batch of empty readings (2 bytes
//! each) would otherwise be materialised as ≈ 450,000 readings before its
//! size is checked.
//!
//! Only the framing is read (field keys and lengths, as the protobuf
//! encoding specifies them); prost's own wire helpers are not a public API.

/// `ReadingBatch.readings`' key: field 1, wire type 2 (length-delimited).
const READINGS_KEY: u64 = (1 << 3) | 2;

/// A base-128 varint at the front of `buf` (at most 10 bytes).
pub(crate) fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// How many `readings` entries `payload` holds, or `None` if its framing
/// is broken (the decoder then says how).
pub(crate) fn batch_readings(mut payload: &[u8]) -> Option<usize> {
    let mut n = 0usize;
    while !payload.is_empty() {
        let key = varint(&mut payload)?;
        let skip = match key & 7 {
            0 => {
                varint(&mut payload)?;
                0
            }
            1 => 8,
            5 => 4,
            2 => {
                n += usize::from(key == READINGS_KEY);
                usize::try_from(varint(&mut payload)?).ok()?
            }
            _ => return None, // groups, or no wire type at all
        };
        payload = payload.get(skip..)?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use proto::{DeviceReading, ReadingBatch};

    #[test]
    fn counts_match_the_decoded_batch() {
        for n in [0usize, 1, 2, 17, 1000] {
            let batch = ReadingBatch {
                readings: (0..n)
                    .map(|i| DeviceReading {
                        device_id: format!("d{i}"),
                        stream: if i % 3 == 0 {
                            String::new()
                        } else {
                            "s".into()
                        },
                        value: Some(i as f64),
                        event_time_ms: Some(i as i64),
                        labels: Default::default(),
                    })
                    .collect(),
            };
            let bytes = batch.encode_to_vec();
            assert_eq!(batch_readings(&bytes), Some(n));
        }
        // Empty readings: two bytes each.
        let empty = [0x0a, 0x00].repeat(5);
        assert_eq!(batch_readings(&empty), Some(5));
        // Unknown fields are skipped, not counted.
        assert_eq!(batch_readings(&[0x10, 0x96, 0x01, 0x0a, 0x00]), Some(1));
        // Broken framing: a length past the end, a truncated varint.
        assert_eq!(batch_readings(&[0x0a, 0x05, 0x00]), None);
        assert_eq!(batch_readings(&[0x10, 0x96]), None);
    }
}
