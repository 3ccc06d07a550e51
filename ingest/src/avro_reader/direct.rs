//! The mapping's paths read straight from an Avro datum: where a schema
//! lets it, the reader writes each path's [`Leaf`] as it walks the bytes
//! and builds no JSON value (a record's fields are matched to the paths
//! once, when the plan is compiled, not per message).
//!
//! The walk is the reader's own (`Reader::value`): the same bytes read in
//! the same order with the same checks, so a message is refused exactly
//! when, and with the words that, the JSON route refuses it, and each leaf
//! is what [`Leaf::of`] makes of the JSON value at the path. Where the JSON
//! route builds arrays and maps — one a path reads or passes through, or
//! any inside a value a path ends on — it counts their items against
//! `MAX_AVRO_ITEMS`; the walk counts the same items there, building none.
//! An array's item is named by its decimal index, a map's value by its
//! key; a key met again replaces what its earlier value gave, as a JSON
//! object's would. A schema gets no plan (`Projection::new` returns
//! `None`, it is read as JSON) only with 64 paths or more, or a path naming
//! a field its record declares twice.
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
    /// For each array or map the place may hold: the plans of its items
    /// the paths name (by index, or by key with the bits of the paths
    /// below it).
    lists: Vec<(usize, Vec<Named>)>,
}

/// An item the paths name, the bits of the paths below it, and its plan.
type Named = (Key, u64, Plan);

/// An item a path names: an array's by index, a map's by key.
#[derive(Debug, PartialEq)]
enum Key {
    At(usize),
    Named(String),
}

/// The paths, nodes and schema a plan is compiled from.
struct Planner<'c> {
    nodes: &'c [Node],
    paths: &'c [Path],
}

impl DirectPlan<Compiled> for Projection {
    /// The plan of `paths` in `compiled`'s schema; `None` for 64 paths or
    /// more, or a path naming a field its record declares twice (read as
    /// JSON).
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
            lists: Vec::new(),
        };
        for c in self.held(n) {
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
                Node::Array(item) | Node::Map(item) if on != 0 => {
                    let map = matches!(self.nodes[c], Node::Map(_));
                    let mut keys: Vec<(Key, u64)> = Vec::new();
                    for i in bits(on) {
                        let t = &self.paths[i].tokens()[tok];
                        // As `Path::find`: an array's item by its decimal
                        // index (any other token finds nothing).
                        let key = match map {
                            true => Key::Named(t.clone()),
                            false => match t.parse() {
                                Ok(at) => Key::At(at),
                                Err(_) => continue,
                            },
                        };
                        match keys.iter_mut().find(|(k, _)| *k == key) {
                            Some((_, m)) => *m |= 1 << i,
                            None => keys.push((key, 1 << i)),
                        }
                    }
                    let mut subs = Vec::with_capacity(keys.len());
                    for (key, here) in keys {
                        subs.push((key, here, self.plan(*item, tok + 1, here)?));
                    }
                    plan.lists.push((c, subs));
                }
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
}

impl<'a> Reader<'a> {
    /// Read node `n`'s value at nesting `depth`, at `plan`'s place: the
    /// leaves of the paths that end there are written, the values no path
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
        if let Node::Union(branches) = &nodes[n] {
            let b = self.branch(branches)?;
            return self.project(nodes, b, depth + 1, plan, leaves);
        }
        // Where a path ends, the JSON route builds the whole value, whose
        // array and map items count against the bound: so do they here.
        let counting = self.count_all;
        self.count_all |= plan.ends != 0;
        let leaf = self.leaf(nodes, n, depth, plan, leaves);
        self.count_all = counting;
        let leaf = leaf?;
        for i in bits(plan.ends) {
            leaves[i] = leaf;
        }
        Ok(())
    }

    /// Node `n`'s value (not a union) as a leaf, its planned parts read.
    fn leaf(
        &mut self,
        nodes: &'a [Node],
        n: usize,
        depth: usize,
        plan: &Plan,
        leaves: &mut [Leaf<'a>],
    ) -> Result<Leaf<'a>, String> {
        Ok(match &nodes[n] {
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
            Node::Array(item) | Node::Map(item) => {
                let map = matches!(nodes[n], Node::Map(_));
                match plan.lists.iter().find(|(l, _)| *l == n) {
                    Some((_, keys)) => {
                        self.planned_items(nodes, (*item, map, keys), depth, leaves)?
                    }
                    None => self.skip(nodes, n, depth)?,
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
            Node::Boolean | Node::Union(_) => {
                self.skip(nodes, n, depth)?;
                Leaf::Other
            }
        })
    }

    /// An array's or a map's blocks of items, as the JSON route builds them
    /// (each block counted against the bound, every item below counted
    /// too): the items `keys` name read at their plans, the rest checked.
    /// A map's key met again replaces what its earlier value gave.
    fn planned_items(
        &mut self,
        nodes: &'a [Node],
        (item, map, keys): (usize, bool, &[Named]),
        depth: usize,
        leaves: &mut [Leaf<'a>],
    ) -> Result<(), String> {
        let counting = std::mem::replace(&mut self.count_all, true);
        let mut at = 0;
        let r = (|| loop {
            let count = self.len(true)?;
            if count == 0 {
                return Ok(());
            }
            self.built(count)?;
            for _ in 0..count {
                let found = if map {
                    let name = self.string()?;
                    keys.iter()
                        .find(|(k, ..)| matches!(k, Key::Named(s) if s == name))
                } else {
                    keys.iter().find(|(k, ..)| *k == Key::At(at))
                };
                at += 1;
                match found {
                    Some((_, under, p)) => {
                        for i in bits(*under) {
                            leaves[i] = Leaf::Null;
                        }
                        self.project(nodes, item, depth + 1, p, leaves)?;
                    }
                    None => self.skip(nodes, item, depth + 1)?,
                }
            }
        })();
        self.count_all = counting;
        r
    }

    /// Check node `n`'s value and move past it, building nothing.
    fn skip(&mut self, nodes: &[Node], n: usize, depth: usize) -> Result<(), String> {
        self.value(nodes, n, depth, 0, Want::Nothing).map(drop)
    }
}
