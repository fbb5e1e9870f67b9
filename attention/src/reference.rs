//! The dense reference of the core: materialises the whole `[H, N_q, N_k]` mask from the
//! window spec. O(N²) in time and memory, so it is meant for tests and small checks only.

use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use crate::entry::{Checked, expand_kv};
use crate::relative::pick;
use crate::scores::{Alibi, attend};
use crate::{AttentionError, ScoreOptions, WindowSpec};

/// Dense windowed attention. Shapes as in [`crate::windowed_attention`]:
/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` → `o: [batch, H, N_q, d]`,
/// `lse: [batch, H, N_q]`.
pub fn dense_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    dense_attention_relative(q, k, v, None, spec, opts)
}

/// [`dense_attention`] with relative scores `relative: [batch, H, N_q, L]`, as in
/// [`crate::windowed_attention_relative`].
pub fn dense_attention_relative<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    relative: Option<Tensor<B, 4>>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    let checked = Checked::new(&q, &k, &v, spec, opts)?.relative(relative.as_ref(), spec)?;
    let Checked { heads, q_len, keys, kv_len, .. } = checked;
    let device = q.device();
    let offset = spec.query_offset();
    let distance: Vec<f32> =
        (0..q_len).flat_map(|i| (0..keys).map(move |j| (offset + i) as f32 - j as f32)).collect();
    let relative = relative.map(|table| pick(table, &distance, [1, 1, q_len, keys]));
    let mask = spec.mask(0..heads, offset..offset + q_len, 0..keys, kv_len);
    let mask =
        Tensor::<B, 4, Bool>::from_data(TensorData::new(mask, [1, heads, q_len, keys]), &device);
    let alibi = opts.alibi.as_ref().map(|slopes| Alibi {
        distance: Tensor::from_data(TensorData::new(distance, [1, 1, q_len, keys]), &device),
        slopes: Tensor::from_data(TensorData::new(slopes.clone(), [1, heads, 1, 1]), &device),
    });
    let (k, v) = (expand_kv(k, heads), expand_kv(v, heads));
    Ok(attend(q, k, v, mask, alibi, relative, opts))
}
