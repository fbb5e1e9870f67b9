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
    B: burn::tensor::backend::AutodiffBackend + swa_zoo::attention::ModelBackend,
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

/// NCCL on a CUDA device, in a world of one process (GPU machines here have one GPU, and NCCL
/// refuses two ranks on one device): a communicator is made from a fresh unique id, and a
/// fused f32 tensor, a bf16 tensor (averaged in f32) and a tensor of another backend go
/// through `Nccl::average`: the CUDA ones come back averaged over the one process (their own
/// values) and usable by the next op, the other one is left to the host path. Skips without
/// NCCL's library unless `SWA_REQUIRE_NCCL` is set.
#[test]
fn nccl_on_cuda_averages_in_a_world_of_one() {
    #[cfg(feature = "cuda")]
    {
        use burn::backend::{Cuda, NdArray};
        use burn::tensor::{Distribution, FloatDType, Tensor};
        use swa_zoo::training::distributed::nccl::{Nccl, cuda_index};
        if !crate::common::device_answers::<Cuda>("cuda") {
            return;
        }
        if !Nccl::available() {
            assert!(std::env::var_os("SWA_REQUIRE_NCCL").is_none(), "no libnccl.so.2");
            eprintln!("skipped: NCCL's library (libnccl.so.2) cannot be loaded");
            return;
        }
        let device = Default::default();
        let index = cuda_index::<Cuda>(&device).expect("a CUDA device");
        let nccl = Nccl::join(Nccl::unique_id().unwrap(), 0, 1, index).unwrap();
        let x = Tensor::<Cuda, 2>::random([33, 65], Distribution::Default, &device) * 3.0 + 1.0;
        let expected = x.to_data();
        let mean = nccl.average(&x).unwrap().expect("a CUDA tensor");
        mean.to_data().assert_eq(&expected, true);
        (mean * 2.0).to_data().assert_eq(&(x * 2.0).to_data(), true);
        let half = Tensor::<Cuda, 1>::random([1000], Distribution::Default, &device);
        let half = half.cast(FloatDType::BF16);
        let mean = nccl.average(&half).unwrap().expect("a CUDA tensor");
        mean.to_data().assert_eq(&half.to_data(), true);
        let host = Tensor::<NdArray, 1>::ones([4], &Default::default());
        assert!(nccl.average(&host).unwrap().is_none(), "ndarray tensors take the host path");
        eprintln!("NCCL world of one on {index}: f32 and bf16 averaged on the device");
    }
    #[cfg(not(feature = "cuda"))]
    eprintln!("skipped: built without the `cuda` feature");
}
