//! The parts of an OTLP metrics request counted on its wire form, before
//! prost decodes it, against the bounds below (`otlp_walk.rs` counts the
//! same parts as it walks, `otlp_json/bounded.rs` as it parses): a 1 MiB
//! request of empty attributes or points (2 bytes each) would otherwise be
//! materialised as half a million of them before any bound is checked. Only the framing
//! is read (field keys and lengths), along the paths `otlp.rs` decodes.

use crate::scan::varint;
use crate::{Reason, Rejection};

/// The most of each part one request may hold (documented in
/// docs/input.md#opentelemetry).
pub const MAX_OTLP_RESOURCES: usize = 10_000;
pub const MAX_OTLP_SCOPES: usize = 10_000;
pub const MAX_OTLP_METRICS: usize = 100_000;
/// Data points of gauges and sums, read or not.
pub const MAX_OTLP_POINTS: usize = 1_000_000;
/// Attributes of one resource or one data point.
pub const MAX_OTLP_ATTRIBUTES: usize = 128;

/// One field: its number, wire type and, for a length-delimited one, its
/// body.
struct Field<'a> {
    number: u64,
    body: Option<&'a [u8]>,
}

/// The fields of a message body in order; `None` once its framing is
/// broken (and then nothing more).
struct Fields<'a> {
    buf: &'a [u8],
    broken: bool,
}

fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, broken: false }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Option<Field<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() || self.broken {
            return None;
        }
        let f = self.field();
        self.broken = f.is_none();
        Some(f)
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Option<Field<'a>> {
        let key = varint(&mut self.buf)?;
        let body = match key & 7 {
            0 => {
                varint(&mut self.buf)?;
                None
            }
            1 => {
                self.buf = self.buf.get(8..)?;
                None
            }
            5 => {
                self.buf = self.buf.get(4..)?;
                None
            }
            2 => {
                let len = usize::try_from(varint(&mut self.buf)?).ok()?;
                let body = self.buf.get(..len)?;
                self.buf = &self.buf[len..];
                Some(body)
            }
            _ => return None,
        };
        Some(Field {
            number: key >> 3,
            body,
        })
    }
}

/// The bodies of the length-delimited fields numbered `n` in `buf` (a
/// broken framing ends them: prost's decoding then says what is wrong).
fn each(buf: &[u8], n: u64) -> impl Iterator<Item = &[u8]> {
    fields(buf)
        .map_while(|f| f)
        .filter(move |f| f.number == n)
        .filter_map(|f| f.body)
}

#[derive(Default)]
struct Counts {
    resources: usize,
    scopes: usize,
    metrics: usize,
    points: usize,
}

pub(crate) fn over(what: &str, max: usize) -> Rejection {
    Rejection::new(
        Reason::BatchSize,
        format!("OTLP request: more than {max} {what}"),
    )
}

/// Check a request's parts against the bounds; a broken framing passes
/// (prost's decoding then says what is wrong).
pub(crate) fn check(payload: &[u8]) -> Result<(), Rejection> {
    let mut c = Counts::default();
    let attributes = |body: &[u8], n: u64, whose: &str| match each(body, n).count() {
        a if a > MAX_OTLP_ATTRIBUTES => Err(over(
            &format!("attributes on one {whose}"),
            MAX_OTLP_ATTRIBUTES,
        )),
        _ => Ok(()),
    };
    for rm in each(payload, 1) {
        c.resources += 1;
        if c.resources > MAX_OTLP_RESOURCES {
            return Err(over("resources", MAX_OTLP_RESOURCES));
        }
        for resource in each(rm, 1) {
            attributes(resource, 1, "resource")?;
        }
        for sm in each(rm, 2) {
            c.scopes += 1;
            if c.scopes > MAX_OTLP_SCOPES {
                return Err(over("scopes", MAX_OTLP_SCOPES));
            }
            for m in each(sm, 2) {
                c.metrics += 1;
                if c.metrics > MAX_OTLP_METRICS {
                    return Err(over("metrics", MAX_OTLP_METRICS));
                }
                // A gauge's (5) or a sum's (7) points.
                let data = fields(m)
                    .map_while(|f| f)
                    .filter(|f| f.number == 5 || f.number == 7);
                for d in data {
                    for p in each(d.body.unwrap_or_default(), 1) {
                        c.points += 1;
                        if c.points > MAX_OTLP_POINTS {
                            return Err(over("data points", MAX_OTLP_POINTS));
                        }
                        attributes(p, 7, "data point")?;
                    }
                }
            }
        }
    }
    Ok(())
}
