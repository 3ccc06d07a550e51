//! `kafka.undecodable`: what the service does with a record batch its
//! consumer cannot decompress (a broken producer, a codec this build
//! lacks). Such a batch stops its partition: librdkafka reports it at the
//! batch's first offset and fetches it again for ever.

use serde::Deserialize;

/// What to do with an undecodable record batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Undecodable {
    /// Stop the partition there (the default): `/readyz` turns red naming
    /// the error and how to get past it; nothing is skipped unasked.
    #[default]
    Stop,
    /// Skip the batch's offsets, recording them as one dead letter (reason
    /// `undecodable_batch`, counted in `fleetdp_dead_letters_total`);
    /// everything read before it and after it is handled as usual.
    Skip,
}
