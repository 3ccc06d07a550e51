//! A reading's labels (dimension name → value) in one buffer: names and
//! values back to back in a `String`, and each label's spans in it, sorted
//! by name. A labelled reading costs two allocations, not two per label
//! plus a map's nodes: labels arrive with every reading of a grouped
//! stream that carries its dimensions itself.

use std::fmt;

/// A reading's dimension values, at most one per name, sorted by name.
#[derive(Clone, Default)]
pub struct Labels {
    text: String,
    /// Per label: its name's and its value's byte ranges in `text`.
    spans: Vec<[u32; 4]>,
}

impl Labels {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    fn at(&self, s: &[u32; 4]) -> (&str, &str) {
        let t = &self.text;
        (
            &t[s[0] as usize..s[1] as usize],
            &t[s[2] as usize..s[3] as usize],
        )
    }

    /// The value of label `name`.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&str> {
        if self.spans.is_empty() {
            return None;
        }
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// (name, value) pairs, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.spans.iter().map(|s| self.at(s))
    }

    /// (name, value) pairs as bytes, by name (bytewise order is the
    /// names' order): what a router compares, without re-checking the
    /// text's character boundaries.
    pub fn iter_bytes(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let t = self.text.as_bytes();
        self.spans.iter().map(move |s| {
            (
                &t[s[0] as usize..s[1] as usize],
                &t[s[2] as usize..s[3] as usize],
            )
        })
    }

    /// Add a label; a name given twice keeps its last value (as a map).
    pub fn insert(&mut self, name: &str, value: &str) {
        let name = self.append(name);
        let value = self.append(value);
        self.push_spans(name, value);
        self.sort();
    }

    /// Append `s` to the buffer; its range there.
    pub(crate) fn append(&mut self, s: &str) -> [u32; 2] {
        let start = self.text.len();
        if self.text.capacity() == 0 {
            // One allocation for a reading's usual few labels, instead of
            // the doubling steps from 8 bytes.
            self.text.reserve(s.len().max(TEXT_START));
        }
        self.text.push_str(s);
        [offset(start), offset(self.text.len())]
    }

    /// Record a label appended with [`Labels::append`], unsorted until
    /// [`Labels::sort`].
    pub(crate) fn push_spans(&mut self, name: [u32; 2], value: [u32; 2]) {
        if self.spans.capacity() == 0 {
            self.spans.reserve(SPANS_START);
        }
        self.spans.push([name[0], name[1], value[0], value[1]]);
    }

    /// Sort by name, keeping the last label pushed of each name (inline:
    /// most readings carry none, and then this is one comparison).
    #[inline]
    pub(crate) fn sort(&mut self) {
        if self.spans.len() >= 2 {
            self.sort_many();
        }
    }

    fn sort_many(&mut self) {
        let text = &self.text;
        let name = |s: &[u32; 4]| &text[s[0] as usize..s[1] as usize];
        // Stable: of equal names, the last pushed ends last; keep it (in
        // place: no allocation per reading).
        self.spans.sort_by(|a, b| name(a).cmp(name(b)));
        let mut kept = 0;
        for i in 0..self.spans.len() {
            let s = self.spans[i];
            if kept > 0 && name(&self.spans[kept - 1]) == name(&s) {
                self.spans[kept - 1] = s;
            } else {
                self.spans[kept] = s;
                kept += 1;
            }
        }
        self.spans.truncate(kept);
    }
}

/// First capacity of a labelled reading's text (bytes) and spans: room for
/// a few labels of ordinary length without growing.
const TEXT_START: usize = 64;
const SPANS_START: usize = 4;

/// A buffer offset: a message is at most a few MiB, far below 4 GiB.
fn offset(at: usize) -> u32 {
    u32::try_from(at).expect("labels are bounded by the message size")
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut l = Labels::new();
        for (n, v) in pairs {
            let name = l.append(n.as_ref());
            let value = l.append(v.as_ref());
            l.push_spans(name, value);
        }
        l.sort();
        l
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Labels {}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_of_names_sorted_and_last_value_kept() {
        let l: Labels = [("region", "eu"), ("firmware", "4.1"), ("firmware", "4.2")]
            .into_iter()
            .collect();
        assert_eq!(l.len(), 2);
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            [("firmware", "4.2"), ("region", "eu")]
        );
        assert_eq!((l.get("region"), l.get("model")), (Some("eu"), None));
        let mut m = Labels::new();
        m.insert("region", "eu");
        m.insert("firmware", "4.2");
        assert_eq!(l, m);
        m.insert("region", "us");
        assert_ne!(l, m);
        assert_eq!(format!("{m:?}"), r#"{"firmware": "4.2", "region": "us"}"#);
        assert!(Labels::new().is_empty());
    }
}
