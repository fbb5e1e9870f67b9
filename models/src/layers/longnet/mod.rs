//! LongNet dilated attention (docs/semantics.md §5): branches of segments × dilations, each a
//! call of the core, mixed by their softmax denominators. Here the mechanism and its math,
//! shared by the layer's windowed module (one spec per branch), the KV cache and sequence
//! parallelism.

use burn::tensor::{DType, Tensor, backend::Backend};

use crate::layers::mechanism::Mechanism;
use swa_attention::reciprocal::reciprocal;
use swa_attention::{AttentionError, ModelBackend, ScoreOptions, WindowSpec, windowed_attention};

/// The window spec of each branch at length `n`: segment `w_b` clipped to `n`, dilation `r_b`,
/// head `h` at offset `h mod r_b`.
pub fn branch_specs(
    segments: &[usize],
    dilations: &[usize],
    heads: usize,
    kv_heads: usize,
    n: usize,
) -> Result<Vec<WindowSpec>, AttentionError> {
    if segments.is_empty() {
        return Err(AttentionError::ShapeMismatch {
            what: "LongNet.segments (branches)",
            expected: 1,
            got: 0,
        });
    }
    if dilations.len() != segments.len() {
        return Err(AttentionError::ShapeMismatch {
            what: "LongNet.dilations (one per segment)",
            expected: segments.len(),
            got: dilations.len(),
        });
    }
    let clip = |w: usize| if w == 0 { 0 } else { w.min(n.max(1)) };
    segments
        .iter()
        .zip(dilations)
        .map(|(&w, &r)| WindowSpec::longnet_branch(heads, kv_heads, clip(w), r))
        .collect()
}

/// LongNet attention: `o = Σ_b α_b o_b` with `α_b = exp(lse_b − logsumexp_b' lse_b')`, so that a
/// key reached by two branches counts twice and a row no branch covers outputs 0. Gradients
/// flow through α (torchscale detaches it; we do not).
///
/// `q: [batch, H, N, d]`, `k, v: [batch, H_kv, N, d]` → `[batch, H, N, d]`; every branch
/// scores with `opts` (softmax: the mixture needs each branch's denominator).
pub fn longnet_attention<B: ModelBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    segments: &[usize],
    dilations: &[usize],
    opts: &ScoreOptions,
) -> Result<Tensor<B, 4>, AttentionError> {
    let [_, heads, n, _] = q.dims();
    let kv_heads = k.dims()[1];
    let specs = branch_specs(segments, dilations, heads, kv_heads, n)?;
    mixed_attention(q, k, v, &specs, opts)
}

/// One call of the core per spec over the same `q: [batch, H, N, d]` and `k, v:
/// [batch, H_kv, M + N, d]`, the outputs mixed by their denominators ([`mix_branches`]) →
/// `[batch, H, N, d]`: LongNet's branches, in a layer and in [`longnet_attention`].
pub(crate) fn mixed_attention<B: ModelBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    specs: &[WindowSpec],
    opts: &ScoreOptions,
) -> Result<Tensor<B, 4>, AttentionError> {
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for spec in specs {
        let (o, lse) = windowed_attention(q.clone(), k.clone(), v.clone(), spec, opts)?;
        outs.push(o);
        lses.push(lse);
    }
    Ok(mix_branches(outs, lses))
}

/// The mixture of docs/semantics.md §5: branch outputs `o_b: [batch, H, N, d]` with their log-normalisers
/// `lse_b: [batch, H, N]` → `Σ_b α_b o_b`, `α_b = exp(lse_b − logsumexp_b' lse_b')`. Shared by
/// the forward pass, decoding and the sequence-parallel forward of swa-training. The weights are
/// computed in f32 (`lse` is f32 from the core, §1), then cast to the outputs' dtype.
pub fn mix_branches<B: Backend>(outs: Vec<Tensor<B, 4>>, lses: Vec<Tensor<B, 3>>) -> Tensor<B, 4> {
    let dtype = outs[0].dtype();
    let outs = outs.into_iter().map(|o| o.unsqueeze_dim::<5>(4)).collect();
    let lses = lses.into_iter().map(|l| l.cast(DType::F32).unsqueeze_dim::<4>(3)).collect();
    let lse = Tensor::cat(lses, 3);
    // Stabilise by the largest branch lse (detached: α does not depend on it); rows that no
    // branch covers have only −∞ and use 0.
    let max = lse.clone().max_dim(3).detach();
    let max = max.clone().mask_fill(max.equal_elem(f32::NEG_INFINITY), 0.0);
    let weights = (lse - max).exp();
    let total = weights.clone().sum_dim(3);
    let total = total.clone().mask_fill(total.equal_elem(0.0), 1.0);
    let alpha = (weights * reciprocal(total)).cast(dtype);
    (Tensor::cat(outs, 4) * alpha.unsqueeze_dim::<5>(3)).sum_dim(4).squeeze_dim::<4>(4)
}

/// LongNet's mechanism: branches of segment lengths and dilations.
pub(crate) struct LongNet<'a> {
    pub(crate) segments: &'a [usize],
    pub(crate) dilations: &'a [usize],
}

impl Mechanism for LongNet<'_> {
    /// The full spec: each branch has its own ([`Mechanism::specs`]).
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        WindowSpec::full(heads, kv_heads)
    }

    fn specs(
        &self,
        heads: usize,
        kv_heads: usize,
        n: usize,
    ) -> Result<Vec<WindowSpec>, AttentionError> {
        branch_specs(self.segments, self.dilations, heads, kv_heads, n)
    }

    fn validate(&self, heads: usize, kv_heads: usize) -> Result<(), AttentionError> {
        branch_specs(self.segments, self.dilations, heads, kv_heads, 1).map(|_| ())
    }

    fn window_sum(&self, heads: usize, n: usize) -> usize {
        let per_head: usize =
            self.segments.iter().zip(self.dilations).map(|(w, r)| (*w).min(n).div_ceil(*r)).sum();
        heads * per_head.min(n)
    }

    fn name(&self) -> &'static str {
        "LongNet"
    }

    fn label(&self, _head: usize) -> String {
        format!("LongNet w={} r={}", list(self.segments), list(self.dilations))
    }
}

/// `8,16,32`.
pub(crate) fn list(values: &[usize]) -> String {
    values.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}
