//! The fused decode step (docs/semantics.md §7): one query per head against a layer's bounded
//! cache, in one pass over the cache's ring buffers.
//!
//! The cache keeps one buffer per group of kv heads that share a reach
//! (`swa_models::layers::cache`), so each head reads only its own buffer's slots: an MSWA head with
//! a window of `w/4` reads `w/4` keys, where the tensor path pays a chain of small ops per buffer.
//! The query heads that share a kv head (GQA) are scored together, so each cached key and value
//! is read from memory once per kv head, not once per query head: past a few thousand positions
//! the step is bound by reading the cache. The slots are cut into chunks of [`CHUNK_SLOTS`],
//! scored apart and merged by their running maxima and sums (split-K, as FlashDecoding), so a
//! long cache spreads over every thread even with few kv heads; the chunks depend on the slots
//! alone, so the result does not depend on the threads.
//!
//! Which slot a head sees is asked of [`WindowSpec::visible`] at the slot's position; scores are
//! those of `crate::scores::attend` (scale, softcap, ALiBi, softmax or sigmoid with β), and the
//! branches of a LongNet layer are mixed by their log-normalisers as
//! `swa_models::layers::longnet::mix_branches` mixes them (docs/semantics.md §5). [`write_slot`] is
//! the fused append that keeps those buffers: the new position into every buffer's slot at once.

use std::borrow::Cow;
use std::ops::Range;

use pulp::{Simd, WithSimd};
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
    let kv_heads = step.specs.first().map_or(0, WindowSpec::kv_heads);
    let group = heads / kv_heads.max(1);
    let mut out = vec![0.0; batch * heads * dim];
    if dim == 0 || heads == 0 {
        return out;
    }
    let q = turned(Cow::Borrowed(q), step.rope);
    // Where each kv head lives: (buffer, index within the buffer).
    let mut home = vec![(0, 0); kv_heads];
    for (b, buffer) in buffers.iter().enumerate() {
        for (local, &kv) in buffer.kv_heads.iter().enumerate() {
            home[kv] = (b, local);
        }
    }
    let mut jobs = Vec::new();
    for b in 0..batch {
        for (kv, &(index, local)) in home.iter().enumerate() {
            let buffer = &buffers[index];
            let slab = (b * buffer.kv_heads.len() + local) * buffer.positions.len() * dim;
            let first = (b * heads + kv * group) * dim;
            let slots = buffer.positions.len();
            // An empty buffer still gets its job, which sees nothing.
            for start in (0..slots.max(1)).step_by(CHUNK_SLOTS) {
                let slots = start..(start + CHUNK_SLOTS).min(slots);
                let q = &q[first..first + group * dim];
                jobs.push(Job { q, buffer, slab, first_head: kv * group, slots, dim, step });
            }
        }
    }
    let run = |job: &Job| pulp::Arch::new().dispatch(job);
    // Cached floats read in all; below `PARALLEL_FLOATS`, rayon's fork and join would cost more
    // than the jobs they spread.
    let floats: usize = buffers.iter().map(|b| 2 * b.keys.len()).sum();
    let partials: Vec<Partials> = match floats < PARALLEL_FLOATS {
        true => jobs.iter().map(run).collect(),
        false => jobs.par_iter().map(run).collect(),
    };
    // The jobs of one (batch row, kv head) are consecutive: merge them, then mix the branches.
    let mut partials = partials.into_iter();
    let mut jobs = jobs.iter().peekable();
    for rows in out.chunks_mut(group * dim) {
        let Some(job) = jobs.next() else { break };
        let mut total = partials.next().expect("one result per job");
        while jobs.peek().is_some_and(|next| next.slots.start > 0) {
            jobs.next();
            total.merge(&partials.next().expect("one result per job"));
        }
        total.write(rows, job.step);
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

/// The cache size, in floats read per step, from which the jobs run on several threads. Below
/// it, rayon's fork and join costs more than it saves, as at the efficiency bench's CPU model
/// (8 heads of 16, W = 256: 65,536 floats per layer; docs/architecture/kernels.md).
pub(super) const PARALLEL_FLOATS: usize = 1 << 18;

/// Slots scored by one job: a window of up to 2048 keys is one chunk, and a longer cache
/// (full attention's) splits over the threads. Smaller chunks cost more in jobs than they save:
/// on the efficiency bench's heads of 16, full attention at 8192 positions took 8.9 ms per token
/// with chunks of 256 and 6.1 ms with 2048 (docs/benchmarks.md).
pub(super) const CHUNK_SLOTS: usize = 2048;

/// The query heads of one kv head (one batch row) against one chunk of its buffer's slots.
struct Job<'a> {
    /// The group's queries, `[group, d]`, heads `first_head …`.
    q: &'a [f32],
    buffer: &'a DecodeBuffer<'a>,
    /// Where the kv head's `[slots, d]` slab starts in the buffer's keys and values.
    slab: usize,
    first_head: usize,
    slots: Range<usize>,
    dim: usize,
    step: &'a DecodeStep<'a>,
}

/// Per branch and head of a group: the running maximum `m` of the scores (0 under sigmoid,
/// −∞ when no key was visible), the sum `l` of the weights `e^(s − m)` (or `σ(s + β)`), and
/// `o = Σ weight · v`, not yet divided by `l`.
struct Partials {
    m: Vec<f32>,
    l: Vec<f32>,
    o: Vec<f32>,
    dim: usize,
}

impl Partials {
    /// Adds another chunk's partials of the same rows.
    fn merge(&mut self, other: &Partials) {
        let dim = self.dim;
        for r in 0..self.m.len() {
            let (m, m2) = (self.m[r], other.m[r]);
            if m2 == f32::NEG_INFINITY {
                continue;
            }
            let top = m.max(m2);
            let (mine, theirs) = (exp(m - top), exp(m2 - top));
            self.l[r] = self.l[r] * mine + other.l[r] * theirs;
            let (o, o2) = (&mut self.o[r * dim..(r + 1) * dim], &other.o[r * dim..(r + 1) * dim]);
            o.iter_mut().zip(o2).for_each(|(o, &x)| *o = *o * mine + x * theirs);
            self.m[r] = top;
        }
    }

    /// Writes each head's output into `rows` (`[group, d]`): one branch's, or the branches mixed
    /// by their `lse`.
    fn write(&self, rows: &mut [f32], step: &DecodeStep) {
        let (branches, dim) = (step.specs.len(), self.dim);
        let group = self.m.len() / branches.max(1);
        let normalise = matches!(step.opts.score_fn, ScoreFn::Softmax);
        for (head, o) in rows.chunks_mut(dim).enumerate() {
            let row = |branch: usize| branch * group + head;
            let lse = |r: usize| match self.l[r] > 0.0 {
                true => self.l[r].ln() + self.m[r],
                false => f32::NEG_INFINITY,
            };
            let lses: Vec<f32> = (0..branches).map(|b| lse(row(b))).collect();
            // α_b = exp(lse_b − max) / Σ, with max 0 when no branch sees a key.
            let top = max(&lses);
            let top = if top == f32::NEG_INFINITY { 0.0 } else { top };
            let weights: Vec<f32> = lses.iter().map(|&l| exp(l - top)).collect();
            let total = sum(&weights);
            let total = if total == 0.0 { 1.0 } else { total };
            o.fill(0.0);
            for (branch, weight) in weights.iter().enumerate().filter(|(_, w)| **w != 0.0) {
                let r = row(branch);
                let norm = if normalise { 1.0 / self.l[r] } else { 1.0 };
                let alpha = weight / total * norm;
                let x = &self.o[r * dim..(r + 1) * dim];
                o.iter_mut().zip(x).for_each(|(o, &x)| *o += alpha * x);
            }
        }
    }
}

impl WithSimd for &Job<'_> {
    type Output = Partials;

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> Partials {
        let (branches, group, dim) = (self.step.specs.len(), self.q.len() / self.dim, self.dim);
        let rows = branches * group;
        let mut partials =
            Partials { m: vec![0.0; rows], l: vec![0.0; rows], o: vec![0.0; rows * dim], dim };
        let mut scores = vec![0.0; group * self.slots.len()];
        for (branch, spec) in self.step.specs.iter().enumerate() {
            self.scores(spec, &mut scores);
            for (head, scores) in scores.chunks_mut(self.slots.len()).enumerate() {
                let r = branch * group + head;
                partials.m[r] = self.weigh(scores);
                partials.l[r] = sum(scores);
            }
            let o = &mut partials.o[branch * group * dim..(branch + 1) * group * dim];
            self.weighted_values(&scores, o);
        }
        partials
    }
}

impl Job<'_> {
    /// Each head's scores over the chunk, `[group, slots]`, −∞ where the slot is hidden: each
    /// key read once for the whole group.
    #[inline(always)]
    fn scores(&self, spec: &WindowSpec, scores: &mut [f32]) {
        let (t, opts, dim) = (self.step.position, self.step.opts, self.dim);
        let scale = opts.scale_for(dim);
        let n = self.slots.len();
        let keys = &self.buffer.keys[self.slab..];
        for (i, slot) in self.slots.clone().enumerate() {
            let j = self.buffer.positions[slot];
            let key = &keys[slot * dim..(slot + 1) * dim];
            for (head, q) in self.q.chunks_exact(dim).enumerate() {
                let h = self.first_head + head;
                scores[head * n + i] = match spec.visible(h, t, j, t + 1) {
                    false => f32::NEG_INFINITY,
                    true => {
                        let mut s = scale * dot(q, key);
                        if let Some(cap) = opts.softcap {
                            s = cap * (s / cap).tanh();
                        }
                        let slope = opts.alibi.as_ref().map_or(0.0, |slopes| slopes[h]);
                        // Positions below 2²⁴ convert exactly, as the reference's do.
                        s - slope * (t as f32 - j as f32)
                    }
                };
            }
        }
    }

    /// Turns one head's scores into weights in place, `e^(s − m)` or `σ(s + β)` (0 where
    /// hidden); returns `m` (0 under sigmoid, −∞ when nothing is visible under softmax).
    #[inline(always)]
    fn weigh(&self, scores: &mut [f32]) -> f32 {
        match self.step.opts.score_fn {
            ScoreFn::Softmax => {
                let top = max(scores);
                let shift = if top == f32::NEG_INFINITY { 0.0 } else { top };
                scores.iter_mut().for_each(|s| *s = exp(*s - shift));
                top
            }
            ScoreFn::Sigmoid { beta } => {
                let weight = |s: f32| if s == f32::NEG_INFINITY { 0.0 } else { sigmoid(s + beta) };
                scores.iter_mut().for_each(|s| *s = weight(*s));
                0.0
            }
        }
    }

    /// `o[head] = Σ_slot weight[head, slot] · v[slot]`, each value read once for the group.
    #[inline(always)]
    fn weighted_values(&self, weights: &[f32], o: &mut [f32]) {
        let (n, dim) = (self.slots.len(), self.dim);
        let values = &self.buffer.values[self.slab..];
        for (i, slot) in self.slots.clone().enumerate() {
            let value = &values[slot * dim..(slot + 1) * dim];
            for (head, o) in o.chunks_exact_mut(dim).enumerate() {
                let w = weights[head * n + i];
                if w != 0.0 {
                    o.iter_mut().zip(value).for_each(|(o, &x)| *o += w * x);
                }
            }
        }
    }
}
