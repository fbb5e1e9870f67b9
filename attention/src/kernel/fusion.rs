//! The kernels, the decode step, the append and RoPE inside Burn's fusion wrapper (the default
//! `Wgpu` and `Cuda` types), after `burn-vision`'s custom ops: each kernel is registered in the
//! fusion stream as a [`CustomOpIr`], and runs the inner backend's kernel when the stream executes
//! it. Fusion cannot fuse into a custom op; it treats it as a boundary and fuses the ops around it.

use std::marker::PhantomData;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use crate::backend::{
    KernelBackward, KernelGradients, OutputPrimitives, WindowedAttentionBackend, WindowedKernel,
    WindowedKernelBackend,
};
use crate::decode::{CacheWrite, CachedBuffer, DecodeKernel, DecodeStep, SlotWrite};
use crate::layer_ops::LayerOpsBackend;
use crate::rope::{RopeAngles, RopeBackend, RotateKernel};
use crate::{ScoreOptions, WindowSpec};

impl<B: FusionBackend + WindowedKernelBackend> WindowedKernelBackend for Fusion<B> {
    fn windowed_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        relative: Option<FloatTensor<Self>>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        let client = q.client.clone();
        let [batch, heads, q_len, _] = q.shape.dims();
        let o = TensorIr::uninit(client.create_empty_handle(), q.shape.clone(), q.dtype);
        let lse_shape = Shape::new([batch, heads, q_len]);
        let lse = TensorIr::uninit(client.create_empty_handle(), lse_shape, DType::F32);
        let has_relative = relative.is_some();
        let given: Vec<_> = [q, k, v].into_iter().chain(relative).collect();
        let streams = OperationStreams::with_inputs(&given);
        let inputs: Vec<_> = given.into_iter().map(|t| t.into_ir()).collect();
        let desc = CustomOpIr::new("swa_windowed_forward", &inputs, &[o, lse]);
        let op = KernelOp::<B> {
            desc: desc.clone(),
            spec: spec.clone(),
            opts: opts.clone(),
            given: Given { d_lse: false, relative: has_relative },
            backend: PhantomData,
        };
        let [o, lse] = client.register(streams, OperationIr::Custom(desc), ForwardOp(op)).outputs();
        (o, lse)
    }

    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> KernelGradients<Self> {
        let KernelBackward { q, k, v, relative, o, lse, d_o, d_lse } = inputs;
        let client = q.client.clone();
        let outputs: Vec<_> = [&q, &k, &v]
            .into_iter()
            .chain(relative.as_ref())
            .map(|t| TensorIr::uninit(client.create_empty_handle(), t.shape.clone(), t.dtype))
            .collect();
        let given = Given { d_lse: d_lse.is_some(), relative: relative.is_some() };
        let given_tensors: Vec<_> =
            [q, k, v, o, lse, d_o].into_iter().chain(d_lse).chain(relative).collect();
        let streams = OperationStreams::with_inputs(&given_tensors);
        let inputs: Vec<_> = given_tensors.into_iter().map(|t| t.into_ir()).collect();
        let desc = CustomOpIr::new("swa_windowed_backward", &inputs, &outputs);
        let op = KernelOp::<B> {
            desc: desc.clone(),
            spec: spec.clone(),
            opts: opts.clone(),
            given,
            backend: PhantomData,
        };
        let mut gradients =
            client.register(streams, OperationIr::Custom(desc), BackwardOp(op)).into_iter();
        let mut next = || gradients.next().expect("registered with dq, dk and dv");
        let (dq, dk, dv) = (next(), next(), next());
        KernelGradients { dq, dk, dv, d_relative: gradients.next() }
    }

    /// The inner backend's choice: the same kernels run inside the stream.
    fn windowed_runs(spec: &WindowSpec, q: &Shape, k: &Shape, v: &Shape) -> bool {
        B::windowed_runs(spec, q, k, v)
    }
}

impl<B> WindowedAttentionBackend for Fusion<B>
where
    B: FusionBackend + WindowedKernelBackend + WindowedAttentionBackend,
{
    fn windowed_kernel() -> Option<WindowedKernel<Self>> {
        Some(WindowedKernel::of())
    }

    /// The inner backend's decode step, as one custom op of the stream.
    fn windowed_decode() -> Option<DecodeKernel<Self>> {
        B::windowed_decode().map(|_| decode_step::<B> as DecodeKernel<Self>)
    }

    /// The inner backend's fused append, as one custom op of the stream.
    fn windowed_cache_write() -> Option<CacheWrite<Self>> {
        B::windowed_cache_write().map(|_| cache_write::<B> as CacheWrite<Self>)
    }
}

/// The inner backend's fused RoPE, as one custom op of the stream.
impl<B: FusionBackend + RopeBackend> RopeBackend for Fusion<B> {
    fn rope_kernel() -> Option<RotateKernel<Self>> {
        B::rope_kernel().map(|_| rotate::<B> as RotateKernel<Self>)
    }
}

/// Registers the inner backend's rotation: `[x]` → `[x turned]`.
fn rotate<B: FusionBackend + RopeBackend>(
    x: FloatTensor<Fusion<B>>,
    angles: &RopeAngles,
) -> FloatTensor<Fusion<B>> {
    let client = x.client.clone();
    let out = TensorIr::uninit(client.create_empty_handle(), x.shape.clone(), x.dtype);
    let streams = OperationStreams::with_inputs([&x]);
    let desc = CustomOpIr::new("swa_rope", &[x.into_ir()], &[out]);
    let op = RopeOp::<B> { desc: desc.clone(), angles: angles.clone(), backend: PhantomData };
    client.register(streams, OperationIr::Custom(desc), op).output()
}

/// A registered rotation: its tensors and its angles.
#[derive(Clone, Debug)]
struct RopeOp<B> {
    desc: CustomOpIr,
    angles: RopeAngles,
    backend: PhantomData<B>,
}

impl<B: FusionBackend + RopeBackend> Operation<B::FusionRuntime> for RopeOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let rotate = B::rope_kernel().expect("registered only when the inner backend has one");
        let x = handles.get_float_tensor::<B>(&self.desc.inputs[0]);
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, rotate(x, &self.angles));
    }
}

/// The layer ops run as tensor ops, which fusion fuses itself.
impl<B: FusionBackend> LayerOpsBackend for Fusion<B> {}

/// Registers the inner backend's fused append: `[k, v, keys₀, values₀, keys₁, …]` → `[keys₀,
/// values₀, …]` written. A buffer the cache alone holds reaches the inner backend as its only
/// handle (fusion hands over a tensor at its last use), so the append writes it in place.
fn cache_write<B>(
    k: FloatTensor<Fusion<B>>,
    v: FloatTensor<Fusion<B>>,
    rope: Option<&RopeAngles>,
    writes: Vec<SlotWrite<'_, Fusion<B>>>,
) -> Vec<[FloatTensor<Fusion<B>>; 2]>
where
    B: FusionBackend + WindowedKernelBackend + WindowedAttentionBackend,
{
    let client = k.client.clone();
    let buffers: Vec<_> = writes.iter().map(|w| (w.kv_heads.to_vec(), w.slot)).collect();
    let given: Vec<_> =
        [k, v].into_iter().chain(writes.into_iter().flat_map(|w| [w.keys, w.values])).collect();
    let outputs: Vec<_> = given[2..]
        .iter()
        .map(|t| TensorIr::uninit(client.create_empty_handle(), t.shape.clone(), t.dtype))
        .collect();
    let streams = OperationStreams::with_inputs(&given);
    let inputs: Vec<_> = given.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new("swa_cache_write", &inputs, &outputs);
    let rope = rope.cloned();
    let op = CacheWriteOp::<B> { desc: desc.clone(), buffers, rope, backend: PhantomData };
    let mut written = client.register(streams, OperationIr::Custom(desc), op).into_iter();
    std::iter::from_fn(|| Some([written.next()?, written.next()?])).collect()
}

/// A registered fused append: its tensors, each buffer's kv heads and slot, and the key's
/// rotation.
#[derive(Clone, Debug)]
struct CacheWriteOp<B> {
    desc: CustomOpIr,
    buffers: Vec<(Vec<usize>, usize)>,
    rope: Option<RopeAngles>,
    backend: PhantomData<B>,
}

impl<B> Operation<B::FusionRuntime> for CacheWriteOp<B>
where
    B: FusionBackend + WindowedKernelBackend + WindowedAttentionBackend,
{
    fn execute(&self, handles: &mut Handles<B>) {
        let write =
            B::windowed_cache_write().expect("registered only when the inner backend has one");
        let mut given = self.desc.inputs.iter().map(|t| handles.get_float_tensor::<B>(t));
        let (k, v) = (given.next().expect("k first"), given.next().expect("then v"));
        let writes: Vec<SlotWrite<'_, B>> = self
            .buffers
            .iter()
            .map(|(kv_heads, slot)| SlotWrite {
                keys: given.next().expect("registered with each buffer's keys"),
                values: given.next().expect("registered with each buffer's values"),
                kv_heads,
                slot: *slot,
            })
            .collect();
        let written = write(k, v, self.rope.as_ref(), writes).into_iter().flatten();
        for (output, tensor) in self.desc.outputs.iter().zip(written) {
            handles.register_float_tensor::<B>(&output.id, tensor);
        }
    }
}

/// Registers the inner backend's decode step: `[q, keys₀, values₀, keys₁, …]` → `[o]`.
fn decode_step<B>(
    q: FloatTensor<Fusion<B>>,
    buffers: &[CachedBuffer<'_, Fusion<B>>],
    step: &DecodeStep<'_>,
) -> FloatTensor<Fusion<B>>
where
    B: FusionBackend + WindowedKernelBackend + WindowedAttentionBackend,
{
    let client = q.client.clone();
    let out = TensorIr::uninit(client.create_empty_handle(), q.shape.clone(), q.dtype);
    let given: Vec<_> = std::iter::once(q)
        .chain(buffers.iter().flat_map(|b| [b.keys.clone(), b.values.clone()]))
        .collect();
    let streams = OperationStreams::with_inputs(&given);
    let inputs: Vec<_> = given.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new("swa_windowed_decode", &inputs, &[out]);
    let op = DecodeOp::<B> {
        desc: desc.clone(),
        buffers: buffers.iter().map(|b| (b.kv_heads.to_vec(), b.positions.to_vec())).collect(),
        specs: step.specs.to_vec(),
        opts: step.opts.clone(),
        position: step.position,
        rope: step.rope.cloned(),
        backend: PhantomData,
    };
    client.register(streams, OperationIr::Custom(desc), op).output()
}

/// A registered decode step: its tensors, each buffer's kv heads and slot positions, and the
/// step's specs, options, position and rotation.
#[derive(Clone, Debug)]
struct DecodeOp<B> {
    desc: CustomOpIr,
    buffers: Vec<(Vec<usize>, Vec<usize>)>,
    specs: Vec<WindowSpec>,
    opts: ScoreOptions,
    position: usize,
    rope: Option<RopeAngles>,
    backend: PhantomData<B>,
}

impl<B> Operation<B::FusionRuntime> for DecodeOp<B>
where
    B: FusionBackend + WindowedKernelBackend + WindowedAttentionBackend,
{
    fn execute(&self, handles: &mut Handles<B>) {
        let decode = B::windowed_decode().expect("registered only when the inner backend has one");
        let mut given = self.desc.inputs.iter().map(|t| handles.get_float_tensor::<B>(t));
        let q = given.next().expect("registered with q first");
        let buffers: Vec<CachedBuffer<'_, B>> = self
            .buffers
            .iter()
            .map(|(kv_heads, positions)| CachedBuffer {
                keys: given.next().expect("registered with each buffer's keys"),
                values: given.next().expect("registered with each buffer's values"),
                kv_heads,
                positions,
            })
            .collect();
        let step = DecodeStep {
            specs: &self.specs,
            opts: &self.opts,
            position: self.position,
            rope: self.rope.as_ref(),
        };
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, decode(q, &buffers, &step));
    }
}

/// A registered kernel call: its tensors, its spec and options, and which optional tensors it
/// was given.
#[derive(Clone, Debug)]
struct KernelOp<B> {
    desc: CustomOpIr,
    spec: WindowSpec,
    opts: ScoreOptions,
    given: Given,
    backend: PhantomData<B>,
}

/// The optional inputs of a registered call, which follow the others in this order.
#[derive(Clone, Copy, Debug)]
struct Given {
    /// `∂L/∂lse` (backward only).
    d_lse: bool,
    /// The relative scores.
    relative: bool,
}

/// The forward kernel as a fusion operation: `[q, k, v]` and the relative scores when given →
/// `[o, lse]`.
#[derive(Clone, Debug)]
struct ForwardOp<B>(KernelOp<B>);

/// The backward kernels as a fusion operation: `[q, k, v, o, lse, ∂o]`, then `∂lse` when the
/// loss reaches `lse` and the relative scores when given → `[dq, dk, dv]` and the relative
/// scores' gradient.
#[derive(Clone, Debug)]
struct BackwardOp<B>(KernelOp<B>);

type Handles<B> =
    HandleContainer<<<B as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle>;

impl<B: FusionBackend + WindowedKernelBackend> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let KernelOp { desc, spec, opts, .. } = &self.0;
        let mut given = desc.inputs.iter().map(|t| handles.get_float_tensor::<B>(t));
        let mut next = || given.next().expect("registered with q, k and v");
        let (q, k, v) = (next(), next(), next());
        let (o_value, lse_value) = B::windowed_forward(q, k, v, given.next(), spec, opts);
        handles.register_float_tensor::<B>(&desc.outputs[0].id, o_value);
        handles.register_float_tensor::<B>(&desc.outputs[1].id, lse_value);
    }
}

impl<B: FusionBackend + WindowedKernelBackend> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let KernelOp { desc, spec, opts, given: flags, .. } = &self.0;
        let mut given = desc.inputs.iter().map(|t| handles.get_float_tensor::<B>(t));
        let mut next = || given.next().expect("registered with every input it says");
        let (q, k, v, o, lse, d_o) = (next(), next(), next(), next(), next(), next());
        let d_lse = flags.d_lse.then(&mut next);
        let relative = flags.relative.then(&mut next);
        let inputs = KernelBackward { q, k, v, relative, o, lse, d_o, d_lse };
        let KernelGradients { dq, dk, dv, d_relative } = B::windowed_backward(inputs, spec, opts);
        let gradients = [dq, dk, dv].into_iter().chain(d_relative);
        for (output, gradient) in desc.outputs.iter().zip(gradients) {
            handles.register_float_tensor::<B>(&output.id, gradient);
        }
    }
}
