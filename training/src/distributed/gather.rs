//! The processes' pieces of a tensor gathered into one, as a differentiable op of
//! `Autodiff<B>`: LongNet's sequence parallelism ([`super::sequence_parallel`]) attends to
//! other processes' keys and values, and their gradients must reach the processes that own them.
//!
//! Forward: [`Cluster::gather`]. Backward: each process holds the gradient of its own loss with
//! respect to the whole gathered tensor; the sum of those over the processes is the gradient of
//! the total loss, and each process keeps its own slot of it (a reduce-scatter, done as an
//! all-reduce for the reason in [`super::cluster`]). Every process runs the same graph, so the
//! backward calls meet in the same order.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

use super::cluster::Cluster;

/// Every process's `x: [.., piece, ..]` concatenated along `dim` in rank order, with gradients
/// flowing back to each process's own piece.
pub fn gather_pieces<B: Backend, C: CheckpointStrategy, const D: usize>(
    cluster: &Cluster,
    x: Tensor<Autodiff<B, C>, D>,
    dim: usize,
) -> Tensor<Autodiff<B, C>, D> {
    let x = x.into_primitive().tensor();
    let inner = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(x.primitive.clone()));
    let whole = cluster.gather(inner, dim, "gathering the pieces of a sequence");
    let whole = whole.into_primitive().tensor();
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
        let total = cluster.sum::<B, D>(grad, "the gradient of gathered pieces");
        let [parent] = ops.parents;
        if let Some(node) = parent {
            let own = cluster.own_piece(total, dim).into_primitive().tensor();
            grads.register::<B>(node.id, own);
        }
    }
}
