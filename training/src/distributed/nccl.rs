//! NCCL for the gradients of CUDA tensors (feature `cuda`): the processes of a run average
//! their gradients on their GPUs, without copies through the host. The communicator's unique
//! id is made by rank 0 and sent to the others over MPI ([`super::Cluster::nccl`]), as Horovod
//! and DeepSpeed do.
//!
//! A tensor of Burn's `Cuda` backend (fused or not) is found by its type (`Any`): one file knows
//! the CUDA types, instead of a bound on every training backend. Its buffer is averaged in
//! place (`ncclAllReduce` with `ncclAvg`, in f32 whatever the training precision), ordered
//! against CubeCL's work by synchronizing the device before and after: the gradients are
//! complete when NCCL reads them, and the sums are in memory when CubeCL next reads them.
//!
//! NCCL's library is loaded at run time (cudarc's dynamic loading): the system's `libnccl.so.2`
//! or the one in NVIDIA's Python wheel (`nvidia-nccl-cu12`, `…/site-packages/nvidia/nccl/lib`)
//! on `LD_LIBRARY_PATH`.

use std::any::Any;
use std::sync::Mutex;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::fusion::FusionCubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use burn_fusion::FusionTensor;
use cudarc::driver::result as driver;
use cudarc::nccl::{result as nccl, sys};

use super::problem::ClusterProblem;

/// The inner backend of Burn's fused `Cuda` type.
type CudaCube = CubeBackend<CudaRuntime, f32, i32, u8>;

/// The bytes of an NCCL unique id.
pub type UniqueId = [u8; 128];

/// One process's NCCL communicator, on one CUDA device.
pub struct Nccl {
    comm: Mutex<sys::ncclComm_t>,
    ranks: usize,
}

// SAFETY: the communicator is an opaque handle to NCCL's state, used only under the lock.
unsafe impl Send for Nccl {}
// SAFETY: as for `Send`.
unsafe impl Sync for Nccl {}

/// `problem` as a cluster problem naming the NCCL call.
fn failed(call: &'static str) -> impl FnOnce(String) -> ClusterProblem {
    move |problem| ClusterProblem::Nccl { call, problem }
}

impl Nccl {
    /// Whether NCCL's library can be loaded.
    pub fn available() -> bool {
        // SAFETY: only tries to open the library.
        unsafe { sys::is_culib_present() }
    }

    /// A new unique id for a communicator (made by one process, sent to the others).
    pub fn unique_id() -> Result<UniqueId, ClusterProblem> {
        if !Self::available() {
            return Err(ClusterProblem::NoNccl);
        }
        let id = nccl::get_uniqueid().map_err(|e| failed("ncclGetUniqueId")(format!("{e:?}")))?;
        Ok(id.internal.map(|c| c as u8))
    }

    /// Joins the communicator `id` of `ranks` processes as `rank`, on CUDA device `device`.
    pub fn join(
        id: UniqueId,
        rank: usize,
        ranks: usize,
        device: usize,
    ) -> Result<Self, ClusterProblem> {
        if !Self::available() {
            return Err(ClusterProblem::NoNccl);
        }
        let driver_failed = |call| move |e: driver::DriverError| failed(call)(format!("{e:?}"));
        driver::init().map_err(driver_failed("cuInit"))?;
        let ordinal = device as std::ffi::c_int;
        let cu_device = driver::device::get(ordinal).map_err(driver_failed("cuDeviceGet"))?;
        // SAFETY: `cu_device` came from cuDeviceGet; the primary context is CubeCL's own.
        unsafe {
            let context = driver::primary_ctx::retain(cu_device)
                .map_err(driver_failed("cuDevicePrimaryCtxRetain"))?;
            driver::ctx::set_current(context).map_err(driver_failed("cuCtxSetCurrent"))?;
        }
        let id = sys::ncclUniqueId { internal: id.map(|b| b as std::ffi::c_char) };
        let mut comm = std::mem::MaybeUninit::uninit();
        // SAFETY: `comm` is written by NCCL before it is read; every rank passes the same id.
        let comm = unsafe {
            nccl::comm_init_rank(comm.as_mut_ptr(), ranks as i32, id, rank as i32)
                .map_err(|e| failed("ncclCommInitRank")(format!("{e:?}")))?;
            comm.assume_init()
        };
        Ok(Self { comm: Mutex::new(comm), ranks })
    }

    /// Processes in the communicator.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// `tensor` averaged over the communicator's processes on its device, when it is a
    /// contiguous tensor of Burn's `Cuda` backend; `None` otherwise (the host path takes it).
    pub fn average<B: Backend, const D: usize>(
        &self,
        tensor: &Tensor<B, D>,
    ) -> Result<Option<Tensor<B, D>>, ClusterProblem> {
        let dtype = tensor.dtype();
        let work = match dtype {
            DType::F32 => tensor.clone(),
            _ => tensor.clone().cast(FloatDType::F32),
        };
        let primitive = work.clone().into_primitive().tensor();
        let Some(cube) = cuda_tensor::<B>(&primitive) else { return Ok(None) };
        if !cube.is_contiguous() {
            return Ok(None);
        }
        self.average_buffer(&cube)?;
        Ok(Some(match dtype {
            DType::F32 => work,
            _ => work.cast(FloatDType::from(dtype)),
        }))
    }

    /// Averages `tensor`'s f32 buffer in place over the processes.
    fn average_buffer(&self, tensor: &CubeTensor<CudaRuntime>) -> Result<(), ClusterProblem> {
        let count = tensor.meta.shape().num_elements();
        let client = &tensor.client;
        burn_cubecl::cubecl::future::block_on(client.sync())
            .map_err(|e| failed("synchronizing CubeCL's stream")(format!("{e:?}")))?;
        let resource = client
            .get_resource(tensor.handle.clone())
            .map_err(|e| failed("finding the tensor's buffer")(format!("{e:?}")))?;
        let pointer = resource.resource().ptr as *mut std::ffi::c_void;
        let comm = self.comm.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: `pointer` is the start of the tensor's `count` contiguous f32 on the device
        // (kept alive by `resource`), every CubeCL write to it is complete (the sync above),
        // and NCCL's in-place all-reduce runs on the default stream, synchronized below before
        // the buffer is used again.
        unsafe {
            nccl::all_reduce(
                pointer,
                pointer,
                count,
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclAvg,
                *comm,
                std::ptr::null_mut(),
            )
            .map_err(|e| failed("ncclAllReduce")(format!("{e:?}")))?;
        }
        driver::ctx::synchronize().map_err(|e| failed("cuCtxSynchronize")(format!("{e:?}")))
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        let comm = self.comm.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: the communicator was made by ncclCommInitRank and is not used again.
        let _ = unsafe { nccl::comm_destroy(*comm) };
    }
}

/// The CubeCL tensor behind `primitive` when it is a tensor of Burn's `Cuda` backend, fused
/// (its stream drained first) or not.
fn cuda_tensor<B: Backend>(primitive: &B::FloatTensorPrimitive) -> Option<CubeTensor<CudaRuntime>> {
    let any: &dyn Any = primitive;
    if let Some(tensor) = any.downcast_ref::<CubeTensor<CudaRuntime>>() {
        return Some(tensor.clone());
    }
    let fused = any.downcast_ref::<FusionTensor<FusionCubeRuntime<CudaRuntime>>>()?;
    // A clone keeps the handle alive (read-only): the averaged values stay the fused tensor's.
    Some(fused.client.resolve_tensor_float::<CudaCube>(fused.clone()))
}

/// The CUDA device index of `device` when it is a device of Burn's `Cuda` backend.
pub fn cuda_index<B: Backend>(device: &B::Device) -> Option<usize> {
    let any: &dyn Any = device;
    any.downcast_ref::<burn_cubecl::cubecl::cuda::CudaDevice>().map(|d| d.index)
}
