//! Decoding on wgpu: the CubeCL decode kernel and append (`swa_attention::kernel`) inside
//! fusion, against the forward pass through the windowed kernels, and a forked cache under them
//! (swa-models' decoding tests run the same checks on ndarray and flex).

use swa_models::layers::AttentionKind;

use crate::decoding::{check_decoding, forked_caches_decode_independently, windowed_kinds};
use crate::wgpu_devices::lease;

/// The windowed kinds whose decoding costs lavapipe (CI's Vulkan driver) minutes of shader
/// compiles that no other kind needs: Longformer's global tokens (about 3 minutes of one core)
/// and the hybrid's linear layers. CI decodes the others on wgpu; an ignored test these, and
/// every kind decodes on ndarray and flex.
const SLOW_ON_LAVAPIPE: [&str; 2] = ["longformer", "hybrid"];

/// [`windowed_kinds`] that are (`slow`) or are not in [`SLOW_ON_LAVAPIPE`].
fn kinds_on_lavapipe(slow: bool) -> Vec<(&'static str, Vec<AttentionKind>, usize)> {
    let mut kinds = windowed_kinds();
    kinds.retain(|(name, _, _)| SLOW_ON_LAVAPIPE.contains(name) == slow);
    kinds
}

/// wgpu: the CubeCL decode kernel and append (`swa_attention::kernel`) inside fusion, against
/// the forward pass through the windowed kernels, on the kinds not [`SLOW_ON_LAVAPIPE`].
#[test]
fn the_decode_kernel_reproduces_the_forward_pass_on_wgpu() {
    let Some(device) = lease() else {
        return;
    };
    check_decoding::<burn::backend::Wgpu>(kinds_on_lavapipe(false), "wgpu", &device);
}

/// The same on the kinds [`SLOW_ON_LAVAPIPE`].
#[test]
#[ignore = "about 4 minutes of lavapipe's shader compiles: `-- --ignored slow_kinds_decode`"]
fn the_slow_kinds_decode_as_their_forward_pass_on_wgpu() {
    let Some(device) = lease() else {
        return;
    };
    check_decoding::<burn::backend::Wgpu>(kinds_on_lavapipe(true), "wgpu", &device);
}

/// wgpu: the CubeCL append writes a buffer in place only when no fork shares it.
#[test]
fn a_forked_cache_decodes_independently_under_the_kernels_on_wgpu() {
    let Some(device) = lease() else {
        return;
    };
    forked_caches_decode_independently::<burn::backend::Wgpu>(&device);
}
