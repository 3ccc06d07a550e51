//! OTLP metrics requests (`otlp_proto`) read straight off their wire form:
//! one walk over the bytes finds the mapped metrics' points and builds
//! their readings, without building the request (`otlp.rs`'s types cost a
//! few allocations and reference counts per point). It answers only for a
//! request in the form encoders write: each singular field at most once,
//! each known field of its declared wire type, no groups. For anything
//! else, and for every request it would reject, it answers `None` and the
//! full decoder gives the verdict, so its readings are always the full
//! decoder's (tested side by side in `otlp_walk/tests.rs`). Unmapped
//! metrics are walked too: a request the full decoder refuses anywhere is
//! never read here. The walk counts the parts `otlp_scan.rs` bounds, as it
//! counts them, and leaves a request over a bound to it: nothing beyond a
//! bound is built.
//! The walk only decides where fields are: no sensitivity depends on it.

use crate::labels::Labels;
use crate::otlp::{OtlpMapping, ScalarRef, DELTA};
use crate::otlp_scan::{
    MAX_OTLP_ATTRIBUTES, MAX_OTLP_METRICS, MAX_OTLP_POINTS, MAX_OTLP_RESOURCES, MAX_OTLP_SCOPES,
};
use crate::{Found, MAX_LABELS};

/// One field's payload by wire type.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32,
    Bytes(&'a [u8]),
}

/// A varint as prost reads it: at most ten bytes, the tenth 0 or 1.
#[inline]
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        if i == 9 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The first `n` bytes of `buf`, taken off it.
fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (buf.get(..n)?, buf.get(n..)?);
    *buf = rest;
    Some(head)
}

/// The next field of a message body: its number and payload; `None` for
/// anything prost would refuse or that the walk leaves to it (groups).
#[inline]
fn field<'a>(buf: &mut &'a [u8]) -> Option<(u32, Wire<'a>)> {
    let key = u32::try_from(varint(buf)?).ok()?;
    let number = key >> 3;
    if number == 0 {
        return None;
    }
    let wire = match key & 7 {
        0 => Wire::Varint(varint(buf)?),
        1 => Wire::Fixed64(u64::from_le_bytes(take(buf, 8)?.try_into().ok()?)),
        2 => {
            let len = usize::try_from(varint(buf)?).ok()?;
            Wire::Bytes(take(buf, len)?)
        }
        5 => {
            take(buf, 4)?;
            Wire::Fixed32
        }
        _ => return None,
    };
    Some((number, wire))
}

/// Calls `f` on every field of `body`; `None` as soon as a field or `f`
/// says so.
fn each<'a>(mut body: &'a [u8], mut f: impl FnMut(u32, Wire<'a>) -> Option<()>) -> Option<()> {
    while !body.is_empty() {
        let (n, w) = field(&mut body)?;
        f(n, w)?;
    }
    Some(())
}

/// Counts one more part against its bound; `None` past it.
fn bounded(count: &mut usize, max: usize) -> Option<()> {
    *count += 1;
    (*count <= max).then_some(())
}

/// Sets `slot` once; a second value is left to the full decoder.
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    slot.replace(v).is_none().then_some(())
}

/// An `AnyValue`: its scalar, or `Some(None)` for none (arrays, maps and
/// bytes name nothing).
fn any_value(body: &[u8]) -> Option<Option<ScalarRef<'_>>> {
    let mut s = None;
    each(body, |n, w| {
        let v = match (n, w) {
            (1, Wire::Bytes(x)) => ScalarRef::Str(x),
            (2, Wire::Varint(x)) => ScalarRef::Bool(x != 0),
            (3, Wire::Varint(x)) => ScalarRef::Int(x as i64),
            (4, Wire::Fixed64(x)) => ScalarRef::Double(f64::from_bits(x)),
            (1..=4, _) => return None,
            _ => return Some(()),
        };
        once(&mut s, v)
    })?;
    Some(s)
}

/// A `KeyValue` into `slots`: the last attribute with key `keys[i]` sets
/// `slots[i]` to its scalar (or to none).
fn key_value<'a>(
    body: &'a [u8],
    keys: &[&[u8]],
    slots: &mut [Option<ScalarRef<'a>>],
) -> Option<()> {
    let (mut key, mut value) = (None, None);
    each(body, |n, w| match (n, w) {
        (1, Wire::Bytes(k)) => once(&mut key, k),
        (2, Wire::Bytes(v)) => once(&mut value, any_value(v)?),
        (1 | 2, _) => None,
        _ => Some(()),
    })?;
    let key = key.unwrap_or_default();
    for (k, slot) in keys.iter().zip(slots.iter_mut()) {
        if *k == key {
            *slot = value.flatten();
        }
    }
    Some(())
}

/// A resource's attributes (its field 1) into `slots`, which start empty.
fn resource_attributes<'a>(
    body: &'a [u8],
    keys: &[&[u8]],
    slots: &mut [Option<ScalarRef<'a>>],
) -> Option<()> {
    slots.fill(None);
    let mut count = 0;
    each(body, |n, w| match (n, w) {
        (1, Wire::Bytes(kv)) => {
            bounded(&mut count, MAX_OTLP_ATTRIBUTES)?;
            key_value(kv, keys, slots)
        }
        (1, _) => None,
        _ => Some(()),
    })
}

/// A data point's time and value, its attributes into `slots`.
struct Point {
    time_unix_nano: u64,
    value: Option<f64>,
}

fn point<'a>(body: &'a [u8], keys: &[&[u8]], slots: &mut [Option<ScalarRef<'a>>]) -> Option<Point> {
    let (mut time, mut value, mut count) = (None, None, 0);
    slots.fill(None);
    each(body, |n, w| match (n, w) {
        (7, Wire::Bytes(kv)) => {
            bounded(&mut count, MAX_OTLP_ATTRIBUTES)?;
            key_value(kv, keys, slots)
        }
        (3, Wire::Fixed64(t)) => once(&mut time, t),
        (4, Wire::Fixed64(d)) => once(&mut value, f64::from_bits(d)),
        (6, Wire::Fixed64(i)) => once(&mut value, i as i64 as f64),
        (3 | 4 | 6 | 7, _) => None,
        _ => Some(()),
    })?;
    Some(Point {
        time_unix_nano: time.unwrap_or(0),
        value,
    })
}

/// The device attribute and at most `MAX_LABELS` dimensions (the
/// configuration's bound; a mapping with more is left to the full decoder).
const SLOTS: usize = MAX_LABELS + 1;

/// The walk's state for one request.
struct Walk<'m, 'a> {
    mapping: &'a OtlpMapping,
    /// The device attribute, then each dimension's attribute.
    keys: &'m [&'a [u8]],
    /// Their values on the resource and on the point at hand (the first
    /// `keys.len()` slots).
    resource: [Option<ScalarRef<'a>>; SLOTS],
    point: [Option<ScalarRef<'a>>; SLOTS],
    /// Resources, scopes, metrics and points so far.
    counts: [usize; 4],
    out: Vec<Found<'a>>,
}

/// The walk's readings as the full decoder's, to compare (tests).
#[cfg(test)]
impl Found<'_> {
    fn into_raw(self) -> crate::RawReading {
        crate::RawReading {
            device_id: Some(self.device_id.into_owned()),
            stream: Some(self.stream.to_string()),
            value: self.value,
            event_time_ms: self.event_time_ms,
            labels: self.labels,
        }
    }
}

impl<'m, 'a> Walk<'m, 'a> {
    fn resource_metrics(&mut self, body: &'a [u8]) -> Option<()> {
        bounded(&mut self.counts[0], MAX_OTLP_RESOURCES)?;
        let mut resource = None;
        each(body, |n, w| match (n, w) {
            (1, Wire::Bytes(r)) => once(&mut resource, r),
            (2, Wire::Bytes(_)) => Some(()),
            (1 | 2, _) => None,
            _ => Some(()),
        })?;
        resource_attributes(resource.unwrap_or_default(), self.keys, &mut self.resource)?;
        each(body, |n, w| match (n, w) {
            (2, Wire::Bytes(sm)) => {
                bounded(&mut self.counts[1], MAX_OTLP_SCOPES)?;
                each(sm, |n, w| match (n, w) {
                    (2, Wire::Bytes(m)) => self.metric(m),
                    (2, _) => None,
                    _ => Some(()),
                })
            }
            _ => Some(()),
        })
    }

    fn metric(&mut self, body: &'a [u8]) -> Option<()> {
        bounded(&mut self.counts[2], MAX_OTLP_METRICS)?;
        let (mut name, mut data) = (None, None);
        each(body, |n, w| match (n, w) {
            (1, Wire::Bytes(x)) => once(&mut name, x),
            (5 | 7 | 9 | 10 | 11, Wire::Bytes(x)) => once(&mut data, (n, x)),
            (1 | 5 | 7 | 9 | 10 | 11, _) => None,
            _ => Some(()),
        })?;
        let name = name.unwrap_or_default();
        let stream = self
            .mapping
            .metrics
            .iter()
            .find(|(m, _)| m.as_bytes() == name)
            .map(|(_, s)| s.as_str());
        match data {
            Some((5, g)) => self.points(g, stream),
            Some((7, s)) => {
                let mut temporality = None;
                each(s, |n, w| match (n, w) {
                    (2, Wire::Varint(t)) => once(&mut temporality, t as i32),
                    (1, Wire::Bytes(_)) => Some(()),
                    (1 | 2, _) => None,
                    _ => Some(()),
                })?;
                let delta = temporality == Some(DELTA);
                // A mapped cumulative sum is refused by the full decoder.
                (delta || stream.is_none()).then_some(())?;
                self.points(s, stream)
            }
            // Other kinds: only their framing is read; mapped, refused.
            Some((_, x)) if stream.is_none() => each(x, |_, _| Some(())),
            None if stream.is_none() => Some(()),
            _ => None,
        }
    }

    /// The points (field 1) of a gauge or sum, read into readings of
    /// `stream` when it is mapped.
    fn points(&mut self, body: &'a [u8], stream: Option<&'a str>) -> Option<()> {
        each(body, |n, w| match (n, w) {
            (1, Wire::Bytes(p)) => {
                bounded(&mut self.counts[3], MAX_OTLP_POINTS)?;
                let p = point(p, self.keys, &mut self.point)?;
                match stream {
                    Some(s) => self.reading(s, p),
                    None => Some(()),
                }
            }
            (1, _) => None,
            _ => Some(()),
        })
    }

    fn reading(&mut self, stream: &'a str, p: Point) -> Option<()> {
        let find = |i: usize| self.point[i].or(self.resource[i]);
        // No device, or one that is not UTF-8: the full decoder says why.
        let device = find(0)?.text_ref()?;
        let mut labels = Labels::default();
        for (i, (name, _)) in self.mapping.labels.iter().enumerate() {
            if let Some(v) = find(i + 1).and_then(ScalarRef::text) {
                let (n, v) = (labels.append(name), labels.append(&v));
                labels.push_spans(n, v);
            }
        }
        labels.sort();
        let t = p.time_unix_nano;
        self.out.push(Found {
            device_id: device,
            stream,
            stream_index: 0,
            value: p.value,
            event_time_ms: (t > 0).then_some((t / 1_000_000) as i64),
            labels,
        });
        Some(())
    }
}

/// The readings of an OTLP metrics request in Protobuf, in the full
/// decoder's order; `None` where the full decoder must decide.
pub(crate) fn walk<'a>(payload: &'a [u8], mapping: &'a OtlpMapping) -> Option<Vec<Found<'a>>> {
    let mut keys = [&[][..]; SLOTS];
    let names =
        std::iter::once(&mapping.device_attribute).chain(mapping.labels.iter().map(|(_, k)| k));
    let mut n = 0;
    for k in names {
        *keys.get_mut(n)? = k.as_bytes();
        n += 1;
    }
    let mut walk = Walk {
        mapping,
        keys: &keys[..n],
        resource: [None; SLOTS],
        point: [None; SLOTS],
        counts: [0; 4],
        out: Vec::new(),
    };
    each(payload, |n, w| match (n, w) {
        (1, Wire::Bytes(rm)) => walk.resource_metrics(rm),
        (1, _) => None,
        _ => Some(()),
    })?;
    Some(walk.out)
}

/// [`walk`]'s readings, owned.
#[cfg(test)]
pub(crate) fn readings(payload: &[u8], mapping: &OtlpMapping) -> Option<Vec<crate::RawReading>> {
    walk(payload, mapping).map(|w| w.into_iter().map(Found::into_raw).collect())
}

#[cfg(test)]
mod tests;
