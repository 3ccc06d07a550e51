//! The parts of an OTLP/JSON request counted while it is parsed, against
//! the bounds `otlp_scan.rs` sets for the Protobuf form: a list stops at
//! its first element past a bound (the request's resources, scopes,
//! metrics and points in all; one resource's or point's attributes), so
//! nothing beyond it is built. Scalars FleetDP reads are a number or a
//! string, nothing larger.

use crate::otlp_scan::{
    over, MAX_OTLP_ATTRIBUTES, MAX_OTLP_METRICS, MAX_OTLP_POINTS, MAX_OTLP_RESOURCES,
    MAX_OTLP_SCOPES,
};
use crate::Rejection;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

/// Which bound a [`Counted`] list is counted against.
pub(super) const RESOURCES: usize = 0;
pub(super) const SCOPES: usize = 1;
pub(super) const METRICS: usize = 2;
pub(super) const POINTS: usize = 3;
pub(super) const RESOURCE_ATTRIBUTES: usize = 4;
pub(super) const POINT_ATTRIBUTES: usize = 5;

/// Each bound's name in a rejection and its value; the first four are
/// totals over the request, the attributes' per list.
const BOUNDS: [(&str, usize); 6] = [
    ("resources", MAX_OTLP_RESOURCES),
    ("scopes", MAX_OTLP_SCOPES),
    ("metrics", MAX_OTLP_METRICS),
    ("data points", MAX_OTLP_POINTS),
    ("attributes on one resource", MAX_OTLP_ATTRIBUTES),
    ("attributes on one data point", MAX_OTLP_ATTRIBUTES),
];

thread_local! {
    /// The request's totals so far (this thread's parse).
    static TOTALS: Cell<[usize; 4]> = const { Cell::new([0; 4]) };
    /// The bound a parse stopped at.
    static OVER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Starts a request's count.
pub(super) fn start() {
    TOTALS.with(|t| t.set([0; 4]));
    OVER.with(|o| o.set(None));
}

/// The bound the last parse stopped at, as its rejection.
pub(super) fn stopped() -> Option<Rejection> {
    OVER.with(|o| o.take())
        .map(|k| over(BOUNDS[k].0, BOUNDS[k].1))
}

/// One more element of a `K` list, `len` of them in it so far: within
/// its bound?
fn count<const K: usize>(len: usize) -> bool {
    let n = if K < 4 {
        TOTALS.with(|t| {
            let mut v = t.get();
            v[K] += 1;
            t.set(v);
            v[K]
        })
    } else {
        len + 1
    };
    let within = n <= BOUNDS[K].1;
    if !within {
        OVER.with(|o| o.set(Some(K)));
    }
    within
}

/// A list counted against bound `K` as it is parsed.
pub(super) struct Counted<T, const K: usize>(pub(super) Vec<T>);

impl<T, const K: usize> Default for Counted<T, K> {
    fn default() -> Self {
        Counted(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>, const K: usize> Deserialize<'de> for Counted<T, K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct List<T, const K: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const K: usize> Visitor<'de> for List<T, K> {
            type Value = Counted<T, K>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element()? {
                    if !count::<K>(out.len()) {
                        return Err(de::Error::custom(format!("more than {}", BOUNDS[K].0)));
                    }
                    out.push(x);
                }
                Ok(Counted(out))
            }
        }
        d.deserialize_seq(List::<T, K>(PhantomData))
    }
}

/// A scalar field: a number, or a string (protobuf's JSON writes 64-bit
/// integers and NaN as strings).
pub(super) enum JsonScalar {
    Number(serde_json::Number),
    String(String),
}

impl<'de> Deserialize<'de> for JsonScalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Scalar;
        impl Visitor<'_> for Scalar {
            type Value = JsonScalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_u64<E>(self, v: u64) -> Result<JsonScalar, E> {
                Ok(JsonScalar::Number(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<JsonScalar, E> {
                Ok(JsonScalar::Number(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<JsonScalar, E> {
                serde_json::Number::from_f64(v)
                    .map(JsonScalar::Number)
                    .ok_or_else(|| E::custom("a number that is not finite"))
            }
            fn visit_str<E>(self, v: &str) -> Result<JsonScalar, E> {
                Ok(JsonScalar::String(v.to_string()))
            }
        }
        d.deserialize_any(Scalar)
    }
}
