//! The attention layers and the decoders of `swa-models`: each layer against an f64 model
//! written from docs/semantics.md, linear attention against its quadratic form, the decoder and
//! its presets, decoding with bounded caches (the decode kernel against the caches' tensor ops
//! included), and weights I/O.

#[cfg(feature = "wgpu")]
mod cache_kernel;
mod decode;
mod decoder;
mod display;
#[cfg(feature = "wgpu")]
mod launches;
mod layer_forward;
mod layer_reference;
mod layers;
mod linear_attention;
mod memory;
mod own_mechanism;
mod presets;
mod pretrained;
mod transformer_xl;
mod weight_precision;
mod weights;
