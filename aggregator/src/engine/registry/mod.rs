//! The device registry: a compacted Kafka topic keyed by device id whose
//! value holds the device's attributes (`{"model": "m2", "firmware":
//! "4.2", "region": "eu"}`), read in full before the first reading is
//! processed and followed live (`crate::runtime::follow`), like a Kafka Streams table.
//! The table is shared between the follower thread and the consuming loop
//! (a [`DashMap`]); grouped streams look a device's dimension values up in
//! it when a reading does not carry them as labels.
//!
//! Privacy: the registry is declared public (the operator attests it; a
//! public join in the terms of Tumult's "Understanding sensitivity" (docs/DESIGN.md §10) with multiplicity 1 — a device id is a
//! Kafka key, so a compacted topic holds one row per device). It only
//! decides which group a reading counts in; the group cap `G` bounds what
//! any device adds whatever the registry says, including a device whose
//! row changes mid-horizon (docs/DESIGN.md §4, group-by). Logs never name
//! a device.

mod replica;
mod route;

pub use replica::MAX_DIMENSIONS as MAX_REPLICA_DIMENSIONS;
pub(crate) use replica::{Replica, NO_ROW};
pub(crate) use route::Route;

use crate::config::dimensions::Grouping;
use dashmap::DashMap;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A device's row: per kept dimension, the position of its value among
/// the dimension's declared values ([`ABSENT`]: missing or undeclared, the
/// `other` group) — two bytes a dimension, no strings kept. A dimension
/// with private keys keeps the value's number in [`Registry`]'s interned
/// values instead (its slot is bound by `crate::engine::keys`).
type Row = Box<[u16]>;

/// Most distinct values of private dimensions the registry keeps (all
/// together); a further value counts as missing (`other`) and the record
/// is counted `full`.
pub const MAX_INTERNED_VALUES: usize = 65_535;

/// A row's digit for a missing or undeclared value.
pub const ABSENT: u16 = u16::MAX;

/// Most bytes of one registry record's value.
pub const MAX_ROW_BYTES: usize = 4_096;

/// Most changed devices the journal keeps for [`Replica`]s to catch up
/// from; one further behind copies the whole table.
const JOURNAL: usize = 16_384;

/// Why a registry record was not applied (counted, never logged with its key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The key is missing, empty, longer than 256 bytes or not UTF-8.
    Key,
    /// The value is not a JSON object of strings or integers, or too large.
    Value,
    /// A new device while `registry.max_devices` are held.
    Full,
}

impl Rejected {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::Key => "key",
            Rejected::Value => "value",
            Rejected::Full => "full",
        }
    }
}

/// The table.
pub struct Registry {
    /// By the device id's [`crate::engine::window::device_key`] (the windows' key): no
    /// string kept or compared; two ids with one key (see there) would
    /// share a row, which only decides a group, never a cap.
    devices: DashMap<u64, Row, foldhash::fast::RandomState>,
    /// Dimensions kept (those some stream groups by) and their declared
    /// values' digits (`None`: private keys, values interned); a lookup
    /// per record, of up to 1,000 values each.
    dimensions: Vec<(String, Option<Digits>)>,
    /// Values of private dimensions, by number.
    interned: std::sync::RwLock<Interned>,
    max_devices: usize,
    held: AtomicUsize,
    applied: AtomicU64,
    /// The latest changed devices, for [`Replica`]s.
    journal: Mutex<Journal>,
    /// Changes journaled so far (the journal's end).
    version: AtomicU64,
}

/// A dimension's declared values and their digits.
type Digits = std::collections::HashMap<String, u16, foldhash::fast::RandomState>;

/// Device keys whose rows changed, the oldest at position `start`.
#[derive(Default)]
struct Journal {
    start: u64,
    changed: VecDeque<u64>,
}

impl Registry {
    /// An empty table keeping `dimensions` (name, declared values or
    /// `None` for private keys), at most `max_devices` rows.
    pub fn new(dimensions: Vec<(String, Option<Vec<String>>)>, max_devices: usize) -> Self {
        Self {
            devices: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            dimensions: dimensions
                .into_iter()
                .map(|(d, values)| {
                    let digits = values.map(|v| {
                        v.into_iter()
                            .enumerate()
                            .map(|(i, v)| (v, i as u16))
                            .collect()
                    });
                    (d, digits)
                })
                .collect(),
            interned: Default::default(),
            max_devices,
            held: AtomicUsize::new(0),
            applied: AtomicU64::new(0),
            journal: Default::default(),
            version: AtomicU64::new(0),
        }
    }

    /// Changes so far (see [`Registry::changes_since`]).
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The devices changed since `version`, and the version they bring a
    /// reader to; `None` when the journal no longer reaches that far back.
    pub(crate) fn changes_since(&self, version: u64) -> Option<(Vec<u64>, u64)> {
        let j = self.journal.lock().expect("not poisoned");
        let skip = usize::try_from(version.checked_sub(j.start)?).ok()?;
        let changed = j.changed.iter().skip(skip).copied().collect();
        Some((changed, j.start + j.changed.len() as u64))
    }

    /// Note that `device`'s row changed (after the table holds the change).
    fn journal(&self, device: u64) {
        let mut j = self.journal.lock().expect("not poisoned");
        if j.changed.len() == JOURNAL {
            j.changed.pop_front();
            j.start += 1;
        }
        j.changed.push_back(device);
        self.version
            .store(j.start + j.changed.len() as u64, Ordering::Release);
    }

    /// Devices held.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records applied so far.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Where dimension `name` sits in a row.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.dimensions.iter().position(|(d, _)| d == name)
    }

    /// Apply one record of the registry topic: a row, or a tombstone
    /// (no value, or an empty one) that removes the device.
    pub fn apply(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), Rejected> {
        let device = key
            .filter(|k| !k.is_empty() && k.len() <= ingest::Limits::default().max_device_id_bytes)
            .and_then(|k| std::str::from_utf8(k).ok())
            .ok_or(Rejected::Key)?;
        let value = value.filter(|v| !v.is_empty());
        let Some(value) = value else {
            let device = crate::engine::window::device_key(device);
            if self.devices.remove(&device).is_some() {
                self.held.fetch_sub(1, Ordering::Relaxed);
                self.journal(device);
            }
            self.applied.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let row = self.row(value)?;
        let device = crate::engine::window::device_key(device);
        match self.devices.get_mut(&device) {
            Some(mut r) => *r = row,
            None => {
                if self.len() >= self.max_devices {
                    return Err(Rejected::Full);
                }
                if self.devices.insert(device, row).is_none() {
                    self.held.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.journal(device);
        self.applied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The digits of a JSON object's kept attributes.
    fn row(&self, value: &[u8]) -> Result<Row, Rejected> {
        if value.len() > MAX_ROW_BYTES {
            return Err(Rejected::Value);
        }
        let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(value) else {
            return Err(Rejected::Value);
        };
        let mut row = Vec::with_capacity(self.dimensions.len());
        for (d, values) in &self.dimensions {
            let v = match m.get(d) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                Some(_) => return Err(Rejected::Value),
            };
            if v.as_ref()
                .is_some_and(|v| v.len() > ingest::MAX_LABEL_BYTES)
            {
                return Err(Rejected::Value);
            }
            let digit = match values {
                Some(values) => v.and_then(|v| values.get(&v).copied()).unwrap_or(ABSENT),
                None => match v {
                    None => ABSENT,
                    Some(v) => self.intern(v)?,
                },
            };
            row.push(digit);
        }
        Ok(row.into_boxed_slice())
    }

    /// The number of a private dimension's value (interned once).
    fn intern(&self, v: String) -> Result<u16, Rejected> {
        if let Some(&n) = self
            .interned
            .read()
            .expect("not poisoned")
            .ids
            .get(v.as_str())
        {
            return Ok(n);
        }
        let mut t = self.interned.write().expect("not poisoned");
        if let Some(&n) = t.ids.get(v.as_str()) {
            return Ok(n);
        }
        if t.values.len() >= MAX_INTERNED_VALUES {
            return Err(Rejected::Full);
        }
        let n = t.values.len() as u16;
        let v: std::sync::Arc<str> = v.into();
        t.values.push(v.clone());
        t.ids.insert(v, n);
        Ok(n)
    }

    /// The value of private dimension `position` of the device whose
    /// [`crate::engine::window::device_key`] is `device`, if its row has one.
    pub fn private_value(&self, device: u64, position: usize) -> Option<std::sync::Arc<str>> {
        let n = self.devices.get(&device)?.get(position).copied()?;
        self.interned_value(n)
    }

    /// The private dimensions' value numbered `n` ([`ABSENT`]: none).
    pub(crate) fn interned_value(&self, n: u16) -> Option<std::sync::Arc<str>> {
        if n == ABSENT {
            return None;
        }
        self.interned
            .read()
            .expect("not poisoned")
            .values
            .get(n as usize)
            .cloned()
    }

    /// Call `f` with the row of the device whose [`crate::engine::window::device_key`] is
    /// `device`, if it has one.
    pub fn with_row<R>(&self, device: u64, f: impl FnOnce(Option<&[u16]>) -> R) -> R {
        let row = self.devices.get(&device);
        f(row.as_ref().map(|r| &r[..]))
    }

    /// The group of `device` in `grouping`: `group_in` with the device's
    /// row in this table.
    pub fn group_of(
        &self,
        grouping: &Grouping,
        positions: &[Option<usize>],
        device: u64,
        labels: &ingest::Labels,
        private_digit: Option<usize>,
    ) -> u32 {
        self.with_row(device, |row| {
            group_in(grouping, positions, row, labels, private_digit)
        })
    }
}

/// The group of a reading in `grouping` (`positions[i]`: where the
/// grouping's dimension `i` sits in a registry row, [`Registry::position`]):
/// each dimension's value from the reading's `labels` when it carries one,
/// else from the device's `row`; neither, or an undeclared value: that
/// dimension's `other`. The private dimension, if any, takes
/// `private_digit` (its bound slot, found by the caller).
pub(crate) fn group_in(
    grouping: &Grouping,
    positions: &[Option<usize>],
    row: Option<&[u16]>,
    labels: &ingest::Labels,
    private_digit: Option<usize>,
) -> u32 {
    grouping.index_digits(|i| match labels.get(grouping.dimension(i)) {
        _ if grouping.private_dimension() == Some(i) => private_digit,
        Some(v) => grouping.digit(i, v),
        None => {
            let p = positions.get(i).copied().flatten()?;
            let d = *row?.get(p)?;
            (d != ABSENT).then_some(d as usize)
        }
    })
}

/// Values of private dimensions and their numbers.
#[derive(Default)]
struct Interned {
    ids: std::collections::HashMap<std::sync::Arc<str>, u16>,
    values: Vec<std::sync::Arc<str>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn grouping() -> Grouping {
        use crate::config::dimensions::Dimension;
        let dims = BTreeMap::from([
            (
                "firmware".to_string(),
                Dimension::Public(vec!["4.1".to_string(), "4.2".to_string()]),
            ),
            (
                "region".to_string(),
                Dimension::Public(vec!["eu".to_string()]),
            ),
        ]);
        Grouping::new("s", &["firmware".into(), "region".into()], &dims).unwrap()
    }

    #[test]
    fn rows_labels_and_tombstones() {
        let dims = |d: &str, v: &[&str]| {
            (
                d.to_string(),
                Some(v.iter().map(|x| x.to_string()).collect()),
            )
        };
        let r = Registry::new(
            vec![dims("firmware", &["4.1", "4.2"]), dims("region", &["eu"])],
            2,
        );
        let g = grouping();
        let keys = g.keys();
        let none = ingest::Labels::new();
        let positions: Vec<Option<usize>> = g.dimensions().map(|d| r.position(d)).collect();
        let of = |dev: &str, labels: &ingest::Labels| {
            keys[r.group_of(
                &g,
                &positions,
                crate::engine::window::device_key(dev),
                labels,
                None,
            ) as usize]
                .clone()
        };
        assert_eq!(of("car-1", &none), "firmware=other,region=other");
        r.apply(
            Some(b"car-1"),
            Some(br#"{"firmware":"4.1","region":"eu","model":"x"}"#),
        )
        .unwrap();
        assert_eq!(of("car-1", &none), "firmware=4.1,region=eu");
        // A label on the reading wins over the row.
        let labels: ingest::Labels = [("firmware", "4.2")].into_iter().collect();
        assert_eq!(of("car-1", &labels), "firmware=4.2,region=eu");
        // An update moves the device; a tombstone forgets it.
        r.apply(Some(b"car-1"), Some(br#"{"firmware":"4.2"}"#))
            .unwrap();
        assert_eq!(of("car-1", &none), "firmware=4.2,region=other");
        r.apply(Some(b"car-1"), None).unwrap();
        assert_eq!(
            (of("car-1", &none).as_str(), r.len()),
            ("firmware=other,region=other", 0)
        );
        // Bad records are refused by kind; the table is bounded.
        assert_eq!(r.apply(None, Some(b"{}")), Err(Rejected::Key));
        assert_eq!(r.apply(Some(&[0xff]), Some(b"{}")), Err(Rejected::Key));
        assert_eq!(r.apply(Some(b"a"), Some(b"[1]")), Err(Rejected::Value));
        assert_eq!(
            r.apply(Some(b"a"), Some(br#"{"firmware":[1]}"#)),
            Err(Rejected::Value)
        );
        assert_eq!(
            r.apply(Some(b"a"), Some(&[b' '; MAX_ROW_BYTES + 1])),
            Err(Rejected::Value)
        );
        r.apply(Some(b"a"), Some(b"{}")).unwrap();
        r.apply(Some(b"b"), Some(br#"{"region":7}"#)).unwrap();
        assert_eq!(r.apply(Some(b"c"), Some(b"{}")), Err(Rejected::Full));
        // An update of a held device is not refused when full.
        r.apply(Some(b"b"), Some(br#"{"region":"eu"}"#)).unwrap();
        assert_eq!(r.len(), 2);
    }

    /// A private dimension keeps raw values (interned once), never digits.
    #[test]
    fn private_dimensions_keep_values() {
        let r = Registry::new(
            vec![
                ("firmware".into(), None),
                ("region".into(), Some(vec!["eu".into()])),
            ],
            10,
        );
        r.apply(Some(b"a"), Some(br#"{"firmware":"4.3","region":"eu"}"#))
            .unwrap();
        r.apply(Some(b"b"), Some(br#"{"firmware":"4.3"}"#)).unwrap();
        r.apply(Some(b"c"), Some(br#"{"firmware":7}"#)).unwrap();
        r.apply(Some(b"d"), Some(br#"{"region":"eu"}"#)).unwrap();
        let v = |d: &str| {
            r.private_value(crate::engine::window::device_key(d), 0)
                .map(|v| v.to_string())
        };
        assert_eq!(v("a").as_deref(), Some("4.3"));
        assert_eq!(v("b").as_deref(), Some("4.3"));
        assert_eq!(v("c").as_deref(), Some("7"));
        assert_eq!((v("d"), v("e")), (None, None));
        assert_eq!(r.interned.read().unwrap().values.len(), 2);
    }
}
