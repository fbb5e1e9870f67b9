//! The forward kernel, flash-attention style (docs/semantics.md §1–§2; reference:
//! `crate::reference::dense_attention`).
//!
//! A cube of [`ROWS`] threads owns [`ROWS`] consecutive query rows of one head; each thread keeps
//! its query row and output accumulator in registers. The cube streams the key tiles of
//! [`key_tiles`] through shared memory; each row scores a tile's visible keys, then folds them
//! into its accumulator: softmax with a running maximum and sum (online softmax), sigmoid by
//! plain sums of `σ(s + β)`. Rows that see no key write `o = 0` and `lse = −∞`.

use cubecl::prelude::*;

use super::config::{Call, ROWS, Variant};
use super::reach::{key_tiles, nth_tile};
use super::score::{row_end, score, sigmoid};
use super::tile::load_tiles;
use super::visibility::{load_window, visible};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` → `o: [batch, H, N_q, d]`,
/// `lse: [batch, H, N_q]` (f32 whatever `F` is). Grid: (query blocks, H, batch); [`ROWS`]
/// threads per cube.
#[cube(launch)]
pub(crate) fn forward_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
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
    let unit = UNIT_POS_X as usize;
    let head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let q_len = q.shape(2);
    let block = CUBE_POS_X as usize * ROWS;
    let row = block + unit;
    let live = row < q_len;
    let position = call.query_offset + row as u32;
    let window = load_window(windows, head);
    let slope = slopes[head];
    let kv_head = head / (q.shape(1) / k.shape(1));

    let mut q_row = Array::<f32>::new(dim);
    let mut acc = Array::<f32>::new(dim);
    let q_base = batch * q.stride(0) + head * q.stride(1) + row * q.stride(2);
    for c in 0..dim {
        q_row[c] = 0.0;
        if live {
            q_row[c] = f32::cast_from(q[q_base + c * q.stride(3)]);
        }
        acc[c] = 0.0;
    }

    let first = call.query_offset + block as u32;
    let last = call.query_offset + (min(block + ROWS, q_len) - 1) as u32;
    let tiles = key_tiles(&window, first, last, &call, tile, variant.causal);
    let k_base = batch * k.stride(0) + kv_head * k.stride(1);
    let v_base = batch * v.stride(0) + kv_head * v.stride(1);
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
                if visible(&window, position, j, &call, variant.causal) {
                    let mut dot = 0.0f32;
                    for c in 0..dim {
                        dot += q_row[c] * k_tile[r * dim + c];
                    }
                    let s = score(dot, position, j, slope, &call, variant).value;
                    scores[r] = s;
                    tile_max = max(tile_max, s);
                    seen |= 1u32 << r as u32;
                }
            }
            if seen != 0 {
                let mut shift = 0.0f32;
                if comptime![!variant.sigmoid] {
                    let new_max = max(running_max, tile_max);
                    let rescale = (running_max - new_max).exp();
                    total *= rescale;
                    for c in 0..dim {
                        acc[c] *= rescale;
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
        let out_base = batch * o.stride(0) + head * o.stride(1) + row * o.stride(2);
        let end = row_end(total, running_max, &call, variant);
        for c in 0..dim {
            let mut value = 0.0f32;
            if end.norm > 0.0 {
                value = acc[c] / end.norm;
            }
            o[out_base + c * o.stride(3)] = F::cast_from(value);
        }
        lse[batch * lse.stride(0) + head * lse.stride(1) + row * lse.stride(2)] = end.lse;
    }
}
