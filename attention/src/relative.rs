//! Relative scores (docs/semantics.md §4): a score added to each query–key pair by the pair's
//! distance, `s_ij += T[i, i − j]`, from a table `T: [batch, H, N_q, L]` of one row per query
//! and one column per distance `0 … L−1`. Transformer-XL's position terms arrive this way: the
//! layer multiplies its queries by the projected sinusoids once (a matmul, O(N·L·d)), and the
//! core only picks each pair's entry, so every path adds a scalar per score and its backward
//! writes a scalar per score.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use crate::WindowSpec;

/// The distances `0 … L−1` a relative table must cover for `q_len` queries under `spec`: one
/// more than the furthest distance of a key any query can see. Heads with a bounded reach need
/// their reach; unbounded heads, sinks and global positions need every distance back to key 0.
pub fn distances_needed(spec: &WindowSpec, q_len: usize) -> usize {
    let back_to_zero = spec.query_offset() + q_len;
    if spec.sinks() > 0 || !spec.globals().is_empty() {
        return back_to_zero;
    }
    let reach = spec.heads().iter().map(|w| w.reach().unwrap_or(usize::MAX)).max();
    reach.unwrap_or(0).min(back_to_zero)
}

/// Each score's entry of the table: `table: [a, b, rows, L]` and the distance `i − j` of each
/// entry of a `[1, b or 1, rows, cols]` score block (row-major, keys fastest) →
/// `[a, b, rows, cols]`. Distances outside `0 … L−1` belong to hidden entries (a later key, a
/// padding slot) and read the nearest column; the mask discards them, and their gradient is 0.
pub(crate) fn pick<B: Backend>(
    table: Tensor<B, 4>,
    distance: &[f32],
    shape: [usize; 4],
) -> Tensor<B, 4> {
    let [a, b, rows, len] = table.dims();
    let last = len.saturating_sub(1) as f32;
    let columns: Vec<i64> = distance.iter().map(|&d| d.clamp(0.0, last) as i64).collect();
    let index = Tensor::<B, 4, Int>::from_data(TensorData::new(columns, shape), &table.device());
    let [_, _, _, cols] = shape;
    table.gather(3, index.expand([a, b, rows, cols]))
}
