//! The fused ops of the layers around the core: RMSNorm (docs/semantics.md §8) and the SwiGLU
//! gate `silu(a)·b`, each as one op forward and one op backward where the backend has kernels
//! for them ([`LayerKernels`], offered by [`WindowedAttentionBackend::layer_kernels`]), and as
//! tensor ops otherwise. The tensor ops are also the kernels' test reference.
//!
//! As tensor ops, an RMSNorm is six ops forward and about twelve backward, and the gate three
//! and five, each a pass over its tensor (and on the CPU, each a wake-up of the thread pool);
//! fused, each is one pass forward and one backward. `Autodiff<B>` differentiates through its
//! inner backend's kernels (`crate::layer_ops_autodiff`).

use burn::nn::Linear;
use burn::tensor::activation::silu;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

use crate::WindowedAttentionBackend;
use crate::backend::blocked_forced;

/// How an RMSNorm scales: `x / √(mean(x²) + ε) · γ` with `γ = w`, or `γ = 1 + w` under
/// `unit_offset` (Gemma's form, docs/semantics.md §9).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsOptions {
    /// `ε`, added to the mean square.
    pub epsilon: f64,
    /// Scale by `1 + w` rather than `w`.
    pub unit_offset: bool,
}

/// A backend's layer kernels as plain function pointers (as [`crate::WindowedKernel`], so that
/// `Autodiff<B>` can use those of its inner backend). Every tensor is row-major over its last
/// dimension, of any rank.
pub struct LayerKernels<B: Backend> {
    /// RMSNorm's forward.
    pub rms_norm: RmsNormKernel<B>,
    /// RMSNorm's backward.
    pub rms_norm_backward: RmsNormBackward<B>,
    /// `a, b` of one shape → `silu(a)·b`.
    pub silu_gate: fn(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
    /// The gate's backward.
    pub silu_gate_backward: GateBackward<B>,
}

/// `x: [..., D]`, `w: [D]` → (`y: [..., D]`, `1/√(mean(x²) + ε)` per row: `[...]` flattened to
/// `[rows]`, f32).
pub type RmsNormKernel<B> = fn(FloatTensor<B>, FloatTensor<B>, RmsOptions) -> [FloatTensor<B>; 2];

/// `x`, `w`, the forward's inverse RMS and `∂L/∂y` → `[∂L/∂x, ∂L/∂w]`.
pub type RmsNormBackward<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    RmsOptions,
) -> [FloatTensor<B>; 2];

/// `a`, `b` and `∂L/∂z` → `[∂L/∂a, ∂L/∂b]`.
pub type GateBackward<B> =
    fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) -> [FloatTensor<B>; 2];

impl<B: Backend> Clone for LayerKernels<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for LayerKernels<B> {}

impl<B: Backend> std::fmt::Debug for LayerKernels<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LayerKernels")
    }
}

/// The backend's layer kernels, unless [`crate::PATH_VARIABLE`] forces the tensor ops.
pub(crate) fn chosen<B: WindowedAttentionBackend>() -> Option<LayerKernels<B>> {
    B::layer_kernels().filter(|_| !blocked_forced())
}

/// RMSNorm of `x: [..., D]` with weight `w: [D]` → the same shape: the backend's fused op
/// ([`WindowedAttentionBackend::rms_norm`]) where it has one.
pub fn rms_norm<B: WindowedAttentionBackend, const N: usize>(
    x: Tensor<B, N>,
    w: Tensor<B, 1>,
    options: RmsOptions,
) -> Tensor<B, N> {
    let primitive = |t: Tensor<B, N>| t.into_primitive().tensor();
    let fused = B::rms_norm(primitive(x.clone()), w.clone().into_primitive().tensor(), options);
    match fused {
        Some(y) => Tensor::from_primitive(TensorPrimitive::Float(y)),
        None => rms_norm_tensor_ops(x, w, options),
    }
}

/// `silu(a)·b` for `a, b` of one shape → that shape: the backend's fused op
/// ([`WindowedAttentionBackend::silu_gate`]) where it has one.
pub fn silu_gate<B: WindowedAttentionBackend, const N: usize>(
    a: Tensor<B, N>,
    b: Tensor<B, N>,
) -> Tensor<B, N> {
    let primitive = |t: Tensor<B, N>| t.into_primitive().tensor();
    match B::silu_gate(primitive(a.clone()), primitive(b.clone())) {
        Some(z) => Tensor::from_primitive(TensorPrimitive::Float(z)),
        None => silu_gate_tensor_ops(a, b),
    }
}

/// A linear layer (Burn's `Linear`, weight `[in, out]`) on `x: [..., in]` → `[..., out]`,
/// through [`product`].
pub fn linear<B: WindowedAttentionBackend, const N: usize>(
    layer: &Linear<B>,
    x: Tensor<B, N>,
) -> Tensor<B, N> {
    product(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// `x·w (+ b)` for `x: [..., in]`, `w: [in, out]`, `b: [out]` → `[..., out]`, with the rows of
/// `x` flattened: the backend's fused product ([`WindowedAttentionBackend::fused_linear`])
/// where it has one for these shapes, else Burn's `linear` on the flattened rows. Flattening
/// keeps a weight stored as its transpose a view (a checkpoint's `[out, in]`, or a tied
/// embedding table): for a product of higher rank Burn's `linear` reshapes the weight, which
/// copies a transposed view.
pub fn product<B: WindowedAttentionBackend, const N: usize>(
    x: Tensor<B, N>,
    w: Tensor<B, 2>,
    b: Option<Tensor<B, 1>>,
) -> Tensor<B, N> {
    let mut dims = x.dims();
    let [d_in, d_out] = w.dims();
    let rows = x.shape().num_elements() / d_in.max(1);
    let x = x.reshape([rows, d_in]);
    let primitive = |t: Tensor<B, 2>| t.into_primitive().tensor();
    let fused = B::fused_linear(
        primitive(x.clone()),
        primitive(w.clone()),
        b.clone().map(|b| b.into_primitive().tensor()),
    );
    let y = match fused {
        Some(y) => Tensor::from_primitive(TensorPrimitive::Float(y)),
        None => burn::tensor::module::linear(x, w, b),
    };
    dims[N - 1] = d_out;
    y.reshape(dims)
}

/// RMSNorm as tensor ops on any backend, `x: [..., D]`, `w: [D]` → the same shape. Written
/// with `powf(−½)` rather than a division: Burn 0.21's ndarray backend computes the backward of
/// a division, and its `recip`, through an approximate SIMD reciprocal.
pub fn rms_norm_tensor_ops<B: Backend, const N: usize>(
    x: Tensor<B, N>,
    w: Tensor<B, 1>,
    options: RmsOptions,
) -> Tensor<B, N> {
    let scale =
        x.clone().powi_scalar(2).mean_dim(N - 1).add_scalar(options.epsilon).powf_scalar(-0.5);
    let gamma = match options.unit_offset {
        true => w.add_scalar(1.0),
        false => w,
    };
    x * scale * gamma.unsqueeze()
}

/// `silu(a)·b` as tensor ops on any backend.
pub fn silu_gate_tensor_ops<B: Backend, const N: usize>(
    a: Tensor<B, N>,
    b: Tensor<B, N>,
) -> Tensor<B, N> {
    silu(a) * b
}
