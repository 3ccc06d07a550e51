//! The declared stream names, looked up by a reading's stream name. A
//! configuration declares a few streams, and a reading names one: a short
//! list scanned with word-sized comparisons costs less than hashing the
//! name and probing a table (measured in docs/performance.md, "Where a
//! reading's time goes"). Past [`SCAN_UP_TO`] names the table is used.
//! Either way the answer is the same: the index the configuration gives
//! the name, or none.

use std::collections::HashMap;

/// Names scanned in order rather than hashed.
const SCAN_UP_TO: usize = 8;

/// A few names in a list, scanned; more in a table, hashed.
#[derive(Debug, Clone)]
pub(crate) enum StreamNames {
    /// Every name with its index, in declaration order (unique names).
    Scan(Vec<(Box<str>, usize)>),
    /// Past [`SCAN_UP_TO`] names.
    Table(HashMap<Box<str>, usize, foldhash::fast::RandomState>),
}

impl StreamNames {
    /// Names in declaration order; a repeated name keeps its last index.
    pub(crate) fn new(names: impl IntoIterator<Item = String>) -> Self {
        let table: HashMap<Box<str>, usize, foldhash::fast::RandomState> = names
            .into_iter()
            .enumerate()
            .map(|(i, s)| (s.into_boxed_str(), i))
            .collect();
        if table.len() > SCAN_UP_TO {
            return Self::Table(table);
        }
        let mut list: Vec<(Box<str>, usize)> = table.into_iter().collect();
        list.sort_by_key(|&(_, i)| i);
        Self::Scan(list)
    }

    /// The index of stream `name`, if declared.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<usize> {
        match self {
            Self::Table(table) => table.get(name).copied(),
            Self::Scan(list) => list
                .iter()
                .find(|(n, _)| same(n.as_bytes(), name.as_bytes()))
                .map(|&(_, i)| i),
        }
    }
}

/// Byte equality of two short strings without a call to `memcmp`: two
/// overlapping words at each end for 8 bytes or more, else byte by byte.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let n = a.len();
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().expect("8"));
    if n <= 16 {
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scanned or hashed, every name is found at its index and nothing
    /// else is: every prefix, extension and one-byte change of each name
    /// (lengths 1 to 40, across the word boundaries) misses.
    #[test]
    fn finds_exactly_the_declared_names() {
        for count in [1, 3, SCAN_UP_TO, SCAN_UP_TO + 1, 20] {
            let names: Vec<String> = (0..count)
                .map(|i| {
                    let len = 1 + (i * 7) % 40;
                    (0..len)
                        .map(|j| (b'a' + ((i + j) % 26) as u8) as char)
                        .collect()
                })
                .collect();
            let s = StreamNames::new(names.clone());
            for (i, n) in names.iter().enumerate() {
                assert_eq!(s.get(n), Some(i), "{n:?} of {count}");
                let b = n.as_bytes();
                for at in 0..b.len() {
                    let mut changed = b.to_vec();
                    changed[at] ^= 0x20;
                    let changed = String::from_utf8(changed).unwrap();
                    assert_eq!(s.get(&changed), None, "{changed:?}");
                    assert_eq!(s.get(&n[..at]), None, "prefix of {n:?}");
                }
                assert_eq!(s.get(&format!("{n}x")), None);
            }
            assert_eq!(s.get(""), None);
        }
    }

    /// As the table it replaces: a repeated name keeps its last index.
    #[test]
    fn a_repeated_name_keeps_its_last_index() {
        let s = StreamNames::new(["a", "b", "a"].map(String::from));
        assert_eq!((s.get("a"), s.get("b")), (Some(2), Some(1)));
    }
}
