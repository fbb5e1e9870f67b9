//! NCCL on CUDA tensors (feature `cuda`), run by the GPU session: it needs a CUDA device and
//! NCCL's library, and skips, saying why, without them. CI compiles it with the NCCL path.

use burn::backend::{Cuda, NdArray};
use burn::tensor::{Distribution, FloatDType, Tensor};
use swa_training::distributed::nccl::{Nccl, cuda_index};

/// NCCL on a CUDA device, in a world of one process (GPU machines here have one GPU, and NCCL
/// refuses two ranks on one device): a communicator is made from a fresh unique id, and a
/// fused f32 tensor, a bf16 tensor (averaged in f32) and a tensor of another backend go
/// through `Nccl::average`: the CUDA ones come back averaged over the one process (their own
/// values) and usable by the next op, the other one is left to the host path. Skips without
/// NCCL's library unless `SWA_REQUIRE_NCCL` is set.
#[test]
fn nccl_on_cuda_averages_in_a_world_of_one() {
    let answers = std::panic::catch_unwind(|| {
        Tensor::<Cuda, 1>::zeros([1], &Default::default()).into_data();
    });
    if answers.is_err() {
        eprintln!("skipped: no CUDA device answers on this machine");
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
