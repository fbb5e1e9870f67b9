//! One block of scores (docs/semantics.md §1, §4): the same scores as `crate::scores::attend`,
//! `s = c·tanh(scale·q·k / c) − m_h·(i − j) + T[i, i − j]`, with −∞ where the pair is not
//! visible.
//!
//! A block pairs consecutive rows of one query list, each repeated for every head of the group
//! (row `r·G + g` is query `r` of the group's head `g`), with consecutive keys of one key list.
//! Each row has a live range of columns: for a class row, the keys of its window interval
//! ([`super::schedule`]), otherwise every column. The product `q·kᵀ` fills the whole block;
//! everything after it works on the live ranges only, and the passes give the columns outside
//! them weight 0.

use super::matmul::{Mat, matmul};
use crate::{ScoreOptions, WindowSpec};

/// Zeroes `row` outside its live range `start..end` and returns the live part.
#[inline(always)]
pub(crate) fn live(row: &mut [f32], (start, end): (usize, usize)) -> &mut [f32] {
    let (head, rest) = row.split_at_mut(start);
    let (live, tail) = rest.split_at_mut(end - start);
    head.fill(0.0);
    tail.fill(0.0);
    live
}

/// The rows and columns of one block.
pub(crate) struct ScoreBlock<'a> {
    /// Query index of each row (each stands for `G` rows, one per head of the group).
    pub queries: &'a [usize],
    /// For class rows, the key-list indices each row sees ([`super::schedule::QueryList`]); `None`
    /// to decide every pair with [`WindowSpec::visible`].
    pub intervals: Option<&'a [(usize, usize)]>,
    /// Position of each column's key.
    pub keys: &'a [usize],
    /// Index of the first column's key in its key list.
    pub first_key: usize,
}

impl ScoreBlock<'_> {
    /// Rows of the block: queries × heads.
    pub fn rows(&self, heads: usize) -> usize {
        self.queries.len() * heads
    }
}

/// What scoring a block needs besides the block: the call's spec and options, and the group.
pub(crate) struct Scoring<'a> {
    /// The call's window spec.
    pub spec: &'a WindowSpec,
    /// The call's score options.
    pub opts: &'a ScoreOptions,
    /// The group's heads.
    pub heads: &'a [usize],
    /// Valid keys.
    pub kv_len: usize,
    /// Head dimension.
    pub dim: usize,
    /// The slab's relative scores, when the call has them.
    pub relative: Option<RelativeSlab<'a>>,
}

/// One (batch, kv head) slab of a relative-score table (docs/semantics.md §4): `[G_kv, N_q, len]`
/// for the query heads that share the kv head.
#[derive(Clone, Copy)]
pub(crate) struct RelativeSlab<'a> {
    /// The slab's rows.
    pub rows: &'a [f32],
    /// Distances per row.
    pub len: usize,
    /// Query rows per head.
    pub q_len: usize,
    /// Query heads per kv head.
    pub group: usize,
}

impl RelativeSlab<'_> {
    /// The position of head `h`'s row for query `query` in the slab, in rows.
    pub fn row(&self, h: usize, query: usize) -> usize {
        (h % self.group) * self.q_len + query
    }

    /// The entries of head `h` and query `query`, one per distance.
    pub fn entries(&self, h: usize, query: usize) -> &[f32] {
        let at = self.row(h, query) * self.len;
        &self.rows[at..at + self.len]
    }
}

impl Scoring<'_> {
    /// The live range of each row of `block` (`rows` entries, repeated over the heads), as
    /// column indices of the block.
    pub fn ranges(&self, block: &ScoreBlock) -> Vec<(usize, usize)> {
        let (g, n, first) = (self.heads.len(), block.keys.len(), block.first_key);
        let clamp = |i: usize| i.clamp(first, first + n) - first;
        let range = |r: usize| match block.intervals {
            Some(intervals) => {
                (clamp(intervals[r].0), clamp(intervals[r].1).max(clamp(intervals[r].0)))
            }
            None => (0, n),
        };
        (0..block.rows(g)).map(|row| range(row / g)).collect()
    }

    /// Fills `s` (`rows × keys`, row-major) with the scores of `block` from its query rows `q`
    /// (`rows × d`) and key rows `k` (`keys × d`). Within the live ranges `ranges` they are
    /// final, −∞ where a pair is not visible, and with a softcap `chain` (same shape), when
    /// given, receives `∂s/∂(scale·q·k) = 1 − tanh²` there; outside they are raw products.
    #[inline(always)]
    pub fn scores(
        &self,
        q: &[f32],
        k: &[f32],
        block: &ScoreBlock,
        ranges: &[(usize, usize)],
        s: &mut [f32],
        mut chain: Option<&mut [f32]>,
    ) {
        let (g, n) = (self.heads.len(), block.keys.len());
        let (m, d) = (block.rows(g), self.dim);
        let scale = self.opts.scale_for(d);
        matmul(s, Mat::new(q, m, d), Mat::new(k, n, d).t(), scale, false);
        let offset = self.spec.query_offset();
        for (row, &(start, end)) in ranges.iter().enumerate() {
            let (r, h) = (row / g, self.heads[row % g]);
            let p = offset + block.queries[r];
            let (s, keys) = (&mut s[row * n + start..row * n + end], &block.keys[start..end]);
            if let Some(cap) = self.opts.softcap {
                for (col, x) in s.iter_mut().enumerate() {
                    let t = (*x / cap).tanh();
                    *x = cap * t;
                    if let Some(chain) = chain.as_deref_mut() {
                        chain[row * n + start + col] = 1.0 - t * t;
                    }
                }
            }
            if let Some(slopes) = &self.opts.alibi {
                let (slope, p) = (slopes[h], p as f32);
                // Positions below 2²⁴ convert exactly, as the reference's do.
                for (x, &j) in s.iter_mut().zip(keys) {
                    *x -= slope * (p - j as f32);
                }
            }
            if let Some(relative) = &self.relative {
                // Keys past the query or the table are never visible (the table covers every
                // visible distance): their scores are masked, or outside the live range.
                let entries = relative.entries(h, block.queries[r]);
                for (x, &j) in s.iter_mut().zip(keys) {
                    if let Some(&t) = p.checked_sub(j).and_then(|distance| entries.get(distance)) {
                        *x += t;
                    }
                }
            }
            if block.intervals.is_none() {
                for (x, &j) in s.iter_mut().zip(keys) {
                    if !self.spec.visible(h, p, j, self.kv_len) {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}
