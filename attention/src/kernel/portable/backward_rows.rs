//! The first backward kernel: per query row, the terms every pair of the row shares
//! (FlashAttention-2's preprocessing; docs/semantics.md §1).
//!
//! Writing `dP_ij = dO_i·v_j` and `c_i` for the row coefficient, both score functions give
//! `∂L/∂s_ij = gate_ij·(dP_ij + c_i)` (`kernel::score::weight`):
//! - softmax: `∂L/∂s = P∘(dP − D) + P·dlse` with `D_i = Σ_d dO_i∘O_i`, so `c_i = dlse_i − D_i`;
//! - sigmoid: `lse = ln Σ_j σ_ij` adds `dlse_i·σ(1 − σ)·exp(−lse_i)`, so
//!   `c_i = dlse_i·exp(−lse_i)`, and 0 for rows with `lse = −∞` (which see no key, or whose
//!   weights underflow; the reference gives them no `lse` gradient either).

use cubecl::prelude::*;

use crate::kernel::config::{ROWS, Variant};
use crate::kernel::prologue::offset;

/// `o, d_o: [batch, H, N_q, d]` (the forward's output and its gradient), `lse, d_lse:
/// [batch, H, N_q]` f32 → `terms: [batch, H, N_q, 2]` f32 (`lse_i`, `c_i`). Grid: (query blocks,
/// H, batch).
#[cube(launch)]
pub(crate) fn row_terms_kernel<F: Float>(
    o: &Tensor<F>,
    d_o: &Tensor<F>,
    lse: &Tensor<f32>,
    d_lse: &Tensor<f32>,
    terms: &mut Tensor<f32>,
    #[comptime] variant: Variant,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let row = CUBE_POS_X as usize * ROWS + UNIT_POS_X as usize;
    if row >= o.shape(2) {
        terminate!();
    }
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let base = offset(o, batch, head, row);
    let grad_base = offset(d_o, batch, head, row);
    let (o_columns, d_o_columns) = (o.stride(3), d_o.stride(3));
    let mut delta = 0.0f32;
    for c in 0..dim {
        let value = f32::cast_from(o[base + c * o_columns]);
        delta += value * f32::cast_from(d_o[grad_base + c * d_o_columns]);
    }
    let row_lse = lse[offset(lse, batch, head, row)];
    let row_d_lse = d_lse[offset(d_lse, batch, head, row)];
    let mut coefficient = row_d_lse - delta;
    if comptime![variant.sigmoid] {
        coefficient = 0.0;
        if row_lse > f32::min_value() {
            coefficient = row_d_lse * (-row_lse).exp();
        }
    }
    let out = offset(terms, batch, head, row);
    terms[out] = row_lse;
    terms[out + terms.stride(3)] = coefficient;
}
