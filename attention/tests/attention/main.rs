//! Tests of the windowed attention core: the window spec, the dense reference, the blocked path
//! on every backend, the CubeCL kernels, the fused CPU kernel, RoPE and the layer ops. One
//! binary, since every test binary links Burn.

mod cases;
mod common;
#[cfg(feature = "wgpu")]
#[path = "../../../tests/common/wgpu_devices.rs"]
mod wgpu_devices;

mod blocked;
mod flash;
mod flex;
mod fragments;
mod gpu;
mod kernel;
mod layer_ops;
mod masked;
mod property;
mod reference;
mod rope;
mod schedule;
mod spec;
mod split;
