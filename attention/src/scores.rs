//! From queries, keys and a visibility mask to outputs and log-normalisers (docs/semantics.md §1).
//!
//! Shared by the dense reference and the blocked path: both lay their rows and key columns
//! out as `[a, b, rows, cols]` and differ only in which keys sit in the columns.

use burn::tensor::{Bool, Tensor, activation, backend::Backend};

use crate::reciprocal::{log, reciprocal};
use crate::{ScoreFn, ScoreOptions};

/// Positional inputs of the score: the distance `i − j` per (row, column) and the ALiBi slope
/// per leading index, both broadcastable to the score shape.
pub struct Alibi<B: Backend> {
    /// `i − j`, shape `[1 or a, 1 or b, rows, cols]`.
    pub distance: Tensor<B, 4>,
    /// `m_h`, shape `[a or 1, b or 1, 1, 1]`.
    pub slopes: Tensor<B, 4>,
}

/// Attends `q: [a, b, rows, d]` to `k, v: [a, b, cols, d]` where `mask: [1 or a, 1 or b, rows,
/// cols]` is true. `relative: [a, b, rows, cols]`, when given, is each entry's relative score
/// (docs/semantics.md §4), added after the scale, the softcap and ALiBi.
///
/// Returns `o: [a, b, rows, d]` and `lse: [a, b, rows]`, where `lse_i = ln Σ_j w_ij` over the
/// visible keys, `w = exp(score)` for softmax (the log-normaliser of docs/semantics.md §1) and
/// `w = σ(score + β)` for sigmoid (the log of its total weight). A row that sees no key gives
/// `o = 0` and `lse = −∞`, with finite gradients.
pub fn attend<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Tensor<B, 4, Bool>,
    alibi: Option<Alibi<B>>,
    relative: Option<Tensor<B, 4>>,
    opts: &ScoreOptions,
) -> (Tensor<B, 4>, Tensor<B, 3>) {
    let head_dim = q.dims()[3];
    let mut scores = q.matmul(k.swap_dims(2, 3)) * opts.scale_for(head_dim);
    if let Some(cap) = opts.softcap {
        scores = scores.div_scalar(cap).tanh().mul_scalar(cap);
    }
    if let Some(Alibi { distance, slopes }) = alibi {
        scores = scores - distance * slopes;
    }
    if let Some(relative) = relative {
        scores = scores + relative;
    }
    let hidden = mask.expand(scores.shape()).bool_not();
    let (weights, shift) = match opts.score_fn {
        ScoreFn::Softmax => {
            let masked = scores.mask_fill(hidden, f32::NEG_INFINITY);
            // The maximum only stabilises the exponent. Rows that see no key have maximum −∞:
            // they use 0, and their weights come out 0.
            let max = masked.clone().max_dim(3).detach();
            let max = max.clone().mask_fill(max.equal_elem(f32::NEG_INFINITY), 0.0);
            ((masked - max.clone()).exp(), Some(max))
        }
        ScoreFn::Sigmoid { beta } => {
            (activation::sigmoid(scores.add_scalar(beta)).mask_fill(hidden, 0.0), None)
        }
    };
    let total = weights.clone().sum_dim(3);
    let empty = total.clone().equal_elem(0.0);
    let total = total.mask_fill(empty.clone(), 1.0);
    let mut lse = log(total.clone());
    if let Some(max) = shift {
        lse = lse + max;
    }
    let lse = lse.mask_fill(empty, f32::NEG_INFINITY).squeeze_dim::<3>(3);
    let weights = match opts.score_fn {
        ScoreFn::Softmax => weights * reciprocal(total),
        ScoreFn::Sigmoid { .. } => weights,
    };
    (weights.matmul(v), lse)
}
