//! The backend seam of the core: a Burn backend extension, after Burn's
//! `examples/custom-cubecl-kernel`.
//!
//! - [`WindowedAttentionBackend`] is what [`crate::windowed_attention`] calls. Its default runs the
//!   backend's fused kernel when [`WindowedAttentionBackend::windowed_kernel`] offers one and the
//!   kernel's [`WindowedKernel::runs`] accepts the call, and the blocked O(N·w) path otherwise,
//!   so every backend runs (and, through `Autodiff<B>`, differentiates) the core out of the box.
//!   Setting [`crate::FUSED_OPS_VARIABLE`] to `off` makes every call take the blocked path (and
//!   every other fused op its tensor ops), for comparisons.
//! - [`WindowedKernelBackend`] is what a backend with fused kernels implements: a forward that
//!   returns `o` in the inputs' dtype and `lse` in f32, the exact backward of that forward, and
//!   which calls they take. The CubeCL backends implement it (`crate::kernel`, feature `cube`), and
//!   so does `Flex` (`crate::cpu`, feature `flex`); `Autodiff<B>` turns it into a differentiable op
//!   whose backward runs the backward kernels (`crate::autodiff`).

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Tensor, TensorMetadata, TensorPrimitive, backend::Backend};

use crate::blocked::{MAX_CHUNK_SCORES, blocked_attention_relative};
use crate::decode::{CacheWrite, DecodeKernel};
use crate::fused_ops::fused_ops_off;
use crate::layer_ops::LayerOpsBackend;
use crate::rope::RopeBackend;
use crate::{ScoreOptions, WindowSpec};

/// A Burn backend that can run the windowed core.
///
/// Callers use [`crate::windowed_attention`], which checks its inputs first: implementations
/// may assume the shapes, spec and options agree.
pub trait WindowedAttentionBackend: Backend {
    /// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` and, with relative scores,
    /// `relative: [batch, H, N_q, L]` (docs/semantics.md §4) → (`o: [batch, H, N_q, d]` in the
    /// inputs' dtype, `lse: [batch, H, N_q]` in f32). The default runs the fused kernel where the
    /// backend has one and it accepts the call, else the blocked O(N·w) path.
    fn windowed_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        relative: Option<FloatTensor<Self>>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        match chosen_kernel::<Self>(spec, &q.shape(), &k.shape(), &v.shape()) {
            Some(kernel) => (kernel.forward)(q, k, v, relative, spec, opts),
            None => blocked_primitives::<Self>(q, k, v, relative, spec, opts),
        }
    }

    /// The backend's fused kernels, or `None` (the default) when it has none and the blocked
    /// path runs. `Autodiff<B>` asks its inner backend, to differentiate through the kernels.
    fn windowed_kernel() -> Option<WindowedKernel<Self>> {
        None
    }

    /// The backend's fused decode step for the bounded caches ([`crate::decode`]), or `None`
    /// (the default) when the cache's tensor ops run.
    fn windowed_decode() -> Option<DecodeKernel<Self>> {
        None
    }

    /// The backend's fused append for the bounded caches ([`crate::decode::CacheWrite`]), or
    /// `None` (the default) when each buffer writes its slot with tensor ops.
    fn windowed_cache_write() -> Option<CacheWrite<Self>> {
        None
    }
}

/// Every op a model of the zoo runs: the windowed core ([`WindowedAttentionBackend`]), RoPE
/// ([`RopeBackend`]) and the other fused layer ops ([`LayerOpsBackend`]). Every backend with
/// the three has it.
pub trait ModelBackend: WindowedAttentionBackend + LayerOpsBackend + RopeBackend {}

impl<B: WindowedAttentionBackend + LayerOpsBackend + RopeBackend> ModelBackend for B {}

/// The fused kernel that runs this call on `B`: the backend's, when it has one, the kernel takes
/// the call, and [`FUSED_OPS_VARIABLE`] does not turn the fused ops off.
pub(crate) fn chosen_kernel<B: WindowedAttentionBackend>(
    spec: &WindowSpec,
    q: &Shape,
    k: &Shape,
    v: &Shape,
) -> Option<WindowedKernel<B>> {
    B::windowed_kernel().filter(|kernel| !fused_ops_off() && (kernel.runs)(spec, q, k, v))
}

/// A backend with fused windowed-attention kernels (the CubeCL backends, `crate::kernel`).
///
/// Both methods may assume [`WindowedKernel::runs`] accepted the call.
pub trait WindowedKernelBackend: Backend {
    /// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` and, with relative scores,
    /// `relative: [batch, H, N_q, L]` (docs/semantics.md §4) → (`o: [batch, H, N_q, d]` in the
    /// inputs' dtype, `lse: [batch, H, N_q]` in f32 whatever that dtype, as FlashAttention keeps
    /// it: the backward recomputes every weight as `exp(s − lse)`, which a half-precision `lse`
    /// would round by percents; docs/semantics.md §1).
    fn windowed_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        relative: Option<FloatTensor<Self>>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self>;

    /// The exact gradients of `L` given `∂L/∂o` and, when the loss reaches it, `∂L/∂lse`
    /// (LongNet's mixture and learned sinks differentiate through `lse`), where `o` and `lse`
    /// are what [`WindowedKernelBackend::windowed_forward`] returned for the same inputs.
    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> KernelGradients<Self>;

    /// Whether the kernels take a call with this spec and the shapes of `q`, `k` and `v`
    /// (already checked by [`crate::windowed_attention`]), relative scores or not; otherwise
    /// the blocked path runs it.
    fn windowed_runs(spec: &WindowSpec, q: &Shape, k: &Shape, v: &Shape) -> bool;
}

/// The gradients of a kernel call's inputs.
#[derive(Clone, Debug)]
pub struct KernelGradients<B: Backend> {
    /// `dq`, shaped and typed as `q`.
    pub dq: FloatTensor<B>,
    /// `dk`, shaped and typed as `k`.
    pub dk: FloatTensor<B>,
    /// `dv`, shaped and typed as `v`.
    pub dv: FloatTensor<B>,
    /// The relative scores' gradient, shaped and typed as them, when the call had them: each
    /// entry the gradient of the score it was added to, 0 where no visible key sits.
    pub d_relative: Option<FloatTensor<B>>,
}

/// What the backward kernels read: the forward's inputs and outputs, and their gradients.
#[derive(Clone, Debug)]
pub struct KernelBackward<B: Backend> {
    /// Queries `[batch, H, N_q, d]`.
    pub q: FloatTensor<B>,
    /// Keys `[batch, H_kv, N_k, d]`.
    pub k: FloatTensor<B>,
    /// Values `[batch, H_kv, N_k, d]`.
    pub v: FloatTensor<B>,
    /// The relative scores `[batch, H, N_q, L]`, when the call had them.
    pub relative: Option<FloatTensor<B>>,
    /// The forward's output `o: [batch, H, N_q, d]`, in the inputs' dtype.
    pub o: FloatTensor<B>,
    /// The forward's `lse: [batch, H, N_q]`, f32.
    pub lse: FloatTensor<B>,
    /// `∂L/∂o`, shaped and typed as `o`.
    pub d_o: FloatTensor<B>,
    /// `∂L/∂lse`, shaped and typed as `lse`; `None` when the loss does not reach `lse`.
    pub d_lse: Option<FloatTensor<B>>,
}

/// A backend's fused kernels as plain function pointers, so that `Autodiff<B>` can use those of
/// any inner backend `B` that offers them (Rust has no specialisation to ask `B` for the
/// [`WindowedKernelBackend`] bound instead).
pub struct WindowedKernel<B: Backend> {
    /// [`WindowedKernelBackend::windowed_forward`].
    pub forward: KernelForward<B>,
    /// [`WindowedKernelBackend::windowed_backward`].
    pub backward: fn(KernelBackward<B>, &WindowSpec, &ScoreOptions) -> KernelGradients<B>,
    /// [`WindowedKernelBackend::windowed_runs`].
    pub runs: fn(&WindowSpec, &Shape, &Shape, &Shape) -> bool,
}

/// The signature of [`WindowedKernelBackend::windowed_forward`].
pub type KernelForward<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    Option<FloatTensor<B>>,
    &WindowSpec,
    &ScoreOptions,
) -> OutputPrimitives<B>;

/// `(o, lse)` as backend primitives, `o` in the inputs' dtype and `lse` in f32: what
/// [`WindowedAttentionBackend::windowed_attention`] and the fused forward return.
pub type OutputPrimitives<B> = (FloatTensor<B>, FloatTensor<B>);

impl<B: Backend> Clone for WindowedKernel<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for WindowedKernel<B> {}

impl<B: Backend> std::fmt::Debug for WindowedKernel<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WindowedKernel")
    }
}

impl<B: Backend> WindowedKernel<B> {
    /// The kernels of a [`WindowedKernelBackend`].
    pub fn of() -> Self
    where
        B: WindowedKernelBackend,
    {
        Self {
            forward: B::windowed_forward,
            backward: B::windowed_backward,
            runs: B::windowed_runs,
        }
    }
}

/// The blocked path on raw primitives, its `lse` cast to f32 as the fused kernels give it (it
/// computes `lse` in the inputs' dtype).
pub(crate) fn blocked_primitives<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    relative: Option<FloatTensor<B>>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> OutputPrimitives<B> {
    let (q, k, v, relative) = (tensor::<B>(q), tensor(k), tensor(v), relative.map(tensor));
    let (o, lse) = blocked_attention_relative(q, k, v, relative, spec, opts, MAX_CHUNK_SCORES)
        .expect("inputs are checked by windowed_attention before they reach a backend");
    (o.into_primitive().tensor(), lse.cast(DType::F32).into_primitive().tensor())
}

fn tensor<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 4> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

#[cfg(feature = "ndarray")]
impl<E, I, Q> WindowedAttentionBackend for burn::backend::NdArray<E, I, Q>
where
    E: burn::backend::ndarray::FloatNdArrayElement,
    I: burn::backend::ndarray::IntNdArrayElement,
    Q: burn::backend::ndarray::QuantElement,
    burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<E>>,
    burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<I>>,
{
}
