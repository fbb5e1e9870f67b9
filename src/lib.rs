//! # swa-zoo
//!
//! A model zoo of windowed attention on Burn. This facade re-exports the member crates,
//! [`attention`] (the windowed core), [`models`] and [`training`] (the library that trains and
//! evaluates them), gathers what a user calls most in [`prelude`], and holds the application
//! built on them:
//! - `runtime`: the backend, precision and devices a job runs on (`choice`: their names);
//! - `cli`: the `swa-zoo` command line, one module per subcommand;
//! - `bench`: the efficiency benchmarks (decode latency, KV bytes, training throughput);
//! - `check`: the cross-backend equivalence check;
//! - `study`: what the per-paper examples share (flags, runs, tables);
//! - `report`: figures, CSV, Markdown tables and the loss curve of a run;
//! - `error`: `AppError`, what the application could not do.
//!
//! The application is the default feature `app` and its figures the feature `plot`; with
//! `default-features = false, features = ["flex"]` this crate is the library alone:
//!
//! ```
//! use swa_zoo::prelude::*;
//!
//! let device = Default::default();
//! let preset = Preset::by_name("mswa-table2-mswa-tiny", 256).expect("a preset of the zoo");
//! let model = preset.config.init::<NdArray>(&device)?;
//! let tokens = Tensor::<NdArray, 2, Int>::from_ints([[72, 105, 33]], &device);
//! let logits = model.forward(tokens)?; // [batch, N, vocab]
//! assert_eq!(logits.dims(), [1, 3, 256]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use swa_attention as attention;
pub use swa_models as models;
pub use swa_training as training;

pub mod prelude;

#[cfg(feature = "app")]
pub mod bench;
#[cfg(feature = "app")]
pub mod check;
#[cfg(feature = "app")]
pub mod choice;
#[cfg(feature = "app")]
pub mod cli;
#[cfg(feature = "app")]
pub mod error;
#[cfg(feature = "plot")]
pub mod report;
#[cfg(feature = "app")]
pub mod runtime;
#[cfg(feature = "app")]
pub mod study;

#[cfg(feature = "app")]
pub use error::AppError;

/// The Rust snippets of the README and of the book (`docs/`), compiled and run as this crate's
/// doctests by the test command, so that none of them can rot.
#[cfg(doctest)]
pub mod snippets {
    /// Includes a Markdown file as the documentation of an empty struct.
    macro_rules! page {
        ($name:ident, $path:literal) => {
            #[doc = include_str!($path)]
            pub struct $name;
        };
    }
    page!(Readme, "../README.md");
    page!(Core, "../docs/guide/core.md");
    page!(Decoding, "../docs/guide/decoding.md");
    page!(Weights, "../docs/guide/weights.md");
    page!(Pretrained, "../docs/guide/pretrained.md");
    page!(Training, "../docs/guide/training.md");
    page!(Distributed, "../docs/guide/distributed.md");
    page!(Introduction, "../docs/introduction.md");
    page!(Semantics, "../docs/semantics.md");
    page!(Overview, "../docs/architecture/overview.md");
    page!(Backends, "../docs/architecture/backends.md");
    page!(Blocked, "../docs/architecture/blocked.md");
    page!(Kernels, "../docs/architecture/kernels.md");
    page!(Papers, "../docs/papers.md");
    page!(Testing, "../docs/testing.md");
    page!(Benchmarks, "../docs/benchmarks.md");
    page!(Benchmarking, "../docs/guide/benchmarking.md");
    page!(Reliability, "../docs/reliability.md");
}
