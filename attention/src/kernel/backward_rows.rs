//! The first backward kernel: per query row, the terms every pair of the row shares
//! (FlashAttention-2's preprocessing; docs/semantics.md §1).
//!
//! Writing `dP_ij = dO_i·v_j` and `c_i` for the row coefficient, both score functions give
//! `∂L/∂s_ij = gate_ij·(dP_ij + c_i)` (`super::score::weight`):
//! - softmax: `∂L/∂s = P∘(dP − D) + P·dlse` with `D_i = Σ_d dO_i∘O_i`, so `c_i = dlse_i − D_i`;
//! - sigmoid: `lse = ln Σ_j σ_ij` adds `dlse_i·σ(1 − σ)·exp(−lse_i)`, so
//!   `c_i = dlse_i·exp(−lse_i)`, and 0 for rows with `lse = −∞` (which see no key, or whose
//!   weights underflow; the reference gives them no `lse` gradient either).

use cubecl::prelude::*;

use super::config::{ROWS, Variant};

/// `packed, grad: [batch, H, N_q, d + 1]` (the forward's output and its gradient) →
/// `terms: [batch, H, N_q, 2]` f32 (`lse_i`, `c_i`). Grid: (query blocks, H, batch).
#[cube(launch)]
pub(crate) fn row_terms_kernel<F: Float>(
    packed: &Tensor<F>,
    grad: &Tensor<F>,
    terms: &mut Tensor<f32>,
    #[comptime] variant: Variant,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let row = CUBE_POS_X as usize * ROWS + UNIT_POS_X as usize;
    if row >= packed.shape(2) {
        terminate!();
    }
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let base = batch * packed.stride(0) + head * packed.stride(1) + row * packed.stride(2);
    let grad_base = batch * grad.stride(0) + head * grad.stride(1) + row * grad.stride(2);
    let mut delta = 0.0f32;
    for c in 0..dim {
        let o = f32::cast_from(packed[base + c * packed.stride(3)]);
        delta += o * f32::cast_from(grad[grad_base + c * grad.stride(3)]);
    }
    let lse = f32::cast_from(packed[base + dim * packed.stride(3)]);
    let d_lse = f32::cast_from(grad[grad_base + dim * grad.stride(3)]);
    let mut coefficient = d_lse - delta;
    if comptime![variant.sigmoid] {
        coefficient = 0.0;
        if lse > f32::min_value() {
            coefficient = d_lse * (-lse).exp();
        }
    }
    let out = batch * terms.stride(0) + head * terms.stride(1) + row * terms.stride(2);
    terms[out] = lse;
    terms[out + terms.stride(3)] = coefficient;
}
