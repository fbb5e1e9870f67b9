//! The application in the facade: `swa-zoo train` and its runs ([`train`]), the cross-backend
//! check, the efficiency benchmarks and the per-paper examples' smoke runs, the library example.

mod attention_map;
mod bench;
mod check_backends;
mod cli;
mod examples;
mod finetune;
mod gguf;
mod library;
mod pretrained;
mod report;
mod train;
