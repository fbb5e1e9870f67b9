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
