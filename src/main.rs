//! The `swa-zoo` command: see `swa-zoo --help` and [`swa_zoo::cli`].

/// Counts heap bytes, so that `swa-zoo bench` can report peak memory.
#[global_allocator]
static ALLOCATOR: swa_zoo::bench::heap::CountingAllocator = swa_zoo::bench::heap::CountingAllocator;

fn main() {
    if let Err(problem) = swa_zoo::cli::main() {
        problem.report();
        std::process::exit(problem.exit_code());
    }
}

#[cfg(test)]
mod tests {
    use swa_zoo::bench::heap::{counting, peak_during};

    /// This binary's allocator counts a call's peak heap above what was live before it (older
    /// memory the call frees included), and reports it.
    #[test]
    fn the_binary_counts_a_calls_peak_heap() {
        assert!(counting(), "the swa-zoo binary installs the counting allocator");
        let older = vec![1u8; 1 << 20];
        let ((), peak) = peak_during(|| {
            drop(older);
            std::hint::black_box(vec![2u8; 3 << 20]);
        });
        let peak = peak.expect("a counting binary reports a peak");
        assert!((2 << 20..(2 << 20) + (1 << 18)).contains(&peak), "peak {peak} bytes");
    }
}
