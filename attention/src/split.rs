//! A tensor cut along one axis into consecutive parts: a joined product's q, k and v, or its gate
//! and up halves (`swa_models`). The parts are views of the tensor; on `Autodiff<B>` they are
//! differentiated together, their gradients written side by side by one concatenation, where
//! Burn 0.21 differentiates each narrow on its own: a zero fill of the whole tensor, a
//! slice-assign, and an add per part after the first (for q, k, v that is eight passes over the
//! product's gradient instead of one).
//!
//! A Burn autodiff op has one output, so each part is an op of its own (`PartOp`) whose parent
//! is a `JoinOp` that hands the tensor on unchanged. The backward visits children before
//! their parent: each part's step leaves its gradient in a cell the parts and the join share,
//! and the join's step concatenates them (zeros for a part the loss does not reach) into the
//! tensor's gradient. The join's step needs a gradient of its own to be run, so the first part
//! to arrive also registers its gradient there, as a token the join drops (the same hand-over
//! as the kernel's `lse`, `crate::autodiff`).

use std::sync::{Arc, Mutex};

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Slice, Tensor, TensorMetadata, TensorPrimitive};

use crate::LayerOpsBackend;

/// `x` cut along `dim` into consecutive parts of `sizes`, which must add up to `x`'s extent
/// there → one tensor per size, each `x`'s shape with `sizes[i]` along `dim`
/// ([`LayerOpsBackend::split_parts`]).
pub fn split<B: LayerOpsBackend, const D: usize>(
    x: Tensor<B, D>,
    dim: usize,
    sizes: &[usize],
) -> Vec<Tensor<B, D>> {
    let extent = x.dims()[dim];
    assert_eq!(sizes.iter().sum::<usize>(), extent, "split sizes {sizes:?} of an axis of {extent}");
    let parts = B::split_parts(x.into_primitive().tensor(), dim, sizes);
    parts.into_iter().map(|part| Tensor::from_primitive(TensorPrimitive::Float(part))).collect()
}

/// The parts as views of `x` (Burn's slices), on any backend: [`LayerOpsBackend::split_parts`]'s
/// default.
pub(crate) fn views<B: Backend>(
    x: FloatTensor<B>,
    dim: usize,
    sizes: &[usize],
) -> Vec<FloatTensor<B>> {
    let shape = x.shape();
    let whole = |axis: usize| Slice::new(0, Some(shape[axis] as isize), 1);
    let mut start = 0;
    sizes
        .iter()
        .map(|&size| {
            let slices: Vec<Slice> = (0..shape.num_dims())
                .map(|axis| match axis == dim {
                    true => Slice::new(start as isize, Some((start + size) as isize), 1),
                    false => whole(axis),
                })
                .collect();
            start += size;
            B::float_slice(x.clone(), &slices)
        })
        .collect()
}

/// The parts on `Autodiff<B>`: the inner backend's, each tracked as a [`PartOp`] of one
/// [`JoinOp`] on `x`.
pub(crate) fn tracked<B: LayerOpsBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    dim: usize,
    sizes: &[usize],
) -> Vec<FloatTensor<Autodiff<B, C>>> {
    let parts = B::split_parts(x.primitive.clone(), dim, sizes);
    let cell: Cell<B> = Arc::new(Mutex::new(vec![None; parts.len()]));
    let like = parts.iter().map(|p| (p.shape(), p.dtype(), B::float_device(p))).collect();
    let prepared = Backward::<B, 1>::prepare::<C>(JoinOp, [x.node.clone()]);
    let join = match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            prep.finish(JoinState { cell: cell.clone(), dim, like }, x.primitive)
        }
        OpsKind::UnTracked(prep) => prep.finish(x.primitive),
    };
    let part = |(index, part)| match Backward::<B, 1>::prepare::<C>(PartOp, [join.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(PartState { cell: cell.clone(), index }, part),
        OpsKind::UnTracked(prep) => prep.finish(part),
    };
    parts.into_iter().enumerate().map(part).collect()
}

/// The parts' gradients, each left by its part's step for the join's.
type Cell<B> = Arc<Mutex<Vec<Option<FloatTensor<B>>>>>;

/// The backward step of the join: the parts' gradients side by side.
#[derive(Debug)]
struct JoinOp;

/// The shared cell, the axis, and each part's shape, dtype and device (for a zero gradient).
#[derive(Clone, Debug)]
struct JoinState<B: Backend> {
    cell: Cell<B>,
    dim: usize,
    like: Vec<(Shape, DType, B::Device)>,
}

impl<B: Backend> Backward<B, 1> for JoinOp {
    type State = JoinState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        // The token the first part left; the gradient is the cell's.
        let _token = grads.consume::<B>(&ops.node);
        let JoinState { cell, dim, like } = ops.state;
        let parts = std::mem::take(&mut *cell.lock().expect("no step panics holding the cell"));
        let parts = parts.into_iter().zip(like).map(|(gradient, (shape, dtype, device))| {
            gradient.unwrap_or_else(|| B::float_zeros(shape, &device, dtype.into()))
        });
        if let [Some(x)] = ops.parents {
            grads.register::<B>(x.id, B::float_cat(parts.collect(), dim));
        }
    }
}

/// The backward step of a part: its gradient into the cell.
#[derive(Debug)]
struct PartOp;

/// The shared cell and the part's place in it.
#[derive(Clone, Debug)]
struct PartState<B: Backend> {
    cell: Cell<B>,
    index: usize,
}

impl<B: Backend> Backward<B, 1> for PartOp {
    type State = PartState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let gradient = grads.consume::<B>(&ops.node);
        let PartState { cell, index } = ops.state;
        let mut parts = cell.lock().expect("no step panics holding the cell");
        let first = parts.iter().all(Option::is_none);
        parts[index] = Some(gradient.clone());
        if let ([Some(join)], true) = (ops.parents, first) {
            grads.register::<B>(join.id, gradient);
        }
    }
}
