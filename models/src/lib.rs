//! # swa-models
//!
//! Decoder language models of swa-zoo ("Transformer++", docs/semantics.md §8) assembled from a list of
//! per-layer [`crate::layers::AttentionKind`]s, with presets that reproduce the seed
//! papers' configurations.
//!
//! A two-layer hybrid of Taylor linear attention and sliding windows, its logits, and a few
//! greedy tokens decoded with caches bounded by the window:
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Int, Tensor};
//! use swa_models::layers::AttentionKind;
//! use swa_models::{DecoderConfig, GenerateConfig};
//!
//! let device = Default::default();
//! let kinds = vec![AttentionKind::Linear { feature_dim: 4 }, AttentionKind::Sliding { window: 8 }];
//! // 256 byte ids, width 32, 2 layers, 4 query heads sharing 2 kv heads.
//! let config = DecoderConfig::new(kinds).with_d_model(32).with_layers(2).with_kv_heads(Some(2));
//! let model = config.init::<NdArray>(&device)?;
//! let logits = model.forward(Tensor::<NdArray, 2, Int>::from_ints([[1, 2, 3]], &device))?;
//! assert_eq!(logits.dims(), [1, 3, 256]);
//! let greedy = GenerateConfig::new().with_temperature(0.0).with_max_new_tokens(4);
//! assert_eq!(model.generate(&[vec![1, 2, 3]], &greedy, &device)?[0].len(), 4);
//! # Ok::<(), swa_models::ModelError>(())
//! ```

mod architecture;
mod block;
mod decoder;
mod error;
pub mod files;
mod generate;
pub mod gguf;
pub mod hf;
mod info;
pub mod layers;
pub mod lora;
mod memory;
mod mlp;
pub mod panics;
pub mod presets;
pub mod records;
pub mod safetensors;
pub mod sampling;
mod sizes;
pub mod stored;
pub mod weights;

pub use crate::layers::{LayerError, RmsNorm, RmsNormConfig};
pub use architecture::Architecture;
pub use block::Block;
pub use decoder::{Decoder, DecoderCache, DecoderConfig};
pub use error::ModelError;
pub use generate::GenerateConfig;
pub use info::ModelInfo;
pub use memory::{DecoderMemory, DecoderMemoryData};
pub use mlp::{GatedMlp, GatedMlpConfig, MlpActivation};
pub use presets::{Preset, PresetSize};
