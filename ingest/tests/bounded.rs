//! A message over the reading limit is refused before its readings are
//! materialised: the decoder's peak heap use for a 900 KB batch of empty
//! readings (≈ 450,000 of them, 2 bytes each on the wire) stays far below
//! what those readings would take decoded; an OTLP/JSON request stops at
//! the first part past a bound, and the kinds FleetDP does not read are
//! skipped unbuilt. A counting allocator measures it.

use fleetdp_ingest::{Decoder, Format, Limits, Reason};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l` (the caller's contract).
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One test at a time: the counts are the process's.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Peak heap bytes allocated while `f` runs, above what was live before.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed) - base)
}

fn decoder() -> Decoder {
    Decoder::new(["temp".to_string()], Format::Json, Limits::default())
}

#[test]
fn oversized_batches_are_refused_without_materialising_them() {
    let _alone = alone();
    let d = decoder();
    // Protobuf: 450,000 empty `readings` entries (key 0x0a, length 0).
    let batch = [0x0a, 0x00].repeat(450_000);
    let ct = Format::ProtobufBatch.content_type();
    let (r, peak) = peak_during(|| d.decode(&batch, Some(ct)));
    assert_eq!(r.unwrap_err().reason, Reason::BatchSize);
    assert!(peak < 64 * 1024, "protobuf batch: {peak} bytes at peak");
    // JSON: 300,000 empty objects in a list and in a batch object.
    for body in [
        format!("[{}{{}}]", "{},".repeat(299_999)),
        format!("{{\"readings\":[{}{{}}]}}", "{},".repeat(299_999)),
    ] {
        let (r, peak) = peak_during(|| d.decode(body.as_bytes(), Some("application/json")));
        assert_eq!(r.unwrap_err().reason, Reason::BatchSize);
        // At most the allowed 10,000 readings (≈ 100 B each, in a vector
        // that doubles) were kept before the refusal; all 300,000 would
        // take ≈ 30 MB.
        assert!(peak < 4 << 20, "JSON: {peak} bytes at peak");
    }
}

fn otlp_json_decoder() -> Decoder {
    Decoder::new(["temp".to_string()], Format::OtlpJson, Limits::default()).with_otlp(
        fleetdp_ingest::OtlpMapping {
            device_attribute: "device.id".into(),
            metrics: vec![("t".into(), "temp".into())],
            labels: vec![],
        },
    )
}

/// One mapped gauge point of device `d1`, then `more` metrics.
fn otlp_json(attributes: &str, more: &str) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{attributes}{{"key":"device.id","value":{{"stringValue":"d1"}}}}]}},"scopeMetrics":[{{"metrics":[{{"name":"t","gauge":{{"dataPoints":[{{"timeUnixNano":"1795541400000000000","asDouble":21.5}}]}}}}{more}]}}]}}]}}"#
    )
}

#[test]
fn otlp_json_stops_at_a_bound_and_skips_what_it_does_not_read() {
    let _alone = alone();
    let d = otlp_json_decoder();
    let ct = Some("application/json");
    // 150,000 empty attributes on one resource (450 KB; ≈ 8 MB built).
    let body = otlp_json(&"{},".repeat(150_000), "");
    let (r, peak) = peak_during(|| d.decode(body.as_bytes(), ct));
    let e = r.unwrap_err();
    assert_eq!(e.reason, Reason::BatchSize);
    assert!(e.detail.contains("attributes on one resource"), "{e}");
    assert!(peak < 64 * 1024, "attributes: {peak} bytes at peak");
    // 10,001 resources: over the request's total.
    let body = format!(r#"{{"resourceMetrics":[{}{{}}]}}"#, "{},".repeat(10_000));
    let e = d.decode(body.as_bytes(), ct).unwrap_err();
    assert_eq!(e.reason, Reason::BatchSize);
    assert!(e.detail.contains("more than 10000 resources"), "{e}");
    // An unmapped histogram of 300,000 bucket counts (600 KB) is skipped,
    // not built (≈ 10 MB as JSON values); the gauge's reading is read.
    let counts = format!("[{}0]", "0,".repeat(299_999));
    let histogram =
        format!(r#",{{"name":"h","histogram":{{"dataPoints":[{{"bucketCounts":{counts}}}]}}}}"#);
    let body = otlp_json("", &histogram);
    let (r, peak) = peak_during(|| d.decode(body.as_bytes(), ct));
    assert_eq!(r.expect("the gauge's reading").len(), 1);
    assert!(peak < 64 * 1024, "histogram: {peak} bytes at peak");
    // A time that is neither a number nor a string is refused, not built.
    let body = otlp_json("", "").replace(r#""1795541400000000000""#, &counts);
    let e = d.decode(body.as_bytes(), ct).unwrap_err();
    assert_eq!(e.reason, Reason::Undecodable);
}
