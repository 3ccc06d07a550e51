//! Which parts of a decoded message to build as JSON: the readers of a
//! fleet's own binary records (Avro, Protobuf through a descriptor set)
//! build only what the mapping's paths read — the values along a path,
//! everything under its end — and check the rest without building it.
//! `mask` holds the paths (by index, at most 63) still matching at a
//! message's current level. Where a schema lets them, the readers build
//! nothing and read the paths straight into leaves ([`DirectPlan`]).

use crate::leaf::Leaf;
use crate::mapped::Path;
use serde_json::{Number, Value};
use std::sync::Arc;

/// Deepest nesting a reader converts (deeper values are refused as
/// undecodable).
pub(crate) const MAX_DEPTH: usize = 32;

/// A float as JSON; NaN and ±∞ spelled as strings, so the mapping refuses
/// them as not finite (JSON has no literal for them).
pub(crate) fn float(f: f64) -> Value {
    match (Number::from_f64(f), crate::leaf::spelled(f)) {
        (Some(n), _) => Value::Number(n),
        (None, s) => Value::String(s.unwrap_or("nan").into()),
    }
}

/// What to build of a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Want {
    /// Nothing: check it and move on.
    Nothing,
    /// All of it (a path ends here or passes through an array or map).
    All,
    /// The fields along these paths (bits), which continue below.
    Paths(u64),
}

/// What to build of a value reached by `mask`'s paths after `tok` tokens.
pub(crate) fn want_of(paths: &[Path], tok: usize, mask: u64) -> Want {
    if mask == 0 {
        Want::Nothing
    } else if bits(mask).any(|i| paths[i].tokens().len() == tok) {
        Want::All
    } else {
        Want::Paths(mask)
    }
}

/// The set bits of `mask`, lowest first.
pub(crate) fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let i = mask.trailing_zeros() as usize;
        (mask != 0).then(|| {
            mask &= mask - 1;
            i
        })
    })
}

/// What to build of a whole message read for `paths` (`None`: all of it;
/// so too with more paths than a mask holds).
pub(crate) fn root(paths: Option<&[Path]>) -> Want {
    match paths {
        Some(p) if p.len() < 64 => want_of(p, 0, (1u64 << p.len()) - 1),
        _ => Want::All,
    }
}

/// What to build of field `name` of a value built as `want`, `tok` path
/// tokens down.
pub(crate) fn field(paths: &[Path], want: Want, tok: usize, name: &str) -> Want {
    match want {
        Want::Paths(mask) => {
            let here = bits(mask)
                .filter(|&i| paths[i].tokens()[tok] == name)
                .fold(0u64, |m, i| m | 1 << i);
            want_of(paths, tok + 1, here)
        }
        w => w,
    }
}

/// A plan for reading the mapping's paths straight from a message's bytes
/// into leaves, compiled once against a reader's compiled schema `C`.
pub(crate) trait DirectPlan<C>: Sized {
    /// The plan of `paths`, or `None` when the schema makes them read as
    /// JSON.
    fn new(compiled: &C, paths: &[Path]) -> Option<Self>;
    /// One message's leaves, in the order of the paths.
    fn read<'a>(&'a self, compiled: &'a C, body: &'a [u8]) -> Result<Vec<Leaf<'a>>, String>;
}

/// The plan of `paths` on `compiled` (none without a compiled schema).
pub(crate) fn plan<C, P: DirectPlan<C>>(
    compiled: Option<&Arc<C>>,
    paths: &[Path],
) -> Option<Arc<P>> {
    compiled.and_then(|c| P::new(c, paths)).map(Arc::new)
}

/// One message's leaves by `plan` (`None`: no plan, it is read as JSON).
pub(crate) fn read<'a, C, P: DirectPlan<C>>(
    plan: Option<&'a Arc<P>>,
    compiled: Option<&'a Arc<C>>,
    body: &'a [u8],
) -> Option<Result<Vec<Leaf<'a>>, String>> {
    Some(plan?.read(compiled?, body))
}
