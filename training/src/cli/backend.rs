//! Running a job on the backend chosen on the command line.

use burn::backend::Autodiff;
use burn::tensor::backend::AutodiffBackend;
use clap::ValueEnum;
use swa_attention::WindowedAttentionBackend;

/// The backends a build can offer; those not compiled in say how to get them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// burn-flex on the CPU: the fastest CPU backend here.
    Flex,
    /// burn-ndarray on the CPU: the tests' reference.
    Ndarray,
    /// wgpu: Vulkan, Metal or DX12 (needs `--features wgpu`).
    Wgpu,
    /// CUDA (needs `--features cuda`).
    Cuda,
}

/// A job generic over the training backend.
pub trait Job {
    /// Runs on backend `B` (with autodiff) and its device.
    fn run<B>(self, device: B::Device) -> Result<(), String>
    where
        B: AutodiffBackend + WindowedAttentionBackend,
        B::InnerBackend: WindowedAttentionBackend;
}

/// Runs `job` on `choice`, device `index`.
pub fn dispatch(choice: BackendChoice, index: usize, job: impl Job) -> Result<(), String> {
    let missing = |feature: &str| {
        Err(format!("this build has no {feature} backend; rebuild with `--features {feature}`"))
    };
    let _ = index;
    match choice {
        #[cfg(feature = "flex")]
        BackendChoice::Flex => job.run::<Autodiff<burn::backend::Flex>>(Default::default()),
        BackendChoice::Ndarray => job.run::<Autodiff<burn::backend::NdArray>>(Default::default()),
        #[cfg(feature = "wgpu")]
        BackendChoice::Wgpu => {
            let device = match index {
                0 => burn::backend::wgpu::WgpuDevice::DefaultDevice,
                n => burn::backend::wgpu::WgpuDevice::DiscreteGpu(n),
            };
            job.run::<Autodiff<burn::backend::Wgpu>>(device)
        }
        #[cfg(feature = "cuda")]
        BackendChoice::Cuda => job.run::<Autodiff<burn::backend::Cuda>>(burn::backend::cuda::CudaDevice::new(index)),
        #[allow(unreachable_patterns)]
        other => missing(&format!("{other:?}").to_lowercase()),
    }
}
