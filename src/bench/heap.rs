//! Peak heap memory of a call, counted by a global allocator (the host's heap, as against the
//! models' segment memory).
//!
//! A binary opts in with `#[global_allocator] static A: CountingAllocator = CountingAllocator;`:
//! the `swa-zoo` binary does (for `swa-zoo bench`), and so do the `efficiency` and
//! `cpu_attention` benches and the `longnet` example. It counts only inside [`peak_during`], so
//! the binary's other commands (`train`, `generate`) pay no counting. Elsewhere [`peak_during`]
//! reports `None`: nothing was counted.
//! Only heap memory allocated through Rust is counted, which on the CPU backends is every
//! tensor; a GPU driver's buffers (or lavapipe's emulated device memory) are not.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// The system allocator, counting the bytes allocated and freed while a [`peak_during`] call
/// runs, and nothing otherwise: outside a measurement (a training run, say) each allocation
/// costs one relaxed load more than the system allocator's.
pub struct CountingAllocator;

/// Set by the allocator's first call: this binary installed it.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Whether a measurement is running.
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Bytes allocated less bytes freed since the measurement began (negative where it freed
/// more than it allocated), and the largest value it took.
static HELD: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// One measurement at a time.
static MEASURING: Mutex<()> = Mutex::new(());

/// Adds `bytes` (negative: freed) to the running measurement, if any.
fn count(bytes: isize) {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    if COUNTING.load(Ordering::Relaxed) {
        let held = HELD.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PEAK.fetch_max(held, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether this binary counts its allocations.
pub fn counting() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Runs `call` and returns its result with the most heap bytes held during it above what was
/// live before it; `None` when the binary does not count (see the module documentation).
/// Measurements run one at a time: a second waits for the first.
pub fn peak_during<T>(call: impl FnOnce() -> T) -> (T, Option<usize>) {
    let _one = MEASURING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HELD.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let out = call();
    COUNTING.store(false, Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed).max(0) as usize;
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
