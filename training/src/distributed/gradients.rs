//! Data parallelism's collective steps: every process starts from rank 0's weights, every
//! step's gradients are averaged over the processes before the optimizer sees them, so that
//! the processes keep identical weights, and at the end the processes check that they do.
//!
//! The gradients travel as one flat tensor per step, in the module's own order of parameters
//! (the same in every process), rather than one call per parameter keyed by parameter ids,
//! which are drawn at random in each process.

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};
use swa_models::SplitMix64;

use super::cluster::{Cluster, ClusterProblem};
use crate::error::TrainingError;

/// `grads` of `model` replaced by their mean over the processes. A trainable parameter without
/// a gradient here counts as a zero gradient, so every process sends the same layout.
pub fn mean_gradients<B: AutodiffBackend, M: AutodiffModule<B>>(
    cluster: &Cluster,
    model: &M,
    mut grads: GradientsParams,
) -> GradientsParams {
    let mut take = TakeGradients::<B> { grads: &mut grads, pieces: Vec::new() };
    model.visit(&mut take);
    let pieces = take.pieces;
    if pieces.is_empty() {
        return grads;
    }
    let sizes = pieces.iter().map(|p| p.dims()[0]).collect::<Vec<_>>();
    let total = cluster.sum(Tensor::cat(pieces, 0), "the gradient all-reduce");
    let mean = total.div_scalar(cluster.nodes() as f64);
    let mut put = PutGradients::<B> { grads: &mut grads, pieces: mean.split_with_sizes(sizes, 0) };
    put.pieces.reverse();
    model.visit(&mut put);
    grads
}

/// `model` with rank 0's weights in every process: one sum of rank 0's weights and everybody
/// else's zeros, flattened in module order.
pub fn rank_zero_weights<B: Backend, M: Module<B>>(cluster: &Cluster, model: M) -> M {
    let mut take = TakeWeights::<B> { zeros: cluster.rank() > 0, pieces: Vec::new() };
    model.visit(&mut take);
    if take.pieces.is_empty() {
        return model;
    }
    let sizes = take.pieces.iter().map(|p| p.dims()[0]).collect::<Vec<_>>();
    let shared = cluster.sum(Tensor::cat(take.pieces, 0), "sharing rank 0's initial weights");
    let mut pieces = shared.split_with_sizes(sizes, 0);
    pieces.reverse();
    model.map(&mut PutWeights { pieces })
}

/// A fingerprint of `model`'s weights: a hash of every weight's f32 bits in module order.
pub fn weights_fingerprint<B: Backend, M: Module<B>>(model: &M) -> u64 {
    let mut take = TakeWeights::<B> { zeros: false, pieces: Vec::new() };
    model.visit(&mut take);
    take.pieces.into_iter().fold(0x6A09_E667_F3BC_C908, |hash, piece| {
        let values = piece.into_data().convert_dtype(DType::F32);
        let values = values.to_vec::<f32>().expect("converted to f32");
        values.iter().fold(hash, |h, v| SplitMix64::mix(h ^ v.to_bits() as u64))
    })
}

/// Checks that every process of `cluster` ends with the same weights as this one; returns
/// their fingerprint ([`weights_fingerprint`]). The fingerprints travel as four 16-bit pieces,
/// each exact in f32.
pub fn agree_on_weights<B: Backend, M: Module<B>>(
    cluster: &Cluster,
    model: &M,
    device: &B::Device,
) -> Result<u64, TrainingError> {
    let mine = weights_fingerprint::<B, M>(model);
    let pieces: Vec<f32> = (0..4).map(|i| ((mine >> (16 * i)) & 0xFFFF) as f32).collect();
    let pieces = Tensor::<B, 2>::from_data(TensorData::new(pieces, [1, 4]), device);
    let all = cluster.gather(pieces, 0, "comparing the final weights");
    let all = all.into_data().convert_dtype(DType::F32).to_vec::<f32>().expect("converted to f32");
    let fingerprints =
        all.chunks(4).map(|p| p.iter().rev().fold(0u64, |h, &x| (h << 16) | x as u64));
    match fingerprints.enumerate().find(|(_, f)| *f != mine) {
        Some((other, _)) => Err(TrainingError::Cluster {
            rank: cluster.rank(),
            problem: ClusterProblem::Mismatch { what: "final weights", other },
        }),
        None => Ok(mine),
    }
}

/// Takes each trainable parameter's gradient out of `grads`, flattened, in module order.
struct TakeGradients<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    pieces: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for TakeGradients<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let size = value.shape().num_elements();
        let grad = self
            .grads
            .remove::<B::InnerBackend, D>(param.id)
            .unwrap_or_else(|| value.inner().zeros_like());
        self.pieces.push(grad.reshape([size]));
    }
}

/// Puts the averaged gradients back, in the order [`TakeGradients`] took them (`pieces` is
/// reversed, so the next one is at the end).
struct PutGradients<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    pieces: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for PutGradients<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let piece = self.pieces.pop().expect("one piece per trainable parameter");
        self.grads.register::<B::InnerBackend, D>(param.id, piece.reshape(value.shape()));
    }
}

/// Takes every weight, flattened, in module order (zeros in place of the values when `zeros`).
struct TakeWeights<B: Backend> {
    zeros: bool,
    pieces: Vec<Tensor<B, 1>>,
}

impl<B: Backend> ModuleVisitor<B> for TakeWeights<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        let size = value.shape().num_elements();
        let value = if self.zeros { value.zeros_like() } else { value };
        self.pieces.push(value.reshape([size]));
    }
}

/// Puts the shared weights back in the order [`TakeWeights`] took them (`pieces` reversed).
struct PutWeights<B: Backend> {
    pieces: Vec<Tensor<B, 1>>,
}

impl<B: Backend> ModuleMapper<B> for PutWeights<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, value, mapper) = param.consume();
        let piece = self.pieces.pop().expect("one piece per weight").reshape(value.shape());
        // A trainable weight stays trainable (a leaf of the autodiff graph).
        let piece = match value.is_require_grad() {
            true => piece.detach().require_grad(),
            false => piece,
        };
        Param::from_mapped_value(id, piece, mapper)
    }
}
