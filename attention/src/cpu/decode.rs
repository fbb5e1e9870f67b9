//! The fused decode step (docs/semantics.md §7): one query per head against a layer's bounded
//! cache, in one pass over the cache's ring buffers.
//!
//! The cache keeps one buffer per group of kv heads that share a reach
//! (`swa_models::layers::cache`), so each head reads only its own buffer's slots: an MSWA head with
//! a window of `w/4` reads `w/4` keys, where the tensor path pays a chain of small ops per buffer.
//! Which slot a head sees is asked of [`WindowSpec::visible`] at the slot's position; scores are
//! those of `crate::scores::attend` (scale, softcap, ALiBi, softmax or sigmoid with β), and the
//! branches of a LongNet layer are mixed by their log-normalisers as
//! `swa_models::layers::longnet::mix_branches` mixes them (docs/semantics.md §5). [`write_slot`] is
//! the fused append that keeps those buffers: the new position into every buffer's slot at once.

use std::borrow::Cow;

use rayon::prelude::*;

use super::math::{dot, exp, max, sigmoid, sum};
use super::rope::turned;
use crate::decode::DecodeStep;
use crate::{ScoreFn, WindowSpec};

/// One ring buffer of a layer's cache, as contiguous f32 slices.
#[derive(Clone, Copy, Debug)]
pub struct DecodeBuffer<'a> {
    /// Keys `[batch, kv_heads.len(), slots, d]`, rotated at their absolute positions.
    pub keys: &'a [f32],
    /// Values, shaped as `keys`.
    pub values: &'a [f32],
    /// The kv heads held, in the order of the buffer's second axis.
    pub kv_heads: &'a [usize],
    /// The position each slot holds.
    pub positions: &'a [usize],
}

/// `o: [batch, H, d]` for the queries `q: [batch, H, d]`, turned by `step.rope` if given, each
/// head against the slots of the buffer that holds its kv head. Rows that see no key get 0.
pub fn decode(
    q: &[f32],
    buffers: &[DecodeBuffer],
    batch: usize,
    dim: usize,
    step: &DecodeStep,
) -> Vec<f32> {
    let heads = step.specs.first().map_or(0, WindowSpec::num_heads);
    let group = heads / step.specs.first().map_or(1, WindowSpec::kv_heads);
    // Where each kv head lives: (buffer, index within the buffer).
    let mut home = vec![(0, 0); heads / group.max(1)];
    for (b, buffer) in buffers.iter().enumerate() {
        for (local, &kv) in buffer.kv_heads.iter().enumerate() {
            home[kv] = (b, local);
        }
    }
    let mut out = vec![0.0; batch * heads * dim];
    if dim == 0 {
        return out;
    }
    let q = turned(Cow::Borrowed(q), step.rope);
    let attend_row = |(row, o): (usize, &mut [f32])| {
        let (b, h) = (row / heads, row % heads);
        let (index, local) = home[h / group];
        let buffer = &buffers[index];
        let slab = (b * buffer.kv_heads.len() + local) * buffer.positions.len() * dim;
        let len = buffer.positions.len() * dim;
        let keys = &buffer.keys[slab..slab + len];
        let values = &buffer.values[slab..slab + len];
        let head = Head { q: &q[row * dim..(row + 1) * dim], keys, values, buffer, h, dim };
        head.attend(step, o);
    };
    // Cached floats read in all; below `PARALLEL_FLOATS`, rayon's fork and join would cost more
    // than the rows they spread.
    let floats: usize = buffers.iter().map(|b| 2 * b.keys.len()).sum();
    if floats < PARALLEL_FLOATS {
        out.chunks_mut(dim).enumerate().for_each(attend_row);
    } else {
        out.par_chunks_mut(dim).enumerate().for_each(attend_row);
    }
    out
}

/// Writes the new position's rows, `new: [batch, H_kv, d]` (every kv head), into slot `slot`
/// of one ring buffer, `buffer: [batch, kv_heads.len(), slots, d]`, for the kv heads it holds:
/// the fused append of the bounded caches (`crate::decode::CacheWrite`).
pub fn write_slot(
    buffer: &mut [f32],
    new: &[f32],
    kv_heads: &[usize],
    slot: usize,
    batch: usize,
    dim: usize,
) {
    let all = new.len() / (batch * dim).max(1);
    let slab = buffer.len() / (batch * kv_heads.len()).max(1);
    for b in 0..batch {
        for (local, &kv) in kv_heads.iter().enumerate() {
            let from = (b * all + kv) * dim;
            let to = (b * kv_heads.len() + local) * slab + slot * dim;
            buffer[to..to + dim].copy_from_slice(&new[from..from + dim]);
        }
    }
}

/// The cache size, in floats read per step, from which the rows run on several threads. Below
/// it, rayon's fork and join costs more than it saves, as at the efficiency bench's CPU model
/// (8 heads of 16, W = 256: 65,536 floats per layer; docs/architecture/kernels.md).
pub(super) const PARALLEL_FLOATS: usize = 1 << 18;

/// One head of one batch element: its query and its buffer's slab of keys and values.
struct Head<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    buffer: &'a DecodeBuffer<'a>,
    h: usize,
    dim: usize,
}

impl Head<'_> {
    /// Writes the head's output into `o`: one branch's, or the branches mixed by their `lse`.
    fn attend(&self, step: &DecodeStep, o: &mut [f32]) {
        let mut branch = vec![0.0; self.dim];
        let mut lses = Vec::with_capacity(step.specs.len());
        let mut outputs = Vec::with_capacity(step.specs.len());
        for spec in step.specs {
            let lse = self.branch(spec, step, &mut branch);
            lses.push(lse);
            outputs.push(branch.clone());
        }
        // α_b = exp(lse_b − max) / Σ, with max 0 when no branch sees a key.
        let top = max(&lses);
        let top = if top == f32::NEG_INFINITY { 0.0 } else { top };
        let weights: Vec<f32> = lses.iter().map(|&l| exp(l - top)).collect();
        let total = sum(&weights);
        let total = if total == 0.0 { 1.0 } else { total };
        o.fill(0.0);
        for (weight, output) in weights.iter().zip(&outputs) {
            let alpha = weight / total;
            o.iter_mut().zip(output).for_each(|(o, x)| *o += alpha * x);
        }
    }

    /// One branch's output into `o` (0 when no slot is visible); returns its `lse`.
    fn branch(&self, spec: &WindowSpec, step: &DecodeStep, o: &mut [f32]) -> f32 {
        let (t, opts) = (step.position, step.opts);
        let scale = opts.scale_for(self.dim);
        let slope = opts.alibi.as_ref().map_or(0.0, |slopes| slopes[self.h]);
        let scores: Vec<f32> = self
            .buffer
            .positions
            .iter()
            .enumerate()
            .map(|(slot, &j)| {
                if !spec.visible(self.h, t, j, t + 1) {
                    return f32::NEG_INFINITY;
                }
                let key = &self.keys[slot * self.dim..(slot + 1) * self.dim];
                let mut s = scale * dot(self.q, key);
                if let Some(cap) = opts.softcap {
                    s = cap * (s / cap).tanh();
                }
                // Positions below 2²⁴ convert exactly, as the reference's do.
                s - slope * (t as f32 - j as f32)
            })
            .collect();
        let (weights, shift): (Vec<f32>, f32) = match opts.score_fn {
            ScoreFn::Softmax => {
                let top = max(&scores);
                let top = if top == f32::NEG_INFINITY { 0.0 } else { top };
                (scores.iter().map(|&s| exp(s - top)).collect(), top)
            }
            ScoreFn::Sigmoid { beta } => {
                let weight = |s: f32| if s == f32::NEG_INFINITY { 0.0 } else { sigmoid(s + beta) };
                (scores.iter().map(|&s| weight(s)).collect(), 0.0)
            }
        };
        let total = sum(&weights);
        o.fill(0.0);
        if total == 0.0 {
            return f32::NEG_INFINITY;
        }
        let norm = match opts.score_fn {
            ScoreFn::Softmax => 1.0 / total,
            ScoreFn::Sigmoid { .. } => 1.0,
        };
        for (slot, &w) in weights.iter().enumerate().filter(|(_, w)| **w != 0.0) {
            let value = &self.values[slot * self.dim..(slot + 1) * self.dim];
            o.iter_mut().zip(value).for_each(|(o, &x)| *o += w * norm * x);
        }
        total.ln() + shift
    }
}
