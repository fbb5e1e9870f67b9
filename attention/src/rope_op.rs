//! A backend's fused RoPE as one differentiable op of `Autodiff<B>`: the forward runs the inner
//! backend's rotation, the backward the opposite rotation of the output's gradient (a rotation's
//! transpose is its inverse), so neither direction builds the tensor ops' tables and products.

use std::sync::Arc;

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::ops::FloatTensor;

use crate::RopeBackend;
use crate::rope::{RopeAngles, RotateKernel};

impl<B: RopeBackend, C: CheckpointStrategy> RopeBackend for Autodiff<B, C> {
    fn rope_kernel() -> Option<RotateKernel<Self>> {
        tracked::<B, C>()
    }
}

/// `Autodiff<B>`'s fused rotation, offered when `B` has one.
fn tracked<B: RopeBackend, C: CheckpointStrategy>() -> Option<RotateKernel<Autodiff<B, C>>> {
    B::rope_kernel().map(|_| rotate::<B, C> as RotateKernel<Autodiff<B, C>>)
}

/// `x` rotated by `angles` with the inner backend's kernel, tracked for the backward.
fn rotate<B: RopeBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    angles: &RopeAngles,
) -> FloatTensor<Autodiff<B, C>> {
    let kernel = B::rope_kernel().expect("offered only when the inner backend has one");
    match RopeOp.prepare::<C>([x.node.clone()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let state = RopeState { kernel, inverse: Arc::new(angles.inverse()) };
            prep.finish(state, kernel(x.primitive, angles))
        }
        OpsKind::UnTracked(prep) => prep.finish(kernel(x.primitive, angles)),
    }
}

/// The backward step of the rotation.
#[derive(Debug)]
struct RopeOp;

/// The inner backend's kernel and the opposite angles.
#[derive(Clone, Debug)]
struct RopeState<B: RopeBackend> {
    kernel: RotateKernel<B>,
    inverse: Arc<RopeAngles>,
}

impl<B: RopeBackend> Backward<B, 1> for RopeOp {
    type State = RopeState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let gradient = grads.consume::<B>(&ops.node);
        let RopeState { kernel, inverse } = ops.state;
        if let [Some(parent)] = ops.parents {
            grads.register::<B>(parent.id, kernel(gradient, &inverse));
        }
    }
}
