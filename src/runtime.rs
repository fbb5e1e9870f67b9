//! Running a job on the backend, precision and devices chosen on the command line or an
//! example's flags: [`run_on`] turns a [`Placement`] into a concrete Burn backend type and runs
//! a [`Job`] on it, or names what this build or backend cannot do.

use burn::backend::Autodiff;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use burn::tensor::{DType, backend::DeviceError};
use burn::train::ExecutionStrategy;
pub use swa_training::TrainingBackend;

pub use crate::choice::{BackendChoice, Precision};
use crate::error::AppError;

/// Where a job runs: a backend, its device indices (one, or several for data-parallel
/// training) and a precision.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The backend.
    pub backend: BackendChoice,
    /// Device indices; the first is the main device.
    pub devices: Vec<usize>,
    /// The float type.
    pub precision: Precision,
}

/// A job generic over the training backend.
pub trait Job: Sized {
    /// Runs on backend `B` (with autodiff) and its device.
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError>;

    /// Runs under one of Burn's execution strategies; only training uses several devices.
    fn run_with<B: TrainingBackend>(self, strategy: ExecutionStrategy<B>) -> Result<(), AppError> {
        match strategy {
            ExecutionStrategy::SingleDevice(device) => self.run::<B>(device),
            _ => Err(AppError::SeveralDevices),
        }
    }
}

/// Runs `job` where `place` says, or names what this build or backend cannot do.
pub fn run_on(place: &Placement, job: impl Job + Send) -> Result<(), AppError> {
    use BackendChoice::*;
    keep_large_buffers_on_the_heap();
    #[cfg(not(feature = "ddp"))]
    let cpu = |backend: &'static str| match (place.precision, place.devices.len()) {
        (Precision::F32, 1) => Ok(()),
        (Precision::F32, _) => Err(AppError::OneDevice { backend }),
        (precision, _) => Err(AppError::Precision {
            precision,
            problem: format!(
                "{backend} computes in f32 only; half precision needs --backend wgpu (f16) or cuda (f16, bf16)"
            ),
        }),
    };
    match (place.backend, place.precision) {
        #[cfg(all(feature = "flex", not(feature = "ddp")))]
        (Flex, _) => cpu("flex").and_then(|_| {
            on_cpu_threads(|| job.run::<Autodiff<burn::backend::Flex>>(Default::default()))
        }),
        #[cfg(not(feature = "ddp"))]
        (Ndarray, _) => cpu("ndarray").and_then(|_| {
            on_cpu_threads(|| job.run::<Autodiff<burn::backend::NdArray>>(Default::default()))
        }),
        #[cfg(feature = "ddp")]
        (backend @ (Flex | Ndarray), _) => Err(AppError::CpuInDdpBuild { backend: backend.name() }),
        #[cfg(feature = "wgpu")]
        (Wgpu, Precision::Bf16) => Err(AppError::Precision {
            precision: Precision::Bf16,
            problem: "WGSL has no bf16; use --precision f16 on wgpu, or --backend cuda".into(),
        }),
        #[cfg(feature = "wgpu")]
        (Wgpu, precision) => {
            launch::<Autodiff<burn::backend::Wgpu>>(wgpu_strategy(place), precision, job)
        }
        #[cfg(feature = "cuda")]
        (Cuda, precision) => {
            launch::<Autodiff<burn::backend::Cuda>>(cuda_strategy(place), precision, job)
        }
        #[allow(unreachable_patterns)]
        (other, _) => Err(AppError::NoBackend { feature: other.name() }),
    }
}

/// Runs `job` under `strategy` once every device computes in `precision`.
///
/// Burn 0.21 keeps one default float type per device, settable once, before the device's first
/// tensor; new tensors take it whatever `B`'s own float type is. So one backend type per runtime
/// serves every precision (and the build instantiates each job once per runtime, not per float
/// type): the device is set to `precision` here, or, where something already set it, must
/// already compute in it.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn launch<B: TrainingBackend>(
    strategy: ExecutionStrategy<B>,
    precision: Precision,
    job: impl Job,
) -> Result<(), AppError> {
    let main = std::slice::from_ref(strategy.main_device());
    let devices = match &strategy {
        ExecutionStrategy::MultiDevice(devices, _) => devices.as_slice(),
        #[cfg(feature = "ddp")]
        ExecutionStrategy::DistributedDataParallel { devices, .. } => devices.as_slice(),
        _ => main,
    };
    keep_compiled_kernels();
    for device in devices {
        let int = <B::IntElem as burn::tensor::Element>::dtype();
        match burn::tensor::set_default_dtypes::<B>(device, precision.dtype(), int) {
            // Settled now, or already: either way its float type must be `precision`'s.
            Ok(()) | Err(DeviceError::AlreadyInitialized { .. }) => {}
            Err(_) => {
                let problem = format!("{} does not support it", B::name(device));
                return Err(AppError::Precision { precision, problem });
            }
        }
        let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
        if float != precision.dtype() {
            let problem = format!("the device already computes in {float:?}");
            return Err(AppError::Precision { precision, problem });
        }
    }
    job.run_with(strategy)
}

/// Turns on CubeCL's on-disk cache of compiled kernels (CUDA's PTX, Vulkan's SPIR-V) unless a
/// `cubecl.toml` says where to keep it, before the first device reads CubeCL's configuration: a
/// second start of the same model then skips NVRTC, which is most of a cold start on CUDA
/// (docs/benchmarks.md, correctness on CUDA). The cache sits in the `target` folder of the
/// project run from (`~/.cache/cubecl` outside one), beside CubeCL's autotune cache, which is
/// on disk by default. The rest of the configuration is CubeCL's own: its files and
/// environment variables. Nothing happens where the configuration was already read.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn keep_compiled_kernels() {
    use swa_attention::cubecl::config::cache::CacheConfig;
    use swa_attention::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    let mut state = CubeClRuntimeConfig::storage().lock();
    if state.is_none() {
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        config.compilation.cache.get_or_insert(CacheConfig::Target);
        *state = Some(std::sync::Arc::new(config));
    }
}

/// wgpu devices: index 0 is the default adapter, `n` the n-th discrete GPU. Several run under
/// Burn's multi-device data parallelism.
#[cfg(feature = "wgpu")]
fn wgpu_strategy<B>(place: &Placement) -> ExecutionStrategy<B>
where
    B: burn::tensor::backend::Backend<Device = burn::backend::wgpu::WgpuDevice>,
{
    use burn::backend::wgpu::WgpuDevice;
    match place.devices.as_slice() {
        [0] => ExecutionStrategy::SingleDevice(WgpuDevice::DefaultDevice),
        [n] => ExecutionStrategy::SingleDevice(WgpuDevice::DiscreteGpu(*n)),
        many => ExecutionStrategy::MultiDevice(
            many.iter().map(|&n| WgpuDevice::DiscreteGpu(n)).collect(),
            burn::train::MultiDeviceOptim::OptimMainDevice,
        ),
    }
}

/// CUDA devices; several run under Burn's multi-device data parallelism.
#[cfg(all(feature = "cuda", not(feature = "ddp")))]
fn cuda_strategy<B>(place: &Placement) -> ExecutionStrategy<B>
where
    B: burn::tensor::backend::Backend<Device = burn::backend::cuda::CudaDevice>,
{
    let devices: Vec<_> =
        place.devices.iter().map(|&n| burn::backend::cuda::CudaDevice::new(n)).collect();
    match devices.len() {
        1 => ExecutionStrategy::SingleDevice(devices[0].clone()),
        _ => {
            ExecutionStrategy::MultiDevice(devices, burn::train::MultiDeviceOptim::OptimMainDevice)
        }
    }
}

/// CUDA devices, one or several, under burn-train's distributed data parallelism: a copy of the
/// model per device, gradients averaged by NCCL's all-reduce as the backward pass produces them
/// (the `ddp` build; see the README's "Several devices").
#[cfg(feature = "ddp")]
fn cuda_strategy<B>(place: &Placement) -> ExecutionStrategy<B>
where
    B: burn::tensor::backend::distributed::DistributedBackend<
            Device = burn::backend::cuda::CudaDevice,
        >,
{
    use burn::tensor::backend::distributed::{DistributedConfig, ReduceOperation};
    let devices = place.devices.iter().map(|&n| burn::backend::cuda::CudaDevice::new(n)).collect();
    ExecutionStrategy::ddp(devices, DistributedConfig { all_reduce_op: ReduceOperation::Mean })
}

/// Runs `work` on a thread of the CPU backends' thread pool (rayon's global pool, which flex and
/// ndarray split their ops over) and returns what it returns.
///
/// Called from a thread outside the pool, each op that splits its work wakes the pool's
/// workers and puts the caller to sleep until they finish: two thread switches per op, and
/// three busy threads on two cores. On a worker, the op runs a part itself and the other
/// workers take the rest. A decoding step is about a hundred small ops, so the switches are a
/// large part of its time on a small machine. Jobs on the CPU backends run here ([`run_on`]).
///
/// One job at a time per process (later callers wait their turn; a call from a worker of the
/// pool runs in place): a worker waiting for a part of one job's op takes whatever is queued,
/// another job whole included, and Burn's autodiff holds a process-wide lock over a backward
/// pass whose ops split over the pool, so a second job taken under the first's backward waits
/// for that lock on a thread the first waits for: two jobs at once could deadlock.
pub fn on_cpu_threads<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if rayon::current_thread_index().is_some() {
        return work();
    }
    let _turn = ONE_JOB.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    rayon::scope(|_| work())
}

/// Lets the process's allocator reuse large buffers instead of mapping fresh pages for each.
///
/// glibc's malloc serves a request of 32 MiB or more (its largest dynamic threshold) with a
/// fresh `mmap` and unmaps it on free, and it returns freed memory at the top of its heap to
/// the system, so a large buffer faults in and zeroes its pages again at every use: at
/// N = 16384 every `[1, 8, N, 64]` f32 tensor is exactly 32 MiB, and the fused kernel's
/// forward would spend a third of its time faulting pages in. Here malloc maps nothing itself and keeps what is freed at the top of its heap
/// (up to 2 GiB) for the next buffer, so the process's resident memory stays near its peak.
/// Called once per process, before the first job; with another C library it does nothing.
pub fn keep_large_buffers_on_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes two of malloc's parameters, and glibc allows it at
            // any time; it is called once, before the job allocates its tensors.
            unsafe {
                libc::mallopt(libc::M_MMAP_MAX, 0);
                libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
            }
        });
    }
}
