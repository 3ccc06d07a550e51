//! The mapping's paths read straight from an Avro datum: where a schema
//! lets it, the reader writes each path's [`Leaf`] as it walks the bytes
//! and builds no JSON value (a record's fields are matched to the paths
//! once, when the plan is compiled, not per message).
//!
//! The walk is the reader's own (`Reader::value`): the same bytes read in
//! the same order with the same checks, so a message is refused exactly
//! when, and with the words that, the JSON route refuses it, and each leaf
//! is what [`Leaf::of`] makes of the JSON value at the path. One thing the
//! JSON route does that a projection does not is build arrays and maps
//! and count their items against `MAX_AVRO_ITEMS`; so a schema where a
//! path leads into an array or a map, or ends on a value holding one, gets
//! no plan (`Projection::new` returns `None`) and is read as JSON.
//! `ingest/tests/avro_reader.rs` checks the two routes agree.

use super::{Compiled, Node, Reader, MAX_DEPTH};
use crate::leaf::Leaf;
use crate::mapped::Path;
use crate::project::{bits, DirectPlan, Want};

/// The mapping's paths compiled against one schema.
#[derive(Debug)]
pub(crate) struct Projection {
    root: Plan,
    /// How many paths (leaves per message).
    paths: usize,
}

/// One place the paths reach: the paths that end there and, for each
/// record the place may hold (a union's branches may hold several), the
/// plan of each of its fields (`None`: no path goes there).
#[derive(Debug)]
struct Plan {
    ends: u64,
    records: Vec<(usize, Vec<Option<Plan>>)>,
}

/// The paths, nodes and schema a plan is compiled from.
struct Planner<'c> {
    nodes: &'c [Node],
    paths: &'c [Path],
}

impl DirectPlan<Compiled> for Projection {
    /// The plan of `paths` in `compiled`'s schema; `None` when a path leads
    /// into an array or a map, ends on a value holding one, or names a field
    /// a record declares twice (such schemas are read as JSON).
    fn new(compiled: &Compiled, paths: &[Path]) -> Option<Projection> {
        if paths.is_empty() || paths.len() >= 64 {
            return None;
        }
        let p = Planner {
            nodes: &compiled.nodes,
            paths,
        };
        let root = p.plan(0, 0, (1u64 << paths.len()) - 1)?;
        Some(Projection {
            root,
            paths: paths.len(),
        })
    }

    /// Read one datum's leaves, in the order of the paths; every byte must
    /// belong to it.
    fn read<'a>(&'a self, compiled: &'a Compiled, body: &'a [u8]) -> Result<Vec<Leaf<'a>>, String> {
        let mut r = Reader {
            bytes: body,
            at: 0,
            items: 0,
            paths: &[],
            count_all: false,
        };
        let mut leaves = vec![Leaf::Null; self.paths];
        r.project(&compiled.nodes, 0, 0, &self.root, &mut leaves)?;
        if r.at < body.len() {
            return Err(format!("{} bytes after the record", body.len() - r.at));
        }
        Ok(leaves)
    }
}

impl Planner<'_> {
    /// The plan of the place node `n` is at, reached by `mask`'s paths
    /// after `tok` tokens.
    fn plan(&self, n: usize, tok: usize, mask: u64) -> Option<Plan> {
        let ends = bits(mask)
            .filter(|&i| self.paths[i].tokens().len() == tok)
            .fold(0u64, |m, i| m | 1 << i);
        let on = mask & !ends;
        let mut plan = Plan {
            ends,
            records: Vec::new(),
        };
        for c in self.held(n) {
            if ends != 0 && self.holds_items(c, &mut vec![false; self.nodes.len()]) {
                return None;
            }
            match &self.nodes[c] {
                Node::Record(fields) if on != 0 => {
                    let mut subs = Vec::with_capacity(fields.len());
                    for (j, (name, f)) in fields.iter().enumerate() {
                        let here = bits(on)
                            .filter(|&i| self.paths[i].tokens()[tok] == *name)
                            .fold(0u64, |m, i| m | 1 << i);
                        if here != 0 && fields[..j].iter().any(|(other, _)| other == name) {
                            return None;
                        }
                        subs.push(match here {
                            0 => None,
                            _ => Some(self.plan(*f, tok + 1, here)?),
                        });
                    }
                    plan.records.push((c, subs));
                }
                Node::Array(_) | Node::Map(_) if on != 0 => return None,
                // Avro allows no union directly in a union; none is planned.
                Node::Union(_) => return None,
                _ => {}
            }
        }
        Some(plan)
    }

    /// The nodes a value of node `n` may be: a union's branches, else `n`.
    fn held(&self, n: usize) -> Vec<usize> {
        match &self.nodes[n] {
            Node::Union(branches) => branches.clone(),
            _ => vec![n],
        }
    }

    /// Whether a value of node `n` may hold an array or a map.
    fn holds_items(&self, n: usize, seen: &mut Vec<bool>) -> bool {
        if std::mem::replace(&mut seen[n], true) {
            return false;
        }
        match &self.nodes[n] {
            Node::Array(_) | Node::Map(_) => true,
            Node::Union(branches) => branches.iter().any(|&b| self.holds_items(b, seen)),
            Node::Record(fields) => fields.iter().any(|(_, f)| self.holds_items(*f, seen)),
            _ => false,
        }
    }
}

impl<'a> Reader<'a> {
    /// Read node `n`'s value at nesting `depth`, at `plan`'s place: the
    /// leaves of the paths that end there are written, the fields no path
    /// reaches are checked and skipped (as `value` does with `Want::Nothing`).
    fn project(
        &mut self,
        nodes: &'a [Node],
        n: usize,
        depth: usize,
        plan: &Plan,
        leaves: &mut [Leaf<'a>],
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("value nested deeper than {MAX_DEPTH}"));
        }
        let leaf = match &nodes[n] {
            Node::Union(branches) => {
                let b = self.branch(branches)?;
                return self.project(nodes, b, depth + 1, plan, leaves);
            }
            Node::Record(fields) => {
                if let Some((_, subs)) = plan.records.iter().find(|(r, _)| *r == n) {
                    for ((_, f), sub) in fields.iter().zip(subs) {
                        match sub {
                            Some(p) => self.project(nodes, *f, depth + 1, p, leaves)?,
                            None => self.skip(nodes, *f, depth + 1)?,
                        }
                    }
                } else {
                    self.skip(nodes, n, depth)?;
                }
                Leaf::Other
            }
            Node::Int => Leaf::Int(self.int()?.into()),
            Node::Long => Leaf::Int(self.long()?),
            Node::Float => Leaf::float(f32::from_le_bytes(self.fixed()?) as f64),
            Node::Double => Leaf::float(f64::from_le_bytes(self.fixed()?)),
            Node::String => Leaf::Str(self.string()?),
            Node::Enum(symbols) => Leaf::Str(self.symbol(symbols)?),
            // As JSON: null, and bytes and fixed values are absent.
            Node::Null | Node::Bytes | Node::Fixed(_) => {
                self.skip(nodes, n, depth)?;
                Leaf::Null
            }
            Node::Boolean | Node::Array(_) | Node::Map(_) => {
                self.skip(nodes, n, depth)?;
                Leaf::Other
            }
        };
        for i in bits(plan.ends) {
            leaves[i] = leaf;
        }
        Ok(())
    }

    /// Check node `n`'s value and move past it, building nothing.
    fn skip(&mut self, nodes: &[Node], n: usize, depth: usize) -> Result<(), String> {
        self.value(nodes, n, depth, 0, Want::Nothing).map(drop)
    }

    /// `N` bytes, as an array (a float's or a double's).
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
}
