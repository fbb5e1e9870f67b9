//! The public entry of the windowed core and the checks every implementation shares.

use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

use crate::relative::distances_needed;
use crate::{AttentionError, ScoreOptions, WindowSpec, WindowedAttentionBackend};

/// Windowed attention (docs/semantics.md §1–§2) on the backend's fastest path: the CubeCL kernel
/// where the backend has one, else the blocked O(N·w) path.
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
    windowed_attention_relative(q, k, v, None, spec, opts)
}

/// [`windowed_attention`] with relative scores (docs/semantics.md §4, Transformer-XL):
/// `relative: [batch, H, N_q, L]` adds `relative[.., i, δ]` to the score of every key at
/// distance `δ = i − j` from query `i` (absolute positions), after the scale, the softcap and
/// ALiBi. The spec must be causal and `L` must cover every distance a query can see (its
/// heads' reach, or back to key 0 for unbounded heads, sinks and globals).
pub fn windowed_attention_relative<B: WindowedAttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    relative: Option<Tensor<B, 4>>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    Checked::new(&q, &k, &v, spec, opts)?.relative(relative.as_ref(), spec)?;
    let float = |t: Tensor<B, 4>| t.into_primitive().tensor();
    let relative = relative.map(float);
    let (o, lse) = B::windowed_attention(float(q), float(k), float(v), relative, spec, opts);
    Ok((
        Tensor::from_primitive(TensorPrimitive::Float(o)),
        Tensor::from_primitive(TensorPrimitive::Float(lse)),
    ))
}

/// The sizes of a call once its tensors, spec and options agree.
pub(crate) struct Checked {
    /// Batch size.
    pub batch: usize,
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
        Ok(Self { batch, heads, q_len, keys, kv_len })
    }

    /// Checks a relative-score table against the call: `[batch, H, N_q, L]`, a causal spec,
    /// and `L` covering every distance a query can see.
    pub fn relative<B: Backend>(
        self,
        table: Option<&Tensor<B, 4>>,
        spec: &WindowSpec,
    ) -> Result<Self, AttentionError> {
        let Some(table) = table else { return Ok(self) };
        if !spec.is_causal() {
            return Err(AttentionError::RelativeScoresNotCausal);
        }
        let [batch, heads, rows, len] = table.dims();
        let mismatch = |what, expected, got| AttentionError::ShapeMismatch { what, expected, got };
        if batch != self.batch {
            return Err(mismatch("relative scores batch", self.batch, batch));
        }
        if heads != self.heads {
            return Err(mismatch("relative scores heads", self.heads, heads));
        }
        if rows != self.q_len {
            return Err(mismatch("relative scores rows (one per query)", self.q_len, rows));
        }
        let needed = distances_needed(spec, self.q_len);
        if len < needed.max(1) {
            return Err(AttentionError::RelativeTableTooShort { needed, got: len });
        }
        Ok(self)
    }
}

/// Repeats each of the `H_kv` key/value heads `H / H_kv` times, so query head `h` meets kv head
/// `h / (H / H_kv)` (GQA). `[batch, H_kv, N, d]` → `[batch, H, N, d]`.
pub fn expand_kv<B: Backend>(x: Tensor<B, 4>, heads: usize) -> Tensor<B, 4> {
    let [batch, kv_heads, n, d] = x.dims();
    if kv_heads == heads {
        return x;
    }
    x.unsqueeze_dim::<5>(2)
        .expand([batch, kv_heads, heads / kv_heads, n, d])
        .reshape([batch, heads, n, d])
}
