//! Longformer's global rows (docs/semantics.md §2): the queries at global positions attend to every key
//! (causally in a decoder) through their own projections `Wq_g, Wk_g, Wv_g`, and replace the
//! local result for those rows. The local rows are one call of the core with the Longformer
//! window spec, whose global keys every query sees.

use burn::tensor::{Bool, Int, Tensor, TensorData, backend::Backend};

use crate::entry::expand_kv;
use crate::scores::attend;
use crate::{ScoreOptions, WindowSpec};

/// Replaces the rows of `local: [batch, H, N, d]` at the spec's global positions with
/// attention of `q_g: [batch, H, N, d]` over `k_g, v_g: [batch, H_kv, N, d]`, every key the
/// spec shows a global query. Returns `[batch, H, N, d]`. O(|G|·N).
pub fn replace_global_rows<B: Backend>(
    local: Tensor<B, 4>,
    q_g: Tensor<B, 4>,
    k_g: Tensor<B, 4>,
    v_g: Tensor<B, 4>,
    spec: &WindowSpec,
) -> Tensor<B, 4> {
    let globals = spec.globals();
    let [_, heads, n, _] = local.dims();
    if globals.is_empty() {
        return local;
    }
    let device = local.device();
    let count = globals.len();
    let positions: Vec<i64> = globals.iter().map(|&g| g as i64).collect();
    let rows = Tensor::<B, 1, Int>::from_data(TensorData::new(positions, [count]), &device);
    let mut mask = Vec::with_capacity(heads * count * n);
    for h in 0..heads {
        for &g in globals {
            mask.extend((0..n).map(|j| spec.visible(h, g, j, n)));
        }
    }
    let mask =
        Tensor::<B, 4, Bool>::from_data(TensorData::new(mask, [1, heads, count, n]), &device);
    let (k_g, v_g) = (expand_kv(k_g, heads), expand_kv(v_g, heads));
    let (global, _) = attend(q_g.select(2, rows), k_g, v_g, mask, None, &ScoreOptions::softmax());
    // Row i reads itself from `local`, or its global row from the appended block.
    let mut index: Vec<i64> = (0..n as i64).collect();
    for (slot, &g) in globals.iter().enumerate() {
        index[g] = (n + slot) as i64;
    }
    let index = Tensor::<B, 1, Int>::from_data(TensorData::new(index, [n]), &device);
    Tensor::cat(vec![local, global], 2).select(2, index)
}
