//! A message over the reading limit is refused before its readings are
//! materialised: the decoder's peak heap use for a 900 KB batch of empty
//! readings (≈ 450,000 of them, 2 bytes each on the wire) stays far below
//! what those readings would take decoded. A counting allocator measures it.

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
