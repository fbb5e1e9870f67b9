//! Tests of `swa-models`: the attention layers, each against an f64 model written from
//! docs/semantics.md, linear attention against its quadratic form, the decoder and its presets,
//! decoding with bounded caches (the decode kernel against the caches' tensor ops included),
//! and weights I/O. One binary, since every test binary links Burn; what needs training is in
//! swa-training's `training` binary, what needs the application in the facade's `zoo`.

#[path = "../../../tests/common/decoding.rs"]
pub mod decoding;
#[path = "../../../tests/common/tensors.rs"]
pub mod tensors;
#[cfg(feature = "wgpu")]
#[path = "../../../tests/common/wgpu_devices.rs"]
pub mod wgpu_devices;

pub use tensors::{Reference, max_abs, tensor, to_vec, values};

#[cfg(feature = "wgpu")]
mod cache_kernel;
mod decode;
mod decoder;
mod display;
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
