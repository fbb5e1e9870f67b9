//! The `swa-zoo` command: see `swa-zoo --help` and [`swa_zoo::training::cli`].

fn main() {
    if let Err(problem) = swa_zoo::training::cli::main() {
        eprintln!("error: {problem}");
        std::process::exit(1);
    }
}
