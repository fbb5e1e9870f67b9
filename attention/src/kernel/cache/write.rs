//! The fused append of the bounded caches (docs/semantics.md §7; reference: the ring buffer's
//! tensor ops, `swa_models::layers::ring`): the new position's key and value rows into one slot of
//! each ring buffer of a layer's cache, for the kv heads the buffer holds, in one launch; the key
//! turned by RoPE on the way (reference: `crate::rope::rotate_tensor_ops`), in f32 and rounded
//! once, as the rotation kernel turns it.

use cubecl::prelude::*;

use crate::kernel::prologue::offset;

/// Threads per cube, over the head dim.
pub(crate) const THREADS: usize = 32;

/// Words per cube row in the table: a kv head, the buffer that holds it, its index on the
/// buffer's second axis, and the slot the new position goes to.
pub(crate) const HEAD_WORDS: usize = 4;

/// `new_keys, new_values: [batch, H_kv, 1, d]` (every kv head) → one slot of each buffer's
/// `keys, values: [batch, its kv heads, slots, d]` (the buffers are a `Sequence` of tensors; a
/// cube's branch into its own is uniform). `table: [rows, HEAD_WORDS]`, a row per kv head the
/// buffers hold; with `rotate`, the rows are followed by the key's rotation, `cos θ` then `sin
/// θ` of each of the `d/2` dimension pairs as f32 bits. Grid: (rows, batch).
#[cube(launch)]
pub(crate) fn cache_write_kernel<F: Float>(
    new_keys: &Tensor<F>,
    new_values: &Tensor<F>,
    keys: &mut Sequence<Tensor<F>>,
    values: &mut Sequence<Tensor<F>>,
    table: &Array<u32>,
    #[comptime] rotate: bool,
    #[define(F)] _dtype: StorageType,
) {
    let at = CUBE_POS_X as usize * HEAD_WORDS;
    let buffer = table[at + 1] as usize;
    let row = Row {
        kv: table[at] as usize,
        batch: CUBE_POS_Y as usize,
        local: table[at + 2] as usize,
        slot: table[at + 3] as usize,
    };
    #[unroll]
    for b in 0..keys.len() {
        if buffer == b {
            if rotate {
                write_turned(new_keys, keys.index_mut(b), row, table);
            } else {
                write_row(new_keys, keys.index_mut(b), row);
            }
            write_row(new_values, values.index_mut(b), row);
        }
    }
}

/// Where one cube writes: kv head `kv` of batch row `batch`, at index `local` of its buffer's
/// second axis, into slot `slot`.
#[derive(CubeType, Clone, Copy)]
struct Row {
    kv: usize,
    batch: usize,
    local: usize,
    slot: usize,
}

/// Copies the row's `[d]` vector of `new` (`[batch, H_kv, 1, d]`) into its slot of `buffer`.
#[cube]
fn write_row<F: Float>(new: &Tensor<F>, buffer: &mut Tensor<F>, row: Row) {
    let dim = buffer.shape(3);
    let from = offset(new, row.batch, row.kv, 0);
    let to = offset(buffer, row.batch, row.local, row.slot);
    for step in 0..dim.div_ceil(THREADS) {
        let c = UNIT_POS_X as usize + step * THREADS;
        if c < dim {
            buffer[to + c * buffer.stride(3)] = new[from + c * new.stride(3)];
        }
    }
}

/// [`write_row`] with pair `k` (dimensions `k` and `k + d/2`) turned by the angle whose cosine
/// and sine end `table`.
#[cube]
fn write_turned<F: Float>(new: &Tensor<F>, buffer: &mut Tensor<F>, row: Row, table: &Array<u32>) {
    let half = buffer.shape(3) / 2;
    let (cosines, sines) = (table.len() - 2 * half, table.len() - half);
    let from = offset(new, row.batch, row.kv, 0);
    let to = offset(buffer, row.batch, row.local, row.slot);
    let (step_new, step_buffer) = (new.stride(3), buffer.stride(3));
    for step in 0..half.div_ceil(THREADS) {
        let k = UNIT_POS_X as usize + step * THREADS;
        if k < half {
            let (cos, sin) =
                (f32::reinterpret(table[cosines + k]), f32::reinterpret(table[sines + k]));
            let a = f32::cast_from(new[from + k * step_new]);
            let b = f32::cast_from(new[from + (k + half) * step_new]);
            buffer[to + k * step_buffer] = F::cast_from(a * cos - b * sin);
            buffer[to + (k + half) * step_buffer] = F::cast_from(b * cos + a * sin);
        }
    }
}
