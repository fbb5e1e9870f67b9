//! The dQ kernel (FlashAttention-2's, parallel over query blocks; docs/semantics.md §1; reference:
//! `crate::reference::dense_attention`, differentiated).
//!
//! Laid out as the forward: a cube of [`ROWS`] threads owns [`ROWS`] query rows of one head and
//! streams the same key tiles ([`block_key_tiles`]). Each row recomputes its weights from `q`,
//! `k` and its `lse`, and sums `dq_i = Σ_j ∂L/∂s_ij · chain_ij · scale · k_j`.

use cubecl::prelude::*;

use crate::kernel::config::{Call, ROWS, Variant};
use crate::kernel::prologue::{block_key_tiles, load_row, offset, query_block, zero_row};
use crate::kernel::reach::nth_tile;
use crate::kernel::score::{base2_shift, exponent_factor, relative_score, score, weight};
use crate::kernel::tile::load_tiles;
use crate::kernel::visibility::visible;

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]`,
/// `terms: [batch, H, N_q, 2]` and, when the variant has them, the relative scores
/// `[batch, H, N_q, L]` → `dq: [batch, H, N_q, d]` and the relative scores' gradient (each
/// visible pair's `∂L/∂s` at its distance; the caller zeroes it first). Grid: (query blocks, H,
/// batch).
#[cube(launch)]
pub(crate) fn query_grads_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_o: &Tensor<Vector<F, N>>,
    terms: &Tensor<f32>,
    relative: &Tensor<F>,
    dq: &mut Tensor<F>,
    d_relative: &mut Tensor<F>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: Call,
    #[comptime] variant: Variant,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let tile = variant.tile;
    let at = query_block(q, k, windows, slopes, &call, ROWS);
    let batch = at.batch;
    let head = at.head;
    let row = at.row;
    let live = at.live;

    let mut q_row = Array::<f32>::new(dim);
    let mut d_out = Array::<f32>::new(dim);
    let mut acc = Array::<f32>::new(dim);
    load_row(q, offset(q, batch, head, row), live, &mut q_row, dim);
    load_row(d_o, offset(d_o, batch, head, row), live, &mut d_out, dim);
    zero_row(&mut acc, dim);
    let mut shift = 0.0f32;
    let mut coefficient = 0.0f32;
    if live {
        let t_base = offset(terms, batch, head, row);
        shift = base2_shift(terms[t_base]);
        coefficient = terms[t_base + terms.stride(3)];
    }

    let r_base = offset(relative, batch, head, row);
    let d_base = offset(d_relative, batch, head, row);
    let tiles = block_key_tiles(&at, &call, ROWS, tile, variant.causal);
    let k_base = offset(k, batch, at.kv_head, 0);
    let v_base = offset(v, batch, at.kv_head, 0);
    let mut k_tile = SharedMemory::<f32>::new(tile * dim);
    let mut v_tile = SharedMemory::<f32>::new(tile * dim);

    for t in 0..tiles.before + tiles.count {
        let j0 = nth_tile(&tiles, t) as usize * tile;
        let kv_len = call.kv_len as usize;
        load_tiles(k, k_base, v, v_base, j0, kv_len, &mut k_tile, &mut v_tile, tile, dim);
        sync_cube();

        if live {
            for r in 0..tile {
                let j = (j0 + r) as u32;
                if visible(&at.window, at.position, j, &call, variant.causal, variant.plain) {
                    let mut dot = 0.0f32;
                    let mut d_p = 0.0f32;
                    for c in 0..dim {
                        dot += q_row[c] * k_tile[r * dim + c];
                        d_p += d_out[c] * v_tile[r * dim + c];
                    }
                    let s = score(dot, at.position, j, at.slope, &call, variant);
                    let value = s.value + relative_score(relative, r_base, at.position, j, variant);
                    let w = weight(value, exponent_factor(&call, variant), shift, &call, variant);
                    let d_score = w.gate * (d_p + coefficient);
                    if comptime![variant.relative] {
                        // One thread owns the row: each of its distances is written once.
                        let distance = (at.position - j) as usize * d_relative.stride(3);
                        d_relative[d_base + distance] = F::cast_from(d_score);
                    }
                    let d_raw = d_score * s.chain * call.scale;
                    for c in 0..dim {
                        acc[c] += d_raw * k_tile[r * dim + c];
                    }
                }
            }
        }
        sync_cube();
    }

    if live {
        let out_base = offset(dq, batch, head, row);
        let dq_columns = dq.stride(3);
        for c in 0..dim {
            dq[out_base + c * dq_columns] = F::cast_from(acc[c]);
        }
    }
}
