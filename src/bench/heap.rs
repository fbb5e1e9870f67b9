//! Peak heap memory of a call, counted by a global allocator (the host's heap, as against the
//! models' segment memory).
//!
//! A binary opts in with `#[global_allocator] static A: CountingAllocator = CountingAllocator;`:
//! the `swa-zoo` binary does, for every command, and so do the `efficiency` and `cpu_attention`
//! benches and the `longnet` example. Elsewhere [`peak_during`] reports `None`: nothing was
//! counted.
//! Only heap memory allocated through Rust is counted, which on the CPU backends is every
//! tensor; a GPU driver's buffers (or lavapipe's emulated device memory) are not.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes live and their peak.
pub struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                - layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether this binary counts its allocations.
pub fn counting() -> bool {
    LIVE.load(Ordering::Relaxed) > 0
}

/// Runs `call` and returns its result with the most heap bytes held during it above what was
/// live before it; `None` when the binary does not count (see the module documentation).
pub fn peak_during<T>(call: impl FnOnce() -> T) -> (T, Option<usize>) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = call();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (out, counting().then_some(peak))
}

/// The peak resident memory of this process so far (Linux's VmHWM), in KiB; `None` where
/// `/proc/self/status` does not say. Unlike [`peak_during`], it counts every byte the process
/// holds (code, the allocator's slack, buffers outside Rust's allocator).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
