//! A lane's per-device window counts ([`DeviceHorizon`]), eight bytes per
//! device: the memory bound of docs/DESIGN.md §9 ("Memory"); and its count
//! of devices whose entries are hosted in replica slots ([`HostedCount`],
//! module `hosted`).
//!
//! Privacy argument: the windower's bounding decisions read and write whole
//! [`DeviceHorizon`] values through [`DeviceCounts::update`]; this module
//! only encodes them, and the encoding changes nothing those decisions can
//! see. Fields are stored relative to a lane base (horizon, window seq);
//! a value that does not fit the packed form is kept whole in a side map
//! (`spill`), so no count is ever clipped or wrapped. The one normalisation
//! is that a `last_seq` of a window already closed (below `open_from`, the
//! lane's oldest open window) is stored as "no open window charged" (as a
//! fresh entry's `u64::MAX`) with `in_window` 0: the windower only asks
//! whether `last_seq` equals the seq of an open window or exceeds it, and
//! for every open seq both answers are "no" either way. A property test
//! runs the windower with tiny field widths (constant spilling and
//! rebasing) against the default layout and requires identical windows.

use super::FastMap;
use crate::engine::devices::DeviceTable;

/// A device's windows in its current horizon.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DeviceHorizon {
    pub(super) horizon: i64,
    pub(super) windows: u32,
    /// Readings in window `last_seq` (the window charged last); a device
    /// has readings in the open window exactly when it was charged in it.
    pub(super) in_window: u32,
    pub(super) last_seq: u64,
}

impl DeviceHorizon {
    /// No window charged yet in `horizon`.
    pub(super) fn fresh(horizon: i64) -> Self {
        Self {
            horizon,
            windows: 0,
            in_window: 0,
            last_seq: u64::MAX,
        }
    }
}

/// A lane's hosted devices, by the horizon of their counts (a handful of
/// horizons at any time: the lane's live ones).
#[derive(Debug, Default, Clone)]
pub(super) struct HostedCount {
    by_horizon: Vec<(i64, usize)>,
    live: usize,
}

impl HostedCount {
    pub(super) fn add(&mut self, horizon: i64) {
        self.live += 1;
        match self.by_horizon.iter_mut().find(|(h, _)| *h == horizon) {
            Some((_, n)) => *n += 1,
            None => self.by_horizon.push((horizon, 1)),
        }
    }

    /// One hosted device of `horizon` (not swept) is no longer hosted.
    pub(super) fn remove(&mut self, horizon: i64) {
        let i = self
            .by_horizon
            .iter()
            .position(|(h, _)| *h == horizon)
            .expect("a hosted device's horizon is counted");
        self.live -= 1;
        self.by_horizon[i].1 -= 1;
        if self.by_horizon[i].1 == 0 {
            self.by_horizon.swap_remove(i);
        }
    }

    /// The lane swept horizons before `before`: their hosted counts read as
    /// absent from now on.
    pub(super) fn sweep(&mut self, before: i64) {
        self.by_horizon.retain(|(h, _)| *h >= before);
        self.live = self.by_horizon.iter().map(|(_, n)| n).sum();
    }

    /// Hosted devices whose counts are of `horizon`.
    pub(super) fn of_horizon(&self, horizon: i64) -> usize {
        self.by_horizon
            .iter()
            .find(|(h, _)| *h == horizon)
            .map_or(0, |(_, n)| *n)
    }

    /// Hosted devices whose counts are not swept.
    #[inline]
    pub(super) fn live(&self) -> usize {
        self.live
    }
}

/// Bit widths of the packed fields (64 in all).
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    seq: u32,
    in_window: u32,
    windows: u32,
    horizon: u32,
}

impl Layout {
    /// `k` ≤ 10,000 < 2¹⁴ and `W` ≤ 10⁶ < 2²⁰ always fit; 1,023 horizons
    /// and ≈ 10⁶ windows past the lane's bases before anything spills.
    pub(super) const DEFAULT: Layout = Layout {
        seq: 20,
        in_window: 14,
        windows: 20,
        horizon: 10,
    };

    /// Widths so small that most entries spill and bases move often (tests).
    #[cfg(test)]
    pub(super) const TINY: Layout = Layout {
        seq: 3,
        in_window: 2,
        windows: 2,
        horizon: 1,
    };

    fn spilled(self) -> u64 {
        (1u64 << self.seq) - 1
    }
}

/// Where the relative fields start from.
#[derive(Debug, Clone, Copy)]
struct Bases {
    horizon: i64,
    seq: u64,
}

/// Per-device counts of one lane.
#[derive(Debug, Clone)]
pub(super) struct DeviceCounts {
    table: DeviceTable<u64>,
    /// Entries whose slot holds the `spilled` marker.
    spill: FastMap<u64, DeviceHorizon>,
    layout: Layout,
    /// Set by the first update or sweep.
    bases: Option<Bases>,
}

impl Default for DeviceCounts {
    fn default() -> Self {
        Self::with_layout(Layout::DEFAULT)
    }
}

impl DeviceCounts {
    pub(super) fn with_layout(layout: Layout) -> Self {
        Self {
            table: DeviceTable::default(),
            spill: FastMap::default(),
            layout,
            bases: None,
        }
    }

    /// Empty counts whose table holds `devices` without growing.
    pub(super) fn with_capacity(layout: Layout, devices: usize) -> Self {
        Self {
            table: DeviceTable::with_capacity(devices),
            ..Self::with_layout(layout)
        }
    }

    /// Devices held.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Devices whose counts are of `horizon` (one pass over the table: the
    /// device-limit alarm's query, once a window where a stream has one).
    pub(super) fn of_horizon(&self, horizon: i64) -> usize {
        let Some(bases) = self.bases else {
            return 0;
        };
        let spilled = self.layout.spilled();
        let mut n = 0;
        self.table.for_each(|dk, &v| {
            let h = match v == spilled {
                true => self.spill.get(&dk).map_or(i64::MIN, |d| d.horizon),
                false => unpack(self.layout, bases, v).horizon,
            };
            n += usize::from(h == horizon);
        });
        n
    }

    /// Bytes held (slots, and the spilled entries at 48 B each).
    pub(super) fn bytes(&self) -> usize {
        self.table.bytes() + self.spill.capacity() * 48
    }

    #[inline]
    pub(super) fn prefetch(&self, dk: u64) {
        self.table.prefetch(dk);
    }

    /// Run `f` on device `dk`'s counts, which start as `fresh` when the
    /// device is new; a new device is refused (`None`, nothing changed)
    /// when the lane already holds `limit` devices. `open_from`: the lane's
    /// oldest open window (every admitted reading's seq is at least this).
    pub(super) fn update<R>(
        &mut self,
        dk: u64,
        fresh: DeviceHorizon,
        open_from: u64,
        limit: usize,
        f: impl FnOnce(&mut DeviceHorizon) -> R,
    ) -> Option<R> {
        let layout = self.layout;
        let bases = *self.bases.get_or_insert(Bases {
            horizon: fresh.horizon.saturating_sub(1),
            seq: open_from,
        });
        // Move the seq base on once the open windows are half the seq
        // range past it: one pass over the table per ≈ 2^(seq-1) windows.
        let half = 1u64 << (layout.seq - 1);
        if open_from.saturating_sub(bases.seq) >= half {
            self.rebase(bases.horizon, open_from, |_| true);
            return self.update(dk, fresh, open_from, limit, f);
        }
        let spilled = layout.spilled();
        let fresh_packed = pack(layout, bases, &fresh, open_from).unwrap_or(spilled);
        let slot = self
            .table
            .get_or_insert_if(dk, fresh_packed, |len| len < limit)?;
        let mut entry = if *slot == spilled {
            self.spill.get(&dk).copied().unwrap_or(fresh)
        } else {
            unpack(layout, bases, *slot)
        };
        let was_spilled = *slot == spilled;
        let r = f(&mut entry);
        match pack(layout, bases, &entry, open_from) {
            Some(v) => {
                *slot = v;
                if was_spilled {
                    self.spill.remove(&dk);
                }
            }
            None => {
                *slot = spilled;
                self.spill.insert(dk, entry);
            }
        }
        Some(r)
    }

    /// Take device `dk`'s counts out of the table (to be hosted elsewhere:
    /// docs/DESIGN.md §4, group-by, "the whole device slot").
    pub(super) fn take(&mut self, dk: u64) -> Option<DeviceHorizon> {
        let v = self.table.remove(dk)?;
        Some(if v == self.layout.spilled() {
            self.spill
                .remove(&dk)
                .expect("a spilled slot has its entry")
        } else {
            unpack(self.layout, self.bases.expect("an entry sets the bases"), v)
        })
    }

    /// Put device `dk`'s counts (held elsewhere until now) back in the
    /// table, whatever the device limit: the device was counted all along.
    pub(super) fn put(&mut self, dk: u64, e: DeviceHorizon, open_from: u64) {
        self.update(dk, e, open_from, usize::MAX, |x| *x = e);
    }

    /// Drop the devices `keep` refuses and re-encode the rest against new
    /// bases: horizons from `horizon_base`, windows from `open_from` (the
    /// lane's oldest open window). One pass, in place.
    pub(super) fn rebase(
        &mut self,
        horizon_base: i64,
        open_from: u64,
        keep: impl Fn(&DeviceHorizon) -> bool,
    ) {
        let layout = self.layout;
        let spilled = layout.spilled();
        let Some(old) = self.bases else {
            return;
        };
        let new = Bases {
            horizon: horizon_base,
            seq: open_from,
        };
        let mut old_spill = std::mem::take(&mut self.spill);
        let mut new_spill = FastMap::default();
        self.table.retain_mut(|dk, v| {
            let e = if *v == spilled {
                old_spill.remove(&dk).expect("a spilled slot has its entry")
            } else {
                unpack(layout, old, *v)
            };
            if !keep(&e) {
                return false;
            }
            *v = pack(layout, new, &e, open_from).unwrap_or_else(|| {
                new_spill.insert(dk, e);
                spilled
            });
            true
        });
        self.spill = new_spill;
        self.bases = Some(new);
    }
}

fn pack(l: Layout, b: Bases, e: &DeviceHorizon, open_from: u64) -> Option<u64> {
    let horizon = u64::try_from(e.horizon.checked_sub(b.horizon)?).ok()?;
    let (seq, in_window) = if e.last_seq == u64::MAX || e.last_seq < open_from {
        (0, 0)
    } else {
        let rel = e.last_seq.checked_sub(b.seq)?.checked_add(1)?;
        (rel, u64::from(e.in_window))
    };
    let windows = u64::from(e.windows);
    let fits = |v: u64, bits: u32| v < (1u64 << bits);
    if seq >= l.spilled()
        || !fits(in_window, l.in_window)
        || !fits(windows, l.windows)
        || !fits(horizon, l.horizon)
    {
        return None;
    }
    Some(
        seq | in_window << l.seq
            | windows << (l.seq + l.in_window)
            | horizon << (l.seq + l.in_window + l.windows),
    )
}

fn unpack(l: Layout, b: Bases, v: u64) -> DeviceHorizon {
    let field = |shift: u32, bits: u32| (v >> shift) & ((1u64 << bits) - 1);
    let seq = field(0, l.seq);
    DeviceHorizon {
        horizon: b.horizon + field(l.seq + l.in_window + l.windows, l.horizon) as i64,
        windows: field(l.seq + l.in_window, l.windows) as u32,
        in_window: field(l.seq, l.in_window) as u32,
        last_seq: if seq == 0 { u64::MAX } else { b.seq + seq - 1 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Whatever packs unpacks to the same counts, up to the documented
    /// normalisation of closed windows; what does not fit is refused.
    #[test]
    fn packing_round_trips() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for layout in [Layout::DEFAULT, Layout::TINY] {
            for _ in 0..100_000 {
                let b = Bases {
                    horizon: rng.gen_range(-5..5_000_000),
                    seq: rng.gen_range(0..1u64 << 40),
                };
                let open_from = b.seq + rng.gen_range(0..2_000_000);
                let e = DeviceHorizon {
                    horizon: b.horizon + rng.gen_range(-2..1100),
                    windows: rng.gen_range(0..1_100_000),
                    in_window: rng.gen_range(0..20_000),
                    last_seq: match rng.gen_range(0..4) {
                        0 => u64::MAX,
                        1 => open_from.saturating_sub(rng.gen_range(1..100)),
                        _ => open_from + rng.gen_range(0..1_100_000),
                    },
                };
                let Some(v) = pack(layout, b, &e, open_from) else {
                    continue;
                };
                assert_ne!(v, layout.spilled());
                let back = unpack(layout, b, v);
                assert_eq!((back.horizon, back.windows), (e.horizon, e.windows));
                if e.last_seq == u64::MAX || e.last_seq < open_from {
                    assert_eq!((back.last_seq, back.in_window), (u64::MAX, 0));
                } else {
                    assert_eq!((back.last_seq, back.in_window), (e.last_seq, e.in_window));
                }
            }
        }
    }

    /// Against a plain map of whole values under random updates, sweeps
    /// and a moving open window: the same counts, in both layouts.
    #[test]
    fn agrees_with_a_map_of_whole_values() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for layout in [Layout::DEFAULT, Layout::TINY] {
            let mut counts = DeviceCounts::with_layout(layout);
            let mut reference: std::collections::HashMap<u64, DeviceHorizon> = Default::default();
            let (mut open_from, mut oldest_horizon) = (1_000u64, 50i64);
            for step in 0..60_000 {
                let dk = rng.gen_range(0..300u64);
                let horizon = oldest_horizon + rng.gen_range(0..4);
                let seq = open_from + rng.gen_range(0..12);
                let fresh = DeviceHorizon::fresh(horizon);
                let change = |e: &mut DeviceHorizon| {
                    let before = *e;
                    if e.last_seq != seq {
                        e.windows += 1;
                        e.in_window = 0;
                    }
                    e.in_window += 1;
                    e.last_seq = seq;
                    e.horizon = e.horizon.max(horizon);
                    before
                };
                let got = counts.update(dk, fresh, open_from, usize::MAX, change);
                let want = change(reference.entry(dk).or_insert(fresh));
                let norm = |e: DeviceHorizon| {
                    if e.last_seq == u64::MAX || e.last_seq < open_from {
                        (e.horizon, e.windows, 0, u64::MAX)
                    } else {
                        (e.horizon, e.windows, e.in_window, e.last_seq)
                    }
                };
                assert_eq!(got.map(norm), Some(norm(want)), "step {step}");
                if rng.gen_ratio(1, 50) {
                    open_from += rng.gen_range(1..6);
                }
                if rng.gen_ratio(1, 500) {
                    oldest_horizon += 1;
                    let keep = |e: &DeviceHorizon| e.horizon >= oldest_horizon;
                    counts.rebase(oldest_horizon, open_from, keep);
                    reference.retain(|_, e| keep(e));
                    assert_eq!(counts.len(), reference.len());
                }
            }
        }
    }

    /// A full lane refuses new devices and still serves the ones it holds.
    #[test]
    fn limit_refuses_only_new_devices() {
        let mut c = DeviceCounts::default();
        let fresh = DeviceHorizon::fresh(7);
        for dk in 1..=3 {
            assert!(c.update(dk, fresh, 0, 3, |_| ()).is_some());
        }
        assert!(c.update(4, fresh, 0, 3, |_| ()).is_none());
        assert_eq!(c.len(), 3);
        assert!(c.update(2, fresh, 0, 3, |e| e.windows += 1).is_some());
    }
}
