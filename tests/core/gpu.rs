//! The core on the CubeCL backends (wgpu, CUDA) against the dense reference on ndarray. Each
//! test runs only when its feature is compiled in and a device answers; otherwise it says why
//! it skipped.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::cases::matrix;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::common::{Case, Path, Tolerance, check_within, device_answers};

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn check_backend<B>(name: &str, lengths: &[usize], tol: Tolerance)
where
    B: burn::tensor::backend::AutodiffBackend + swa_zoo::attention::WindowedAttentionBackend,
{
    if !device_answers::<B>(name) {
        return;
    }
    let mut worst = [0f32; 3];
    for &n in lengths {
        for (_, spec, opts) in matrix(n) {
            let errors = check_within::<B>(&Case::new(n, 8, spec, opts), Path::Dispatch, &Default::default(), tol);
            worst = std::array::from_fn(|i| worst[i].max(errors[i]));
        }
    }
    eprintln!("{name}: largest max-abs errors: o {:e}, lse {:e}, gradients {:e}", worst[0], worst[1], worst[2]);
}

#[test]
fn core_on_wgpu_matches_dense_on_ndarray() {
    #[cfg(feature = "wgpu")]
    // The kernels' own tests (`kernel.rs`) cover every length; here the blocked path of global
    // tokens and the dispatch between the two paths, at lengths below, across and past a block.
    check_backend::<burn::backend::Autodiff<burn::backend::Wgpu>>("wgpu", &[5, 65, 257], crate::common::F32);
    #[cfg(not(feature = "wgpu"))]
    eprintln!("skipped: built without the `wgpu` feature");
}

#[test]
fn core_on_cuda_matches_dense_on_ndarray() {
    #[cfg(feature = "cuda")]
    check_backend::<burn::backend::Autodiff<burn::backend::Cuda>>("cuda", &crate::cases::LENGTHS, crate::common::TF32);
    #[cfg(not(feature = "cuda"))]
    eprintln!("skipped: built without the `cuda` feature");
}
