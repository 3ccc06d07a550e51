//! A grouped stream's route: the group of a reading from its labels and
//! its device's packed registry row, in one pass over precomputed place
//! values (docs/DESIGN.md §4, group-by). It computes exactly what
//! [`group_in`](super::group_in) computes for a grouping without private
//! keys — a dimension's label wins, a value not declared is `other`, a
//! missing label falls back to the row, a digit the row does not hold
//! (missing, [`ABSENT`](super::ABSENT), past the declared values, past the
//! row's width) is `other` — and a test compares the two on random
//! groupings, labels and rows. It walks the reading's labels (sorted by
//! name) beside the dimensions sorted by name once, instead of searching
//! the labels per dimension, and reads the row only for a dimension no
//! label gives.
//!
//! The group only routes a reading; `G` caps what a device adds across
//! groups whatever the labels or the registry say.

use super::replica::{MAX_DIMENSIONS, NO_ROW};
use crate::config::dimensions::Grouping;
use std::collections::HashMap;

/// One dimension of a [`Route`].
#[derive(Debug, Clone)]
struct Term {
    name: Box<[u8]>,
    /// Its digit's bit shift in a packed row (`None`: not in the row).
    shift: Option<u32>,
    /// Its `other` digit (the number of declared values).
    other: u64,
    /// Its place value in the group index.
    place: u64,
    /// Each declared value's digit.
    digits: HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>,
}

impl Term {
    #[inline]
    fn row_digit(&self, packed: u64) -> u64 {
        self.shift
            .map_or(self.other, |s| ((packed >> s) & 0xffff).min(self.other))
    }
}

/// The route of one grouping without private keys.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// In the order of their names (bytewise).
    terms: Vec<Term>,
}

impl Route {
    /// The route of `grouping` over registry rows whose dimension `i` sits
    /// at `positions[i]` (none: no registry); `None` for a grouping with
    /// private keys (their digits are bound slots, found per reading).
    pub(crate) fn new(grouping: &Grouping, positions: &[Option<usize>]) -> Option<Self> {
        if grouping.private_dimension().is_some() {
            return None;
        }
        let dims = grouping.dimensions().count();
        let mut place = 1u64;
        let mut terms = Vec::with_capacity(dims);
        for i in (0..dims).rev() {
            let other = grouping.declared_values(i) as u64;
            let shift = positions
                .get(i)
                .copied()
                .flatten()
                .filter(|&p| p < MAX_DIMENSIONS)
                .map(|p| 16 * p as u32);
            let digits = (0..other)
                .map(|d| {
                    let v = grouping.declared_value(i, d as usize);
                    (v.as_bytes().into(), d)
                })
                .collect();
            terms.push(Term {
                name: grouping.dimension(i).as_bytes().into(),
                shift,
                other,
                place,
                digits,
            });
            place *= other + 1;
        }
        terms.sort_by(|a, b| a.name.cmp(&b.name));
        Some(Self { terms })
    }

    /// The group of a device whose packed row is `packed`, for a reading
    /// without labels.
    #[inline]
    pub(crate) fn index(&self, packed: u64) -> u32 {
        self.terms
            .iter()
            .map(|t| t.row_digit(packed) * t.place)
            .sum::<u64>() as u32
    }

    /// The group of a reading with `labels` whose device's packed row
    /// `row` gives (called at most once, only when a dimension has no
    /// label; [`NO_ROW`] without a registry).
    pub(crate) fn index_labelled(&self, labels: &ingest::Labels, row: impl FnOnce() -> u64) -> u32 {
        let mut labels = labels.iter_bytes().peekable();
        let mut row = Some(row);
        let mut packed = NO_ROW;
        let mut index = 0;
        for t in &self.terms {
            while labels.next_if(|(n, _)| **n < *t.name).is_some() {}
            let d = match labels.next_if(|(n, _)| **n == *t.name) {
                Some((_, v)) => t.digits.get(v).copied().unwrap_or(t.other),
                None => {
                    if let Some(f) = row.take() {
                        packed = f();
                    }
                    t.row_digit(packed)
                }
            };
            index += d * t.place;
        }
        index as u32
    }
}

#[cfg(test)]
mod tests {
    use super::super::{group_in, replica::pack, ABSENT};
    use super::*;
    use crate::config::dimensions::Dimension;
    use rand::{Rng, SeedableRng};

    /// A route finds the group `group_in` finds: random groupings of up to
    /// four dimensions (names out of order), labels giving some dimensions
    /// (declared values, undeclared ones, names sorting between and
    /// around the dimensions'), registry rows with digits in range, past
    /// the declared values and ABSENT, no row, and dimensions the registry
    /// does not keep or keeps past a row's width.
    #[test]
    fn routes_as_group_in() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let names = ["model", "fw", "region", "a", "zone"];
        let dims: std::collections::BTreeMap<_, _> = names
            .iter()
            .zip([3, 1, 5, 2, 4])
            .map(|(d, n)| {
                let values = (0..n).map(|i| format!("{d}{i}")).collect();
                (d.to_string(), Dimension::Public(values))
            })
            .collect();
        let extra = ["", "b", "fx", "mode", "modelx", "zz", "region0"];
        for case in 0..5_000 {
            let mut by: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            for i in (1..by.len()).rev() {
                by.swap(i, rng.gen_range(0..=i));
            }
            by.truncate(rng.gen_range(1..=4));
            let g = Grouping::new("s", &by, &dims).unwrap();
            let width = rng.gen_range(0..=MAX_DIMENSIONS);
            let positions: Vec<Option<usize>> = (0..by.len())
                .map(|_| {
                    rng.gen_bool(0.8)
                        .then(|| rng.gen_range(0..MAX_DIMENSIONS + 1))
                })
                .collect();
            let route = Route::new(&g, &positions).unwrap();
            let row: Vec<u16> = (0..width)
                .map(|_| match rng.gen_range(0..4) {
                    0 => ABSENT,
                    1 => rng.gen_range(0..ABSENT),
                    _ => rng.gen_range(0..6),
                })
                .collect();
            let mut labels = ingest::Labels::new();
            for d in names.iter().chain(&extra) {
                if rng.gen_bool(0.4) {
                    labels.insert(d, &format!("{d}{}", rng.gen_range(0..7)));
                }
            }
            let none = ingest::Labels::default();
            let packed = pack(&row);
            for (labels, row) in [
                (&labels, Some(&row[..])),
                (&labels, None),
                (&none, Some(&row[..])),
            ] {
                let want = group_in(&g, &positions, row, labels, None);
                let got = route.index_labelled(labels, || row.map_or(NO_ROW, pack));
                assert_eq!(
                    got, want,
                    "case {case}: {by:?} {positions:?} {row:?} {labels:?}"
                );
                if labels.is_empty() {
                    let p = row.map_or(NO_ROW, |_| packed);
                    assert_eq!(route.index(p), want, "case {case}: no labels");
                }
            }
        }
    }

    /// A reading whose labels give every dimension never reads the row.
    #[test]
    fn full_labels_leave_the_row_alone() {
        let dims = [("fw", vec!["4.1"]), ("region", vec!["eu", "us"])]
            .into_iter()
            .map(|(d, v)| {
                (
                    d.to_string(),
                    Dimension::Public(v.into_iter().map(String::from).collect()),
                )
            })
            .collect();
        let by = vec!["region".to_string(), "fw".to_string()];
        let g = Grouping::new("s", &by, &dims).unwrap();
        let route = Route::new(&g, &[Some(0), Some(1)]).unwrap();
        let labels: ingest::Labels = [("fw", "4.1"), ("region", "us")].into_iter().collect();
        let got = route.index_labelled(&labels, || panic!("the row was read"));
        assert_eq!(got, group_in(&g, &[None, None], None, &labels, None));
    }
}
