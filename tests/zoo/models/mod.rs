//! The attention layers and the decoders of `swa-models`: each layer against an f64 model
//! written from docs/semantics.md, the decoder and its presets, decoding with bounded caches,
//! and weights I/O.

mod decode;
mod decoder;
mod display;
#[cfg(feature = "wgpu")]
mod launches;
mod layer_forward;
mod layer_reference;
mod layers;
mod memory;
mod presets;
mod pretrained;

mod transformer_xl;
mod weight_precision;
mod weights;
