//! The backward pass: exact `dq`, `dk`, `dv` from `∂L/∂o` and `∂L/∂lse` (docs/semantics.md §1),
//! FlashAttention-2 style, with the weights recomputed from `lse`.
//!
//! Writing `dP_ij = dO_i·v_j` and `c_i` for a row coefficient, both score functions give
//! `∂L/∂s_ij = gate_ij·(dP_ij + c_i)`, as the CubeCL backward kernels compute it:
//! - softmax, `p = exp(s − lse)`, gate `p`: `c_i = ∂L/∂lse_i − Σ_d dO_i∘O_i`;
//! - sigmoid, `w = σ(s + β)`, gate `w·(1 − w)`: `lse = ln Σ_j w_ij` adds
//!   `∂L/∂lse_i·exp(−lse_i)`, so `c_i` is that, and 0 for rows with `lse = −∞`.
//!
//! Then `dq_i = scale·Σ_j ∂L/∂s_ij·chain_ij·k_j` (`chain = 1 − tanh²` under a softcap, else 1),
//! `dk_j = scale·Σ_i ∂L/∂s_ij·chain_ij·q_i` and `dv_j = Σ_i weight_ij·dO_i`. Two passes own their
//! outputs, so no two threads write one row: the dQ pass over the forward's query tiles, the
//! dK/dV pass over key tiles, each reading the query runs that can see its keys. A group's tiles
//! stack all its heads, so a key tile sums over every query head of its kv head that shares
//! its window; heads with other windows add theirs in their own group.

use std::borrow::Cow;

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::block::{ScoreBlock, Scoring, live};
use super::gather::{GroupInputs, add, query_lists, scatter, slab, span_rows};
use super::math::{dot, exp, sigmoid};
use super::matmul::{Mat, matmul};
use super::schedule::{CHUNK, Group, Span, Tile, chunks, groups};
use super::{Dims, Relative};
use crate::{AttentionError, ScoreFn, ScoreOptions, WindowSpec};

/// What the backward reads: the forward's inputs and outputs, and the gradients of the outputs,
/// each laid out as the [module](super) says.
#[derive(Clone, Copy, Debug)]
pub struct BackwardInputs<'a> {
    /// Queries `[batch, H, N_q, d]`.
    pub q: &'a [f32],
    /// Keys `[batch, H_kv, N_k, d]`.
    pub k: &'a [f32],
    /// Values `[batch, H_kv, N_k, d]`.
    pub v: &'a [f32],
    /// The forward's `o: [batch, H, N_q, d]`.
    pub o: &'a [f32],
    /// The forward's `lse: [batch, H, N_q]`.
    pub lse: &'a [f32],
    /// `∂L/∂o: [batch, H, N_q, d]`.
    pub d_o: &'a [f32],
    /// `∂L/∂lse: [batch, H, N_q]`, or `None` when the loss does not use `lse`.
    pub d_lse: Option<&'a [f32]>,
    /// The relative scores `[batch, H, N_q, L]`, when the call has them.
    pub relative: Option<Relative<'a>>,
}

/// The gradients of the inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients {
    /// `dq: [batch, H, N_q, d]`.
    pub dq: Vec<f32>,
    /// `dk: [batch, H_kv, N_k, d]`, 0 for padded keys.
    pub dk: Vec<f32>,
    /// `dv: [batch, H_kv, N_k, d]`, 0 for padded keys.
    pub dv: Vec<f32>,
    /// The relative scores' gradient `[batch, H, N_q, L]` when the call has them: each entry
    /// `∂L/∂s` of the pair at its distance, 0 where no visible key sits.
    pub d_relative: Option<Vec<f32>>,
}

/// The exact gradients of windowed attention on contiguous f32 buffers.
pub fn backward(
    inputs: &BackwardInputs,
    dims: Dims,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<Gradients, AttentionError> {
    let (queries, keys, rows) = (dims.query_elements(), dims.key_elements(), dims.rows());
    let mut buffers = vec![
        ("q elements", inputs.q, queries),
        ("k elements", inputs.k, keys),
        ("v elements", inputs.v, keys),
        ("o elements", inputs.o, queries),
        ("lse elements", inputs.lse, rows),
        ("dO elements", inputs.d_o, queries),
    ];
    buffers.extend(inputs.d_lse.map(|d_lse| ("dlse elements", d_lse, rows)));
    let relative = inputs.relative;
    buffers.extend(relative.map(|r| ("relative score elements", r.table, rows * r.len)));
    let kv_len = dims.check(spec, opts, &buffers)?;
    let coefficients = row_coefficients(inputs, dims.dim, opts.score_fn);
    let plan: Vec<(Group, Vec<Tile>, Vec<Tile>)> = groups(spec, dims.q_len, kv_len)
        .into_iter()
        .map(|group| {
            let (query_tiles, key_tiles) = (group.query_tiles(), group.key_tiles());
            (group, query_tiles, key_tiles)
        })
        .collect();
    let (mut dq, mut dk, mut dv) = (vec![0.0; queries], vec![0.0; keys], vec![0.0; keys]);
    // Without relative scores, one unused float per slab keeps the slabs zipped.
    let len = relative.map_or(1, |r| r.len.max(1));
    let mut d_relative = vec![0.0; dims.batch * dims.kv_heads * dims.group() * dims.q_len * len];
    let (q_slab, k_slab) = (dims.group() * dims.q_len * dims.dim, dims.keys * dims.dim);
    let r_slab = dims.group() * dims.q_len * len;
    if q_slab == 0 || k_slab == 0 {
        return Ok(Gradients { dq, dk, dv, d_relative: relative.map(|_| d_relative) });
    }
    let slabs = dq.par_chunks_mut(q_slab).zip(dk.par_chunks_mut(k_slab));
    let slabs = slabs.zip(dv.par_chunks_mut(k_slab));
    let slabs = slabs.zip(d_relative.par_chunks_mut(r_slab));
    slabs.enumerate().for_each(|(index, (((dq, dk), dv), d_rel))| {
        let kv_head = index % dims.kv_heads;
        for (group, query_tiles, key_tiles) in plan.iter().filter(|(g, ..)| g.kv_head == kv_head) {
            let relative = relative.map(|r| r.slab(index, dims));
            let scoring =
                Scoring { spec, opts, heads: &group.heads, kv_len, dim: dims.dim, relative };
            let slabs = [
                slab(inputs.q, index, q_slab),
                slab(inputs.k, index, k_slab),
                slab(inputs.v, index, k_slab),
            ];
            let base = GroupInputs::gather(group, slabs, dims);
            let heads = &base.slab_heads;
            let rows = |buffer, width| {
                let len = dims.group() * dims.q_len * width;
                query_lists(group, heads, slab(buffer, index, len), dims.q_len, width)
            };
            let group_inputs = Inputs {
                grads: rows(inputs.d_o, dims.dim),
                lse: rows(inputs.lse, 1),
                coefficients: rows(&coefficients, 1),
                base: &base,
            };
            let pass = |tile| Pass { scoring: &scoring, group, inputs: &group_inputs, tile };
            let dq_rows: Vec<(Vec<f32>, Vec<f32>)> = query_tiles
                .par_iter()
                .map(|tile| pulp::Arch::new().dispatch(QueryGrads(pass(tile))))
                .collect();
            for (tile, (rows, relative_rows)) in query_tiles.iter().zip(dq_rows) {
                let queries = &group.queries[tile.own.list].queries[tile.own.range.clone()];
                scatter(dq, heads, dims.q_len, queries, dims.dim, &rows);
                if relative.is_some() {
                    scatter(d_rel, heads, dims.q_len, queries, len, &relative_rows);
                }
            }
            let dkv_rows: Vec<(Vec<f32>, Vec<f32>)> = key_tiles
                .par_iter()
                .map(|tile| pulp::Arch::new().dispatch(KeyGrads(pass(tile))))
                .collect();
            for (tile, (dk_rows, dv_rows)) in key_tiles.iter().zip(dkv_rows) {
                let keys = &group.keys[tile.own.list][tile.own.range.clone()];
                add(dk, keys, dims.dim, &dk_rows);
                add(dv, keys, dims.dim, &dv_rows);
            }
        }
    });
    Ok(Gradients { dq, dk, dv, d_relative: relative.map(|_| d_relative) })
}

/// The row coefficient `c_i` of every query row, `[batch, H, N_q]` (see the module docs).
fn row_coefficients(inputs: &BackwardInputs, dim: usize, score_fn: ScoreFn) -> Vec<f32> {
    let o_rows = inputs.o.par_chunks_exact(dim).zip(inputs.d_o.par_chunks_exact(dim));
    o_rows
        .zip(inputs.lse)
        .enumerate()
        .map(|(row, ((o, d_o), &lse))| {
            let d_lse = inputs.d_lse.map_or(0.0, |d_lse| d_lse[row]);
            match score_fn {
                ScoreFn::Softmax => d_lse - dot(o, d_o),
                ScoreFn::Sigmoid { .. } if lse == f32::NEG_INFINITY => 0.0,
                ScoreFn::Sigmoid { .. } => d_lse * (-lse).exp(),
            }
        })
        .collect()
}

/// A group's lists gathered from one (batch, kv head) slab, for the backward.
struct Inputs<'a> {
    /// Queries, keys and values.
    base: &'a GroupInputs<'a>,
    /// Per query list, `∂L/∂o` as `[rows, G, d]`.
    grads: Vec<Cow<'a, [f32]>>,
    /// Per query list, `lse` as `[rows, G]`.
    lse: Vec<Cow<'a, [f32]>>,
    /// Per query list, the row coefficients as `[rows, G]`.
    coefficients: Vec<Cow<'a, [f32]>>,
}

/// One tile of either pass.
struct Pass<'a> {
    scoring: &'a Scoring<'a>,
    group: &'a Group,
    inputs: &'a Inputs<'a>,
    tile: &'a Tile,
}

/// The weights and score gradients of one block, `rows × keys` each.
struct PairGrads {
    /// `p` (softmax) or `w` (sigmoid), 0 where not visible.
    weights: Vec<f32>,
    /// `scale·∂L/∂s·chain`: the factor of `k` in `dq` and of `q` in `dk`.
    scores: Vec<f32>,
}

/// A tile's relative-score gradient rows, `[rows, G, L]`, which the dQ pass fills.
struct RelativeRows<'a> {
    rows: &'a mut [f32],
    len: usize,
}

impl Pass<'_> {
    /// The weights and score gradients of the block pairing query run `queries` with key run
    /// `keys`, recomputed from the inputs, on the rows' live ranges (0 elsewhere). With
    /// `relative`, each visible pair's `∂L/∂s` is added to its row's entry at its distance.
    #[inline(always)]
    fn pair_grads(
        &self,
        queries: &Span,
        keys: &Span,
        mut relative: Option<RelativeRows>,
    ) -> PairGrads {
        let (g, d) = (self.group.heads.len(), self.scoring.dim);
        let block: ScoreBlock = self.group.block(queries, keys);
        let (m, n) = (block.rows(g), keys.range.len());
        let inputs = self.inputs;
        let q = span_rows(&inputs.base.queries, queries, g * d);
        let d_o = span_rows(&inputs.grads, queries, g * d);
        let lse = span_rows(&inputs.lse, queries, g);
        let coefficients = span_rows(&inputs.coefficients, queries, g);
        let (k, v) =
            (span_rows(&inputs.base.keys, keys, d), span_rows(&inputs.base.values, keys, d));
        let ranges = self.scoring.ranges(&block);
        let softcap = self.scoring.opts.softcap.is_some();
        let mut weights = vec![0.0f32; m * n];
        let mut chain = vec![0.0f32; if softcap { m * n } else { 0 }];
        self.scoring.scores(q, k, &block, &ranges, &mut weights, Some(&mut chain));
        let mut scores = vec![0.0f32; m * n];
        matmul(&mut scores, Mat::new(d_o, m, d), Mat::new(v, n, d).t(), 1.0, false);
        let scale = self.scoring.opts.scale_for(d);
        let rows = weights.chunks_exact_mut(n).zip(scores.chunks_exact_mut(n));
        for (row, (w, ds)) in rows.enumerate() {
            let (lse, c) = (lse[row], coefficients[row]);
            let (w, ds) = (live(w, ranges[row]), live(ds, ranges[row]));
            match self.scoring.opts.score_fn {
                ScoreFn::Softmax if lse == f32::NEG_INFINITY => {
                    // The row sees no key: no weight, no gradient.
                    w.fill(0.0);
                    ds.fill(0.0);
                }
                ScoreFn::Softmax => w.iter_mut().zip(ds.iter_mut()).for_each(|(w, ds)| {
                    *w = exp(*w - lse);
                    *ds = *w * (*ds + c);
                }),
                ScoreFn::Sigmoid { beta } => w.iter_mut().zip(ds.iter_mut()).for_each(|(w, ds)| {
                    *w = if *w == f32::NEG_INFINITY { 0.0 } else { sigmoid(*w + beta) };
                    *ds = *w * (1.0 - *w) * (*ds + c);
                }),
            }
            // `ds` is `∂L/∂s` here: the relative entry's gradient, before the scale and chain.
            if let Some(relative) = relative.as_mut() {
                let p = self.scoring.spec.query_offset() + block.queries[row / g];
                let entries = &mut relative.rows[row * relative.len..(row + 1) * relative.len];
                let (start, _) = ranges[row];
                for (col, &d) in ds.iter().enumerate() {
                    let j = block.keys[start + col];
                    if let Some(entry) = p.checked_sub(j).and_then(|at| entries.get_mut(at)) {
                        *entry += d;
                    }
                }
            }
            match softcap {
                true => {
                    let chain = &chain[row * n + ranges[row].0..row * n + ranges[row].1];
                    ds.iter_mut().zip(chain).for_each(|(ds, c)| *ds *= scale * c);
                }
                false => ds.iter_mut().for_each(|ds| *ds *= scale),
            }
        }
        PairGrads { weights, scores }
    }
}

/// A tile of the dQ pass, run under pulp's dispatch so that its loops vectorise: returns its
/// `dq` rows, `[rows, G, d]`, and with relative scores their gradient rows, `[rows, G, L]`.
struct QueryGrads<'a>(Pass<'a>);

impl WithSimd for QueryGrads<'_> {
    type Output = (Vec<f32>, Vec<f32>);

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> (Vec<f32>, Vec<f32>) {
        let pass = &self.0;
        let (own, d) = (&pass.tile.own, pass.scoring.dim);
        let rows = own.range.len() * pass.group.heads.len();
        let mut dq = vec![0.0f32; rows * d];
        let len = pass.scoring.relative.map_or(0, |r| r.len);
        let mut d_relative = vec![0.0f32; rows * len];
        for span in chunks(&pass.tile.reads, CHUNK) {
            let relative = (len > 0).then(|| RelativeRows { rows: &mut d_relative, len });
            let grads = pass.pair_grads(own, &span, relative);
            let keys = Mat::new(span_rows(&pass.inputs.base.keys, &span, d), span.range.len(), d);
            let scores = Mat::new(&grads.scores, dq.len() / d, span.range.len());
            matmul(&mut dq, scores, keys, 1.0, true);
        }
        (dq, d_relative)
    }
}

/// A tile of the dK/dV pass, run under pulp's dispatch so that its loops vectorise: returns its
/// `dk` and `dv` rows, `[keys, d]` each.
struct KeyGrads<'a>(Pass<'a>);

impl WithSimd for KeyGrads<'_> {
    type Output = (Vec<f32>, Vec<f32>);

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> Self::Output {
        let pass = &self.0;
        let (own, g, d) = (&pass.tile.own, pass.group.heads.len(), pass.scoring.dim);
        let n = own.range.len();
        let (mut dk, mut dv) = (vec![0.0f32; n * d], vec![0.0f32; n * d]);
        for span in chunks(&pass.tile.reads, (CHUNK / g).max(1)) {
            let grads = pass.pair_grads(&span, own, None);
            let m = span.range.len() * g;
            let q = span_rows(&pass.inputs.base.queries, &span, g * d);
            let d_o = span_rows(&pass.inputs.grads, &span, g * d);
            matmul(&mut dv, Mat::new(&grads.weights, m, n).t(), Mat::new(d_o, m, d), 1.0, true);
            matmul(&mut dk, Mat::new(&grads.scores, m, n).t(), Mat::new(q, m, d), 1.0, true);
        }
        (dk, dv)
    }
}
