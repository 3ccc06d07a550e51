//! What a document holds at the end of one of the mapping's paths, as the
//! mapping reads it ([`crate::Mapping`]): nothing, a string, an integer, a
//! finite float, or something else (a boolean, a record, a list). A JSON
//! document's leaf is found by walking its value; a binary reader that
//! knows the paths in advance (`avro_reader`'s projection) writes the
//! leaves as it walks the bytes, building no value at all. Both read the
//! same way: a leaf is what the JSON value at the path would be, so the
//! mapping's verdicts cannot depend on how the message was read.

use serde_json::Value;

/// A path's end in one document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Leaf<'a> {
    /// Absent, or `null`: the mapping treats them alike.
    Null,
    Str(&'a str),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer above `i64::MAX`.
    Big(u64),
    /// A finite float (written with a fraction or an exponent in JSON).
    Float(f64),
    /// A boolean, an object or an array: never a device id, a time, a
    /// label or a value.
    Other,
}

impl<'a> Leaf<'a> {
    /// The leaf of a JSON value found at a path (`None`: absent).
    pub(crate) fn of(v: Option<&'a Value>) -> Leaf<'a> {
        match v {
            None | Some(Value::Null) => Leaf::Null,
            Some(Value::String(s)) => Leaf::Str(s),
            Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Leaf::Int(i),
                (None, Some(u)) => Leaf::Big(u),
                // Without `arbitrary_precision` every other number is an f64.
                (None, None) => Leaf::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Some(_) => Leaf::Other,
        }
    }

    /// A float as a reader converts it to JSON (`project::float`): NaN and
    /// ±∞ are spelled as strings, so the mapping refuses them as values.
    pub(crate) fn float(f: f64) -> Leaf<'static> {
        spelled(f).map_or(Leaf::Float(f), Leaf::Str)
    }

    /// An integer's decimal text (device ids and labels may be numbers).
    pub(crate) fn integer_text(self) -> Option<String> {
        match self {
            Leaf::Int(i) => Some(i.to_string()),
            Leaf::Big(u) => Some(u.to_string()),
            _ => None,
        }
    }

    /// A number as `f64` (`None`: not a number).
    pub(crate) fn as_f64(self) -> Option<f64> {
        match self {
            Leaf::Int(i) => Some(i as f64),
            Leaf::Big(u) => Some(u as f64),
            Leaf::Float(f) => Some(f),
            _ => None,
        }
    }

    /// An integer that fits `i64` (`None`: anything else).
    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Leaf::Int(i) => Some(i),
            _ => None,
        }
    }
}

/// How a float JSON cannot write is spelled (`None`: a finite one).
pub(crate) fn spelled(f: f64) -> Option<&'static str> {
    match f {
        _ if f.is_finite() => None,
        _ if f.is_nan() => Some("nan"),
        _ if f > 0.0 => Some("inf"),
        _ => Some("-inf"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A leaf reads as its JSON value does (serde_json's own accessors).
    #[test]
    fn a_leaf_reads_as_its_json_value() {
        let values = [
            json!(null),
            json!("x"),
            json!(""),
            json!(0),
            json!(-7),
            json!(i64::MAX),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(i64::MAX as u64 + 1),
            json!(2100.0),
            json!(-0.5),
            json!(1e300),
            json!(true),
            json!([1]),
            json!({"a": 1}),
        ];
        for v in &values {
            let l = Leaf::of(Some(v));
            let n = v.as_number();
            assert_eq!(l.as_f64(), n.and_then(|n| n.as_f64()), "{v}");
            assert_eq!(l.as_i64(), n.and_then(|n| n.as_i64()), "{v}");
            let integer = n.filter(|n| n.is_i64() || n.is_u64());
            assert_eq!(l.integer_text(), integer.map(|n| n.to_string()), "{v}");
            assert_eq!(matches!(l, Leaf::Str(_)), v.is_string(), "{v}");
            assert_eq!(matches!(l, Leaf::Null), v.is_null(), "{v}");
        }
        assert_eq!(Leaf::of(None), Leaf::Null);
        for f in [
            1.5,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
        ] {
            let json = crate::project::float(f);
            assert_eq!(
                format!("{:?}", Leaf::float(f)),
                format!("{:?}", Leaf::of(Some(&json)))
            );
        }
    }
}
