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
use std::sync::Arc;
use zeroize::Zeroizing;

/// The secret that keys all noise. Never printed; its bytes are zeroed when
/// the last handle drops, and clones share them (no copy per release).
#[derive(Clone, PartialEq, Eq)]
pub struct ReleaseKey(Arc<Zeroizing<[u8; 32]>>);

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
    #[error("release key is not hexadecimal (only 0-9, a-f, A-F)")]
    NotHex,
    #[error("release key is degenerate ({0}): anyone could guess it and recompute the noise; create one with `fleetdp keygen`")]
    Weak(&'static str),
}

/// Keys that look made by hand, refused whatever the checks below say.
const KNOWN_WEAK: &[&str] = &[
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    "deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef",
];

impl ReleaseKey {
    /// A key from bytes as they are (tests and fixed fixtures; production
    /// keys go through [`ReleaseKey::from_hex`]).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(Arc::new(Zeroizing::new(bytes)))
    }

    /// Parse exactly 64 hex digits (surrounding white space ignored) and
    /// refuse degenerate keys: all bytes equal, fewer than 16 distinct
    /// bytes, a repeated 4-byte word, or a known hand-made pattern. A key
    /// from `fleetdp keygen` fails these with probability below 2⁻²⁰.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let t = text.trim();
        if t.len() != 64 {
            return Err(KeyError::Length(t.chars().count()));
        }
        if !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyError::NotHex);
        }
        let mut out = Zeroizing::new([0u8; 32]);
        for (i, pair) in t.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16).expect("checked") as u8;
            out[i] = digit(pair[0]) << 4 | digit(pair[1]);
        }
        if let Some(why) = weakness(&out, t) {
            return Err(KeyError::Weak(why));
        }
        Ok(Self(Arc::new(out)))
    }

    /// A fresh random key from the operating system.
    pub fn ephemeral() -> Self {
        use rand::RngCore;
        let mut b = Zeroizing::new([0u8; 32]);
        rand::rngs::OsRng.fill_bytes(b.as_mut());
        Self(Arc::new(b))
    }

    /// The key's public id: 16 hex digits of BLAKE3 in a domain of its
    /// own (one-way: it tells keys apart and says nothing of the noise).
    /// The state records it, so a lane is never resumed under another key
    /// by accident (docs/DESIGN.md §6).
    pub fn id(&self) -> String {
        let d = blake3::derive_key("fleetdp 2026 release key id v1", self.0.as_slice());
        d[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Hex form, for writing a newly generated key file.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn weakness(b: &[u8; 32], hex: &str) -> Option<&'static str> {
    if b.iter().all(|x| *x == b[0]) {
        return Some("all bytes equal");
    }
    let mut seen = [false; 256];
    b.iter().for_each(|x| seen[*x as usize] = true);
    if seen.iter().filter(|s| **s).count() < 16 {
        return Some("fewer than 16 distinct bytes");
    }
    let words: Vec<&[u8]> = b.chunks(4).collect();
    if (0..words.len()).any(|i| words[i + 1..].contains(&words[i])) {
        return Some("a repeated 4-byte word");
    }
    if KNOWN_WEAK.iter().any(|k| k.eq_ignore_ascii_case(hex)) {
        return Some("a well-known pattern");
    }
    None
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

/// The generator of a private-key selection (`seq`: the horizon; digest:
/// of the counts), in its own domain.
pub fn selection_rng(key: &ReleaseKey, id: WindowId<'_>, digest: &[u8; 32]) -> ChaCha20Rng {
    keyed_rng(b"fleetdp/key-selection/v1", key, id, digest)
}

/// The generator of a device-limit alarm's threshold noise (`id.seq`: the
/// instance's horizon), drawn once per (lane, horizon), in its own domain.
pub fn alarm_threshold_rng(key: &ReleaseKey, id: WindowId<'_>) -> ChaCha20Rng {
    keyed_rng(b"fleetdp/device-alarm-threshold/v1", key, id, &[0; 32])
}

/// The generator of one device-limit alarm check (`id.seq`: the window
/// closed; digest: of the horizon and the count), in its own domain.
pub fn alarm_check_rng(key: &ReleaseKey, id: WindowId<'_>, digest: &[u8; 32]) -> ChaCha20Rng {
    keyed_rng(b"fleetdp/device-alarm-check/v1", key, id, digest)
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
    fn a_key_id_is_stable_short_and_differs_between_keys() {
        let a = ReleaseKey::from_bytes([7; 32]);
        assert_eq!(a.id(), a.id());
        assert_eq!(a.id().len(), 16);
        assert!(a.id().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a.id(), ReleaseKey::from_bytes([8; 32]).id());
        // Not a prefix of the key itself, nor of its plain BLAKE3 hash.
        assert!(!a.to_hex().starts_with(&a.id()));
        assert!(!blake3::hash(&[7; 32]).to_hex().starts_with(&a.id()));
    }

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

    #[test]
    fn degenerate_and_malformed_keys_are_refused() {
        let plus = "+f".repeat(32);
        for (text, want) in [
            ("0".repeat(64), "all bytes equal"),
            ("f".repeat(64), "all bytes equal"),
            ("deadbeef".repeat(8), "a repeated 4-byte word"),
            ("0123456789abcdef".repeat(4), "fewer than 16 distinct bytes"),
            ("0011".repeat(16), "all bytes equal"),
        ] {
            let got = ReleaseKey::from_hex(&text);
            assert!(
                matches!(got, Err(KeyError::Weak(_))),
                "{text}: {got:?} (expected {want})"
            );
        }
        assert_eq!(ReleaseKey::from_hex(&plus), Err(KeyError::NotHex));
        assert_eq!(
            ReleaseKey::from_hex(&format!("{}g", "a".repeat(63))),
            Err(KeyError::NotHex)
        );
        assert!(matches!(
            ReleaseKey::from_hex(&"a".repeat(65)),
            Err(KeyError::Length(65))
        ));
        // Random keys pass, in either case.
        for _ in 0..1000 {
            let k = ReleaseKey::ephemeral();
            assert_eq!(ReleaseKey::from_hex(&k.to_hex().to_uppercase()).unwrap(), k);
        }
    }
}
