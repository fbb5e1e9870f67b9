//! The processes' pieces of a tensor gathered into one, as a differentiable op of
//! `Autodiff<B>`: LongNet's sequence parallelism ([`super::sequence_parallel`]) attends to
//! other processes' keys and values, and their gradients must reach the processes that own them.
//!
//! Forward: an all-gather ([`Cluster::all_gather`]). Backward: each process holds the gradient
//! of its own loss with respect to the whole gathered tensor; the sum of those over the
//! processes is the gradient of the total loss, and each process keeps its own slot of it (a
//! reduce-scatter, [`Cluster::reduce_scatter`]). Every process runs the same graph, so the
//! backward calls meet in the same order. The values travel as f32 through host memory.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use super::cluster::Cluster;
use super::gradients::host_values;

/// Every process's `x: [.., piece, ..]` concatenated along `dim` in rank order, with gradients
/// flowing back to each process's own piece.
pub fn gather_pieces<B: Backend, C: CheckpointStrategy, const D: usize>(
    cluster: &Cluster,
    x: Tensor<Autodiff<B, C>, D>,
    dim: usize,
) -> Tensor<Autodiff<B, C>, D> {
    let x = x.into_primitive().tensor();
    let inner = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(x.primitive.clone()));
    let whole = gather(cluster, inner, dim).into_primitive().tensor();
    let output = match GatherOp::<D>.prepare::<C>([x.node.clone()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(GatherState { cluster: cluster.clone(), dim }, whole),
        OpsKind::UnTracked(prep) => prep.finish(whole),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

/// The backward step of [`gather_pieces`] for a tensor of rank `D`.
#[derive(Debug)]
struct GatherOp<const D: usize>;

/// What the backward needs: the collective, and the dimension the pieces were joined along.
#[derive(Clone, Debug)]
struct GatherState {
    cluster: Cluster,
    dim: usize,
}

impl<B: Backend, const D: usize> Backward<B, 1> for GatherOp<D> {
    type State = GatherState;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let GatherState { cluster, dim } = ops.state;
        let grad = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(grad));
        // Every process sums, whether or not its piece needs a gradient, to stay in step.
        let own = own_gradient(&cluster, grad, dim);
        let [parent] = ops.parents;
        if let Some(node) = parent {
            grads.register::<B>(node.id, own.into_primitive().tensor());
        }
    }
}

/// Every process's `x` concatenated along `dim` in rank order (every process passes the same
/// shape), in `x`'s dtype on its device.
fn gather<B: Backend, const D: usize>(
    cluster: &Cluster,
    x: Tensor<B, D>,
    dim: usize,
) -> Tensor<B, D> {
    let (device, dtype, dims) = (x.device(), x.dtype(), x.dims());
    let whole = cluster.all_gather(&host_values(x), "gathering the pieces of a sequence");
    let pieces = whole.chunks(dims.iter().product()).map(|piece| {
        let data = TensorData::new(piece.to_vec(), dims).convert_dtype(dtype);
        Tensor::<B, D>::from_data(data, &device)
    });
    Tensor::cat(pieces.collect(), dim)
}

/// This process's slot along `dim` of the sum over the processes of `grad`, the gradient of
/// every process's pieces side by side.
fn own_gradient<B: Backend, const D: usize>(
    cluster: &Cluster,
    grad: Tensor<B, D>,
    dim: usize,
) -> Tensor<B, D> {
    let (device, dtype) = (grad.device(), grad.dtype());
    let piece = grad.dims()[dim] / cluster.nodes();
    let mut dims = grad.dims();
    dims[dim] = piece;
    // Rank r's slot is block r of what is summed.
    let blocks = (0..cluster.nodes()).map(|r| grad.clone().narrow(dim, r * piece, piece));
    let blocks = blocks.map(|block| block.reshape([-1])).collect();
    let flat = host_values(Tensor::<B, 1>::cat(blocks, 0));
    let own = cluster.reduce_scatter(&flat, "the gradient of gathered pieces");
    Tensor::from_data(TensorData::new(own, dims).convert_dtype(dtype), &device)
}
