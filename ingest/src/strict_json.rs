//! A JSON value parsed as `serde_json::Value` is, except that an object
//! naming a key twice is refused at any depth (JSON leaves duplicates
//! undefined; `Value` keeps the last, so a document could carry one device
//! id to a reader that takes the first and another to FleetDP). Native
//! readings refuse them the same way (`crate::json`).

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Deserialize a [`Value`] refusing duplicate object keys.
pub(crate) struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A [`Value`] deserialized by [`Strict`] (for lists of documents).
pub(crate) struct StrictValue(pub Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Strict.deserialize(d).map(StrictValue)
    }
}

/// The error for key `k` named twice in one object.
pub(crate) fn duplicate<E: de::Error>(k: &str) -> E {
    let shown: String = k.chars().take(64).collect();
    E::custom(format!("duplicate key {shown:?} in one object"))
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(duplicate(&k));
            }
            let v = map.next_value_seed(Strict)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Value, String> {
        let mut de = serde_json::Deserializer::from_str(text);
        Strict.deserialize(&mut de).map_err(|e| e.to_string())
    }

    #[test]
    fn values_parse_as_serde_json_parses_them() {
        for t in [
            r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}]}"#,
            "[]",
            "7",
            "\"s\"",
        ] {
            assert_eq!(
                parse(t).unwrap(),
                serde_json::from_str::<Value>(t).unwrap(),
                "{t}"
            );
        }
    }

    #[test]
    fn a_key_named_twice_is_refused_at_any_depth() {
        for t in [r#"{"vin":"a","vin":"b"}"#, r#"{"x":[{"ts":1,"ts":2}]}"#] {
            let e = parse(t).unwrap_err();
            assert!(e.contains("duplicate key"), "{t}: {e}");
        }
        assert!(parse(r#"{"a":{"k":1},"b":{"k":2}}"#).is_ok());
    }

    /// A mapped document with a key twice is refused naming it, in a list
    /// too; nesting past the limit says so (it read "Syntax error").
    #[test]
    fn mapped_documents_refuse_duplicates_and_name_the_depth_limit() {
        for t in [r#"{"vin":"a","vin":"b"}"#, r#"[{"ts":1},{"ts":1,"ts":2}]"#] {
            let e = crate::mapped::parse_docs(t.as_bytes(), 10).unwrap_err();
            assert!(e.to_string().contains("duplicate key"), "{t}: {e}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let e = crate::mapped::parse_docs(deep.as_bytes(), 10).unwrap_err();
        assert!(
            e.to_string().contains("nested deeper than 128 levels"),
            "{e}"
        );
    }
}
