//! The fused append of the bounded caches (docs/semantics.md §7; reference: the ring buffer's
//! tensor ops, `crate::layers::ring`): the new position's key and value rows into one slot of a
//! ring buffer, for the kv heads the buffer holds.

use cubecl::prelude::*;

/// Threads per cube, over the head dim.
pub(crate) const THREADS: usize = 32;

/// `new_keys, new_values: [batch, H_kv, 1, d]` (every kv head) → slot `slot` of `keys, values:
/// [batch, kv_heads.len(), slots, d]`, whose second axis holds the kv heads `kv_heads`. Grid:
/// (the buffer's kv heads, batch).
#[cube(launch)]
pub(crate) fn cache_write_kernel<F: Float>(
    new_keys: &Tensor<F>,
    new_values: &Tensor<F>,
    keys: &mut Tensor<F>,
    values: &mut Tensor<F>,
    kv_heads: &Array<u32>,
    slot: u32,
    #[define(F)] _dtype: StorageType,
) {
    let local = CUBE_POS_X as usize;
    let batch = CUBE_POS_Y as usize;
    let kv = kv_heads[local] as usize;
    let slot = slot as usize;
    let dim = keys.shape(3);
    let from_k = batch * new_keys.stride(0) + kv * new_keys.stride(1);
    let from_v = batch * new_values.stride(0) + kv * new_values.stride(1);
    let to_k = batch * keys.stride(0) + local * keys.stride(1) + slot * keys.stride(2);
    let to_v = batch * values.stride(0) + local * values.stride(1) + slot * values.stride(2);
    for step in 0..dim.div_ceil(THREADS) {
        let c = UNIT_POS_X as usize + step * THREADS;
        if c < dim {
            keys[to_k + c * keys.stride(3)] = new_keys[from_k + c * new_keys.stride(3)];
            values[to_v + c * values.stride(3)] = new_values[from_v + c * new_values.stride(3)];
        }
    }
}
