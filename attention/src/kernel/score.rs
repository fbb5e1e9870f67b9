//! Scores and weights of one (query, key) pair, shared by the forward and backward kernels so
//! that both compute the same thing as `crate::scores::attend` (docs/semantics.md §1, §4):
//! `s = c·tanh(scale·q·k / c) − m_h·(i − j)`, then `exp(s − m)` (softmax) or `σ(s + β)`.
//!
//! The softmax's exponentials are taken in base 2 ([`exp2_scaled`]: `e^x = 2^(x·log₂e)`),
//! so that a pair's weight is one fused multiply-add and `ex2` on CUDA: its input scaled by a
//! [`exponent_factor`] minus a row's shift, the factor carrying the scale too where the
//! variant allows (`Variant::scaled_dots`, under which [`score`] is the product itself).

use cubecl::prelude::*;

use crate::kernel::config::{Call, Variant};

/// A pair's score and `∂s/∂(scale·q·k)`: `1 − tanh²` under a softcap, else 1.
#[derive(CubeType)]
pub(crate) struct Score {
    pub value: f32,
    pub chain: f32,
}

/// The score of query position `i` and key position `j` from `dot = q_i·k_j`, with ALiBi slope
/// `slope`; softcap before ALiBi, as `crate::scores::attend`. Under `Variant::scaled_dots` it
/// is `dot` itself: the scale is folded into the softmax's [`exponent_factor`], and the row
/// maxima are taken over the products (the scale being positive).
#[cube]
pub(crate) fn score(
    dot: f32,
    i: u32,
    j: u32,
    slope: f32,
    call: &Call,
    #[comptime] variant: Variant,
) -> Score {
    let raw = if comptime![variant.scaled_dots] { dot } else { dot * call.scale };
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

/// `log₂ e`: the factor that turns a natural exponent into a power of 2.
const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// What the softmax multiplies a [`score`] by before [`exp2_scaled`]: `scale·log₂e`
/// where the variant folds the scale into the exponent (`Variant::scaled_dots`), else `log₂e`.
#[cube]
pub(crate) fn exponent_factor(call: &Call, #[comptime] variant: Variant) -> f32 {
    let log2_e = f32::new(LOG2_E);
    if comptime![variant.scaled_dots] { call.scale * log2_e } else { log2_e }
}

/// A row's shift in the base of [`exp2_scaled`] from its log-normaliser `lse` (natural): what
/// the backward kernels keep of `lse`, converted once per row.
#[cube]
pub(crate) fn base2_shift(lse: f32) -> f32 {
    lse * f32::new(LOG2_E)
}

/// `2^(x·factor − shift)`, fast: with CUDA's `__powf` of 2 its logarithm folds away, leaving a
/// fused multiply-add and `ex2.approx`. `x·factor` and `shift` must be finite (the kernels'
/// masked scores are chosen so).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
pub(crate) fn exp2_scaled(x: f32, factor: f32, shift: f32) -> f32 {
    f32::powf(2.0, x * factor - shift)
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
/// (`kernel::portable::backward_rows`).
#[derive(CubeType)]
pub(crate) struct Weight {
    pub value: f32,
    pub gate: f32,
}

/// The weight and gate of the pair whose [`score`] is `x` in a row whose
/// log-normaliser is `shift` in base 2 ([`base2_shift`]): `2^(x·factor − shift)` under
/// softmax ([`exponent_factor`]), `σ(x + β)` under sigmoid (where `x` is the score).
#[cube]
pub(crate) fn weight(
    x: f32,
    factor: f32,
    shift: f32,
    call: &Call,
    #[comptime] variant: Variant,
) -> Weight {
    let mut weight = Weight { value: 0.0, gate: 0.0 };
    if comptime![variant.sigmoid] {
        let w = sigmoid(x + call.beta);
        weight.value = w;
        weight.gate = w * (1.0 - w);
    } else {
        let p = exp2_scaled(x, factor, shift);
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
