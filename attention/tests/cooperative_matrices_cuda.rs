//! The cooperative-matrix suite ([`cooperative_matrices`]) on CUDA (NVIDIA's tensor cores:
//! 16×16×16 tiles, plane 32, f16 and bf16): `cargo test -p swa-attention --features cuda --test
//! cooperative_matrices_cuda` (the GPU session's `cmma` step).
#![cfg(feature = "cuda")]

mod cooperative_matrices;

use burn::backend::Cuda;
use burn::backend::cuda::CudaDevice;
use cubecl::cuda::CudaRuntime;

#[test]
fn every_f16_tile_shape_multiplies_exactly() {
    cooperative_matrices::tile_products::<CudaRuntime>("CUDA", &CudaDevice::default());
}

#[test]
fn the_tensor_core_forward_matches_the_dense_reference() {
    cooperative_matrices::forward_suite::<CudaRuntime, Cuda>("CUDA", &CudaDevice::default());
}

#[test]
fn the_tensor_core_backward_matches_the_dense_reference() {
    cooperative_matrices::backward_suite::<CudaRuntime, Cuda>("CUDA", &CudaDevice::default());
}

#[test]
fn relative_scores_run_on_the_portable_kernels() {
    cooperative_matrices::relative_suite::<CudaRuntime, Cuda>("CUDA", &CudaDevice::default());
}
