//! # swa-training
//!
//! Training, evaluation, data and the `swa-zoo` CLI, built on [`swa_models`]:
//! - [`corpus`]: byte- and word-level corpora, with an embedded default;
//! - [`tasks`]: synthetic long-range tasks (MQAR, passkey retrieval, the majority vote of
//!   Longformer's example); [`synthetic`]: training on them and their accuracy;
//! - [`loader`]: reproducible batches for the Learner;
//! - [`language_model`], [`metrics`], [`schedule`], [`renderer`], [`train`], [`checkpoint`]: the
//!   training run; [`mixed_precision`]: f16 and bf16 training on f32 master weights with loss
//!   scaling;
//! - [`eval`]: evaluation at several lengths and windows, in parallel or decoded;
//! - [`plot`], [`curve`]: CSV and SVG figures, the loss curve of a run;
//! - [`config_file`]: strict reading of JSON configurations;
//! - [`check`]: the cross-backend equivalence check;
//! - [`bench`]: the efficiency benchmarks (decode latency, KV bytes, training throughput);
//! - [`study`]: what the per-paper examples share (flags, runs, tables);
//! - [`cli`]: the `swa-zoo` command line.

pub mod bench;
pub mod check;
pub mod checkpoint;
pub mod cli;
pub mod config_file;
pub mod corpus;
pub mod curve;
pub mod eval;
pub mod language_model;
pub mod loader;
pub mod metrics;
pub mod mixed_precision;
pub mod plot;
pub mod renderer;
pub mod schedule;
pub mod study;
pub mod synthetic;
pub mod tasks;
pub mod train;
