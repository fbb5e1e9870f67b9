//! The `swa-zoo` command: see `swa-zoo --help` and [`swa_zoo::training::cli`].

/// Counts heap bytes, so that `swa-zoo bench` can report peak memory.
#[global_allocator]
static ALLOCATOR: swa_zoo::training::bench::memory::CountingAllocator =
    swa_zoo::training::bench::memory::CountingAllocator;

fn main() {
    if let Err(problem) = swa_zoo::training::cli::main() {
        eprintln!("error: {problem}");
        std::process::exit(1);
    }
}
