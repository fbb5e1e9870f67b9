//! The public entry of the windowed core and the checks every implementation shares.

use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

use crate::{AttentionError, ScoreOptions, WindowSpec, WindowedAttentionBackend};

/// Windowed attention (docs/semantics.md §1–§2) on the backend's fastest path: the CubeCL kernel where
/// the backend has one, else the blocked O(N·w) path.
///
/// - `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, with `H_kv` dividing `H` (GQA).
/// - Returns `o: [batch, H, N_q, d]` in the inputs' dtype and `lse: [batch, H, N_q]` in f32
///   whatever that dtype (as FlashAttention keeps it), `lse_i = ln Σ_j w_ij` over the visible
///   keys: the softmax log-normaliser, or for sigmoid the log of the total weight `Σ σ(s + β)`;
///   `−∞` for rows that see no key.
///
/// The spec and options are checked against the shapes first, so bad input is reported here
/// with the problem named, never deep inside an implementation.
pub fn windowed_attention<B: WindowedAttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    Checked::new(&q, &k, &v, spec, opts)?;
    let float = |t: Tensor<B, 4>| t.into_primitive().tensor();
    let (o, lse) = B::windowed_attention(float(q), float(k), float(v), spec, opts);
    Ok((
        Tensor::from_primitive(TensorPrimitive::Float(o)),
        Tensor::from_primitive(TensorPrimitive::Float(lse)),
    ))
}

/// The sizes of a call once its tensors, spec and options agree.
pub(crate) struct Checked {
    /// Query heads `H`.
    pub heads: usize,
    /// Query rows `N_q`.
    pub q_len: usize,
    /// Key rows `N_k` in the tensors.
    pub keys: usize,
    /// Valid keys; the rest are padding.
    pub kv_len: usize,
}

impl Checked {
    pub fn new<B: Backend>(
        q: &Tensor<B, 4>,
        k: &Tensor<B, 4>,
        v: &Tensor<B, 4>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> Result<Self, AttentionError> {
        let [batch, heads, q_len, dim] = q.dims();
        let [k_batch, kv_heads, keys, k_dim] = k.dims();
        let mismatch = |what, expected, got| AttentionError::ShapeMismatch { what, expected, got };
        if k_batch != batch {
            return Err(mismatch("key batch", batch, k_batch));
        }
        if k_dim != dim {
            return Err(mismatch("key head dim", dim, k_dim));
        }
        if v.dims() != [batch, kv_heads, keys, v.dims()[3]] {
            let got = v.dims()[..3].iter().product();
            return Err(mismatch("value [batch·H_kv·N_k]", batch * kv_heads * keys, got));
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(AttentionError::HeadsNotDivisible { heads, kv_heads });
        }
        let kv_len = spec.check(heads, kv_heads, keys)?;
        opts.check(heads)?;
        Ok(Self { heads, q_len, keys, kv_len })
    }
}

/// Repeats each of the `H_kv` key/value heads `H / H_kv` times, so query head `h` meets kv head
/// `h / (H / H_kv)` (GQA). `[batch, H_kv, N, d]` → `[batch, H, N, d]`.
pub(crate) fn expand_kv<B: Backend>(x: Tensor<B, 4>, heads: usize) -> Tensor<B, 4> {
    let [batch, kv_heads, n, d] = x.dims();
    if kv_heads == heads {
        return x;
    }
    x.unsqueeze_dim::<5>(2)
        .expand([batch, kv_heads, heads / kv_heads, n, d])
        .reshape([batch, heads, n, d])
}
