//! The output topic's record kinds, as every reader tells them apart
//! (restore, the fleet task, `fleetdp tail`): window releases (no
//! [`RECORD_KIND`] header) and fleet-wide releases ([`FLEET`]).

use super::{FLEET, RECORD_KIND};
use crate::clients::kafka::{decode_fleet, decode_release, header, CONTENT_TYPE};
use rdkafka::message::Message;

/// Whether an output-topic message is a fleet-wide release.
pub fn is_fleet<M: Message>(msg: &M) -> bool {
    header(msg, RECORD_KIND) == Some(FLEET)
}

/// A record of the output topic.
#[derive(Debug, Clone)]
pub enum OutputRecord {
    Window(proto::WindowRelease),
    Fleet(proto::FleetRelease),
}

/// An output-topic message decoded by its kind ([`RECORD_KIND`]) and
/// content type; `None` without a payload. A fleet record read as a window
/// release would decode (JSON ignores unknown fields) into a wrong one, so
/// every reader of the output topic decodes here.
pub fn decode_output<M: Message>(msg: &M) -> Option<anyhow::Result<OutputRecord>> {
    let payload = msg.payload()?;
    let ct = header(msg, CONTENT_TYPE);
    Some(if is_fleet(msg) {
        decode_fleet(payload, ct).map(OutputRecord::Fleet)
    } else {
        decode_release(payload, ct).map(OutputRecord::Window)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedHeaders};

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
