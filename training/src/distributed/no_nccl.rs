//! The stand-in for `nccl.rs` in a build without the `cuda` feature: there are no CUDA tensors,
//! so no communicator is ever made ([`cuda_index`] finds no CUDA device) and every gradient
//! takes the host path.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use super::problem::ClusterProblem;

/// The bytes of an NCCL unique id.
pub type UniqueId = [u8; 128];

/// A communicator that cannot exist in this build.
pub enum Nccl {}

impl Nccl {
    /// No NCCL in this build.
    pub fn available() -> bool {
        false
    }

    /// Refuses: this build has no NCCL.
    pub fn unique_id() -> Result<UniqueId, ClusterProblem> {
        Err(ClusterProblem::NoNccl)
    }

    /// Refuses: this build has no NCCL.
    pub fn join(_: UniqueId, _: usize, _: usize, _: usize) -> Result<Self, ClusterProblem> {
        Err(ClusterProblem::NoNccl)
    }

    /// Processes in the communicator.
    pub fn ranks(&self) -> usize {
        match *self {}
    }

    /// Unreachable: no communicator exists.
    pub fn average<B: Backend, const D: usize>(
        &self,
        _: &Tensor<B, D>,
    ) -> Result<Option<Tensor<B, D>>, ClusterProblem> {
        match *self {}
    }
}

/// No device of this build is a CUDA device.
pub fn cuda_index<B: Backend>(_: &B::Device) -> Option<usize> {
    None
}
