//! Tests of the windowed attention core: the window spec, the dense reference, the blocked path
//! on every backend, the CubeCL kernels, RoPE and linear attention. One binary, since every test
//! binary links Burn.

mod cases;
mod common;
#[cfg(feature = "wgpu")]
#[path = "../common/wgpu_devices.rs"]
mod wgpu_devices;

mod blocked;
#[cfg(feature = "wgpu")]
mod decode;
mod flash;
mod flex;
mod fragments;
mod gpu;
mod kernel;
mod layer_ops;
mod linear;
mod masked;
mod property;
mod reference;
mod rope;
mod schedule;
mod spec;
mod split;
