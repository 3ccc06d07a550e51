//! What the differential tests of FleetDP's own binary readers share: the
//! comparison of a message's decoding with the reference library's, and
//! of the decoder's verdict with the JSON route's.

use fleetdp_ingest::{Decoder, Format, Limits, Mapping, Path, Rejection, TimeUnit};
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

/// Every path `m` reads.
pub fn paths_of(m: &Mapping) -> Vec<Path> {
    [&m.device_id, &m.event_time]
        .into_iter()
        .chain(m.streams.iter().chain(&m.labels).map(|(_, p)| p))
        .cloned()
        .collect()
}

/// A decoder of `format` reading through `m`, its streams `v0`..`v2`.
pub fn mapped_decoder(format: Format, m: &Mapping) -> Decoder {
    let names = (0..3).map(|k| format!("v{k}"));
    Decoder::new(names, format, Limits::default()).with_mapping(m.clone())
}

/// The JSON route's verdict on a message: the parts the paths read, built
/// as JSON (`built`), read as a mapped JSON document through `m`.
pub fn json_verdict(m: &Mapping, built: Result<Value, Rejection>) -> String {
    let json = built.and_then(|v| {
        mapped_decoder(Format::Json, m).decode(&serde_json::to_vec(&v).unwrap(), None)
    });
    format!("{json:?}")
}

/// A mapping of paths from `pool` (streams `v0`.., labels `g0`..): half
/// the mappings keep to its first `direct` paths (the ones a reader reads
/// straight from the bytes), the rest draw from all of it.
pub fn mapping(pool: &'static [&'static str], direct: usize) -> impl Strategy<Value = Mapping> {
    let unit = prop::sample::select(vec![
        TimeUnit::Milliseconds,
        TimeUnit::Seconds,
        TimeUnit::Microseconds,
        TimeUnit::Nanoseconds,
        TimeUnit::Rfc3339,
    ]);
    let n = pool.len();
    (
        (0..n, 0..n, unit),
        prop::collection::vec(0..n, 1..4),
        prop::collection::vec(0..n, 0..3),
        any::<bool>(),
    )
        .prop_map(move |((device, time, unit), streams, labels, keep)| {
            let pick = |i: usize| Path::parse(pool[if keep { i % direct } else { i }]).unwrap();
            let named = |prefix: &str, v: &[usize]| -> Vec<(String, Path)> {
                v.iter()
                    .enumerate()
                    .map(|(k, &i)| (format!("{prefix}{k}"), pick(i)))
                    .collect()
            };
            Mapping {
                device_id: pick(device),
                event_time: pick(time),
                unit,
                streams: named("v", &streams),
                labels: named("g", &labels),
            }
        })
}
