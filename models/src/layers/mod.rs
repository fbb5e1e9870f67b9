//! The attention layers of swa-zoo, each in a file named after it, all built on the windowed
//! core or, for linear attention, on docs/semantics.md §6.
//!
//! - [`kind`]: the attention kind of a layer as data, and the window spec and score options of
//!   full, SWA, MSWA, SWAT and sinks attention;
//! - [`mswa`]: MSWA's window allocation over heads and layers;
//! - [`longnet`]: LongNet's branches and their mixture;
//! - [`longformer`]: Longformer's global rows;
//! - [`linear`]: Taylor linear attention;
//! - [`memory`]: segment memory, what a layer keeps of a stream read segment by segment
//!   (Transformer-XL; docs/semantics.md §10);
//! - [`transformer_xl`]: Transformer-XL's relative positions, over the core's relative scores;
//! - [`cache`]: the bounded KV cache for decoding, one ring buffer (`ring`) per group of kv heads
//!   that share a reach;
//! - [`norm`]: RMSNorm, of the decoder's blocks and of q and k per head;
//! - [`layer_options`]: how a layer departs from Transformer++ for a pretrained architecture;
//! - [`mixer`]: what a layer mixes the tokens with, the windowed core's projections or linear
//!   attention, as one enum module;
//! - [`self_attention`]: the layer module that projects, rotates and calls the mechanism;
//! - [`layer_cache`]: decoding with that layer, token by token or a whole prompt at once;
//! - [`LayerError`]: why a layer rejected its configuration or input.

pub mod cache;
mod error;
mod full;
pub mod kind;
pub mod layer_cache;
pub mod layer_options;
pub mod linear;
pub mod longformer;
pub mod longnet;
pub mod mechanism;
pub mod memory;
pub mod mixer;
pub mod mswa;
pub mod norm;
mod ring;
pub mod self_attention;
mod sinks;
mod sliding;
mod swat;
pub mod transformer_xl;

pub use cache::{CachePositions, KvCache};
pub use error::LayerError;
pub use kind::{AttentionKind, SwatPositions};
pub use layer_cache::LayerCache;
pub use layer_options::LayerOptions;
pub use longnet::{branch_specs, longnet_attention, mix_branches};
pub use memory::{Keep, LayerMemory, LayerMemoryData};
pub use mixer::{
    Mixer, MixerRecord, Projections, ProjectionsRecord, WindowedMixer, WindowedMixerRecord,
};
pub use norm::{RmsNorm, RmsNormConfig};
pub use self_attention::{SelfAttention, SelfAttentionConfig, with_sink_logits};
