//! What the differential tests of FleetDP's own binary readers share: the
//! comparison of a message's decoding with the reference library's.

use fleetdp_ingest::{Path, Rejection};
use proptest::prelude::*;
use serde_json::Value;

/// `ours` (FleetDP's reader, the whole value) against `theirs` (the
/// reference): both refuse, or both accept with the same value — except a
/// refusal of ours whose detail contains `ours_may_refuse` (a bound on what
/// is built). Then `view` (ours, only what `paths` read) is accepted alike
/// and finds, for every path, what the whole value has — except that where
/// only that bound refused the whole value, the view (which builds less)
/// may accept, and then finds what the reference has.
pub fn agree(
    ours: &Result<Value, Rejection>,
    theirs: &Result<Value, Rejection>,
    view: &Result<Value, Rejection>,
    paths: &[Path],
    ours_may_refuse: Option<&str>,
) -> Result<(), TestCaseError> {
    match (ours, theirs) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => prop_assert!(
            ours_may_refuse.is_some_and(|t| e.detail.contains(t)),
            "only FleetDP refused: {}",
            e.detail
        ),
        (Ok(_), Err(e)) => prop_assert!(false, "only the reference refused: {}", e.detail),
    }
    let bound_only = matches!((ours, theirs), (Err(e), Ok(_))
        if ours_may_refuse.is_some_and(|t| e.detail.contains(t)));
    let full = match (view, ours, theirs) {
        (Ok(_), Err(_), Ok(reference)) if bound_only => reference,
        (Ok(_), Ok(full), _) => full,
        _ => {
            prop_assert_eq!(view.is_ok(), ours.is_ok(), "{:?}", view.as_ref().err());
            return Ok(());
        }
    };
    let view = view.as_ref().expect("accepted");
    for p in paths {
        prop_assert_eq!(p.find(view), p.find(full), "{}", p.as_str());
    }
    Ok(())
}
