//! The inner backend's layer kernels ([`crate::layer_ops::LayerKernels`]) as differentiable
//! ops of `Autodiff<B>`: RMSNorm with parents `x` and `w`, the MLP's gate with parent `[a | b]`
//! (the joined gate and up product), the cross-entropy with parent `logits`, each backward one
//! kernel call; and the split of a joined product (`crate::split`). Without kernels,
//! or when [`crate::FUSED_OPS_VARIABLE`] turns the fused ops off, they return `None`: the
//! caller's tensor ops run on `Autodiff<B>` and are differentiated op by op.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::LayerOpsBackend;
use crate::layer_ops::{self, LayerKernels, MlpActivation, RmsOptions};

impl<B: LayerOpsBackend, C: CheckpointStrategy> LayerOpsBackend for Autodiff<B, C> {
    fn rms_norm(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        options: RmsOptions,
    ) -> Option<FloatTensor<Self>> {
        rms_norm::<B, C>(x, w, options)
    }

    fn gate(both: FloatTensor<Self>, activation: MlpActivation) -> Option<FloatTensor<Self>> {
        gate::<B, C>(both, activation)
    }

    fn cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> Option<FloatTensor<Self>> {
        cross_entropy::<B, C>(logits, targets)
    }

    fn split_parts(x: FloatTensor<Self>, dim: usize, sizes: &[usize]) -> Vec<FloatTensor<Self>> {
        crate::split::tracked::<B, C>(x, dim, sizes)
    }
}

/// RMSNorm on `Autodiff<B>`: the inner kernel, tracked, or `None` without one.
fn rms_norm<B: LayerOpsBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    w: FloatTensor<Autodiff<B, C>>,
    options: RmsOptions,
) -> Option<FloatTensor<Autodiff<B, C>>> {
    let kernels = layer_ops::chosen::<B>()?;
    let prepared = RmsNormOp.prepare::<C>([x.node.clone(), w.node.clone()]);
    let [y, inverse_rms] = (kernels.rms_norm)(x.primitive.clone(), w.primitive.clone(), options);
    match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let state = RmsState { kernels, x: x.primitive, w: w.primitive, inverse_rms, options };
            Some(prep.finish(state, y))
        }
        OpsKind::UnTracked(prep) => Some(prep.finish(y)),
    }
}

/// The MLP's gate on `Autodiff<B>`: the inner kernel, tracked, or `None` without one.
fn gate<B: LayerOpsBackend, C: CheckpointStrategy>(
    both: FloatTensor<Autodiff<B, C>>,
    activation: MlpActivation,
) -> Option<FloatTensor<Autodiff<B, C>>> {
    let kernels = layer_ops::chosen::<B>()?;
    let prepared = GateOp.prepare::<C>([both.node.clone()]);
    let z = (kernels.gate)(both.primitive.clone(), activation);
    match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let state = GateState { kernels, both: both.primitive, activation };
            Some(prep.finish(state, z))
        }
        OpsKind::UnTracked(prep) => Some(prep.finish(z)),
    }
}

/// The cross-entropy on `Autodiff<B>`: the inner kernel, tracked, or `None` without one.
fn cross_entropy<B: LayerOpsBackend, C: CheckpointStrategy>(
    logits: FloatTensor<Autodiff<B, C>>,
    targets: IntTensor<B>,
) -> Option<FloatTensor<Autodiff<B, C>>> {
    let kernels = layer_ops::chosen::<B>()?;
    let prepared = CrossEntropyOp.prepare::<C>([logits.node.clone()]);
    let [loss, lse] = (kernels.cross_entropy)(logits.primitive.clone(), targets.clone());
    match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let state = CrossEntropyState { kernels, logits: logits.primitive, targets, lse };
            Some(prep.finish(state, loss))
        }
        OpsKind::UnTracked(prep) => Some(prep.finish(loss)),
    }
}

/// The backward step of RMSNorm.
#[derive(Debug)]
struct RmsNormOp;

/// What RMSNorm's backward reads: its inputs, the inverse RMS of each row, the options.
#[derive(Clone, Debug)]
struct RmsState<B: LayerOpsBackend> {
    kernels: LayerKernels<B>,
    x: FloatTensor<B>,
    w: FloatTensor<B>,
    inverse_rms: FloatTensor<B>,
    options: RmsOptions,
}

impl<B: LayerOpsBackend> Backward<B, 2> for RmsNormOp {
    type State = RmsState<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let gradient = grads.consume::<B>(&ops.node);
        let RmsState { kernels, x, w, inverse_rms, options } = ops.state;
        let gradients = (kernels.rms_norm_backward)(x, w, inverse_rms, gradient, options);
        for (parent, gradient) in ops.parents.into_iter().zip(gradients) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, gradient);
            }
        }
    }
}

/// The backward step of the MLP's gate.
#[derive(Debug)]
struct GateOp;

/// What the gate's backward reads: its input `[a | b]` and activation.
#[derive(Clone, Debug)]
struct GateState<B: LayerOpsBackend> {
    kernels: LayerKernels<B>,
    both: FloatTensor<B>,
    activation: MlpActivation,
}

impl<B: LayerOpsBackend> Backward<B, 1> for GateOp {
    type State = GateState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let gradient = grads.consume::<B>(&ops.node);
        let GateState { kernels, both, activation } = ops.state;
        if let [Some(node)] = ops.parents {
            grads.register::<B>(node.id, (kernels.gate_backward)(both, gradient, activation));
        }
    }
}

/// The backward step of the cross-entropy.
#[derive(Debug)]
struct CrossEntropyOp;

/// What the cross-entropy's backward reads: the logits, the targets, each row's log-normaliser.
#[derive(Clone, Debug)]
struct CrossEntropyState<B: LayerOpsBackend> {
    kernels: LayerKernels<B>,
    logits: FloatTensor<B>,
    targets: IntTensor<B>,
    lse: FloatTensor<B>,
}

impl<B: LayerOpsBackend> Backward<B, 1> for CrossEntropyOp {
    type State = CrossEntropyState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let gradient = grads.consume::<B>(&ops.node);
        let CrossEntropyState { kernels, logits, targets, lse } = ops.state;
        if let [Some(node)] = ops.parents {
            let d_logits = (kernels.cross_entropy_backward)(logits, targets, lse, gradient);
            grads.register::<B>(node.id, d_logits);
        }
    }
}
