//! The decode kernel (docs/semantics.md §7; reference: the cache's tensor ops,
//! `crate::layers::cache`): one query per head against one ring buffer of a layer's bounded
//! cache, for the query heads whose kv heads the buffer holds.
//!
//! A cube of [`THREADS`] threads owns one (query head, batch element). The slots stream through
//! in chunks of [`THREADS`]: each thread scores one slot of the chunk (where the host's mask,
//! built from [`crate::WindowSpec::visible`], shows it), then every thread folds the chunk's
//! weights into the output columns it owns, reading each value row across the threads
//! (coalesced). Softmax keeps a running maximum and sum (online softmax), sigmoid plain sums of
//! `σ(s + β)`; the scores are those of the windowed kernels ([`score`]). A LongNet layer's
//! branches each get their own pass and are mixed by their log-normalisers, as
//! `crate::layers::longnet::mix_branches` mixes them (§5). Rows that see no slot get 0.

use cubecl::prelude::*;

use super::config::{Call, Variant};
use super::score::{score, sigmoid};

/// Threads per cube: one slot each while scoring, output columns `c ≡ thread (mod THREADS)`
/// while accumulating.
pub(crate) const THREADS: usize = 32;

/// `q: [batch, H, 1, d]`, the buffer's `keys, values: [batch, kv heads, slots, d]` → the rows
/// of `out: [batch, H, 1, d]` of the buffer's query heads. `rows` holds, per cube row, the query
/// head and the local index of its kv head in the buffer; `mask: [branches, rows, slots]` is 1
/// where a branch's spec shows a slot to the row's head; `positions: [slots]` the position each
/// slot holds; `slopes: [rows]` the rows' ALiBi slopes. `call.query_offset` is the query's
/// position. Grid: (rows, batch).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_kernel<F: Float>(
    q: &Tensor<F>,
    keys: &Tensor<F>,
    values: &Tensor<F>,
    out: &mut Tensor<F>,
    rows: &Array<u32>,
    mask: &Array<u32>,
    positions: &Array<u32>,
    slopes: &Array<f32>,
    call: Call,
    #[comptime] variant: Variant,
    #[comptime] branches: usize,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let columns = comptime![dim.div_ceil(THREADS)];
    let unit = UNIT_POS_X as usize;
    let row = CUBE_POS_X as usize;
    let batch = CUBE_POS_Y as usize;
    let row_count = CUBE_COUNT_X as usize;
    let head = rows[2 * row] as usize;
    let local = rows[2 * row + 1] as usize;
    let slope = slopes[row];
    let slots = keys.shape(2);

    let mut query = SharedMemory::<f32>::new(dim);
    let q_base = batch * q.stride(0) + head * q.stride(1);
    for k in 0..columns {
        let c = unit + k * THREADS;
        if c < dim {
            query[c] = f32::cast_from(q[q_base + c * q.stride(3)]);
        }
    }
    sync_cube();

    let k_base = batch * keys.stride(0) + local * keys.stride(1);
    let v_base = batch * values.stride(0) + local * values.stride(1);
    let mut scores = SharedMemory::<f32>::new(THREADS);
    let mut weights = SharedMemory::<f32>::new(THREADS);
    let mut outs = Array::<f32>::new(branches * columns);
    let mut lses = Array::<f32>::new(branches);

    #[unroll]
    for b in 0..branches {
        let mut running_max = f32::min_value();
        let mut total = 0.0f32;
        let mut acc = Array::<f32>::new(columns);
        for k in 0..columns {
            acc[k] = 0.0;
        }
        for chunk in 0..slots.div_ceil(THREADS) {
            let slot = chunk * THREADS + unit;
            let mut seen = false;
            let mut value = 0.0f32;
            if slot < slots {
                seen = mask[(b * row_count + row) * slots + slot] == 1;
            }
            if seen {
                let mut dot = 0.0f32;
                for c in 0..dim {
                    let key = keys[k_base + slot * keys.stride(2) + c * keys.stride(3)];
                    dot += query[c] * f32::cast_from(key);
                }
                value = score(dot, call.query_offset, positions[slot], slope, &call, variant).value;
            }
            scores[unit] = value;
            let mut flag = 0.0f32;
            if seen {
                flag = 1.0;
            }
            weights[unit] = flag;
            sync_cube();

            let mut rescale = 1.0f32;
            let mut shift = 0.0f32;
            if comptime![!variant.sigmoid] {
                let mut chunk_max = f32::min_value();
                for r in 0..THREADS {
                    if weights[r] > 0.0 {
                        chunk_max = max(chunk_max, scores[r]);
                    }
                }
                let new_max = max(running_max, chunk_max);
                rescale = (running_max - new_max).exp();
                running_max = new_max;
                shift = new_max;
            }
            sync_cube();
            let mut weight = 0.0f32;
            if seen {
                if comptime![variant.sigmoid] {
                    weight = sigmoid(value + call.beta);
                } else {
                    weight = (value - shift).exp();
                }
            }
            weights[unit] = weight;
            sync_cube();

            total *= rescale;
            for k in 0..columns {
                acc[k] *= rescale;
            }
            for r in 0..THREADS {
                let w = weights[r];
                let slot = chunk * THREADS + r;
                if w > 0.0 {
                    total += w;
                    let v_row = v_base + slot * values.stride(2);
                    for k in 0..columns {
                        let c = unit + k * THREADS;
                        if c < dim {
                            acc[k] += w * f32::cast_from(values[v_row + c * values.stride(3)]);
                        }
                    }
                }
            }
            sync_cube();
        }
        let mut lse = call.neg_inf;
        let mut norm = 1.0f32;
        if total > 0.0 {
            lse = total.ln();
            if comptime![!variant.sigmoid] {
                lse += running_max;
                norm = total;
            }
        }
        lses[b] = lse;
        for k in 0..columns {
            let mut value = 0.0f32;
            if total > 0.0 {
                value = acc[k] / norm;
            }
            outs[b * columns + k] = value;
        }
    }

    // α_b = exp(lse_b − top) / Σ_b' exp(lse_b' − top), with top 0 when no branch sees a slot.
    let mut top = call.neg_inf;
    for b in 0..branches {
        top = max(top, lses[b]);
    }
    if top == call.neg_inf {
        top = 0.0;
    }
    let mut mass = 0.0f32;
    for b in 0..branches {
        mass += (lses[b] - top).exp();
    }
    if mass == 0.0 {
        mass = 1.0;
    }
    let out_base = batch * out.stride(0) + head * out.stride(1);
    for k in 0..columns {
        let c = unit + k * THREADS;
        if c < dim {
            let mut mixed = 0.0f32;
            for b in 0..branches {
                mixed += (lses[b] - top).exp() / mass * outs[b * columns + k];
            }
            out[out_base + c * out.stride(3)] = F::cast_from(mixed);
        }
    }
}
