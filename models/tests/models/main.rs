//! Tests of `swa-models`: the attention layers, each against an f64 model written from
//! docs/semantics.md, linear attention against its quadratic form, the decoder and its presets,
//! decoding with bounded caches, and weights I/O, on the CPU backends (ndarray, the reference,
//! and flex's fused kernels). One binary, since every test binary links Burn; what needs
//! training is in swa-training's `training` binary, what needs the application in the facade's
//! `zoo`, and so are the models on wgpu (decoding with the CubeCL kernels): a binary that names
//! a GPU backend compiles all of Burn's backend for it, which the facade's library has already
//! compiled (docs/testing.md, "What the time goes to").

#[path = "../../../tests/common/decoding.rs"]
pub mod decoding;
#[path = "../../../tests/common/tensors.rs"]
pub mod tensors;

pub use tensors::{Reference, max_abs, tensor, to_vec, values};

mod decode;
mod decoder;
mod display;
mod layer_forward;
mod layer_reference;
mod layers;
mod linear_attention;
mod lora;
mod memory;
mod own_mechanism;
mod packed_weights;
mod presets;
mod pretrained;
mod transformer_xl;
mod weight_precision;
mod weights;
