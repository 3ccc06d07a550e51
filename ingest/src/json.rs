//! JSON payloads in one pass, with the reading count bounded while parsing:
//! a reading, a list of readings, or `{"readings": [...]}`. A payload with
//! more readings than allowed is refused at the first reading too many,
//! before the rest is parsed or kept (a 1 MB message of `{}`s would
//! otherwise become hundreds of thousands of readings in memory first).

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::cell::Cell;
use std::fmt;

/// One reading's fields as sent (unknown fields are ignored).
#[derive(Deserialize, Default)]
pub(crate) struct JsonReading {
    pub device_id: Option<String>,
    pub stream: Option<String>,
    pub value: Option<serde_json::Value>,
    pub event_time_ms: Option<i64>,
    /// Dimension values (`{"firmware": "4.2"}`).
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

/// Why a payload was refused.
pub(crate) enum JsonError {
    /// More than the allowed readings (parsing stopped there).
    TooMany,
    Syntax(serde_json::Error),
}

/// Parse `payload` into at most `max` readings.
pub(crate) fn parse(payload: &[u8], max: usize) -> Result<Vec<JsonReading>, JsonError> {
    let too_many = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(payload);
    let result = Payload {
        max,
        too_many: &too_many,
    }
    .deserialize(&mut de)
    .and_then(|r| de.end().map(|()| r));
    match result {
        Ok(r) => Ok(r),
        Err(_) if too_many.get() => Err(JsonError::TooMany),
        Err(e) => Err(JsonError::Syntax(e)),
    }
}

#[derive(Clone, Copy)]
struct Payload<'a> {
    max: usize,
    too_many: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Payload<'_> {
    type Value = Vec<JsonReading>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Payload<'_> {
    type Value = Vec<JsonReading>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a reading object, an array of readings or {\"readings\": [...]}")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        bounded_seq(seq, self.max, self.too_many)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut one = JsonReading::default();
        let mut list = None;
        // The fields read, each at most once (a key named twice is refused:
        // another reader may take the first where FleetDP took the last).
        let mut seen = 0u8;
        let mut first = |bit: u8, key: &str| {
            if seen & bit != 0 {
                return Err(crate::strict_json::duplicate::<A::Error>(key));
            }
            seen |= bit;
            Ok(())
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "readings" => {
                    first(1, &key)?;
                    list = Some(map.next_value_seed(List(self))?)
                }
                "device_id" => {
                    first(2, &key)?;
                    one.device_id = map.next_value()?
                }
                "stream" => {
                    first(4, &key)?;
                    one.stream = map.next_value()?
                }
                "value" => {
                    first(8, &key)?;
                    one.value = map.next_value()?
                }
                "event_time_ms" => {
                    first(16, &key)?;
                    one.event_time_ms = map.next_value()?
                }
                "labels" => {
                    first(32, &key)?;
                    one.labels = map.next_value()?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // An object with `readings` is a batch (its other fields are
        // ignored); any other object is one reading.
        Ok(list.unwrap_or_else(|| vec![one]))
    }
}

/// The elements of `seq`, at most `max`: at the first one more, parsing
/// stops with an error and `too_many` is set (nothing past it is read).
pub(crate) fn bounded_seq<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    mut seq: A,
    max: usize,
    too_many: &Cell<bool>,
) -> Result<Vec<T>, A::Error> {
    let mut out = Vec::new();
    while let Some(x) = seq.next_element::<T>()? {
        if out.len() == max {
            too_many.set(true);
            return Err(de::Error::custom("too many elements"));
        }
        out.push(x);
    }
    Ok(out)
}

/// The `readings` array of a batch object.
struct List<'a>(Payload<'a>);

impl<'de> DeserializeSeed<'de> for List<'_> {
    type Value = Vec<JsonReading>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_shapes_parse() {
        let one = parse(
            br#"{"device_id":"a","stream":"s","value":1.5,"event_time_ms":7,"x":[1]}"#,
            10,
        )
        .ok()
        .unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].device_id.as_deref(), Some("a"));
        assert_eq!(one[0].event_time_ms, Some(7));
        let list = parse(br#"[{"device_id":"a"},{"device_id":"b"}]"#, 10)
            .ok()
            .unwrap();
        assert_eq!(list.len(), 2);
        let batch = parse(br#"{"source":"x","readings":[{"device_id":"a"}]}"#, 10)
            .ok()
            .unwrap();
        assert_eq!(batch[0].device_id.as_deref(), Some("a"));
        assert!(matches!(parse(b"[] x", 10), Err(JsonError::Syntax(_))));
        assert!(matches!(parse(b"7", 10), Err(JsonError::Syntax(_))));
    }

    /// The count is checked as readings arrive: a payload far over the
    /// limit is refused as too many even when its end is malformed.
    #[test]
    fn too_many_stops_at_the_first_extra_reading() {
        assert!(matches!(parse(b"[{},{},{}]", 3), Ok(v) if v.len() == 3));
        assert!(matches!(
            parse(b"[{},{},{},{}]", 3),
            Err(JsonError::TooMany)
        ));
        assert!(matches!(
            parse(br#"{"readings":[{},{},{},{}, oops"#, 3),
            Err(JsonError::TooMany)
        ));
    }

    #[test]
    fn a_field_named_twice_is_refused() {
        for t in [
            r#"{"device_id":"a","device_id":"b"}"#,
            r#"[{"value":1,"value":2}]"#,
            r#"{"readings":[],"readings":[]}"#,
        ] {
            match parse(t.as_bytes(), 10) {
                Err(JsonError::Syntax(e)) => {
                    assert!(e.to_string().starts_with("duplicate"), "{t}: {e}")
                }
                _ => panic!("{t}: accepted"),
            }
        }
        assert!(parse(br#"{"x":1,"x":2,"device_id":"a"}"#, 10).is_ok());
    }
}
