//! Neighbouring relations: which pairs of windows must be indistinguishable.
//!
//! Privacy argument: bounding contributions to `k` readings per device per
//! window turns "one device differs" into "at most `k` records differ"
//! (`d_in = k`). Under [`Relation::ChangeOne`] those records change value and
//! the window size `n` is public; under [`Relation::AddRemove`] they are added
//! or removed and the size is private.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The neighbouring relation, as the references of docs/DESIGN.md §10 name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Relation {
    /// Bounded DP (`ChangeOneDistance`): same size, up to `k` values changed.
    ChangeOne,
    /// Unbounded DP (`SymmetricDistance`): up to `k` records added or removed.
    AddRemove,
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Relation::ChangeOne => "change-one",
            Relation::AddRemove => "add-remove",
        })
    }
}

/// A relation together with its input distance: one device is at most `k`
/// records of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbouring {
    pub relation: Relation,
    /// `d_in`: records one device may change in one window (`k ≥ 1`).
    pub k: u32,
}

impl Neighbouring {
    pub fn new(relation: Relation, k: u32) -> Self {
        assert!(k >= 1, "k must be at least 1");
        Self { relation, k }
    }
    /// Whether the window size is public under this relation.
    pub fn size_is_public(&self) -> bool {
        self.relation == Relation::ChangeOne
    }
}
