//! # swa-models
//!
//! The decoder model zoo of swa-zoo, built on [`swa_attention`]'s windowed core. This crate is
//! empty until the issue «The attention layers and the decoder model zoo» fills it.
