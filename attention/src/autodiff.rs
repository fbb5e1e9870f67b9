//! A backend's fused kernels as one differentiable op of `Autodiff<B>`, after the backward of
//! Burn's `examples/custom-cubecl-kernel`: the CubeCL kernels (`crate::kernel`) and the CPU
//! kernel (`crate::cpu`) differentiate through the same op.
//!
//! The op's single output is the packed `[batch, H, N_q, d + 1]` tensor (`o` ‖ `lse`); `o` and
//! `lse` are slices of it, so autodiff hands the backward one gradient holding `∂L/∂o` and
//! `∂L/∂lse` (zeros where the loss does not use one of them). The backward runs the inner
//! backend's backward kernels: exact gradients, no dense fallback (docs/semantics.md §1).

use burn::backend::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use crate::backend::{
    KernelBackward, OutputPrimitives, WindowedAttentionBackend, WindowedKernel, blocked_primitives,
    chosen_kernel, split_packed,
};
use crate::{ScoreOptions, WindowSpec};

impl<B: WindowedAttentionBackend, C: CheckpointStrategy> WindowedAttentionBackend
    for Autodiff<B, C>
{
    /// The kernels with their backward when `B` has them and they take the call, else the
    /// blocked path (differentiated op by op, as on every backend).
    fn windowed_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        match chosen_kernel::<B>(spec, &q.shape(), &k.shape(), &v.shape()) {
            Some(kernel) => kernel_op::<B, C>(kernel, q, k, v, spec, opts),
            None => blocked_primitives::<Self>(q, k, v, spec, opts),
        }
    }
}

/// The inner backend's forward kernel as one tracked op whose backward is its backward kernel.
fn kernel_op<B: WindowedAttentionBackend, C: CheckpointStrategy>(
    kernel: WindowedKernel<B>,
    q: FloatTensor<Autodiff<B, C>>,
    k: FloatTensor<Autodiff<B, C>>,
    v: FloatTensor<Autodiff<B, C>>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> OutputPrimitives<Autodiff<B, C>> {
    let dim = q.shape()[3];
    let nodes = [q.node.clone(), k.node.clone(), v.node.clone()];
    let packed = match KernelOp.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(mut prep) => {
            let inputs = [prep.checkpoint(&q), prep.checkpoint(&k), prep.checkpoint(&v)];
            let packed = (kernel.forward)(q.primitive, k.primitive, v.primitive, spec, opts);
            let state = KernelState {
                inputs,
                packed: packed.clone(),
                kernel,
                spec: spec.clone(),
                opts: opts.clone(),
            };
            prep.finish(state, packed)
        }
        OpsKind::UnTracked(prep) => {
            prep.finish((kernel.forward)(q.primitive, k.primitive, v.primitive, spec, opts))
        }
    };
    split_packed::<Autodiff<B, C>>(packed, dim)
}

/// The backward step of the kernel op; everything it needs is in [`KernelState`].
#[derive(Debug)]
struct KernelOp;

/// What the backward keeps from the forward: the inputs (checkpointed), the packed output, the
/// kernels, and the call's spec and options.
#[derive(Clone, Debug)]
struct KernelState<B: WindowedAttentionBackend> {
    inputs: [NodeId; 3],
    packed: FloatTensor<B>,
    kernel: WindowedKernel<B>,
    spec: WindowSpec,
    opts: ScoreOptions,
}

impl<B: WindowedAttentionBackend> Backward<B, 3> for KernelOp {
    type State = KernelState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let KernelState { inputs: [q, k, v], packed, kernel, spec, opts } = ops.state;
        let inputs = KernelBackward {
            q: checkpointer.retrieve_node_output(q),
            k: checkpointer.retrieve_node_output(k),
            v: checkpointer.retrieve_node_output(v),
            packed,
            grad,
        };
        let gradients = (kernel.backward)(inputs, &spec, &opts);
        for (parent, gradient) in ops.parents.into_iter().zip(gradients) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, gradient);
            }
        }
    }
}
