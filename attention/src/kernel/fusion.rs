//! The kernels inside Burn's fusion wrapper (the default `Wgpu` and `Cuda` types), after
//! `burn-vision`'s custom ops: each kernel is registered in the fusion stream as a
//! [`CustomOpIr`], and runs the inner backend's kernel when the stream executes it. Fusion
//! cannot fuse into a custom op; it treats it as a boundary and fuses the ops around it.

use std::marker::PhantomData;

use burn::tensor::Shape;
use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use crate::backend::{
    KernelBackward, WindowedAttentionBackend, WindowedKernel, WindowedKernelBackend,
};
use crate::{ScoreOptions, WindowSpec};

impl<B: FusionBackend + WindowedKernelBackend> WindowedKernelBackend for Fusion<B> {
    fn windowed_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> FloatTensor<Self> {
        let client = q.client.clone();
        let [batch, heads, q_len, dim] = q.shape.dims();
        let shape = Shape::new([batch, heads, q_len, dim + 1]);
        let packed = TensorIr::uninit(client.create_empty_handle(), shape, q.dtype);
        let streams = OperationStreams::with_inputs([&q, &k, &v]);
        let inputs = [q.into_ir(), k.into_ir(), v.into_ir()];
        let desc = CustomOpIr::new("swa_windowed_forward", &inputs, &[packed]);
        let op = KernelOp::<B> {
            desc: desc.clone(),
            spec: spec.clone(),
            opts: opts.clone(),
            backend: PhantomData,
        };
        client.register(streams, OperationIr::Custom(desc), ForwardOp(op)).output()
    }

    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> [FloatTensor<Self>; 3] {
        let KernelBackward { q, k, v, packed, grad } = inputs;
        let client = q.client.clone();
        let outputs = [&q, &k, &v]
            .map(|t| TensorIr::uninit(client.create_empty_handle(), t.shape.clone(), t.dtype));
        let streams = OperationStreams::with_inputs([&q, &k, &v, &packed, &grad]);
        let inputs = [q.into_ir(), k.into_ir(), v.into_ir(), packed.into_ir(), grad.into_ir()];
        let desc = CustomOpIr::new("swa_windowed_backward", &inputs, &outputs);
        let op = KernelOp::<B> {
            desc: desc.clone(),
            spec: spec.clone(),
            opts: opts.clone(),
            backend: PhantomData,
        };
        client.register(streams, OperationIr::Custom(desc), BackwardOp(op)).outputs()
    }

    /// The inner backend's choice: the same kernels run inside the stream.
    fn windowed_runs(spec: &WindowSpec, q: &Shape, k: &Shape, v: &Shape) -> bool {
        B::windowed_runs(spec, q, k, v)
    }
}

impl<B: FusionBackend + WindowedKernelBackend> WindowedAttentionBackend for Fusion<B> {
    fn windowed_kernel() -> Option<WindowedKernel<Self>> {
        Some(WindowedKernel::of())
    }
}

/// A registered kernel call: its tensors and its spec and options.
#[derive(Clone, Debug)]
struct KernelOp<B> {
    desc: CustomOpIr,
    spec: WindowSpec,
    opts: ScoreOptions,
    backend: PhantomData<B>,
}

/// The forward kernel as a fusion operation: `[q, k, v]` → `[packed]`.
#[derive(Clone, Debug)]
struct ForwardOp<B>(KernelOp<B>);

/// The backward kernels as a fusion operation: `[q, k, v, packed, grad]` → `[dq, dk, dv]`.
#[derive(Clone, Debug)]
struct BackwardOp<B>(KernelOp<B>);

type Handles<B> =
    HandleContainer<<<B as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle>;

impl<B: FusionBackend + WindowedKernelBackend> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let KernelOp { desc, spec, opts, .. } = &self.0;
        let ([q, k, v], [packed]) = desc.as_fixed();
        let [q, k, v] = [q, k, v].map(|t| handles.get_float_tensor::<B>(t));
        handles.register_float_tensor::<B>(&packed.id, B::windowed_forward(q, k, v, spec, opts));
    }
}

impl<B: FusionBackend + WindowedKernelBackend> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let KernelOp { desc, spec, opts, .. } = &self.0;
        let ([q, k, v, packed, grad], outputs) = desc.as_fixed::<5, 3>();
        let [q, k, v, packed, grad] =
            [q, k, v, packed, grad].map(|t| handles.get_float_tensor::<B>(t));
        let gradients = B::windowed_backward(KernelBackward { q, k, v, packed, grad }, spec, opts);
        for (output, gradient) in outputs.iter().zip(gradients) {
            handles.register_float_tensor::<B>(&output.id, gradient);
        }
    }
}
