//! From queries, keys and a visibility mask to outputs and log-normalisers (SEMANTICS §1).
//!
//! Shared by the dense reference and the blocked path: both lay their rows and key columns
//! out as `[a, b, rows, cols]` and differ only in which keys sit in the columns.

use burn::tensor::{Bool, Tensor, activation, backend::Backend};

use crate::{ScoreFn, ScoreOptions};

/// Positional inputs of the score: the distance `i − j` per (row, column) and the ALiBi slope
/// per leading index, both broadcastable to the score shape.
pub(crate) struct Alibi<B: Backend> {
    /// `i − j`, shape `[1 or a, 1 or b, rows, cols]`.
    pub distance: Tensor<B, 4>,
    /// `m_h`, shape `[a or 1, b or 1, 1, 1]`.
    pub slopes: Tensor<B, 4>,
}

/// Attends `q: [a, b, rows, d]` to `k, v: [a, b, cols, d]` where `mask: [1 or a, 1 or b, rows,
/// cols]` is true.
///
/// Returns `o: [a, b, rows, d]` and `lse: [a, b, rows]`, where `lse_i = ln Σ_j w_ij` over the
/// visible keys, `w = exp(score)` for softmax (the log-normaliser of SEMANTICS §1) and
/// `w = σ(score + β)` for sigmoid (the log of its total weight). A row that sees no key gives
/// `o = 0` and `lse = −∞`, with finite gradients.
pub(crate) fn attend<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Tensor<B, 4, Bool>,
    alibi: Option<Alibi<B>>,
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
    let total = RowTotal::new(weights.clone().sum_dim(3));
    let mut lse = total.log();
    if let Some(max) = shift {
        lse = lse + max;
    }
    let lse = lse.mask_fill(total.empty.clone(), f32::NEG_INFINITY).squeeze_dim::<3>(3);
    let weights = match opts.score_fn {
        ScoreFn::Softmax => total.normalise(weights),
        ScoreFn::Sigmoid { .. } => weights,
    };
    (weights.matmul(v), lse)
}

/// The row totals `t = Σ_j w_j` of the weights, with division by `t` and `ln t` written so that
/// their backward passes need neither a division nor a logarithm.
///
/// Why: Burn 0.21's ndarray backend differentiates `x / y` and `ln` with an approximate
/// reciprocal (see [`crate::reciprocal`]); `reference::gradients_match_an_f64_truth` checks the
/// result. With `c = 1/t` held constant and `r = t·c` (1 in value), `w·c·(2 − r)` has the value
/// `w/t` and exactly the gradient of `w/t`, and `ln t + r − 1` has the value and gradient of
/// `ln t`.
struct RowTotal<B: Backend> {
    /// `t·c`: 1 in value (0 for rows that see no key), carrying the gradient of `t`.
    ratio: Tensor<B, 4>,
    /// `c = 1/t`, a constant (1 for rows that see no key).
    inverse: Tensor<B, 4>,
    /// `ln t`, a constant (0 for rows that see no key).
    log_value: Tensor<B, 4>,
    /// Rows that see no key: `t = 0`.
    empty: Tensor<B, 4, Bool>,
}

impl<B: Backend> RowTotal<B> {
    fn new(total: Tensor<B, 4>) -> Self {
        let value = total.clone().detach();
        let empty = value.clone().equal_elem(0.0);
        let safe = value.mask_fill(empty.clone(), 1.0);
        let inverse = safe.ones_like() / safe.clone();
        Self { ratio: total * inverse.clone(), inverse, log_value: safe.log(), empty }
    }

    /// `w / t` per row.
    fn normalise(&self, weights: Tensor<B, 4>) -> Tensor<B, 4> {
        weights * self.inverse.clone() * self.ratio.clone().neg().add_scalar(2.0)
    }

    /// `ln t` per row (−1 for rows that see no key; the caller masks them).
    fn log(&self) -> Tensor<B, 4> {
        self.log_value.clone() + self.ratio.clone().sub_scalar(1.0)
    }
}
