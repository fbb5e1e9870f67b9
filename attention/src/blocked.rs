//! The blocked O(N·w) path of the core: tensor ops only, so it runs and differentiates on every
//! Burn backend. The schedule comes from `crate::plan`; this file gathers each block's queries
//! and keys, attends with the shared score code, and scatters the rows back in place.

use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use crate::entry::{Checked, expand_kv};
use crate::index::{index_tensor, inverse_permutation};
use crate::plan::{BlockSet, GroupPlan, head_groups, plan_group};
use crate::relative::pick;
use crate::scores::{Alibi, attend};
use crate::{AttentionError, ScoreOptions, WindowSpec};

/// Blocked windowed attention. Shapes as in [`crate::windowed_attention`]:
/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` → `o: [batch, H, N_q, d]`,
/// `lse: [batch, H, N_q]`. Time and memory are O(N·w) for windows of w keys.
pub fn blocked_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    blocked_attention_chunked(q, k, v, spec, opts, MAX_CHUNK_SCORES)
}

/// [`blocked_attention`] holding at most `chunk_scores` scores at once (at least one block).
/// Smaller chunks lower peak memory; the result is the same.
pub fn blocked_attention_chunked<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
    chunk_scores: usize,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    blocked_attention_relative(q, k, v, None, spec, opts, chunk_scores)
}

/// [`blocked_attention_chunked`] with relative scores `relative: [batch, H, N_q, L]`, as in
/// [`crate::windowed_attention_relative`].
pub fn blocked_attention_relative<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    relative: Option<Tensor<B, 4>>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
    chunk_scores: usize,
) -> Result<(Tensor<B, 4>, Tensor<B, 3>), AttentionError> {
    let checked = Checked::new(&q, &k, &v, spec, opts)?.relative(relative.as_ref(), spec)?;
    let Checked { heads, q_len, kv_len, .. } = checked;
    let (k, v) = (expand_kv(k, heads), expand_kv(v, heads));
    let groups = head_groups(spec);
    let distance = opts.alibi.is_some() || relative.is_some();
    let inputs = |q, k, v, relative| Inputs { q, k, v, relative, opts, chunk_scores };
    if groups.len() == 1 {
        let plan = plan_group(spec, 0, q_len, kv_len, distance);
        return Ok(attend_group(inputs(q, k, v, relative), &plan, &groups[0]));
    }
    let (mut outs, mut lses, mut order) = (Vec::new(), Vec::new(), Vec::new());
    for group in &groups {
        let plan = plan_group(spec, group[0], q_len, kv_len, distance);
        let index = index_tensor::<B>(group.iter().copied(), &q.device());
        let of_group = |t: &Tensor<B, 4>| t.clone().select(1, index.clone());
        let group_inputs =
            inputs(of_group(&q), of_group(&k), of_group(&v), relative.as_ref().map(of_group));
        let (o, lse) = attend_group(group_inputs, &plan, group);
        outs.push(o);
        lses.push(lse);
        order.extend(group.iter().copied());
    }
    let inverse =
        index_tensor::<B>(inverse_permutation(heads, order.into_iter().map(Some)), &q.device());
    let out = Tensor::cat(outs, 1).select(1, inverse.clone());
    let lse = Tensor::cat(lses, 1).select(1, inverse);
    Ok((out, lse))
}

/// One group's tensors (`q, k, v: [batch, H_g, N, d]`, kv already expanded; the relative
/// table `[batch, H_g, N_q, L]`) and how to attend them.
#[derive(Clone)]
struct Inputs<'a, B: Backend> {
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    relative: Option<Tensor<B, 4>>,
    opts: &'a ScoreOptions,
    chunk_scores: usize,
}

/// Runs one group's block sets on its heads and puts every query row back at its position.
fn attend_group<B: Backend>(
    inputs: Inputs<'_, B>,
    plan: &GroupPlan,
    heads: &[usize],
) -> (Tensor<B, 4>, Tensor<B, 3>) {
    let device = inputs.q.device();
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for set in &plan.sets {
        let (o, lse) = attend_set(inputs.clone(), set, heads);
        outs.push(o);
        lses.push(lse);
    }
    let inverse = index_tensor::<B>(plan.inverse.iter().copied(), &device);
    let out = Tensor::cat(outs, 2).select(2, inverse.clone());
    let lse = Tensor::cat(lses, 2).select(2, inverse);
    (out, lse)
}

/// Most scores one chunk of blocks holds at once by default (64 MiB in f32, a few times that
/// in temporaries): long sequences are processed chunk by chunk, so the working set, and with
/// it the time per block, stays the same as N grows.
pub const MAX_CHUNK_SCORES: usize = 1 << 24;

/// Attends the slots of one block set. Returns `o: [batch, H_g, slots, d]` and
/// `lse: [batch, H_g, slots]`, slots in the set's row order.
fn attend_set<B: Backend>(
    inputs: Inputs<'_, B>,
    set: &BlockSet,
    heads: &[usize],
) -> (Tensor<B, 4>, Tensor<B, 3>) {
    let [batch, group, _, _] = inputs.q.dims();
    let per_block = (batch * group * set.block_rows * set.block_cols).max(1);
    let chunk = (inputs.chunk_scores / per_block).max(1);
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for first in (0..set.blocks).step_by(chunk) {
        let blocks = first..(first + chunk).min(set.blocks);
        let (o, lse) = attend_blocks(inputs.clone(), set, blocks, heads);
        outs.push(o);
        lses.push(lse);
    }
    if outs.len() == 1 {
        return (outs.remove(0), lses.remove(0));
    }
    (Tensor::cat(outs, 2), Tensor::cat(lses, 2))
}

/// Attends the blocks `range` of one set: `o: [batch, H_g, slots, d]`, `lse: [batch, H_g, slots]`
/// for the slots of those blocks.
fn attend_blocks<B: Backend>(
    inputs: Inputs<'_, B>,
    set: &BlockSet,
    range: std::ops::Range<usize>,
    heads: &[usize],
) -> (Tensor<B, 4>, Tensor<B, 3>) {
    let Inputs { q, k, v, relative, opts, .. } = inputs;
    let [batch, group, _, dim] = q.dims();
    let device = q.device();
    let (blocks, rows, cols) = (range.len(), set.block_rows, set.block_cols);
    let slots = blocks * rows;
    if cols == 0 {
        let lse = Tensor::full([batch, group, slots], f32::NEG_INFINITY, &device);
        return (Tensor::zeros([batch, group, slots, dim], &device), lse);
    }
    let (row_slots, col_slots) =
        (range.start * rows..range.end * rows, range.start * cols..range.end * cols);
    let entries = range.start * rows * cols..range.end * rows * cols;
    let row_index = index_tensor::<B>(BlockSet::gather(&set.rows[row_slots]), &device);
    let col_index = index_tensor::<B>(BlockSet::gather(&set.cols[col_slots]), &device);
    let relative = relative.map(|table| {
        let len = table.dims()[3];
        let table = table.select(2, row_index.clone()).reshape([batch * group, blocks, rows, len]);
        let distance = set.distance.as_ref().expect("planned with distances");
        pick(table, &distance[entries.clone()], [1, blocks, rows, cols])
    });
    let q = q.select(2, row_index).reshape([batch * group, blocks, rows, dim]);
    let k = k.select(2, col_index.clone()).reshape([batch * group, blocks, cols, dim]);
    let v = v.select(2, col_index).reshape([batch * group, blocks, cols, dim]);
    let shape = [1, blocks, rows, cols];
    let mask = set.mask[entries.clone()].to_vec();
    let mask = Tensor::<B, 4, Bool>::from_data(TensorData::new(mask, shape), &device);
    let alibi = opts.alibi.as_ref().zip(set.distance.as_ref()).map(|(slopes, distance)| {
        let per_row: Vec<f32> = (0..batch).flat_map(|_| heads.iter().map(|&h| slopes[h])).collect();
        let distance = distance[entries].to_vec();
        Alibi {
            distance: Tensor::from_data(TensorData::new(distance, shape), &device),
            slopes: Tensor::from_data(TensorData::new(per_row, [batch * group, 1, 1, 1]), &device),
        }
    });
    let (out, lse) = attend(q, k, v, mask, alibi, relative, opts);
    (out.reshape([batch, group, slots, dim]), lse.reshape([batch, group, slots]))
}

/// How many scores the blocked path computes per batch element for `q_len` queries and
/// `kv_len` keys: over the head groups, heads × blocks × rows × columns. The dense path
/// computes `H · N_q · N_k`; this is O(N·w).
pub fn scheduled_scores(spec: &WindowSpec, q_len: usize, kv_len: usize) -> usize {
    head_groups(spec)
        .iter()
        .map(|group| {
            let plan = plan_group(spec, group[0], q_len, kv_len, false);
            let per_head: usize =
                plan.sets.iter().map(|s| s.blocks * s.block_rows * s.block_cols).sum();
            group.len() * per_head
        })
        .sum()
}
