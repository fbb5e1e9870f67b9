//! The core on the CubeCL backends (wgpu, CUDA) against the dense reference on ndarray. Each
//! test runs only when its feature is compiled in and a device answers; otherwise it says why
//! it skipped.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::cases::{LENGTHS, matrix};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::common::{Case, Path, Tolerance, check_within};

/// Whether a first tensor op on `B`'s default device succeeds (no adapter or driver panics).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn device_answers<B: burn::tensor::backend::Backend>() -> bool {
    std::panic::catch_unwind(|| {
        burn::tensor::Tensor::<B, 1>::zeros([1], &Default::default()).into_data();
    })
    .is_ok()
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn check_backend<B>(name: &str, tol: Tolerance)
where
    B: burn::tensor::backend::AutodiffBackend + swa_zoo::attention::WindowedAttentionBackend,
{
    if !device_answers::<B>() {
        eprintln!("skipped: no {name} device answers on this machine");
        return;
    }
    let mut worst = [0f32; 3];
    for n in LENGTHS {
        for (label, spec, opts) in matrix(n) {
            eprintln!("{name}: {label} n={n}");
            let errors = check_within::<B>(&Case::new(n, 8, spec, opts), Path::Dispatch, &Default::default(), tol);
            worst = std::array::from_fn(|i| worst[i].max(errors[i]));
        }
    }
    eprintln!("{name}: largest max-abs errors: o {:e}, lse {:e}, gradients {:e}", worst[0], worst[1], worst[2]);
}

#[test]
fn core_on_wgpu_matches_dense_on_ndarray() {
    #[cfg(feature = "wgpu")]
    check_backend::<burn::backend::Autodiff<burn::backend::Wgpu>>("wgpu", crate::common::F32);
    #[cfg(not(feature = "wgpu"))]
    eprintln!("skipped: built without the `wgpu` feature");
}

#[test]
fn core_on_cuda_matches_dense_on_ndarray() {
    #[cfg(feature = "cuda")]
    check_backend::<burn::backend::Autodiff<burn::backend::Cuda>>("cuda", crate::common::TF32);
    #[cfg(not(feature = "cuda"))]
    eprintln!("skipped: built without the `cuda` feature");
}
