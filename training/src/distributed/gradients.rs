//! Data parallelism's collective steps: every process starts from rank 0's weights, the
//! gradients of every optimizer step (after accumulation) are averaged over the processes
//! before the optimizer sees them ([`Averaged`]), so that the processes keep identical
//! weights, and at the end the processes check that they do.
//!
//! Gradients and weights travel in the module's own order of parameters (the same in every
//! process), rather than keyed by parameter ids, which are drawn at random in each process,
//! as f32 whatever the training precision (half-precision gradients are summed in f32): on the
//! host in the cluster's buckets, or, for CUDA tensors, on their GPU through NCCL
//! ([`super::nccl`]).

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};
use swa_attention::rng::SplitMix64;

use super::cluster::Cluster;
use super::nccl::{Nccl, cuda_index};
use super::problem::ClusterProblem;
use crate::error::TrainingError;

/// `tensor`'s values as f32 on the host (without a copy when it is an f32 tensor that only
/// this call holds, on the CPU backends).
pub(super) fn host_values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    let data = tensor.into_data().convert_dtype(DType::F32);
    data.into_vec::<f32>().expect("converted to f32")
}

/// A tensor's values as f32 on the host, with what it takes to rebuild it.
struct HostPiece<B: Backend> {
    values: Vec<f32>,
    dims: Vec<usize>,
    dtype: DType,
    device: B::Device,
}

impl<B: Backend> HostPiece<B> {
    fn new<const D: usize>(tensor: Tensor<B, D>) -> Self {
        let (dims, dtype, device) = (tensor.dims().to_vec(), tensor.dtype(), tensor.device());
        Self { values: host_values(tensor), dims, dtype, device }
    }

    fn tensor<const D: usize>(self) -> Tensor<B, D> {
        let data = TensorData::new(self.values, self.dims).convert_dtype(self.dtype);
        Tensor::from_data(data, &self.device)
    }
}

/// `grads` of `model` replaced by their mean over the processes. A trainable parameter without
/// a gradient here counts as a zero gradient, so every process sends the same layout. CUDA
/// gradients are averaged on their GPU through NCCL ([`Cluster::nccl`]); the others go
/// through the host in the cluster's buckets.
pub fn mean_gradients<B: AutodiffBackend, M: AutodiffModule<B>>(
    cluster: &Cluster,
    model: &M,
    mut grads: GradientsParams,
) -> GradientsParams {
    let _waiting = cluster.watch("the gradient all-reduce");
    let nccl =
        model.devices().first().and_then(cuda_index::<B::InnerBackend>).and_then(|device| {
            cluster.nccl(device).unwrap_or_else(|problem| stop(cluster, problem))
        });
    let mut take = TakeGradients::<B> { grads: &mut grads, nccl, cluster, pieces: Vec::new() };
    model.visit(&mut take);
    let mut pieces = take.pieces;
    let mut slices: Vec<&mut [f32]> = pieces.iter_mut().map(|(_, p)| &mut p.values[..]).collect();
    let scale = 1.0 / cluster.nodes() as f32;
    cluster.sum_pieces(&mut slices, scale, "the gradient all-reduce");
    pieces.reverse();
    model.visit(&mut PutGradients::<B> { grads: &mut grads, pieces });
    grads
}

/// Ends the process after a failed collective call: the optimizer's step cannot return an
/// error, and a process that went on alone would train another model than its peers.
fn stop(cluster: &Cluster, problem: ClusterProblem) -> ! {
    eprintln!("error: rank {}: {problem}; stopping", cluster.rank());
    std::process::exit(1)
}

/// `model` with rank 0's weights in every process.
pub fn rank_zero_weights<B: Backend, M: Module<B>>(cluster: &Cluster, model: M) -> M {
    let mut take = TakeWeights::<B> { pieces: Vec::new() };
    model.visit(&mut take);
    let mut pieces = take.pieces;
    for piece in &mut pieces {
        cluster.broadcast(&mut piece.values, "sharing rank 0's initial weights");
    }
    pieces.reverse();
    model.map(&mut PutWeights { pieces })
}

/// A fingerprint of `model`'s weights: a hash of every weight's f32 bits in module order.
pub fn weights_fingerprint<B: Backend, M: Module<B>>(model: &M) -> u64 {
    let mut take = TakeWeights::<B> { pieces: Vec::new() };
    model.visit(&mut take);
    take.pieces.into_iter().fold(0x6A09_E667_F3BC_C908, |hash, piece| {
        piece.values.iter().fold(hash, |h, v| SplitMix64::mix(h ^ v.to_bits() as u64))
    })
}

/// Checks that every process of `cluster` ends with the same weights as this one; returns
/// their fingerprint ([`weights_fingerprint`]).
pub fn agree_on_weights<B: Backend, M: Module<B>>(
    cluster: &Cluster,
    model: &M,
) -> Result<u64, TrainingError> {
    let mine = weights_fingerprint::<B, M>(model);
    match cluster.agree(mine, "final weights") {
        Ok(()) => Ok(mine),
        Err(problem) => Err(TrainingError::Cluster { rank: cluster.rank(), problem }),
    }
}

/// An optimizer whose steps take the mean of the processes' gradients: once per optimizer
/// step, after gradient accumulation, so a step of `K` accumulated batches sums once. Its
/// record is the inner optimizer's (checkpoints are those of a run of one process).
#[derive(Clone)]
pub struct Averaged<O> {
    /// The processes; `None` trains alone (the inner optimizer as it is).
    pub cluster: Option<Cluster>,
    /// The optimizer that steps with the mean.
    pub inner: O,
}

impl<M, B, O> Optimizer<M, B> for Averaged<O>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    O: Optimizer<M, B>,
{
    type Record = O::Record;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        let Some(cluster) = &self.cluster else { return self.inner.step(lr, module, grads) };
        let grads = mean_gradients(cluster, &module, grads);
        cluster.stepped();
        self.inner.step(lr, module, grads)
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        if self.cluster.is_none() {
            return self.inner.step_multi(lr, module, grads);
        }
        // Several devices of this process: their sum first, then the mean over processes.
        let mut collect = CollectGradients { multi: grads, grads: GradientsParams::new() };
        module.visit(&mut collect);
        self.step(lr, module, collect.grads)
    }

    fn to_record(&self) -> Self::Record {
        self.inner.to_record()
    }

    fn load_record(self, record: Self::Record) -> Self {
        Self { cluster: self.cluster, inner: self.inner.load_record(record) }
    }
}

/// Sums each trainable parameter's gradients over the devices of one process.
struct CollectGradients {
    multi: MultiGradientsParams,
    grads: GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for CollectGradients {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some((grad, _)) = self.multi.remove::<B::InnerBackend, D>(param.id) {
            self.grads.register::<B::InnerBackend, D>(param.id, grad);
        }
    }
}

/// Takes each trainable parameter's gradient out of `grads`, in module order: averaged at once
/// on its device when NCCL has it, or to the host (`pieces`) for the cluster's sum.
struct TakeGradients<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    nccl: Option<&'a Nccl>,
    cluster: &'a Cluster,
    pieces: Vec<(ParamId, HostPiece<B::InnerBackend>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for TakeGradients<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let grad = self
            .grads
            .remove::<B::InnerBackend, D>(param.id)
            .unwrap_or_else(|| value.inner().zeros_like());
        let on_device = self.nccl.map(|nccl| nccl.average(&grad)).transpose();
        match on_device.unwrap_or_else(|problem| stop(self.cluster, problem)).flatten() {
            Some(mean) => self.grads.register::<B::InnerBackend, D>(param.id, mean),
            None => self.pieces.push((param.id, HostPiece::new(grad))),
        }
    }
}

/// Puts the averaged host gradients back, in the order [`TakeGradients`] took them (`pieces`
/// is reversed, so the next one is at the end).
struct PutGradients<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    pieces: Vec<(ParamId, HostPiece<B::InnerBackend>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for PutGradients<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.pieces.last().is_some_and(|(id, _)| *id == param.id) {
            let (_, piece) = self.pieces.pop().expect("just seen");
            self.grads.register::<B::InnerBackend, D>(param.id, piece.tensor());
        }
    }
}

/// Takes every weight to the host, in module order.
struct TakeWeights<B: Backend> {
    pieces: Vec<HostPiece<B>>,
}

impl<B: Backend> ModuleVisitor<B> for TakeWeights<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.pieces.push(HostPiece::new(param.val()));
    }
}

/// Puts the shared weights back in the order [`TakeWeights`] took them (`pieces` reversed).
struct PutWeights<B: Backend> {
    pieces: Vec<HostPiece<B>>,
}

impl<B: Backend> ModuleMapper<B> for PutWeights<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, value, mapper) = param.consume();
        let piece: Tensor<B, D> = self.pieces.pop().expect("one piece per weight").tensor();
        // A trainable weight stays trainable (a leaf of the autodiff graph).
        let piece = match value.is_require_grad() {
            true => piece.detach().require_grad(),
            false => piece,
        };
        Param::from_mapped_value(id, piece, mapper)
    }
}
