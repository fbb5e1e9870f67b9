//! Scores and weights of one (query, key) pair, shared by the forward and backward kernels so
//! that both compute the same thing as `crate::scores::attend` (docs/semantics.md §1, §4):
//! `s = c·tanh(scale·q·k / c) − m_h·(i − j)`, then `exp(s − m)` (softmax) or `σ(s + β)`.

use cubecl::prelude::*;

use super::config::{Call, Variant};

/// A pair's score and `∂s/∂(scale·q·k)`: `1 − tanh²` under a softcap, else 1.
#[derive(CubeType)]
pub(crate) struct Score {
    pub value: f32,
    pub chain: f32,
}

/// The score of query position `i` and key position `j` from `dot = q_i·k_j`, with ALiBi slope
/// `slope`; softcap before ALiBi, as `crate::scores::attend`.
#[cube]
pub(crate) fn score(
    dot: f32,
    i: u32,
    j: u32,
    slope: f32,
    call: &Call,
    #[comptime] variant: Variant,
) -> Score {
    let raw = dot * call.scale;
    let mut score = Score { value: raw, chain: 1.0 };
    if comptime![variant.softcap] {
        let t = (raw / call.cap).tanh();
        score.value = call.cap * t;
        score.chain = 1.0 - t * t;
    }
    if comptime![variant.alibi] {
        score.value -= slope * (f32::cast_from(i) - f32::cast_from(j));
    }
    score
}

/// The relative score (docs/semantics.md §4) of the query row whose table row starts at `base`
/// (`offset(relative, batch, head, row)`), at position `i`, and a visible key at `j ≤ i`: the
/// entry at distance `i − j`, in f32; 0 when the variant has no relative scores (the table is
/// then a placeholder, never read).
#[cube]
pub(crate) fn relative_score<F: Float>(
    relative: &Tensor<F>,
    base: usize,
    i: u32,
    j: u32,
    #[comptime] variant: Variant,
) -> f32 {
    let mut value = 0.0f32;
    if comptime![variant.relative] {
        value = f32::cast_from(relative[base + (i - j) as usize * relative.stride(3)]);
    }
    value
}

/// `σ(x) = 1 / (1 + e^−x)`.
#[cube]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// A visible pair's weight as the backward recomputes it from the row's `lse`, and its gate:
/// softmax `p = exp(s − lse)` with `∂L/∂s = p·(dP + c)`; sigmoid `w = σ(s + β)` with
/// `∂L/∂s = σ(1 − σ)·(dP + c)`. The row coefficient `c` carries `D` and `∂L/∂lse`
/// (`super::backward_rows`).
#[derive(CubeType)]
pub(crate) struct Weight {
    pub value: f32,
    pub gate: f32,
}

/// The weight and gate of score `s` in a row with log-normaliser `lse`.
#[cube]
pub(crate) fn weight(s: f32, lse: f32, call: &Call, #[comptime] variant: Variant) -> Weight {
    let mut weight = Weight { value: 0.0, gate: 0.0 };
    if comptime![variant.sigmoid] {
        let w = sigmoid(s + call.beta);
        weight.value = w;
        weight.gate = w * (1.0 - w);
    } else {
        let p = (s - lse).exp();
        weight.value = p;
        weight.gate = p;
    }
    weight
}

/// A finished row of the forward: its log-normaliser (`m + ln Σ` under softmax, `ln Σ` under
/// sigmoid, −∞ for a row that saw no key) and the divisor of its accumulated output (`Σ` under
/// softmax, 1 under sigmoid, 0 for a row that saw no key and writes `o = 0`).
#[derive(CubeType)]
pub(crate) struct RowEnd {
    pub lse: f32,
    pub norm: f32,
}

/// The end of a row with weight sum `total` and, under softmax, running maximum `running_max`.
#[cube]
pub(crate) fn row_end(
    total: f32,
    running_max: f32,
    call: &Call,
    #[comptime] variant: Variant,
) -> RowEnd {
    let mut end = RowEnd { lse: call.neg_inf, norm: 0.0 };
    if total > 0.0 {
        end.lse = total.ln();
        end.norm = 1.0;
        if comptime![!variant.sigmoid] {
            end.lse += running_max;
            end.norm = total;
        }
    }
    end
}
