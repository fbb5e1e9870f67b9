//! # swa-zoo
//!
//! A model zoo of windowed attention on Burn. This facade re-exports the member crates,
//! [`attention`] (the windowed core), [`models`] and [`training`] (the library that trains and
//! evaluates them), and holds the application built on them:
//! - [`runtime`]: the backend, precision and devices a job runs on;
//! - [`cli`]: the `swa-zoo` command line, one module per subcommand;
//! - [`bench`](mod@bench): the efficiency benchmarks (decode latency, KV bytes, training throughput);
//! - [`check`]: the cross-backend equivalence check;
//! - [`study`]: what the per-paper examples share (flags, runs, tables);
//! - [`report`]: figures, CSV, Markdown tables and the loss curve of a run;
//! - [`error`]: [`AppError`], what the application could not do.

pub use swa_attention as attention;
pub use swa_models as models;
pub use swa_training as training;

pub mod bench;
pub mod check;
pub mod cli;
pub mod error;
pub mod report;
pub mod runtime;
pub mod study;

pub use error::AppError;
