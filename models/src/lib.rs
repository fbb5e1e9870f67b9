//! # swa-models
//!
//! Decoder language models of swa-zoo ("Transformer++", docs/semantics.md §8) assembled from a list of
//! per-layer [`swa_attention::layers::AttentionKind`]s, with presets that reproduce the seed
//! papers' configurations.

mod block;
mod decoder;
mod error;
mod generate;
mod info;
mod mlp;
mod norm;
pub mod presets;
mod rng;
pub mod sampling;
pub mod weights;

pub use block::Block;
pub use decoder::{Decoder, DecoderCache, DecoderConfig};
pub use error::ModelError;
pub use generate::GenerateConfig;
pub use info::ModelInfo;
pub use mlp::{SwiGlu, SwiGluConfig};
pub use norm::{RmsNorm, RmsNormConfig};
pub use presets::{Preset, Scale};
pub use rng::SplitMix64;
