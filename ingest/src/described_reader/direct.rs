//! The mapping's paths read straight from a fleet's own Protobuf message:
//! where the message type lets it, the reader writes each path's [`Leaf`]
//! as it walks the bytes and builds no JSON value (each message's fields
//! are matched to the paths once, when the plan is compiled).
//!
//! The walk reads the same bytes in the same order with the same prost
//! primitives as the JSON route (`Walk`, which also checks every field no
//! path reaches), so a message is refused exactly when, and with the words
//! that, the JSON route refuses it; each leaf is what [`Leaf::of`] makes of
//! the JSON value at the path, with the JSON route's merge rules: the last
//! value of a field wins, a field without presence holding its default is
//! absent, a message seen twice merges, a list's items accumulate over its
//! occurrences. A plan is not made (`Projection::new` returns `None`, the
//! message is read as JSON) when a path names a member of a oneof (setting
//! a sibling clears it), a map, a whole list, or a list of messages.
//! `ingest/tests/described_reader.rs` checks the two routes agree.

use super::{Compiled, Scalar, Shape, Walk, K, MAX_DEPTH};
use crate::leaf::Leaf;
use crate::mapped::Path;
use crate::project::{bits, DirectPlan, Want};
use prost::bytes::Buf;
use prost::encoding::{self as enc, DecodeContext, WireType};
use prost::DecodeError;
use serde_json::Map;

/// The mapping's paths compiled against one message type.
#[derive(Debug)]
pub(crate) struct Projection {
    root: Plan,
    paths: usize,
    /// How many list places the plan counts items of.
    lists: usize,
}

/// A message place: what to do with each of its fields (by their index in
/// the compiled message).
#[derive(Debug)]
struct Plan {
    fields: Vec<Step>,
}

#[derive(Debug)]
enum Step {
    /// No path reads it (or only through a scalar, finding nothing): check
    /// it as the JSON route does and move on.
    Skip,
    /// A single field: the paths ending on it, and the plan of the paths
    /// going on below it (a message field).
    Single { ends: u64, below: Option<Box<Plan>> },
    /// A list of scalars: its item counter, and the paths ending on an
    /// item (its index, their bits).
    Items { list: usize, at: Vec<(usize, u64)> },
}

impl Scalar for Leaf<'_> {
    fn float(f: f64) -> Self {
        Leaf::float(f)
    }
    fn int(i: i64) -> Self {
        Leaf::Int(i)
    }
    fn uint(u: u64) -> Self {
        i64::try_from(u).map_or(Leaf::Big(u), Leaf::Int)
    }
    fn boolean(_: bool) -> Self {
        Leaf::Other
    }
    fn bytes() -> Self {
        Leaf::Null
    }
}

/// What a walk writes, moved down into each nested message and back.
#[derive(Debug, Default)]
struct State<'a> {
    leaves: Vec<Leaf<'a>>,
    /// Items read so far per list place.
    counts: Vec<usize>,
    too_deep: bool,
    /// A string field's bytes (their UTF-8 checked by prost).
    text: String,
}

impl DirectPlan<Compiled> for Projection {
    /// The plan of `paths` in `compiled`'s message; `None` when it is read
    /// as JSON (module docs).
    fn new(compiled: &Compiled, paths: &[Path]) -> Option<Projection> {
        if paths.is_empty() || paths.len() >= 64 {
            return None;
        }
        let mut lists = 0;
        let root = plan(
            compiled,
            paths,
            (0, 0, (1u64 << paths.len()) - 1),
            &mut lists,
        )?;
        Some(Projection {
            root,
            paths: paths.len(),
            lists,
        })
    }

    /// Read one message's leaves, in the order of the paths.
    fn read<'a>(&'a self, c: &'a Compiled, body: &'a [u8]) -> Result<Vec<Leaf<'a>>, String> {
        let mut d = Direct {
            c,
            body,
            msg: 0,
            plan: &self.root,
            depth: 0,
            st: State {
                leaves: vec![Leaf::Null; self.paths],
                counts: vec![0; self.lists],
                ..State::default()
            },
        };
        let r = prost::Message::merge(&mut d, body);
        if d.st.too_deep {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        r.map_err(|e| e.to_string())?;
        Ok(d.st.leaves)
    }
}

/// The plan of message `msg`'s place, reached by `mask`'s paths after
/// `tok` tokens; `lists` numbers the list places.
fn plan(
    c: &Compiled,
    paths: &[Path],
    (msg, tok, mask): (usize, usize, u64),
    lists: &mut usize,
) -> Option<Plan> {
    let mut fields = Vec::with_capacity(c.messages[msg].len());
    for f in &c.messages[msg] {
        let here = bits(mask)
            .filter(|&i| paths[i].tokens()[tok] == f.name)
            .fold(0u64, |m, i| m | 1 << i);
        if here == 0 {
            fields.push(Step::Skip);
            continue;
        }
        if !f.siblings.is_empty() {
            return None;
        }
        let ends = bits(here)
            .filter(|&i| paths[i].tokens().len() == tok + 1)
            .fold(0u64, |m, i| m | 1 << i);
        let on = here & !ends;
        fields.push(match (f.shape, f.kind) {
            (Shape::Map { .. }, _) | (Shape::List { .. }, K::Message(_)) => return None,
            (Shape::List { .. }, _) if ends != 0 => return None,
            (Shape::List { .. }, _) => {
                // An index ends a path on a scalar item; deeper paths and
                // other tokens find nothing.
                let at = bits(on)
                    .filter(|&i| paths[i].tokens().len() == tok + 2)
                    .filter_map(|i| Some((paths[i].tokens()[tok + 1].parse().ok()?, 1u64 << i)))
                    .collect();
                *lists += 1;
                Step::Items {
                    list: *lists - 1,
                    at,
                }
            }
            (Shape::Single { .. }, K::Message(m)) => Step::Single {
                ends,
                below: match on {
                    0 => None,
                    _ => Some(Box::new(plan(c, paths, (m, tok + 1, on), lists)?)),
                },
            },
            (Shape::Single { .. }, _) if ends == 0 => Step::Skip,
            (Shape::Single { .. }, _) => Step::Single { ends, below: None },
        });
    }
    Some(Plan { fields })
}

/// One message being read at a place of the plan (a prost `Message`, so
/// that prost frames it as it does the JSON route's `Walk`).
#[derive(Debug)]
struct Direct<'a> {
    c: &'a Compiled,
    /// The whole message (strings are borrowed from it).
    body: &'a [u8],
    msg: usize,
    plan: &'a Plan,
    depth: usize,
    st: State<'a>,
}

impl<'a> Direct<'a> {
    /// One scalar value of kind `k` as a leaf, and whether it is the
    /// kind's default.
    fn scalar(
        &mut self,
        k: K,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(Leaf<'a>, bool), DecodeError> {
        Ok(match k {
            K::String => {
                enc::string::merge(wire_type, &mut self.st.text, buf, ctx)?;
                // The string's bytes are the last ones read.
                let end = self.body.len() - buf.remaining();
                let bytes = &self.body[end - self.st.text.len()..end];
                let s = std::str::from_utf8(bytes).expect("prost checked these bytes as UTF-8");
                (Leaf::Str(s), s.is_empty())
            }
            K::Message(_) => unreachable!("planned as a message"),
            k => super::scalar::<Leaf<'a>>(k, wire_type, buf, ctx)?,
        })
    }

    /// A list's items (packed or one at a time), each counted and written
    /// where an index path ends on it.
    fn items(
        &mut self,
        (k, list, at): (K, usize, &[(usize, u64)]),
        packable: bool,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let item = |d: &mut Self, wire_type, buf: &mut _, ctx| {
            let (leaf, _) = d.scalar(k, wire_type, buf, ctx)?;
            let n = d.st.counts[list];
            d.st.counts[list] += 1;
            for &(_, paths) in at.iter().filter(|(index, _)| *index == n) {
                for i in bits(paths) {
                    d.st.leaves[i] = leaf;
                }
            }
            Ok(())
        };
        if wire_type == WireType::LengthDelimited && packable {
            let item_type = match k {
                K::Double | K::Fixed64 | K::Sfixed64 => WireType::SixtyFourBit,
                K::Float | K::Fixed32 | K::Sfixed32 => WireType::ThirtyTwoBit,
                _ => WireType::Varint,
            };
            enc::merge_loop(self, buf, ctx, |d, buf, ctx| item(d, item_type, buf, ctx))
        } else {
            item(self, wire_type, buf, ctx)
        }
    }

    /// A message field's value at `below`'s place (`None`: checked only).
    fn message(
        &mut self,
        (number, m): (u32, usize),
        below: Option<&'a Plan>,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let Some(plan) = below else {
            return self.skip(number, wire_type, buf, ctx);
        };
        let mut d = Direct {
            c: self.c,
            body: self.body,
            msg: m,
            plan,
            depth: self.depth + 1,
            st: std::mem::take(&mut self.st),
        };
        d.st.too_deep |= d.depth > MAX_DEPTH;
        let r = enc::message::merge(wire_type, &mut d, buf, ctx);
        self.st = d.st;
        r
    }

    /// Field `number` read as the JSON route reads a field it builds
    /// nothing of.
    fn skip(
        &mut self,
        number: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let mut w = Walk {
            c: self.c,
            msg: self.msg,
            want: Want::Nothing,
            tok: 0,
            depth: self.depth,
            paths: &[],
            out: Map::new(),
            too_deep: false,
        };
        let r = prost::Message::merge_field(&mut w, number, wire_type, buf, ctx);
        self.st.too_deep |= w.too_deep;
        r
    }
}

impl prost::Message for Direct<'_> {
    fn merge_field(
        &mut self,
        number: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let Some((i, f)) = self.c.field(self.msg, number) else {
            return enc::skip_field(wire_type, number, buf, ctx);
        };
        let plan = self.plan;
        match (&plan.fields[i], f.shape, f.kind) {
            (Step::Skip, ..) => self.skip(number, wire_type, buf, ctx)?,
            (Step::Items { list, at }, Shape::List { packable }, k) => {
                self.items((k, *list, at), packable, wire_type, buf, ctx)?
            }
            (Step::Single { ends, below }, _, K::Message(m)) => {
                self.message((number, m), below.as_deref(), wire_type, buf, ctx)?;
                for i in bits(*ends) {
                    self.st.leaves[i] = Leaf::Other;
                }
            }
            (Step::Single { ends, .. }, Shape::Single { presence }, k) => {
                let (leaf, default) = self.scalar(k, wire_type, buf, ctx)?;
                let leaf = if presence || !default {
                    leaf
                } else {
                    Leaf::Null
                };
                for i in bits(*ends) {
                    self.st.leaves[i] = leaf;
                }
            }
            _ => unreachable!("a step is planned for its field's shape"),
        }
        Ok(())
    }

    fn encode_raw(&self, _: &mut impl prost::bytes::BufMut) {
        unreachable!("only decoded")
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {}
}
