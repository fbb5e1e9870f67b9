//! The cooperative-matrix suite ([`cooperative_matrices`]) on Vulkan, through Burn's SPIR-V
//! compiler (lavapipe 26 in CI): `cargo test -p swa-attention --features vulkan --test
//! cooperative_matrices_vulkan`.
#![cfg(feature = "vulkan")]

mod cooperative_matrices;

use burn::backend::Vulkan;
use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};

#[test]
fn every_f16_tile_shape_multiplies_exactly() {
    cooperative_matrices::tile_products::<WgpuRuntime>("Vulkan", &WgpuDevice::DefaultDevice);
}

#[test]
fn the_tensor_core_forward_matches_the_dense_reference() {
    cooperative_matrices::forward_suite::<WgpuRuntime, Vulkan>(
        "Vulkan",
        &WgpuDevice::DefaultDevice,
    );
}

#[test]
fn the_tensor_core_backward_matches_the_dense_reference() {
    cooperative_matrices::backward_suite::<WgpuRuntime, Vulkan>(
        "Vulkan",
        &WgpuDevice::DefaultDevice,
    );
}

#[test]
fn relative_scores_run_on_the_portable_kernels() {
    cooperative_matrices::relative_suite::<WgpuRuntime, Vulkan>(
        "Vulkan",
        &WgpuDevice::DefaultDevice,
    );
}
