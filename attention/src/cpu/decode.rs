//! The fused decode step (docs/semantics.md §7): one query per head against a layer's bounded
//! cache, in one pass over the cache's ring buffers.
//!
//! The cache keeps one buffer per group of kv heads that share a reach
//! (`swa_models::layers::cache`), so each head reads only its own buffer's slots: an MSWA head with
//! a window of `w/4` reads `w/4` keys, where the tensor path pays a chain of small ops per buffer.
//! The query heads that share a kv head (GQA) are scored together, run of [`HOT_SLOTS`] by run,
//! so each cached key and value is read from memory once per kv head, not once per query head:
//! past a few thousand positions the step is bound by reading the cache. Each head's scores are
//! one matrix-vector product over the run's contiguous keys, and its output one vector-matrix
//! product over the values (`super::math::dots`, `add_weighted_rows`), in SIMD registers. The slots are cut into chunks of [`CHUNK_SLOTS`],
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

use super::math::{add_weighted_rows, dots, exp, max, sigmoid, sum};
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
            let slots = scanned(buffer, step.position);
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
    let scanned_rows = |b: &DecodeBuffer| batch * b.kv_heads.len() * scanned(b, step.position);
    let floats: usize = buffers.iter().map(|b| 2 * scanned_rows(b) * dim).sum();
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

/// How many of `buffer`'s slots a step at position `t` scans: up to the last that holds a
/// position before `t + 1`, the step's `kv_len`. Every later slot is empty (a growing ring's
/// reserve) or holds a key that [`WindowSpec::visible`] hides (`j < kv_len` is its first rule).
fn scanned(buffer: &DecodeBuffer, t: usize) -> usize {
    buffer.positions.iter().rposition(|&j| j <= t).map_or(0, |last| last + 1)
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
/// it, rayon's fork and join costs more than it saves: 32,768 floats are a few microseconds of
/// reading, about what a fork costs with the threads awake (`with_threads_awake`).
pub(super) const PARALLEL_FLOATS: usize = 1 << 15;

/// Slots scored by one job: a longer cache splits over the threads, so that even a model with
/// few kv heads spreads its step (SmolLM2's 3 kv heads at 640 positions: 6 jobs a layer). Measured
/// on the Xeon AMX (2 threads, 2026-12-01): with this chunking and [`PARALLEL_FLOATS`],
/// SmolLM2-135M's step at 604 positions took 12–13 ms against 15–20 serially; on the efficiency
/// bench (heads of 16), chunks of 512 and of 2048 were within the machine's noise in alternating
/// runs (full attention at 8192 positions 5.7–6.2 against 5.3–6.7 ms).
pub(super) const CHUNK_SLOTS: usize = 512;

/// Slots whose keys (or values) the group's heads read one after another: 256 rows of up to
/// 128 floats are 128 KiB, which stay in any core's level-2 cache between the heads, so the
/// cache is read from memory once per kv head, not once per query head.
const HOT_SLOTS: usize = 256;

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
    fn with_simd<S: Simd>(self, simd: S) -> Partials {
        let (branches, group, dim) = (self.step.specs.len(), self.q.len() / self.dim, self.dim);
        let (rows, n) = (branches * group, self.slots.len());
        let nothing = match self.step.opts.score_fn {
            ScoreFn::Softmax => f32::NEG_INFINITY,
            ScoreFn::Sigmoid { .. } => 0.0,
        };
        let mut partials =
            Partials { m: vec![nothing; rows], l: vec![0.0; rows], o: vec![0.0; rows * dim], dim };
        if n == 0 {
            return partials;
        }
        // Each head's `q·k` over the chunk, `[group, slots]`, which every branch scores: the
        // keys are contiguous, so it is a matrix-vector product per head, taken [`HOT_SLOTS`]
        // keys at a time so that the group's heads find them in the core's cache.
        let mut products = vec![0.0; group * n];
        for part in self.parts() {
            let keys = self.rows(self.buffer.keys, &part);
            for (q, y) in self.q.chunks_exact(dim).zip(products.chunks_exact_mut(n)) {
                dots(simd, q, keys, &mut y[part.clone()]);
            }
        }
        let mut scores = vec![0.0; group * n];
        for (branch, spec) in self.step.specs.iter().enumerate() {
            self.scores(spec, &products, &mut scores);
            for (head, weights) in scores.chunks_mut(n).enumerate() {
                let r = branch * group + head;
                partials.m[r] = self.weigh(weights);
                partials.l[r] = sum(weights);
            }
            // `o[head] = Σ_slot weight · v`, values taken as the keys were.
            let o = &mut partials.o[branch * group * dim..(branch + 1) * group * dim];
            for part in self.parts() {
                let values = self.rows(self.buffer.values, &part);
                for (weights, o) in scores.chunks(n).zip(o.chunks_exact_mut(dim)) {
                    add_weighted_rows(simd, &weights[part.clone()], values, o);
                }
            }
        }
        partials
    }
}

impl Job<'_> {
    /// The chunk's slots in runs of [`HOT_SLOTS`], counted from the chunk's first.
    fn parts(&self) -> impl Iterator<Item = Range<usize>> + use<'_> {
        let n = self.slots.len();
        (0..n).step_by(HOT_SLOTS).map(move |start| start..(start + HOT_SLOTS).min(n))
    }

    /// The rows `[part, d]` of the job's kv head in `buffer` (its keys or values), `part`
    /// counted from the chunk's first slot.
    fn rows<'b>(&self, buffer: &'b [f32], part: &Range<usize>) -> &'b [f32] {
        let first = self.slab + (self.slots.start + part.start) * self.dim;
        &buffer[first..first + part.len() * self.dim]
    }

    /// Each head's scores over the chunk, `[group, slots]`, from its products `q·k` (`[group,
    /// slots]`): scaled, soft-capped and biased where `spec` shows the slot, −∞ where it hides it.
    #[inline(always)]
    fn scores(&self, spec: &WindowSpec, products: &[f32], scores: &mut [f32]) {
        let (t, opts, n) = (self.step.position, self.step.opts, self.slots.len());
        let scale = opts.scale_for(self.dim);
        let positions = &self.buffer.positions[self.slots.clone()];
        let heads = products.chunks_exact(n).zip(scores.chunks_exact_mut(n)).enumerate();
        for (head, (products, scores)) in heads {
            let h = self.first_head + head;
            let slope = opts.alibi.as_ref().map_or(0.0, |slopes| slopes[h]);
            for ((score, &product), &j) in scores.iter_mut().zip(products).zip(positions) {
                *score = match spec.visible(h, t, j, t + 1) {
                    false => f32::NEG_INFINITY,
                    true => {
                        let mut s = scale * product;
                        if let Some(cap) = opts.softcap {
                            s = cap * (s / cap).tanh();
                        }
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
}
