//! The models on the backends beside the reference, next to the cross-backend check
//! (`app::check_backends`): decoding with the CubeCL kernels, training on the fused kernels
//! (flex's CPU kernel, wgpu's CubeCL kernels), on several devices and in half precision, and the
//! kernel launches of a step. They are the facade's tests, not their crates', because a test
//! binary that names a backend compiles all of Burn's code for it, and the facade's library
//! has compiled it already for its jobs: this binary shares it (docs/testing.md, "What the time
//! goes to").

#[cfg(feature = "wgpu")]
mod cache_kernel;
#[cfg(feature = "wgpu")]
mod decoding;
// The fused kernels: flex's CPU kernel, wgpu's CubeCL kernels.
#[cfg(any(feature = "flex", feature = "wgpu"))]
mod kernel_training;
#[cfg(feature = "wgpu")]
mod launches;
mod training_devices;
