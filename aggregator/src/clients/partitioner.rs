//! Which input partition a device's readings belong on. The per-device caps
//! (`k` per window, `W` per horizon) are kept per (stream, partition), so
//! they bound a device only if all its readings arrive on one partition: the
//! producers key messages by `device_id`, and the service checks each
//! reading against the producers' partitioner, dead-lettering readings that
//! landed elsewhere (`wrong_partition`) instead of counting them twice.

use serde::Deserialize;

/// The producers' partitioner for keyed messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Partitioner {
    /// Kafka's Java default (`murmur2(key) & 0x7fffffff) % n`); librdkafka's
    /// `partitioner=murmur2_random`.
    #[default]
    Murmur2,
    /// librdkafka's default `consistent_random`: `crc32(key) % n`.
    Crc32,
    /// No check. Only safe when something else guarantees that a device
    /// never appears on two partitions.
    None,
}

impl Partitioner {
    /// The partition of `key` among `partitions`, or `None` when unchecked.
    pub fn partition(self, key: &[u8], partitions: i32) -> Option<i32> {
        debug_assert!(partitions > 0);
        let h = match self {
            Partitioner::Murmur2 => (murmur2(key) & 0x7fff_ffff) as u64,
            Partitioner::Crc32 => crc32fast::hash(key) as u64,
            Partitioner::None => return None,
        };
        Some((h % partitions as u64) as i32)
    }

    /// The librdkafka `partitioner` property that produces the same placement.
    pub fn librdkafka_name(self) -> Option<&'static str> {
        match self {
            Partitioner::Murmur2 => Some("murmur2_random"),
            Partitioner::Crc32 => Some("consistent_random"),
            Partitioner::None => None,
        }
    }
}

/// Kafka's 32-bit murmur2 (seed 0x9747b28c), as in the Java client's `Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_clients_vectors() {
        // Apache Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (k, want) in cases {
            assert_eq!(murmur2(k) as i32, want, "{}", String::from_utf8_lossy(k));
        }
    }

    #[test]
    fn crc32_is_the_ieee_checksum() {
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            Partitioner::Crc32.partition(b"123456789", 7),
            Some((0xCBF4_3926u32 % 7) as i32)
        );
        assert_eq!(Partitioner::None.partition(b"x", 3), None);
    }
}
