//! `1/x` and `ln x` with exact values and exact gradients on every backend.
//!
//! Burn 0.21's ndarray backend computes `recip`, `powf(−1)` and the backward of a division
//! through an approximate SIMD reciprocal (about 3e-4 relative error, measured against f64),
//! while its forward division is exact. ndarray is the reference every path is tested against,
//! so the core, LongNet's mixture and linear attention divide through these functions instead
//! (`reference::gradients_match_an_f64_truth` checks the core's gradients against f64).

use burn::tensor::{Tensor, backend::Backend};

/// `1/x` elementwise. With `c = 1/x` computed by a forward division and held constant, and
/// `r = x·c` (1 in value), `c·(2 − r)` has the value `1/x` and the gradient `−c² = −1/x²`.
/// `x` must have no zeros.
pub fn reciprocal<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let inverse = {
        let value = x.clone().detach();
        value.ones_like() / value
    };
    let ratio = x * inverse.clone();
    inverse * ratio.neg().add_scalar(2.0)
}

/// `ln x` elementwise for positive `x`. With `c = 1/x` held constant, `ln x + x·c − 1` (the
/// first term held constant) has the value `ln x` and the gradient `c = 1/x`, with no division
/// in its backward pass.
pub(crate) fn log<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let value = x.clone().detach();
    let inverse = value.clone().ones_like() / value.clone();
    value.log() + (x * inverse).sub_scalar(1.0)
}
