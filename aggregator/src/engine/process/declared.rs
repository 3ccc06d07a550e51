//! A declared stream as the router sees it: the planned streams it maps
//! to (one, or one per group), its grouping and where the grouping's
//! dimensions sit in a registry row. Shared by the router and the
//! private-key tables, which both index streams by declaration.

use crate::config::dimensions::Grouping;
use crate::config::Validated;
use crate::engine::registry::Route;

/// A declared stream's planned streams: one, or one per group.
pub(super) struct Declared {
    pub(super) name: String,
    /// Plan index of the stream, or of its first group.
    pub(super) first: usize,
    pub(super) grouping: Option<Grouping>,
    /// Where each of the grouping's dimensions sits in a registry row.
    pub(super) positions: Vec<Option<usize>>,
    /// The group from labels and a replica row (no private keys; used
    /// with a replica or without a registry).
    pub(super) route: Option<Route>,
}

/// The configuration's declared streams in order, each with its plan
/// index (a grouped stream takes one planned stream per group).
pub(super) fn declared(v: &Validated) -> Vec<Declared> {
    let mut first = 0;
    v.groupings
        .iter()
        .zip(&v.config.streams)
        .map(|(g, c)| {
            let d = Declared {
                name: c.name.clone(),
                first,
                grouping: g.clone(),
                positions: Vec::new(),
                route: g.as_ref().and_then(|g| Route::new(g, &[])),
            };
            first += g.as_ref().map_or(1, |g| g.keys().len());
            d
        })
        .collect()
}
