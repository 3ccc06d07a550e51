//! What the windower takes and gives: device keys, a stream's rules, a
//! reading's admission, a closed window with what of it is published, and
//! where a lane resumes. The privacy argument is in the parent module.

use std::collections::HashMap;

/// Device ids are keyed by their 64-bit rapidhash V3 (the portable variant
/// with the default secrets, whose output the crate keeps stable across
/// versions, so keys written to the state topic stay valid): one hash per
/// reading, a few nanoseconds, no allocation. A collision (≈ n²/2⁶⁵ for
/// random ids; an input producer could craft one, the hash is not
/// cryptographic) can only make two devices share caps, which drops
/// readings and never lets a device exceed its bounds.
pub fn device_key(device: &str) -> u64 {
    rapidhash::v3::rapidhash_v3(device.as_bytes())
}

/// Names the [`device_key`] function in state records: charges written under
/// another scheme cannot be matched to devices and are refused on restore.
pub const DEVICE_KEY_SCHEME: &str = "rapidhash-v3";

/// Small maps read per reading (lanes, stream names): a fast seeded hash, not SipHash.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Per-stream settings the windower needs (public parameters).
#[derive(Debug, Clone)]
pub struct StreamRules {
    pub name: String,
    pub window_size: usize,
    pub max_readings_per_device: u32,
    pub max_windows_per_device: u32,
    /// Midpoint of the universe in units (padding value).
    pub midpoint: i64,
    /// Close a window padded to `n` once a reading arrives this much later
    /// (event time) than the window's first reading (count windows only).
    pub timeout_ms: Option<i64>,
    /// Time windows of this length (ms); `None`: count windows of `window_size`.
    pub window_ms: Option<i64>,
    /// Count the lane's devices of the horizon at each close
    /// ([`ClosedWindow::horizon_devices`]): the stream has a device-limit
    /// alarm.
    pub count_devices: bool,
    /// A group of a grouped stream: its lane shares the device's group cap
    /// with its sibling groups.
    pub group: Option<LaneGroup>,
}

/// Where a group's lane sits among its stream's groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneGroup {
    /// Stream index of the stream's first group (groups are consecutive).
    pub first: usize,
    /// How many groups the stream has.
    pub count: usize,
    /// This group's position.
    pub index: u32,
    /// `G`: groups a device may count in per horizon.
    pub max_groups: u32,
}

/// Most readings one time window holds; later ones are dropped
/// (`window_full`): the bound the plan's overflow proof assumes.
pub(crate) const MAX_TIME_WINDOW_READINGS: usize =
    crate::dp::release::MAX_TIME_WINDOW_READINGS as usize;

/// What happened to one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Accepted,
    /// Its offset is inside a window released before a restart.
    AlreadyReleased,
    /// The device already has `k` readings in this window.
    DroppedWindowCap,
    /// The device already touched `W` windows in this horizon.
    DroppedHorizonCap,
    /// Time windows: its window was already released, or its message
    /// arrived after the window's end plus the allowed lateness.
    DroppedLate,
    /// Time windows: its device already has readings in a later window.
    DroppedOutOfOrder,
    /// A new device in a lane already counting `limits.max_devices_per_lane`
    /// devices (a memory bound; see docs/configuration.md, limits).
    DroppedDeviceLimit,
    /// Time windows: the window holds `MAX_TIME_WINDOW_READINGS`.
    DroppedWindowFull,
    /// Grouped streams: the device already counts in `G` other groups of
    /// the stream in this horizon.
    DroppedGroupCap,
}

/// A full window, ready to release.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedWindow {
    pub stream: usize,
    pub partition: i32,
    pub seq: u64,
    pub values: Vec<i64>,
    pub first_offset: i64,
    pub last_offset: i64,
    /// Index of the window's last reading within its message (a message may
    /// hold readings of two windows; a restart resumes after this one).
    pub last_index: u32,
    /// Count windows: the earliest and latest event time among the
    /// window's readings. Time windows: the window's bounds `[start, end)`.
    pub first_event_ms: i64,
    pub last_event_ms: i64,
    /// How many of the values are midpoint padding (count windows; public).
    pub padded: u64,
    /// A time window: its size and offsets are private (add-remove) and
    /// only its bounds and seq are published ([`ClosedWindow::published`]).
    pub timed: bool,
    /// Devices charged one of their `W` windows by this window, with the
    /// horizon charged (internal state, never published).
    pub charges: Vec<(u64, i64)>,
    /// With [`StreamRules::count_devices`]: the horizon of the window's
    /// lateness reference and the devices whose counts in the lane are of
    /// that horizon, after the close (internal: the alarm's private query).
    pub horizon_devices: Option<(i64, u64)>,
    /// The lane's lateness reference after this window: the latest event
    /// time of any window so far (monotone).
    pub reference_event_ms: i64,
    /// Earlier windows whose charges can no longer matter (every horizon
    /// they charged is older than any reading the lane still accepts): their
    /// state records can be deleted (compaction tombstones).
    pub retired: Vec<u64>,
    /// How many state records hold the charges of each retired window (same
    /// order as `retired`; see `charge_records`).
    pub retired_records: Vec<u32>,
}

/// The window metadata a release publishes beside its noisy statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedWindow {
    pub seq: u64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub first_event_ms: i64,
    pub last_event_ms: i64,
    pub n: u64,
    pub padded: u64,
    /// The release time to publish; `None`: the moment it is built.
    pub released_at_ms: Option<i64>,
}

impl ClosedWindow {
    /// What a release may say about this window without noise.
    ///
    /// Count windows (change-one): offsets, arrival event times, `n` and
    /// padding are functions of who sent readings and when, which that
    /// relation makes public. Time windows (add-remove): only the seq and
    /// the window's bounds, which no reading decides; offsets, `n` and
    /// padding would count the readings, so they are published as 0, and
    /// the release time is the window's due moment (end + `lateness_ms`).
    pub fn published(&self, lateness_ms: i64) -> PublishedWindow {
        if self.timed {
            PublishedWindow {
                seq: self.seq,
                first_offset: 0,
                last_offset: 0,
                first_event_ms: self.first_event_ms,
                last_event_ms: self.last_event_ms,
                n: 0,
                padded: 0,
                released_at_ms: Some(self.last_event_ms.saturating_add(lateness_ms)),
            }
        } else {
            PublishedWindow {
                seq: self.seq,
                first_offset: self.first_offset,
                last_offset: self.last_offset,
                first_event_ms: self.first_event_ms,
                last_event_ms: self.last_event_ms,
                n: self.values.len() as u64,
                padded: self.padded,
                released_at_ms: None,
            }
        }
    }
}

/// Where a (stream, partition) resumes after a restart, from the release ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Seq of the last released window.
    pub last_seq: u64,
    /// Last input offset of that window.
    pub last_offset: i64,
    /// Index of its last reading within that message.
    pub last_index: u32,
    /// The lane's lateness reference after it ([`ClosedWindow::reference_event_ms`]).
    pub reference_event_ms: i64,
}

/// Device charges per state record: a window's charges are split into
/// records of at most this many (≈ 12 bytes each, so ≈ 0.5 MB a record,
/// under Kafka's default 1 MB message limit).
pub const MAX_CHARGES_PER_RECORD: usize = 40_000;

/// State records holding `charges` device charges (at least one).
pub fn charge_records(charges: usize) -> u32 {
    charges.div_ceil(MAX_CHARGES_PER_RECORD).max(1) as u32
}
