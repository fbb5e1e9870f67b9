//! What a user of swa-zoo calls most, in one import: `use swa_zoo::prelude::*;`.
//!
//! The windowed core ([`windowed_attention`] with a [`WindowSpec`] and [`ScoreOptions`]), the
//! decoders ([`DecoderConfig`], [`Preset`], [`Decoder`], [`GenerateConfig`]), pretrained
//! checkpoints ([`Pretrained`]), training ([`TrainConfig`], [`train`], [`Corpus`],
//! [`TrainedRun`]), their errors, and Burn's tensor types with the backends this build has.

pub use burn::backend::Autodiff;
#[cfg(feature = "cuda")]
pub use burn::backend::Cuda;
#[cfg(feature = "flex")]
pub use burn::backend::Flex;
#[cfg(feature = "ndarray")]
pub use burn::backend::NdArray;
#[cfg(feature = "wgpu")]
pub use burn::backend::Wgpu;
pub use burn::module::Module;
pub use burn::tensor::{Distribution, Int, Tensor, backend::Backend};

pub use swa_attention::{
    AttentionError, ModelBackend, ScoreOptions, WindowSpec, windowed_attention,
};
pub use swa_models::hf::Pretrained;
pub use swa_models::layers::{AttentionKind, CachePositions};
pub use swa_models::{Decoder, DecoderConfig, GenerateConfig, ModelError, Preset, PresetSize};
pub use swa_training::corpus::Corpus;
pub use swa_training::train::{TrainConfig, train};
pub use swa_training::{TrainedRun, TrainingBackend, TrainingError};
