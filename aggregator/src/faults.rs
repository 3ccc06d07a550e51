//! Crash points for the crash test. `FLEETDP_CRASH_AT=<point>:<n>` makes the
//! process kill itself with SIGKILL the n-th time it reaches `<point>`, so
//! the test can stop an instance exactly between two steps of the release
//! protocol (e.g. after a release is acknowledged and before the offset
//! commit). Only with the cargo feature `crash-points` (the test suite
//! enables it); a production build compiles every crash point to nothing.

#[cfg(feature = "crash-points")]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "crash-points")]
use std::sync::OnceLock;

/// Where the release protocol can be interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// A window closed; nothing written yet.
    BeforeState,
    /// Its charges are in the state topic; the release is not published.
    BeforeRelease,
    /// The release is acknowledged; the input offset is not committed.
    AfterRelease,
    /// An offset commit was just sent.
    AfterCommit,
    /// Partitions were assigned; the ledger is read but not applied.
    DuringRebalance,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 5] = [
        CrashPoint::BeforeState,
        CrashPoint::BeforeRelease,
        CrashPoint::AfterRelease,
        CrashPoint::AfterCommit,
        CrashPoint::DuringRebalance,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CrashPoint::BeforeState => "before_state",
            CrashPoint::BeforeRelease => "before_release",
            CrashPoint::AfterRelease => "after_release",
            CrashPoint::AfterCommit => "after_commit",
            CrashPoint::DuringRebalance => "during_rebalance",
        }
    }
}

#[cfg(feature = "crash-points")]
struct Armed {
    point: CrashPoint,
    at: u64,
    hits: AtomicU64,
}

#[cfg(feature = "crash-points")]
fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let v = std::env::var("FLEETDP_CRASH_AT").ok()?;
            let (name, n) = v.split_once(':').unwrap_or((v.as_str(), "1"));
            let point = CrashPoint::ALL.into_iter().find(|p| p.as_str() == name)?;
            let at = n.parse().ok().filter(|&n| n > 0)?;
            Some(Armed {
                point,
                at,
                hits: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Die here (SIGKILL, no cleanup) if this point is armed and its count is reached.
#[cfg(feature = "crash-points")]
pub fn crash_point(point: CrashPoint) {
    if let Some(a) = armed() {
        if a.point == point && a.hits.fetch_add(1, Ordering::Relaxed) + 1 == a.at {
            eprintln!("fleetdp: crash point {} reached: SIGKILL", point.as_str());
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}

/// Without the `crash-points` feature: nothing.
#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub fn crash_point(_: CrashPoint) {}

#[cfg(all(test, not(feature = "crash-points")))]
mod tests {
    use super::*;

    /// A build without the feature ignores an armed crash point.
    #[test]
    fn crash_points_are_inert_without_the_feature() {
        std::env::set_var("FLEETDP_CRASH_AT", "before_state:1");
        for p in CrashPoint::ALL {
            crash_point(p);
        }
        std::env::remove_var("FLEETDP_CRASH_AT");
    }
}
