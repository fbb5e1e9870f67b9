//! The backend seam of the core: a Burn backend extension, after Burn's
//! `examples/custom-cubecl-kernel`. Its default method is the blocked path, so every backend
//! runs (and, through `Autodiff<B>`, differentiates) the core out of the box; a backend with a
//! custom kernel overrides the method.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

use crate::blocked::blocked_attention;
use crate::{ScoreOptions, WindowSpec};

/// A Burn backend that can run the windowed core.
///
/// Callers use [`crate::windowed_attention`], which checks its inputs first: implementations
/// may assume the shapes, spec and options agree.
pub trait WindowedAttentionBackend: Backend {
    /// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` → (`o: [batch, H, N_q, d]`,
    /// `lse: [batch, H, N_q]`). The default is the blocked O(N·w) path.
    fn windowed_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let tensor = |t| Tensor::<Self, 4>::from_primitive(TensorPrimitive::Float(t));
        let (o, lse) = blocked_attention(tensor(q), tensor(k), tensor(v), spec, opts)
            .expect("inputs are checked by windowed_attention before they reach a backend");
        (o.into_primitive().tensor(), lse.into_primitive().tensor())
    }
}

impl<B: WindowedAttentionBackend, C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy>
    WindowedAttentionBackend for burn::backend::Autodiff<B, C>
{
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

#[cfg(feature = "flex")]
impl WindowedAttentionBackend for burn::backend::Flex {}

#[cfg(feature = "cube")]
impl<R, F, I, BT> WindowedAttentionBackend for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::element::BoolElement,
{
}

#[cfg(feature = "cube")]
impl<B: burn_fusion::FusionBackend + WindowedAttentionBackend> WindowedAttentionBackend
    for burn_fusion::Fusion<B>
{
}
