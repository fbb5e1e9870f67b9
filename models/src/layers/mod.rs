//! The attention layers of swa-zoo, each in a file named after it, all built on the windowed
//! core or, for linear attention, on docs/semantics.md §6.
//!
//! - [`kind`]: the attention kind of a layer as data, dispatching to its mechanism;
//! - [`mechanism`]: what a mechanism says about itself (window spec, scores, windows, label);
//! - the mechanisms, each in the file named after it: `full`, `sliding`, [`mswa`] (MSWA's
//!   window allocation over heads and layers), `swat`, `sinks`, [`longnet`] (branches and their
//!   mixture), [`longformer`] (global rows), [`taylor`] (Taylor linear attention);
//! - [`attend`]: the trait every mechanism's module implements, and what it is handed;
//! - [`mixer`]: the enum module a layer holds one of;
//! - [`window`]: the module of every mechanism that runs as one windowed call;
//! - [`segment_memory`]: what a layer keeps of a stream read segment by segment
//!   (Transformer-XL; docs/semantics.md §10);
//! - [`cache`]: the bounded KV cache for decoding, one ring buffer (`ring`) per group of kv heads
//!   that share a reach;
//! - [`transformer_xl`]: Transformer-XL's relative positions, over the core's relative scores;
//! - [`norm`]: RMSNorm, of the decoder's blocks and of q and k per head;
//! - [`layer_options`]: how a layer departs from Transformer++ for a pretrained architecture;
//! - [`self_attention`]: the layer module around a mechanism's module;
//! - [`LayerError`]: why a layer rejected its configuration or input.

pub mod attend;
pub mod cache;
mod error;
mod full;
pub mod kind;
pub mod layer_options;
pub mod longformer;
pub mod longnet;
pub mod mechanism;
pub mod mixer;
pub mod mswa;
pub mod norm;
mod ring;
pub mod segment_memory;
pub mod self_attention;
mod sinks;
mod sliding;
mod swat;
pub mod taylor;
pub mod transformer_xl;
pub mod window;

pub use attend::{Attend, LayerCache};
pub use cache::{CachePositions, KvCache};
pub use error::LayerError;
pub use kind::{AttentionKind, SwatPositions};
pub use layer_options::LayerOptions;
pub use longnet::{branch_specs, longnet_attention, mix_branches};
pub use mechanism::Mechanism;
pub use mixer::{Mixer, MixerRecord};
pub use norm::{RmsNorm, RmsNormConfig};
pub use segment_memory::{Keep, LayerMemory, LayerMemoryData};
pub use self_attention::{SelfAttention, SelfAttentionConfig};
pub use window::with_sink_logits;
