//! The forward pass: `o` and `lse` (docs/semantics.md §1), FlashAttention-2 style.
//!
//! A tile of query rows (a run of one query list, stacked over its group's heads) keeps its
//! output accumulator and streams the key chunks it can see ([`super::schedule`]). Each chunk is
//! scored ([`super::block`]), then folded in: softmax with a running maximum and sum per row
//! (online softmax: the accumulator is rescaled whenever the maximum grows), sigmoid by plain
//! sums of `σ(s + β)`. Rows that see no key end with `o = 0` and `lse = −∞`.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::block::{Scoring, live};
use super::gather::{GroupInputs, scatter, slab, span_rows};
use super::math::{exp, max, sigmoid, sum};
use super::matmul::{Mat, matmul};
use super::schedule::{CHUNK, Group, Tile, chunks, groups};
use super::{Dims, Relative};
use crate::{AttentionError, ScoreFn, ScoreOptions, WindowSpec};

/// The forward's outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// `o: [batch, H, N_q, d]`.
    pub o: Vec<f32>,
    /// `lse: [batch, H, N_q]`: the softmax log-normaliser, or for sigmoid the log of the total
    /// weight; −∞ for rows that see no key.
    pub lse: Vec<f32>,
}

/// Windowed attention on contiguous f32 buffers laid out as the [module](super) says, with
/// relative scores when given.
pub fn forward(
    [q, k, v]: [&[f32]; 3],
    relative: Option<Relative>,
    dims: Dims,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<Output, AttentionError> {
    let mut buffers = vec![
        ("q elements", q, dims.query_elements()),
        ("k elements", k, dims.key_elements()),
        ("v elements", v, dims.key_elements()),
    ];
    buffers.extend(relative.map(|r| ("relative score elements", r.table, dims.rows() * r.len)));
    let kv_len = dims.check(spec, opts, &buffers)?;
    let plan: Vec<(Group, Vec<Tile>)> = groups(spec, dims.q_len, kv_len)
        .into_iter()
        .map(|group| {
            let tiles = group.query_tiles();
            (group, tiles)
        })
        .collect();
    let mut o = vec![0.0; dims.query_elements()];
    let mut lse = vec![f32::NEG_INFINITY; dims.rows()];
    let (q_slab, k_slab) = (dims.group() * dims.q_len * dims.dim, dims.keys * dims.dim);
    if q_slab == 0 {
        return Ok(Output { o, lse });
    }
    let slabs = o.par_chunks_mut(q_slab).zip(lse.par_chunks_mut(q_slab / dims.dim));
    slabs.enumerate().for_each(|(index, (o, lse))| {
        let kv_head = index % dims.kv_heads;
        for (group, tiles) in plan.iter().filter(|(group, _)| group.kv_head == kv_head) {
            let relative = relative.map(|r| r.slab(index, dims));
            let scoring =
                Scoring { spec, opts, heads: &group.heads, kv_len, dim: dims.dim, relative };
            let slabs = [slab(q, index, q_slab), slab(k, index, k_slab), slab(v, index, k_slab)];
            let inputs = GroupInputs::gather(group, slabs, dims);
            let outputs: Vec<(Vec<f32>, Vec<f32>)> = tiles
                .par_iter()
                .map(|tile| {
                    pulp::Arch::new().dispatch(QueryTile {
                        scoring: &scoring,
                        group,
                        tile,
                        inputs: &inputs,
                    })
                })
                .collect();
            let heads = inputs.slab_heads;
            for (tile, (o_rows, lse_rows)) in tiles.iter().zip(outputs) {
                let queries = &group.queries[tile.own.list].queries[tile.own.range.clone()];
                scatter(o, &heads, dims.q_len, queries, dims.dim, &o_rows);
                scatter(lse, &heads, dims.q_len, queries, 1, &lse_rows);
            }
        }
    });
    Ok(Output { o, lse })
}

/// One tile of the forward, run under pulp's dispatch so that its loops vectorise.
struct QueryTile<'a> {
    scoring: &'a Scoring<'a>,
    group: &'a Group,
    tile: &'a Tile,
    inputs: &'a GroupInputs<'a>,
}

impl WithSimd for QueryTile<'_> {
    type Output = (Vec<f32>, Vec<f32>);

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> Self::Output {
        self.run()
    }
}

impl QueryTile<'_> {
    /// The tile's `o` rows (`[rows, G, d]`) and `lse` rows (`[rows, G]`).
    #[inline(always)]
    fn run(&self) -> (Vec<f32>, Vec<f32>) {
        let (g, d) = (self.group.heads.len(), self.scoring.dim);
        let own = &self.tile.own;
        let m = own.range.len() * g;
        let q = span_rows(&self.inputs.queries, own, g * d);
        let mut acc = vec![0.0f32; m * d];
        let mut running_max = vec![f32::NEG_INFINITY; m];
        let mut total = vec![0.0f32; m];
        let mut s = vec![0.0f32; m * CHUNK];
        for span in chunks(&self.tile.reads, CHUNK) {
            let n = span.range.len();
            let block = self.group.block(own, &span);
            let ranges = self.scoring.ranges(&block);
            let keys = span_rows(&self.inputs.keys, &span, d);
            let s = &mut s[..m * n];
            self.scoring.scores(q, keys, &block, &ranges, s, None);
            for (row, s) in s.chunks_exact_mut(n).enumerate() {
                let s = live(s, ranges[row]);
                match self.scoring.opts.score_fn {
                    ScoreFn::Softmax => {
                        let new_max = running_max[row].max(max(s));
                        if new_max == f32::NEG_INFINITY {
                            // No key seen yet: every weight is 0.
                            s.fill(0.0);
                            continue;
                        }
                        let rescale = exp(running_max[row] - new_max);
                        if rescale != 1.0 {
                            acc[row * d..(row + 1) * d].iter_mut().for_each(|a| *a *= rescale);
                            total[row] *= rescale;
                        }
                        running_max[row] = new_max;
                        s.iter_mut().for_each(|x| *x = exp(*x - new_max));
                    }
                    ScoreFn::Sigmoid { beta } => s.iter_mut().for_each(|x| {
                        *x = if *x == f32::NEG_INFINITY { 0.0 } else { sigmoid(*x + beta) }
                    }),
                }
                total[row] += sum(s);
            }
            let values = Mat::new(span_rows(&self.inputs.values, &span, d), n, d);
            matmul(&mut acc, Mat::new(s, m, n), values, 1.0, true);
        }
        let softmax = self.scoring.opts.score_fn == ScoreFn::Softmax;
        let mut lse = vec![f32::NEG_INFINITY; m];
        for (row, o) in acc.chunks_exact_mut(d).enumerate() {
            if total[row] > 0.0 {
                lse[row] = total[row].ln() + if softmax { running_max[row] } else { 0.0 };
                let norm = if softmax { 1.0 / total[row] } else { 1.0 };
                o.iter_mut().for_each(|x| *x *= norm);
            } else {
                o.fill(0.0);
            }
        }
        (acc, lse)
    }
}
