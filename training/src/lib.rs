//! # swa-training
//!
//! Training, evaluation and data for the [`swa_models`] decoders on Burn's Learner:
//! - [`corpus`]: byte- and word-level corpora, with an embedded default;
//! - [`tasks`]: synthetic long-range tasks (MQAR, passkey retrieval, the majority vote of
//!   Longformer's example); [`synthetic`]: training on them and their accuracy;
//! - [`batch`]: the token batches the model reads; [`loader`]: reproducible batches of text
//!   windows or task examples for the Learner;
//! - [`language_model`], [`metrics`], [`schedule`], [`renderer`], [`train`], [`checkpoint`]: the
//!   training run, on any [`TrainingBackend`]; [`mixed_precision`]: f16 and bf16 training on f32
//!   master weights with loss scaling;
//! - [`distributed`]: training over several processes or machines on Burn's collective (data
//!   parallelism, and LongNet's sequence parallelism);
//! - [`eval`]: evaluation at several lengths and windows, in parallel or decoded;
//! - [`config_file`]: strict reading of JSON configurations;
//! - [`error`]: [`TrainingError`], the one error type, naming what failed and where.
//!
//! The `swa-zoo` command line, the benchmarks, the cross-backend check and the figures are the
//! application's, in the `swa-zoo` facade crate.
//!
//! A few steps of a tiny sliding-window model on the embedded corpus, read back from its
//! folder:
//!
//! ```
//! use burn::backend::{Autodiff, NdArray};
//! use swa_models::layers::AttentionKind;
//! use swa_models::DecoderConfig;
//! use swa_training::{TrainedRun, corpus::Corpus, train::{TrainConfig, train}};
//!
//! let device = Default::default();
//! let out = std::env::temp_dir().join(format!("swa-training-doc-{}", std::process::id()));
//! let kinds = vec![AttentionKind::Sliding { window: 16 }];
//! let model = DecoderConfig::new(kinds).with_d_model(32).with_layers(2);
//! let config = TrainConfig::new(model, 32).with_steps(4).with_checkpoint_every(2);
//! train::<Autodiff<NdArray>>(&config, &Corpus::embedded(), &out, false, &device)?;
//! let run = TrainedRun::<NdArray>::load(&out, &device)?;
//! assert_eq!(run.config.steps, 4);
//! # std::fs::remove_dir_all(&out).ok();
//! # Ok::<(), swa_training::TrainingError>(())
//! ```

pub mod backend;
pub mod batch;
pub mod checkpoint;
pub mod checkpoint_file;
pub mod config_file;
pub mod corpus;
pub mod distributed;
pub mod error;
pub mod eval;
pub mod language_model;
pub mod loader;
pub mod metric_logs;
pub mod metrics;
pub mod mixed_precision;
pub mod renderer;
mod resume_logs;
pub mod run;
pub mod run_lock;
mod run_log;
pub mod schedule;
pub mod stop;
pub mod stream_memory;
pub mod synthetic;
pub mod tasks;
pub mod tokenized;
pub mod train;
mod train_config;

pub use backend::TrainingBackend;
pub use error::TrainingError;
pub use run::TrainedRun;
