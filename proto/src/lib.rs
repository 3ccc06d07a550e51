//! FleetDP's wire messages: device readings in, window releases out
//! (`proto/fleetdp.proto`, compiled at build time without a system protoc),
//! and the OTLP metrics messages releases are also written as.

pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/fleetdp.v1.rs"));
}

/// OpenTelemetry's metrics messages that FleetDP writes
/// (`proto/otlp_metrics.proto`: OTLP's field numbers and names).
pub mod otlp {
    include!(concat!(env!("OUT_DIR"), "/fleetdp.otlp.rs"));
}

pub use v1::{
    DeviceReading, FleetRelease, FleetStatistic, Guarantee, ReadingBatch, Statistic, WindowRelease,
};

/// The Kafka record key of a window release: `<stream>/<partition>/<window_seq>`
/// (not the release key, the secret that keys the noise).
pub fn window_record_key(stream: &str, partition: i32, seq: u64) -> String {
    format!("{stream}/{partition}/{seq}")
}

/// The Kafka record key of a fleet-wide release: `<stream>/fleet/<window_seq>`.
pub fn fleet_record_key(stream: &str, seq: u64) -> String {
    format!("{stream}/fleet/{seq}")
}

/// Parse a window release's record key back into `(stream, partition, window_seq)`.
/// Stream names may contain `/`; the last two fields are numbers.
pub fn parse_window_record_key(key: &str) -> Option<(String, i32, u64)> {
    let mut parts = key.rsplitn(3, '/');
    let seq = parts.next()?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    let stream = parts.next()?;
    (!stream.is_empty()).then(|| (stream.to_string(), partition, seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn window_record_keys_round_trip() {
        let k = window_record_key("fleet/cabin_temp_c", 3, 42);
        assert_eq!(
            parse_window_record_key(&k),
            Some(("fleet/cabin_temp_c".into(), 3, 42))
        );
        assert_eq!(parse_window_record_key("x/1"), None);
        assert_eq!(parse_window_record_key("/1/2"), None);
        // A fleet-wide release's key is not a window release's.
        assert_eq!(parse_window_record_key(&fleet_record_key("s", 4)), None);
    }

    #[test]
    fn messages_encode_and_decode() {
        let r = DeviceReading {
            device_id: "car-1".into(),
            stream: "speed".into(),
            value: Some(12.5),
            event_time_ms: Some(1_700_000_000_000),
            labels: Default::default(),
        };
        let b = ReadingBatch {
            readings: vec![r.clone(), r.clone()],
        };
        assert_eq!(ReadingBatch::decode(&*b.encode_to_vec()).unwrap(), b);
        assert_eq!(DeviceReading::decode(&*r.encode_to_vec()).unwrap(), r);
    }
}
