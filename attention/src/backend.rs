//! The backend seam of the core: a Burn backend extension, after Burn's
//! `examples/custom-cubecl-kernel`.
//!
//! - [`WindowedAttentionBackend`] is what [`crate::windowed_attention`] calls. Its default runs the
//!   backend's fused kernel when [`WindowedAttentionBackend::windowed_kernel`] offers one and the
//!   kernel's [`WindowedKernel::runs`] accepts the call, and the blocked O(N·w) path otherwise,
//!   so every backend runs (and, through `Autodiff<B>`, differentiates) the core out of the box.
//!   Setting [`PATH_VARIABLE`] to `blocked` makes every call take the blocked path, for
//!   comparisons.
//! - [`WindowedKernelBackend`] is what a backend with fused kernels implements: a forward that
//!   returns `o` and `lse` packed in one tensor, the exact backward of that forward, and which
//!   calls they take. The CubeCL backends implement it (`crate::kernel`, feature `cube`), and so
//!   does `Flex` (`crate::cpu`, feature `flex`); `Autodiff<B>` turns it into a differentiable op
//!   whose backward runs the backward kernels (`crate::autodiff`).

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, Tensor, TensorMetadata, TensorPrimitive, backend::Backend};

use crate::blocked::blocked_attention;
use crate::decode::{CacheWrite, DecodeKernel};
use crate::{ScoreOptions, WindowSpec};

/// A Burn backend that can run the windowed core.
///
/// Callers use [`crate::windowed_attention`], which checks its inputs first: implementations
/// may assume the shapes, spec and options agree.
pub trait WindowedAttentionBackend: Backend {
    /// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` → (`o: [batch, H, N_q, d]`,
    /// `lse: [batch, H, N_q]`). The default runs the fused kernel where the backend has one and
    /// it accepts the call, else the blocked O(N·w) path.
    fn windowed_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        match chosen_kernel::<Self>(spec, &q.shape(), &k.shape(), &v.shape()) {
            Some(kernel) => {
                let dim = q.shape()[3];
                split_packed::<Self>((kernel.forward)(q, k, v, spec, opts), dim)
            }
            None => blocked_primitives::<Self>(q, k, v, spec, opts),
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

/// The environment variable that chooses the path of every call: `blocked` forces the blocked
/// path on every backend, and the caches' tensor ops in place of a fused decode step (to compare
/// them with the fused kernels); unset or anything else lets each backend choose. Read at every
/// call, so a process can compare both.
pub const PATH_VARIABLE: &str = "SWA_WINDOWED_PATH";

/// The fused kernel that runs this call on `B`: the backend's, when it has one, the kernel takes
/// the call, and [`PATH_VARIABLE`] does not force the blocked path.
pub(crate) fn chosen_kernel<B: WindowedAttentionBackend>(
    spec: &WindowSpec,
    q: &Shape,
    k: &Shape,
    v: &Shape,
) -> Option<WindowedKernel<B>> {
    B::windowed_kernel().filter(|kernel| !blocked_forced() && (kernel.runs)(spec, q, k, v))
}

/// Whether [`PATH_VARIABLE`] forces the blocked path (and the caches' tensor ops).
pub(crate) fn blocked_forced() -> bool {
    std::env::var(PATH_VARIABLE).is_ok_and(|path| path == "blocked")
}

/// A backend with fused windowed-attention kernels (the CubeCL backends, `crate::kernel`).
///
/// Both methods may assume [`WindowedKernel::runs`] accepted the call.
pub trait WindowedKernelBackend: Backend {
    /// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` → `[batch, H, N_q, d + 1]`: `o` in
    /// the first `d` columns, `lse` in the last (docs/semantics.md §1).
    fn windowed_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> FloatTensor<Self>;

    /// The exact gradients `[dq, dk, dv]` of `L` given `∂L/∂packed`, where `packed` is what
    /// [`WindowedKernelBackend::windowed_forward`] returned for `q, k, v`: the gradient of `o`
    /// and of `lse` (which LongNet's mixture differentiates through) arrive together.
    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> [FloatTensor<Self>; 3];

    /// Whether the kernels take a call with this spec and the shapes of `q`, `k` and `v`
    /// (already checked by [`crate::windowed_attention`]); otherwise the blocked path runs it.
    fn windowed_runs(spec: &WindowSpec, q: &Shape, k: &Shape, v: &Shape) -> bool;
}

/// What the backward kernels read: the forward's inputs and output, and the output's gradient.
#[derive(Clone, Debug)]
pub struct KernelBackward<B: Backend> {
    /// Queries `[batch, H, N_q, d]`.
    pub q: FloatTensor<B>,
    /// Keys `[batch, H_kv, N_k, d]`.
    pub k: FloatTensor<B>,
    /// Values `[batch, H_kv, N_k, d]`.
    pub v: FloatTensor<B>,
    /// The forward's packed output `[batch, H, N_q, d + 1]`.
    pub packed: FloatTensor<B>,
    /// `∂L/∂packed`, same shape: `∂L/∂o` then `∂L/∂lse`.
    pub grad: FloatTensor<B>,
}

/// A backend's fused kernels as plain function pointers, so that `Autodiff<B>` can use those of
/// any inner backend `B` that offers them (Rust has no specialisation to ask `B` for the
/// [`WindowedKernelBackend`] bound instead).
pub struct WindowedKernel<B: Backend> {
    /// [`WindowedKernelBackend::windowed_forward`].
    pub forward: KernelForward<B>,
    /// [`WindowedKernelBackend::windowed_backward`].
    pub backward: fn(KernelBackward<B>, &WindowSpec, &ScoreOptions) -> [FloatTensor<B>; 3],
    /// [`WindowedKernelBackend::windowed_runs`].
    pub runs: fn(&WindowSpec, &Shape, &Shape, &Shape) -> bool,
}

/// The signature of [`WindowedKernelBackend::windowed_forward`].
pub type KernelForward<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    &WindowSpec,
    &ScoreOptions,
) -> FloatTensor<B>;

/// `(o, lse)` as backend primitives: what [`WindowedAttentionBackend::windowed_attention`] returns.
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

/// The blocked path on raw primitives.
pub(crate) fn blocked_primitives<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> OutputPrimitives<B> {
    let (o, lse) = blocked_attention(tensor::<B>(q), tensor(k), tensor(v), spec, opts)
        .expect("inputs are checked by windowed_attention before they reach a backend");
    (o.into_primitive().tensor(), lse.into_primitive().tensor())
}

/// Splits a kernel's packed `[batch, H, N_q, d + 1]` into `o: [batch, H, N_q, d]` and
/// `lse: [batch, H, N_q]` (views; on `Autodiff<B>` the split is differentiated like any slice).
pub(crate) fn split_packed<B: Backend>(packed: FloatTensor<B>, dim: usize) -> OutputPrimitives<B> {
    let packed = tensor::<B>(packed);
    let o = packed.clone().narrow(3, 0, dim);
    let lse = packed.narrow(3, dim, 1).squeeze_dim::<3>(3);
    (o.into_primitive().tensor(), lse.into_primitive().tensor())
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
