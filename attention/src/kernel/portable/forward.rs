//! The forward kernel, flash-attention style (docs/semantics.md §1–§2; reference:
//! `crate::reference::dense_attention`).
//!
//! A cube of [`ROWS`] threads owns [`ROWS`] consecutive query rows of one head; each thread keeps
//! its query row and output accumulator in registers. The cube streams the key tiles of
//! [`block_key_tiles`] through shared memory; each row scores a tile's visible keys, then folds
//! them into its accumulator: softmax with a running maximum and sum (online softmax), sigmoid
//! by plain sums of `σ(s + β)`. Rows that see no key write `o = 0` and `lse = −∞`.

use cubecl::prelude::*;

use crate::kernel::config::{Call, ROWS, Variant};
use crate::kernel::prologue::{block_key_tiles, load_row, offset, query_block, zero_row};
use crate::kernel::reach::nth_tile;
use crate::kernel::score::{relative_score, row_end, score, sigmoid};
use crate::kernel::tile::load_tiles;
use crate::kernel::visibility::visible;

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` and, when the variant has them, the
/// relative scores `[batch, H, N_q, L]` → `o: [batch, H, N_q, d]`, `lse: [batch, H, N_q]` (f32
/// whatever `F` is). Grid: (query blocks, H, batch); [`ROWS`] threads per cube.
#[cube(launch)]
pub(crate) fn forward_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    relative: &Tensor<F>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
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
    let mut acc = Array::<f32>::new(dim);
    load_row(q, offset(q, batch, head, row), live, &mut q_row, dim);
    zero_row(&mut acc, dim);

    let r_base = offset(relative, batch, head, row);
    let tiles = block_key_tiles(&at, &call, ROWS, tile, variant.causal);
    let k_base = offset(k, batch, at.kv_head, 0);
    let v_base = offset(v, batch, at.kv_head, 0);
    let mut k_tile = SharedMemory::<f32>::new(tile * dim);
    let mut v_tile = SharedMemory::<f32>::new(tile * dim);
    let mut scores = Array::<f32>::new(tile);
    let mut running_max = f32::min_value();
    let mut total = 0.0f32;

    for t in 0..tiles.before + tiles.count {
        let j0 = nth_tile(&tiles, t) as usize * tile;
        let kv_len = call.kv_len as usize;
        load_tiles(k, k_base, v, v_base, j0, kv_len, &mut k_tile, &mut v_tile, tile, dim);
        sync_cube();

        if live {
            let mut seen = 0u32;
            let mut tile_max = f32::min_value();
            for r in 0..tile {
                let j = (j0 + r) as u32;
                if visible(&at.window, at.position, j, &call, variant.causal, variant.plain) {
                    let mut dot = 0.0f32;
                    for c in 0..dim {
                        dot += q_row[c] * k_tile[r * dim + c];
                    }
                    let s = score(dot, at.position, j, at.slope, &call, variant).value
                        + relative_score(relative, r_base, at.position, j, variant);
                    scores[r] = s;
                    tile_max = max(tile_max, s);
                    seen |= 1u32 << r as u32;
                }
            }
            if seen != 0 {
                let mut shift = 0.0f32;
                if comptime![!variant.sigmoid] {
                    let new_max = max(running_max, tile_max);
                    // The accumulator moves only when the row's maximum did.
                    if new_max > running_max {
                        let rescale = (running_max - new_max).exp();
                        total *= rescale;
                        for c in 0..dim {
                            acc[c] *= rescale;
                        }
                    }
                    running_max = new_max;
                    shift = new_max;
                }
                for r in 0..tile {
                    if (seen >> r as u32) & 1 == 1 {
                        let w = if comptime![variant.sigmoid] {
                            sigmoid(scores[r] + call.beta)
                        } else {
                            (scores[r] - shift).exp()
                        };
                        total += w;
                        for c in 0..dim {
                            acc[c] += w * v_tile[r * dim + c];
                        }
                    }
                }
            }
        }
        sync_cube();
    }

    if live {
        let out_base = offset(o, batch, head, row);
        let end = row_end(total, running_max, &call, variant);
        let o_columns = o.stride(3);
        for c in 0..dim {
            let mut value = 0.0f32;
            if end.norm > 0.0 {
                value = acc[c] / end.norm;
            }
            o[out_base + c * o_columns] = F::cast_from(value);
        }
        lse[offset(lse, batch, head, row)] = end.lse;
    }
}
