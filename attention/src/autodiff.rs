//! A backend's fused kernels as one differentiable op of `Autodiff<B>`, after the backward of
//! Burn's `examples/custom-cubecl-kernel`: the CubeCL kernels (`crate::kernel`) and the CPU
//! kernel (`crate::cpu`) differentiate through the same op.
//!
//! The kernel's two outputs, `o` in the inputs' dtype and `lse` in f32, are two tracked tensors,
//! while a Burn autodiff op has one output. So `o` is the output of [`KernelOp`] (parents q, k,
//! v, and the relative scores when the call has them), and `lse` the output of [`LseOp`], whose
//! only parent is `o`. The backward visits a child
//! before its parent: when the loss reaches `lse`, [`LseOp`]'s step runs first and hands `∂L/∂lse`
//! to [`KernelOp`]'s step through a cell both share, and [`KernelOp`] runs the inner backend's
//! backward kernels once, on `∂L/∂o` and `∂L/∂lse` together: exact gradients, no dense fallback
//! (docs/semantics.md §1).

use burn::backend::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::TensorMetadata;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use std::sync::{Arc, Mutex};

use crate::backend::{
    KernelBackward, KernelGradients, OutputPrimitives, WindowedAttentionBackend, WindowedKernel,
    blocked_primitives, chosen_kernel,
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
        relative: Option<FloatTensor<Self>>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        let kernel = chosen_kernel::<B>(spec, &q.shape(), &k.shape(), &v.shape());
        let call = |kernel| KernelCall { kernel, spec, opts };
        match (kernel, relative) {
            (Some(kernel), None) => kernel_op::<B, C, 3>(call(kernel), [q, k, v]),
            (Some(kernel), Some(relative)) => {
                kernel_op::<B, C, 4>(call(kernel), [q, k, v, relative])
            }
            (None, relative) => blocked_primitives::<Self>(q, k, v, relative, spec, opts),
        }
    }
}

/// A kernel call: the kernels, and the call's spec and options.
struct KernelCall<'a, B: Backend> {
    kernel: WindowedKernel<B>,
    spec: &'a WindowSpec,
    opts: &'a ScoreOptions,
}

impl<B: Backend> KernelCall<'_, B> {
    /// The forward kernel on `[q, k, v]` or `[q, k, v, relative]`.
    fn forward<const N: usize>(&self, inputs: [FloatTensor<B>; N]) -> OutputPrimitives<B> {
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().expect("q, k and v");
        let (q, k, v) = (next(), next(), next());
        (self.kernel.forward)(q, k, v, inputs.next(), self.spec, self.opts)
    }
}

/// The inner backend's forward kernel on `[q, k, v]` (`N = 3`) or `[q, k, v, relative]`
/// (`N = 4`) as two tracked outputs whose backward is its backward kernel.
fn kernel_op<B: WindowedAttentionBackend, C: CheckpointStrategy, const N: usize>(
    call: KernelCall<'_, B>,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
) -> OutputPrimitives<Autodiff<B, C>> {
    let nodes = inputs.each_ref().map(|t| t.node.clone());
    let d_lse = LseGradient::<B>::default();
    let (o, lse) = match KernelOp.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(mut prep) => {
            let checkpoints = inputs.each_ref().map(|t| prep.checkpoint(t));
            let (o, lse) = call.forward(inputs.map(|t| t.primitive));
            let state = KernelState {
                inputs: checkpoints.to_vec(),
                o: o.clone(),
                lse: lse.clone(),
                d_lse: d_lse.clone(),
                kernel: call.kernel,
                spec: call.spec.clone(),
                opts: call.opts.clone(),
            };
            (prep.finish(state, o), lse)
        }
        OpsKind::UnTracked(prep) => {
            let (o, lse) = call.forward(inputs.map(|t| t.primitive));
            (prep.finish(o), lse)
        }
    };
    let lse = match LseOp.prepare::<C>([o.node.clone()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let zeros_like_o =
                (o.primitive.shape(), o.primitive.dtype(), B::float_device(&o.primitive));
            prep.finish(LseState { d_lse, zeros_like_o }, lse)
        }
        OpsKind::UnTracked(prep) => prep.finish(lse),
    };
    (o, lse)
}

/// `∂L/∂lse`, from [`LseOp`]'s step to [`KernelOp`]'s; empty when the loss does not reach `lse`.
type LseGradient<B> = Arc<Mutex<Option<FloatTensor<B>>>>;

/// The backward step of the kernel op; everything it needs is in [`KernelState`].
#[derive(Debug)]
struct KernelOp;

/// What the backward keeps from the forward: the inputs (checkpointed: q, k, v and the relative
/// scores when given), the outputs, the cell [`LseOp`] fills, the kernels, and the call's spec
/// and options.
#[derive(Clone, Debug)]
struct KernelState<B: WindowedAttentionBackend> {
    inputs: Vec<NodeId>,
    o: FloatTensor<B>,
    lse: FloatTensor<B>,
    d_lse: LseGradient<B>,
    kernel: WindowedKernel<B>,
    spec: WindowSpec,
    opts: ScoreOptions,
}

impl<B: WindowedAttentionBackend, const N: usize> Backward<B, N> for KernelOp {
    type State = KernelState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let d_o = grads.consume::<B>(&ops.node);
        let KernelState { inputs, o, lse, d_lse, kernel, spec, opts } = ops.state;
        let d_lse = d_lse.lock().expect("a backward step does not panic holding the cell").take();
        let mut inputs = inputs.into_iter().map(|id| checkpointer.retrieve_node_output(id));
        let mut next = || inputs.next().expect("q, k and v are checkpointed");
        let (q, k, v) = (next(), next(), next());
        let inputs = KernelBackward { q, k, v, relative: inputs.next(), o, lse, d_o, d_lse };
        let KernelGradients { dq, dk, dv, d_relative } = (kernel.backward)(inputs, &spec, &opts);
        let gradients = [dq, dk, dv].into_iter().chain(d_relative);
        for (parent, gradient) in ops.parents.into_iter().zip(gradients) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, gradient);
            }
        }
    }
}

/// The backward step of `lse`, a child of `o`: it hands `∂L/∂lse` to [`KernelOp`]'s step.
#[derive(Debug)]
struct LseOp;

/// The cell [`KernelOp`]'s step reads, and what a zero gradient of `o` is made of.
#[derive(Clone, Debug)]
struct LseState<B: WindowedAttentionBackend> {
    d_lse: LseGradient<B>,
    zeros_like_o: (burn::tensor::Shape, burn::tensor::DType, B::Device),
}

impl<B: WindowedAttentionBackend> Backward<B, 1> for LseOp {
    type State = LseState<B>;

    /// Stores `∂L/∂lse`, and registers a zero gradient on `o` so that [`KernelOp`]'s step finds
    /// one even when the loss reaches `o` only through `lse`.
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let LseState { d_lse, zeros_like_o: (shape, dtype, device) } = ops.state;
        *d_lse.lock().expect("a backward step does not panic holding the cell") =
            Some(grads.consume::<B>(&ops.node));
        if let [Some(o)] = ops.parents {
            grads.register::<B>(o.id, B::float_zeros(shape, &device, dtype.into()));
        }
    }
}
