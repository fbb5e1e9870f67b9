//! The dQ kernel (FlashAttention-2's, parallel over query blocks; docs/semantics.md §1; reference:
//! `crate::reference::dense_attention`, differentiated).
//!
//! Laid out as the forward: a cube of [`ROWS`] threads owns [`ROWS`] query rows of one head and
//! streams the same key tiles ([`key_tiles`]). Each row recomputes its weights from `q`, `k` and
//! its `lse`, and sums `dq_i = Σ_j ∂L/∂s_ij · chain_ij · scale · k_j`.

use cubecl::prelude::*;

use super::config::{Call, ROWS, Variant};
use super::reach::{key_tiles, nth_tile};
use super::score::{score, weight};
use super::tile::load_tiles;
use super::visibility::{load_window, visible};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]`,
/// `terms: [batch, H, N_q, 2]` → `dq: [batch, H, N_q, d]`. Grid: (query blocks, H, batch).
#[cube(launch)]
pub(crate) fn query_grads_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    d_o: &Tensor<F>,
    terms: &Tensor<f32>,
    dq: &mut Tensor<F>,
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
    let mut d_out = Array::<f32>::new(dim);
    let mut acc = Array::<f32>::new(dim);
    let q_base = batch * q.stride(0) + head * q.stride(1) + row * q.stride(2);
    let g_base = batch * d_o.stride(0) + head * d_o.stride(1) + row * d_o.stride(2);
    let mut lse = 0.0f32;
    let mut coefficient = 0.0f32;
    for c in 0..dim {
        q_row[c] = 0.0;
        d_out[c] = 0.0;
        acc[c] = 0.0;
        if live {
            q_row[c] = f32::cast_from(q[q_base + c * q.stride(3)]);
            d_out[c] = f32::cast_from(d_o[g_base + c * d_o.stride(3)]);
        }
    }
    if live {
        let t_base = batch * terms.stride(0) + head * terms.stride(1) + row * terms.stride(2);
        lse = terms[t_base];
        coefficient = terms[t_base + terms.stride(3)];
    }

    let first = call.query_offset + block as u32;
    let last = call.query_offset + (min(block + ROWS, q_len) - 1) as u32;
    let tiles = key_tiles(&window, first, last, &call, tile, variant.causal);
    let k_base = batch * k.stride(0) + kv_head * k.stride(1);
    let v_base = batch * v.stride(0) + kv_head * v.stride(1);
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
                if visible(&window, position, j, &call, variant.causal) {
                    let mut dot = 0.0f32;
                    let mut d_p = 0.0f32;
                    for c in 0..dim {
                        dot += q_row[c] * k_tile[r * dim + c];
                        d_p += d_out[c] * v_tile[r * dim + c];
                    }
                    let s = score(dot, position, j, slope, &call, variant);
                    let w = weight(s.value, lse, &call, variant);
                    let d_raw = w.gate * (d_p + coefficient) * s.chain * call.scale;
                    for c in 0..dim {
                        acc[c] += d_raw * k_tile[r * dim + c];
                    }
                }
            }
        }
        sync_cube();
    }

    if live {
        let out_base = batch * dq.stride(0) + head * dq.stride(1) + row * dq.stride(2);
        for c in 0..dim {
            dq[out_base + c * dq.stride(3)] = F::cast_from(acc[c]);
        }
    }
}
