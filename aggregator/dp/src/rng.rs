//! Keyed randomness: the noise of a window comes from a ChaCha20 stream whose
//! seed is a keyed BLAKE3 hash of (release key, stream, partition, window seq,
//! digest of the window's accepted values).
//!
//! Privacy argument: a retry, a restart or a zombie instance that releases
//! the same window draws the same bits and so publishes a bit-identical copy;
//! consumers can never average independent noisy copies of one window. A
//! window whose contents differ gets an unrelated stream. Without the key the
//! seed is unpredictable, so the noise is as good as fresh randomness.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::fmt;

/// The secret that keys all noise. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ReleaseKey([u8; 32]);

impl fmt::Debug for ReleaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReleaseKey(<secret>)")
    }
}

/// Why a key cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("release key must be 64 hex digits (32 bytes); got {0} characters")]
    Length(usize),
    #[error("release key is not hexadecimal")]
    NotHex,
}

impl ReleaseKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Parse 64 hex digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let t = text.trim();
        if t.len() != 64 {
            return Err(KeyError::Length(t.len()));
        }
        let mut out = [0u8; 32];
        for (i, chunk) in t.as_bytes().chunks(2).enumerate() {
            let s = std::str::from_utf8(chunk).map_err(|_| KeyError::NotHex)?;
            out[i] = u8::from_str_radix(s, 16).map_err(|_| KeyError::NotHex)?;
        }
        Ok(Self(out))
    }

    /// A fresh random key from the operating system (demo mode only).
    pub fn ephemeral() -> Self {
        use rand::RngCore;
        let mut b = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut b);
        Self(b)
    }

    /// Hex form, for writing a newly generated key file.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Which window the noise is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowId<'a> {
    pub stream: &'a str,
    pub partition: i32,
    pub seq: u64,
}

/// BLAKE3 digest of a window's accepted values, in order.
pub fn window_digest(values: &[i64]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&(values.len() as u64).to_le_bytes());
    // The same bytes in 8 KiB pieces (BLAKE3 does not depend on how its
    // input is split): a call per value cost ~20 ns each.
    let mut buf = [0u8; 8192];
    for chunk in values.chunks(buf.len() / 8) {
        for (b, v) in buf.chunks_exact_mut(8).zip(chunk) {
            b.copy_from_slice(&v.to_le_bytes());
        }
        h.update(&buf[..chunk.len() * 8]);
    }
    *h.finalize().as_bytes()
}

/// The noise generator of one window.
pub fn window_rng(key: &ReleaseKey, window: WindowId<'_>, digest: &[u8; 32]) -> ChaCha20Rng {
    keyed_rng(b"fleetdp/window-noise/v1", key, window, digest)
}

/// The generator of a window's running-total step: keyed like
/// [`window_rng`] but in its own domain, so the two never share bits.
pub fn running_rng(key: &ReleaseKey, window: WindowId<'_>, digest: &[u8; 32]) -> ChaCha20Rng {
    keyed_rng(b"fleetdp/running-noise/v1", key, window, digest)
}

fn keyed_rng(
    domain: &[u8],
    key: &ReleaseKey,
    window: WindowId<'_>,
    digest: &[u8; 32],
) -> ChaCha20Rng {
    let mut h = blake3::Hasher::new_keyed(&key.0);
    h.update(domain);
    h.update(&(window.stream.len() as u64).to_le_bytes());
    h.update(window.stream.as_bytes());
    h.update(&window.partition.to_le_bytes());
    h.update(&window.seq.to_le_bytes());
    h.update(digest);
    ChaCha20Rng::from_seed(*h.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn same_inputs_same_bits_and_any_change_differs() {
        let key = ReleaseKey::from_bytes([7; 32]);
        let w = WindowId {
            stream: "s",
            partition: 0,
            seq: 3,
        };
        let d = window_digest(&[1, 2, 3]);
        let a = window_rng(&key, w, &d).next_u64();
        assert_eq!(a, window_rng(&key, w, &d).next_u64());
        let variants = [
            window_rng(&ReleaseKey::from_bytes([8; 32]), w, &d).next_u64(),
            window_rng(&key, WindowId { seq: 4, ..w }, &d).next_u64(),
            window_rng(&key, WindowId { partition: 1, ..w }, &d).next_u64(),
            window_rng(&key, WindowId { stream: "t", ..w }, &d).next_u64(),
            window_rng(&key, w, &window_digest(&[1, 2, 4])).next_u64(),
        ];
        assert!(variants.iter().all(|&v| v != a));
        // Running totals draw from their own domain.
        assert_ne!(running_rng(&key, w, &d).next_u64(), a);
    }

    /// The digest is the hash of the count and each value in order, however
    /// the implementation feeds it (the noise of every window depends on it).
    #[test]
    fn digest_is_the_hash_of_count_and_values() {
        for n in [0usize, 1, 1023, 1024, 1025, 5000] {
            let values: Vec<i64> = (0..n as i64).map(|i| i * 7919 - 40_000).collect();
            let mut h = blake3::Hasher::new();
            h.update(&(n as u64).to_le_bytes());
            for v in &values {
                h.update(&v.to_le_bytes());
            }
            assert_eq!(window_digest(&values), *h.finalize().as_bytes(), "n = {n}");
        }
    }

    #[test]
    fn hex_keys_round_trip_and_are_not_printed() {
        let k = ReleaseKey::ephemeral();
        assert_eq!(ReleaseKey::from_hex(&k.to_hex()).unwrap(), k);
        assert_eq!(ReleaseKey::from_hex("abc"), Err(KeyError::Length(3)));
        assert_eq!(
            ReleaseKey::from_hex(&"zz".repeat(32)),
            Err(KeyError::NotHex)
        );
        assert!(!format!("{k:?}").contains(&k.to_hex()[..8]));
    }
}
