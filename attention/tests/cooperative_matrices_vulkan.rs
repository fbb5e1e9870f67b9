//! The cooperative-matrix suite ([`cooperative_matrices`]) on Vulkan, through Burn's SPIR-V
//! compiler (lavapipe 26 in CI): `cargo test -p swa-attention --features vulkan --test
//! cooperative_matrices_vulkan`.
//!
//! Each test runs on the one of two Vulkan devices fewer running tests hold
//! ([`wgpu_devices::lease`]): lavapipe compiles one device's shaders at a time, and compiling is
//! most of these tests' time, so two tests at once compile on the machine's two cores.
#![cfg(feature = "vulkan")]

mod cooperative_matrices;
#[path = "../../tests/common/wgpu_devices.rs"]
mod wgpu_devices;

use burn::backend::Vulkan;
use burn::backend::wgpu::WgpuRuntime;
use wgpu_devices::Lease;

/// A device as [`wgpu_devices::lease`] hands them out, or `None` (after saying why) when no wgpu
/// adapter answers; a failure instead under `SWA_REQUIRE_CMMA`, as the suite's own checks fail.
fn lease() -> Option<Lease> {
    let lease = wgpu_devices::lease();
    let required = std::env::var_os("SWA_REQUIRE_CMMA").is_some();
    assert!(lease.is_some() || !required, "SWA_REQUIRE_CMMA is set, but no wgpu adapter answers");
    lease
}

#[test]
fn every_f16_tile_shape_multiplies_exactly() {
    let Some(device) = lease() else { return };
    cooperative_matrices::tile_products::<WgpuRuntime>("Vulkan", &device);
}

#[test]
fn the_tensor_core_forward_matches_the_dense_reference() {
    let Some(device) = lease() else { return };
    cooperative_matrices::forward_suite::<WgpuRuntime, Vulkan>("Vulkan", &device);
}

#[test]
fn the_tensor_core_backward_matches_the_dense_reference() {
    let Some(device) = lease() else { return };
    cooperative_matrices::backward_suite::<WgpuRuntime, Vulkan>("Vulkan", &device);
}

#[test]
fn relative_scores_run_on_the_portable_kernels() {
    let Some(device) = lease() else { return };
    cooperative_matrices::relative_suite::<WgpuRuntime, Vulkan>("Vulkan", &device);
}
