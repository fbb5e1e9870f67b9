//! The core on the CubeCL backends (wgpu, CUDA) against the dense reference on ndarray. Each
//! test runs only when its feature is compiled in and a device answers; otherwise it says why
//! it skipped.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::cases::matrix;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::common::{Case, Path, Tolerance, check_within};

/// Every case of `cases` through the dispatch on `B`'s `device` against the dense reference
/// within `tol`; prints the largest errors under `name`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn check_backend<B>(
    name: &str,
    cases: impl Iterator<Item = Case>,
    tol: Tolerance,
    device: &B::Device,
) where
    B: burn::tensor::backend::AutodiffBackend + swa_attention::ModelBackend,
{
    let mut worst = [0f32; 3];
    for case in cases {
        let errors = check_within::<B>(&case, Path::Dispatch, device, tol);
        worst = std::array::from_fn(|i| worst[i].max(errors[i]));
    }
    eprintln!(
        "{name} ({}): largest max-abs errors: o {:e}, lse {:e}, gradients {:e}",
        B::name(device),
        worst[0],
        worst[1],
        worst[2]
    );
}

/// Every spec of the matrix at each of `lengths`, head dim 8.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn matrix_cases(lengths: &[usize]) -> impl Iterator<Item = Case> + '_ {
    lengths.iter().flat_map(|&n| {
        matrix(n).into_iter().map(move |(_, spec, opts)| Case::new(n, 8, spec, opts))
    })
}

/// A spec the kernels decline (sliding with global tokens, causal) through the dispatch on wgpu,
/// which runs it on the blocked path, at a length across a block. The blocked path's logic is
/// checked on every spec at every length on ndarray and flex (`blocked.rs`, `flex.rs`); here its
/// tensor ops run on wgpu, where each new shape costs lavapipe seconds of shader compilation: the
/// first global-token spec compiles them (about 150 s of one core), each further one adds about
/// a minute and the same ops. Every other spec of the matrix goes to the kernels, whose tests
/// (`kernel.rs`) run it through the same dispatch on `Autodiff<Wgpu>` at every length.
#[test]
fn core_on_wgpu_matches_dense_on_ndarray() {
    #[cfg(feature = "wgpu")]
    if let Some(device) = crate::wgpu_devices::lease() {
        check_backend::<burn::backend::Autodiff<burn::backend::Wgpu>>(
            "wgpu",
            matrix_cases(&[65]).filter(|case| !case.spec.globals().is_empty()).take(1),
            crate::common::F32,
            &device,
        );
    }
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
        use burn::backend::{Autodiff, Cuda};
        if !crate::common::device_answers::<Cuda>("cuda") {
            return;
        }
        let device = Default::default();
        let cases = matrix_cases(&crate::cases::LENGTHS);
        check_backend::<Autodiff<Cuda>>("cuda", cases, crate::common::TF32, &device);
        let half = matrix_cases(&[65])
            .filter(|case| case.spec.globals().is_empty())
            .map(|case| Case { half: true, ..case });
        check_backend::<Autodiff<Cuda<burn::tensor::f16>>>(
            "cuda",
            half,
            crate::common::F16,
            &device,
        );
    }
    #[cfg(not(feature = "cuda"))]
    eprintln!("skipped: built without the `cuda` feature");
}
