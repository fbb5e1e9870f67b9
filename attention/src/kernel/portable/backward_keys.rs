//! The dK/dV kernel (FlashAttention-2's, parallel over key blocks, no atomics; docs/semantics.md
//! §1; reference: `crate::reference::dense_attention`, differentiated).
//!
//! A cube of [`ROWS`] threads owns [`ROWS`] key rows of one kv head; each thread keeps its key,
//! value and both accumulators in registers. For every query head of the kv head's GQA group it
//! streams the query tiles of [`query_tiles`] (queries, `dO`, `lse` and the row coefficients)
//! through shared memory, recomputes each visible pair's weight, and sums
//! `dv_j = Σ_i w_ij·dO_i` and `dk_j = Σ_i ∂L/∂s_ij · chain_ij · scale · q_i`. Keys past `kv_len`
//! get zero gradients.

use cubecl::prelude::*;

use crate::kernel::config::{Call, ROWS, Variant};
use crate::kernel::prologue::{load_row, offset, zero_row};
use crate::kernel::reach::{nth_tile, query_tiles};
use crate::kernel::score::{base2_shift, exponent_factor, relative_score, score, weight};
use crate::kernel::tile::load_tiles;
use crate::kernel::visibility::{load_window, visible};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]`,
/// `terms: [batch, H, N_q, 2]` and, when the variant has them, the relative scores
/// `[batch, H, N_q, L]` → `dk, dv: [batch, H_kv, N_k, d]`. Grid: (key blocks, H_kv, batch).
#[cube(launch)]
pub(crate) fn key_grads_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_o: &Tensor<Vector<F, N>>,
    terms: &Tensor<f32>,
    relative: &Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: Call,
    #[comptime] variant: Variant,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let tile = variant.tile;
    let unit = UNIT_POS_X as usize;
    let kv_head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let q_len = q.shape(2);
    let block = CUBE_POS_X as usize * ROWS;
    let key = block + unit;
    let seen_key = key < call.kv_len as usize;
    let group = q.shape(1) / k.shape(1);

    let mut k_row = Array::<f32>::new(dim);
    let mut v_row = Array::<f32>::new(dim);
    let mut dk_acc = Array::<f32>::new(dim);
    let mut dv_acc = Array::<f32>::new(dim);
    load_row(k, offset(k, batch, kv_head, key), seen_key, &mut k_row, dim);
    load_row(v, offset(v, batch, kv_head, key), seen_key, &mut v_row, dim);
    zero_row(&mut dk_acc, dim);
    zero_row(&mut dv_acc, dim);

    let mut q_tile = SharedMemory::<f32>::new(tile * dim);
    let mut g_tile = SharedMemory::<f32>::new(tile * dim);
    let mut lse_tile = SharedMemory::<f32>::new(tile);
    let mut coefficient_tile = SharedMemory::<f32>::new(tile);
    if block < call.kv_len as usize {
        let first = block as u32;
        let last = (min(block + ROWS, call.kv_len as usize) - 1) as u32;
        for member in 0..group {
            let head = kv_head * group + member;
            let window = load_window(windows, head);
            let slope = slopes[head];
            let tiles =
                query_tiles(&window, first, last, q_len as u32, &call, tile, variant.causal);
            let q_base = offset(q, batch, head, 0);
            let g_base = offset(d_o, batch, head, 0);
            let t_base = offset(terms, batch, head, 0);
            for t in 0..tiles.count {
                let i0 = nth_tile(&tiles, t) as usize * tile;
                load_tiles(q, q_base, d_o, g_base, i0, q_len, &mut q_tile, &mut g_tile, tile, dim);
                let rows = RowRange { start: UNIT_POS_X as usize, step: ROWS };
                load_row_terms(
                    terms,
                    t_base,
                    i0,
                    q_len,
                    rows,
                    &mut lse_tile,
                    &mut coefficient_tile,
                    tile,
                );
                sync_cube();

                if seen_key {
                    for r in 0..tile {
                        let i = i0 + r;
                        let position = call.query_offset + i as u32;
                        if i < q_len
                            && visible(
                                &window,
                                position,
                                key as u32,
                                &call,
                                variant.causal,
                                variant.plain,
                            )
                        {
                            let mut dot = 0.0f32;
                            let mut d_p = 0.0f32;
                            for c in 0..dim {
                                dot += q_tile[r * dim + c] * k_row[c];
                                d_p += g_tile[r * dim + c] * v_row[c];
                            }
                            let s = score(dot, position, key as u32, slope, &call, variant);
                            let r_base = offset(relative, batch, head, i);
                            let value = s.value
                                + relative_score(relative, r_base, position, key as u32, variant);
                            let factor = exponent_factor(&call, variant);
                            let w = weight(value, factor, lse_tile[r], &call, variant);
                            let d_raw = w.gate * (d_p + coefficient_tile[r]) * s.chain * call.scale;
                            for c in 0..dim {
                                dv_acc[c] += w.value * g_tile[r * dim + c];
                                dk_acc[c] += d_raw * q_tile[r * dim + c];
                            }
                        }
                    }
                }
                sync_cube();
            }
        }
    }

    if key < k.shape(2) {
        let dk_base = offset(dk, batch, kv_head, key);
        let dv_base = offset(dv, batch, kv_head, key);
        let (dk_columns, dv_columns) = (dk.stride(3), dv.stride(3));
        for c in 0..dim {
            dk[dk_base + c * dk_columns] = F::cast_from(dk_acc[c]);
            dv[dv_base + c * dv_columns] = F::cast_from(dv_acc[c]);
        }
    }
}

/// Which rows of a tile one thread copies: `start`, `start + step`, … (a thread's index among
/// `step` threads).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct RowRange {
    /// The thread's first row.
    pub start: usize,
    /// The number of threads sharing the copy.
    pub step: usize,
}

/// Copies the row terms (`lse_i` in base 2, [`base2_shift`], and `c_i`;
/// [`crate::kernel::portable::backward_rows`]) of query rows
/// `i0 … i0 + tile − 1` of one head, whose terms start at `t_base`, into shared memory, the
/// thread taking the rows of `rows`; zeros for rows past `q_len`. Shared by the portable dK/dV
/// kernel and its tensor-core twin.
#[cube]
#[allow(clippy::too_many_arguments)] // a cube function takes its tensors and tiles one by one
pub(crate) fn load_row_terms(
    terms: &Tensor<f32>,
    t_base: usize,
    i0: usize,
    q_len: usize,
    rows: RowRange,
    lse_tile: &mut SharedMemory<f32>,
    coefficient_tile: &mut SharedMemory<f32>,
    #[comptime] tile: usize,
) {
    let mut r = rows.start;
    while r < tile {
        lse_tile[r] = 0.0;
        coefficient_tile[r] = 0.0;
        if i0 + r < q_len {
            let at = t_base + (i0 + r) * terms.stride(2);
            lse_tile[r] = base2_shift(terms[at]);
            coefficient_tile[r] = terms[at + terms.stride(3)];
        }
        r += rows.step;
    }
}
