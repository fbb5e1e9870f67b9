//! # swa-models
//!
//! Decoder language models of swa-zoo ("Transformer++", docs/semantics.md §8) assembled from a list of
//! per-layer [`swa_attention::layers::AttentionKind`]s, with presets that reproduce the seed
//! papers' configurations.

mod architecture;
mod block;
mod decoder;
mod error;
pub mod files;
mod generate;
pub mod hf;
mod info;
mod mlp;
pub mod panics;
pub mod presets;
mod rng;
pub mod sampling;
mod sizes;
pub mod weights;

pub use architecture::Architecture;
pub use block::Block;
pub use decoder::{Decoder, DecoderCache, DecoderConfig};
pub use error::ModelError;
pub use generate::GenerateConfig;
pub use info::ModelInfo;
pub use mlp::{GatedMlp, GatedMlpConfig, MlpActivation};
pub use presets::{Preset, Scale};
pub use rng::SplitMix64;
pub use swa_attention::layers::{RmsNorm, RmsNormConfig};
