//! The keys record kind ([`KEYS`]): a private-key table's bindings, per
//! (declared stream, partition), key `stream/partition/keys`, JSON. Written
//! and acknowledged before anything routed by them is released, so a
//! restart never selects a horizon's keys again. Its encoding and decoding.
//!
//! [`KEYS`]: super::KEYS

/// A key table's record as written.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeysRecord {
    pub stream: String,
    pub partition: i32,
    #[serde(flatten)]
    pub bindings: crate::engine::keys::Bindings,
}

impl KeysRecord {
    /// Its key: `stream/partition/keys`.
    pub(super) fn key(&self) -> String {
        format!("{}/{}/keys", self.stream, self.partition)
    }

    pub(super) fn encode(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self)
    }

    /// A keys record read back (`None`: it does not decode).
    pub(super) fn decode(payload: &[u8]) -> Option<Self> {
        serde_json::from_slice(payload).ok()
    }
}
