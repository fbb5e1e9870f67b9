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

/// f32 on `Cuda` (TF32 matmuls) over the whole matrix, then f16 tensors with f32 accumulation
/// on `Cuda<f16>` against the f32 reference on the same f16-rounded inputs, for every spec the
/// kernels take. One test, in this order: Burn 0.21 keeps one default float type per device, and
/// once `Cuda<f16>` has settled it to f16, f32 tensors made on that device without an explicit
/// type no longer match (seen on an H100: `DTypeMismatch` when the f16 check ran first).
#[test]
fn core_on_cuda_matches_dense_on_ndarray() {
    #[cfg(feature = "cuda")]
    {
        check_backend::<burn::backend::Autodiff<burn::backend::Cuda>>("cuda", &crate::cases::LENGTHS, crate::common::TF32);
        check_cuda_f16();
    }
    #[cfg(not(feature = "cuda"))]
    eprintln!("skipped: built without the `cuda` feature");
}

/// The f16 half of [`core_on_cuda_matches_dense_on_ndarray`], at a length past two blocks.
#[cfg(feature = "cuda")]
fn check_cuda_f16() {
    type Half = burn::backend::Autodiff<burn::backend::Cuda<burn::tensor::f16>>;
    if !device_answers::<Half>("cuda") {
        return;
    }
    let mut worst = [0f32; 3];
    for (_, spec, opts) in matrix(65).into_iter().filter(|(_, spec, _)| spec.globals().is_empty()) {
        let mut case = Case::new(65, 8, spec, opts);
        case.half = true;
        let errors = check_within::<Half>(&case, Path::Dispatch, &Default::default(), crate::common::F16);
        worst = std::array::from_fn(|i| worst[i].max(errors[i]));
    }
    eprintln!("cuda f16: largest max-abs errors: o {:e}, lse {:e}, gradients {:e}", worst[0], worst[1], worst[2]);
}
