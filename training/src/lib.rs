//! # swa-training
//!
//! Training, evaluation and the `swa-zoo` CLI, built on [`swa_models`]. This crate is empty
//! until the issue «Training with Burn's dashboard, data, evaluation, and the swa-zoo CLI»
//! fills it.
