//! The decode kernel (docs/semantics.md §7; reference: the cache's tensor ops,
//! `swa_models::layers::cache`): one query per head against a layer's bounded cache, every ring
//! buffer of it in one launch.
//!
//! A cube of [`THREADS`] threads owns one (query head, batch element) and reads the buffer that
//! holds its kv head (the buffers are a `Sequence` of tensors; the cube's branch into its own is
//! uniform). The slots stream through in chunks of [`THREADS`]: each thread scores one slot of
//! the chunk where the head sees it, then every thread folds the chunk's weights into the
//! output columns it owns, reading each value row across the threads (coalesced). Which slots a
//! head sees is [`visible`] at the slots' positions, decided on the device, except for specs
//! with global tokens, whose mask the host builds from [`crate::WindowSpec::visible`]. Softmax
//! keeps a running maximum and sum (online softmax), sigmoid plain sums of `σ(s + β)`; the
//! scores are those of the windowed kernels ([`score`]). A LongNet layer's branches each get
//! their own pass and are mixed by their log-normalisers, as
//! `swa_models::layers::longnet::mix_branches` mixes them (§5). Rows that see no slot get 0.

use cubecl::prelude::*;

use crate::kernel::config::{Call, Variant};
use crate::kernel::prologue::offset;
use crate::kernel::score::{row_end, score, sigmoid};
use crate::kernel::visibility::{load_window, visible};

/// Threads per cube: one slot each while scoring, output columns `c ≡ thread (mod THREADS)`
/// while accumulating.
pub(crate) const THREADS: usize = 32;

/// Words per cube row in the table's rows section: query head, buffer, the kv head's index in
/// the buffer, the index of the buffer's first slot in the positions section, and the first word
/// of the row's host mask (0 without one).
pub(crate) const ROW_WORDS: usize = 5;

/// Where a step's sections sit in its table (`u32` words, one upload per step). The windows of
/// every branch's heads come first, `[branches, H, WINDOW_WORDS]` at word 0, so that
/// [`load_window`] finds branch `b`'s head `h` at `b·H + h`.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct Sections {
    /// Query heads `H`.
    pub heads: u32,
    /// The heads' ALiBi slopes, `[H]`, as f32 bits.
    pub slopes: u32,
    /// [`ROW_WORDS`] words per cube row.
    pub rows: u32,
    /// The positions the slots hold, buffer after buffer.
    pub positions: u32,
    /// The query's rotation (`rotate` only): `cos θ`, then `sin θ`, of each of the `d/2`
    /// dimension pairs, as f32 bits.
    pub angles: u32,
}

/// A cube's row: its query head and batch element, and where its buffer's slots are described.
#[derive(CubeType, Clone, Copy)]
struct Row {
    head: usize,
    batch: usize,
    /// The kv head's index in its buffer.
    local: usize,
    /// The table word of the buffer's first slot position.
    positions: usize,
    /// The table word of the row's host mask, `[branches, slots]`.
    mask: usize,
    slope: f32,
}

/// `q: [batch, H, 1, d]`, `keys, values`: each buffer's `[batch, its kv heads, slots, d]` →
/// `out: [batch, H, 1, d]`. `table`: the step's words ([`Sections`]). `call.query_offset` is the
/// query's position `t`, `call.kv_len` is `t + 1`. With `rotate` the query is turned by RoPE at
/// `t` first, in f32. Grid: (H, batch).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_kernel<F: Float>(
    q: &Tensor<F>,
    keys: &Sequence<Tensor<F>>,
    values: &Sequence<Tensor<F>>,
    out: &mut Tensor<F>,
    table: &Array<u32>,
    sections: Sections,
    call: Call,
    #[comptime] variant: Variant,
    #[comptime] branches: usize,
    #[comptime] host_mask: bool,
    #[comptime] rotate: bool,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let columns = comptime![dim.div_ceil(THREADS)];
    let unit = UNIT_POS_X as usize;
    let at = sections.rows as usize + CUBE_POS_X as usize * ROW_WORDS;
    let head = table[at] as usize;
    let buffer = table[at + 1] as usize;
    let row = Row {
        head,
        batch: CUBE_POS_Y as usize,
        local: table[at + 2] as usize,
        positions: sections.positions as usize + table[at + 3] as usize,
        mask: table[at + 4] as usize,
        slope: f32::reinterpret(table[sections.slopes as usize + head]),
    };

    let mut query = SharedMemory::<f32>::new(dim);
    let q_base = offset(q, row.batch, head, 0);
    for k in 0..columns {
        let c = unit + k * THREADS;
        if c < dim {
            query[c] = f32::cast_from(q[q_base + c * q.stride(3)]);
        }
    }
    sync_cube();
    if rotate {
        turn(&mut query, table, sections.angles as usize, dim);
        sync_cube();
    }

    let mut outs = Array::<f32>::new(branches * columns);
    let mut lses = Array::<f32>::new(branches);
    #[unroll]
    for b in 0..keys.len() {
        if buffer == b {
            #[unroll]
            for branch in 0..branches {
                let (k, v) = (keys.index(b), values.index(b));
                let step = Step { branch, heads: sections.heads as usize };
                attend(
                    &query, k, v, table, row, step, &call, &mut outs, &mut lses, variant, host_mask,
                );
            }
        }
    }
    write_mixed(&outs, &lses, out, row, &call, dim, branches);
}

/// Turns the query's pair `k` (dimensions `k` and `k + d/2`) by the angle whose cosine is
/// `table[angles + k]` and sine `table[angles + d/2 + k]`: RoPE, each thread its own pairs.
#[cube]
fn turn(query: &mut SharedMemory<f32>, table: &Array<u32>, angles: usize, #[comptime] dim: usize) {
    let half = comptime![dim / 2];
    for round in 0..comptime![half.div_ceil(THREADS)] {
        let k = UNIT_POS_X as usize + round * THREADS;
        if k < half {
            let cos = f32::reinterpret(table[angles + k]);
            let sin = f32::reinterpret(table[angles + half + k]);
            let (a, b) = (query[k], query[k + half]);
            query[k] = a * cos - b * sin;
            query[k + half] = b * cos + a * sin;
        }
    }
}

/// Which branch a pass is, of a spec with `heads` query heads.
#[derive(CubeType, Clone, Copy)]
struct Step {
    #[cube(comptime)]
    branch: usize,
    heads: usize,
}

/// One branch's pass of a row over its buffer's slots: the row's output columns into
/// `outs[branch·columns ..]` and its log-normaliser into `lses[branch]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn attend<F: Float>(
    query: &SharedMemory<f32>,
    keys: &Tensor<F>,
    values: &Tensor<F>,
    table: &Array<u32>,
    row: Row,
    step: Step,
    call: &Call,
    outs: &mut Array<f32>,
    lses: &mut Array<f32>,
    #[comptime] variant: Variant,
    #[comptime] host_mask: bool,
) {
    let dim = variant.head_dim;
    let columns = comptime![dim.div_ceil(THREADS)];
    let unit = UNIT_POS_X as usize;
    let slots = keys.shape(2);
    let window = load_window(table, step.branch * step.heads + row.head);
    let k_base = offset(keys, row.batch, row.local, 0);
    let v_base = offset(values, row.batch, row.local, 0);
    let mut scores = SharedMemory::<f32>::new(THREADS);
    let mut weights = SharedMemory::<f32>::new(THREADS);
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
        let mut position = 0u32;
        if slot < slots {
            position = table[row.positions + slot];
            seen = if comptime![host_mask] {
                table[row.mask + step.branch * slots + slot] == 1
            } else {
                visible(&window, call.query_offset, position, call, true, variant.plain)
            };
        }
        if seen {
            let mut dot = 0.0f32;
            let (row_stride, column_stride) = (keys.stride(2), keys.stride(3));
            for c in 0..dim {
                let key = keys[k_base + slot * row_stride + c * column_stride];
                dot += query[c] * f32::cast_from(key);
            }
            value = score(dot, call.query_offset, position, row.slope, call, variant).value;
        }
        scores[unit] = value;
        // (Not an `if` expression: CubeCL 0.10 compiles `if c { 1.0 } else { 0.0 }` on a
        // runtime `c` to its last branch.)
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
            weight = if comptime![variant.sigmoid] {
                sigmoid(value + call.beta)
            } else {
                (value - shift).exp()
            };
        }
        weights[unit] = weight;
        sync_cube();

        // The accumulator moves only when the maximum did (never under sigmoid).
        if rescale != 1.0 {
            total *= rescale;
            for k in 0..columns {
                acc[k] *= rescale;
            }
        }
        for r in 0..THREADS {
            let w = weights[r];
            if w > 0.0 {
                total += w;
                let v_row = v_base + (chunk * THREADS + r) * values.stride(2);
                let column_stride = values.stride(3);
                for k in 0..columns {
                    let c = unit + k * THREADS;
                    if c < dim {
                        acc[k] += w * f32::cast_from(values[v_row + c * column_stride]);
                    }
                }
            }
        }
        sync_cube();
    }
    let end = row_end(total, running_max, call, variant);
    lses[step.branch] = end.lse;
    for k in 0..columns {
        let mut value = 0.0f32;
        if end.norm > 0.0 {
            value = acc[k] / end.norm;
        }
        outs[step.branch * columns + k] = value;
    }
}

/// Writes the row's output: its branches mixed by their log-normalisers,
/// `α_b = exp(lse_b − top) / Σ_b' exp(lse_b' − top)` with `top` 0 when no branch sees a slot
/// (one branch: its output).
#[cube]
fn write_mixed<F: Float>(
    outs: &Array<f32>,
    lses: &Array<f32>,
    out: &mut Tensor<F>,
    row: Row,
    call: &Call,
    #[comptime] dim: usize,
    #[comptime] branches: usize,
) {
    let columns = comptime![dim.div_ceil(THREADS)];
    let unit = UNIT_POS_X as usize;
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
    let out_base = offset(out, row.batch, row.head, 0);
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
