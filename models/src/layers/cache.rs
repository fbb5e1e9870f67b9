//! The bounded KV cache of one attention layer, for token-by-token decoding (docs/semantics.md §7).
//!
//! Key/value heads are grouped by the *reach* of the query heads that read them
//! ([`swa_attention::HeadWindow::reach`]): the span of the window, or the current LongNet segment. A
//! group keeps only its last `reach` positions in a ring of slots, so MSWA heads get buffers of
//! their own sizes and memory stops growing once the windows are full. Positions that every
//! later query sees (sinks, Longformer globals) are pinned for good. Which cached key a query
//! sees is asked of the window spec ([`WindowSpec::mask`] of [`WindowSpec::visible`]); the
//! cache never re-derives a mask. Full attention has no reach, and its cache grows.

use burn::tensor::{Bool, Int, Tensor, TensorData, TensorPrimitive, backend::Backend};
use serde::{Deserialize, Serialize};

use super::LayerError;
use crate::layers::longnet::mix_branches;
use crate::layers::ring::{Buffer, select_heads};
use swa_attention::decode::{CacheWrite, CachedBuffer, DecodeKernel, DecodeStep, SlotWrite};
use swa_attention::expand_kv;
use swa_attention::fused_ops_off;
use swa_attention::index::{index_tensor, inverse_permutation};
use swa_attention::rope::{RopeAngles, rotate};
use swa_attention::scores::{Alibi, attend};
use swa_attention::{AttentionError, ModelBackend, Rope, ScoreOptions, WindowSpec};

/// The positions RoPE and ALiBi give the cached keys and the query (docs/semantics.md §4, §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachePositions {
    /// Absolute token positions: decoding reproduces the forward pass.
    #[default]
    Absolute,
    /// StreamingLLM's position shift: every cached key sits at its slot index in the cache
    /// (positions in order, sinks first) and the query at its own. Only distances matter to RoPE
    /// and ALiBi, and the recent keys are contiguous up to the query, so they keep the rotation
    /// of their absolute positions; the pinned keys (sinks, globals) are turned again at every
    /// step, from a copy kept before RoPE, to the position that gives them their slot distance
    /// (`Buffer::shifted_positions`). A step costs what an absolute one does.
    Streaming,
}

/// The cache of one layer: one buffer per group of kv heads that share a reach.
#[derive(Clone)]
pub struct KvCache<B: Backend> {
    /// One spec, or one per LongNet branch (mixed by their denominators, docs/semantics.md §5).
    specs: Vec<WindowSpec>,
    opts: ScoreOptions,
    positions: CachePositions,
    buffers: Vec<Buffer<B>>,
    /// Under [`CachePositions::Streaming`] with RoPE: each pinned position with its key and
    /// value `[batch, H_kv, 1, d]` before RoPE, which [`KvCache::shift_pinned`] turns.
    pinned: Vec<(usize, Tensor<B, 4>, Tensor<B, 4>)>,
    /// Tokens appended so far; the next one sits at this position.
    len: usize,
}

impl<B: Backend> KvCache<B> {
    /// An empty cache for a causal layer whose core call(s) use `specs` and `opts`.
    pub fn new(
        specs: Vec<WindowSpec>,
        opts: ScoreOptions,
        positions: CachePositions,
    ) -> Result<Self, LayerError> {
        let first = specs.first().ok_or(AttentionError::NoHeads)?;
        let (heads, kv_heads) = (first.num_heads(), first.kv_heads());
        if specs.iter().any(|s| !s.is_causal()) {
            return Err(LayerError::NotCausal { what: "the layer's window spec" });
        }
        opts.check(heads)?;
        let ratio = heads / kv_heads;
        let reach_of = |c: usize| -> Option<usize> {
            let mut reach = Some(0);
            for spec in &specs {
                for window in &spec.heads()[c * ratio..(c + 1) * ratio] {
                    reach = reach.zip(window.reach()).map(|(a, b)| a.max(b));
                }
            }
            reach
        };
        let mut buffers: Vec<Buffer<B>> = Vec::new();
        for c in 0..kv_heads {
            let reach = reach_of(c);
            let buffer = match buffers.iter_mut().find(|b| b.reach == reach) {
                Some(buffer) => buffer,
                None => {
                    buffers.push(Buffer::new(reach));
                    buffers.last_mut().expect("just pushed")
                }
            };
            buffer.kv_heads.push(c);
            buffer.heads.extend(c * ratio..(c + 1) * ratio);
        }
        Ok(Self { specs, opts, positions, buffers, pinned: Vec::new(), len: 0 })
    }

    /// Tokens appended so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been appended yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the cached keys and values of the positions held. A growing ring also holds
    /// empty slots reserved for the next positions (at most as many as it holds, none once
    /// full), which this leaves out: it is what the cache keeps, as a ring grown one slot at a
    /// time would hold it.
    pub fn bytes(&self) -> usize {
        let bytes = |b: &Buffer<B>, t: &Option<Tensor<B, 4>>| {
            t.as_ref().map_or(0, |t| {
                let [batch, heads, _, d] = t.dims();
                batch * heads * b.held() * d * t.dtype().size()
            })
        };
        self.buffers.iter().map(|b| bytes(b, &b.keys) + bytes(b, &b.values)).sum()
    }

    /// Caches the key and value of the next position. `k, v: [batch, H_kv, 1, d]`, before RoPE;
    /// `rope` is the layer's rotation, `None` for a layer without RoPE.
    ///
    /// A ring with no slot for the position first grows by doubling (`Buffer::reserve`); then a
    /// backend with a fused append
    /// ([`swa_attention::WindowedAttentionBackend::windowed_cache_write`]) writes every buffer
    /// in one op (unless [`swa_attention::FUSED_OPS_VARIABLE`] turns the fused ops off);
    /// otherwise each buffer writes its slot with tensor ops. Under StreamingLLM's positions the
    /// pinned keys are then turned to their shifted positions ([`CachePositions::Streaming`]).
    pub fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>, rope: Option<&Rope>)
    where
        B: ModelBackend,
    {
        let position = self.len;
        let spec = &self.specs[0];
        let pinned = position < spec.sinks() || spec.is_global(position);
        if pinned && self.positions == CachePositions::Streaming && rope.is_some() {
            self.pinned.push((position, k.clone(), v.clone()));
        }
        // Keys are kept rotated at their absolute positions, turned once for every buffer (RoPE
        // acts on each head alone): by the fused append, or here.
        let rotation = rope.map(|rope| rope.angles(&[position]));
        for buffer in &mut self.buffers {
            if buffer.reusable_slot(pinned).is_none() {
                buffer.reserve(pinned, &select_heads(k.clone(), &buffer.kv_heads));
            }
        }
        let write = B::windowed_cache_write().filter(|_| !fused_ops_off());
        let slots: Option<Vec<usize>> =
            self.buffers.iter().map(|buffer| buffer.reusable_slot(pinned)).collect();
        match (write, slots) {
            (Some(write), Some(slots)) => {
                let targets: Vec<usize> = (0..self.buffers.len()).collect();
                self.write_fused(write, [k, v], rotation.as_ref(), &targets, &slots);
                for (buffer, slot) in self.buffers.iter_mut().zip(slots) {
                    buffer.occupy(slot, position, pinned);
                }
            }
            _ => {
                let k = match &rotation {
                    Some(angles) => rotate(k, angles),
                    None => k,
                };
                for buffer in &mut self.buffers {
                    let (k, v) = (
                        select_heads(k.clone(), &buffer.kv_heads),
                        select_heads(v.clone(), &buffer.kv_heads),
                    );
                    buffer.store(position, pinned, k, v);
                }
            }
        }
        self.len += 1;
        self.shift_pinned(rope);
    }

    /// The backend's fused append: `[k, v]` (every kv head) into `slots[i]` of buffer
    /// `targets[i]`, the key turned by `rotation`; the caller keeps the ring's books.
    fn write_fused(
        &mut self,
        write: CacheWrite<B>,
        [k, v]: [Tensor<B, 4>; 2],
        rotation: Option<&RopeAngles>,
        targets: &[usize],
        slots: &[usize],
    ) {
        let primitive = |x: &mut Option<Tensor<B, 4>>| {
            x.take().expect("a ring with a slot holds keys").into_primitive().tensor()
        };
        let mut writes: Vec<SlotWrite<B>> = Vec::with_capacity(targets.len());
        for (index, buffer) in self.buffers.iter_mut().enumerate() {
            if let Some(i) = targets.iter().position(|&b| b == index) {
                writes.push(SlotWrite {
                    keys: primitive(&mut buffer.keys),
                    values: primitive(&mut buffer.values),
                    kv_heads: &buffer.kv_heads,
                    slot: slots[i],
                });
            }
        }
        let (k, v) = (k.into_primitive().tensor(), v.into_primitive().tensor());
        let written = write(k, v, rotation, writes);
        for (&index, [keys, values]) in targets.iter().zip(written) {
            let tensor = |x| Tensor::from_primitive(TensorPrimitive::Float(x));
            let buffer = &mut self.buffers[index];
            (buffer.keys, buffer.values) = (Some(tensor(keys)), Some(tensor(values)));
        }
    }

    /// Under [`CachePositions::Streaming`] with RoPE, rewrites each buffer's pinned keys turned
    /// to their shifted positions for the latest query (`Buffer::shifted_positions`), from the
    /// copies kept before RoPE; a key already at its absolute position (nothing evicted yet) is
    /// left as the append wrote it.
    fn shift_pinned(&mut self, rope: Option<&Rope>)
    where
        B: ModelBackend,
    {
        let (CachePositions::Streaming, Some(rope)) = (self.positions, rope) else { return };
        let t = self.len - 1;
        let write = B::windowed_cache_write().filter(|_| !fused_ops_off());
        for index in 0..self.buffers.len() {
            let shifted = self.buffers[index].shifted_positions(t);
            debug_assert!(
                self.buffers[index]
                    .recent
                    .iter()
                    .all(|&slot| shifted[slot] == self.buffers[index].slots[slot]),
                "recent keys keep their absolute rotation"
            );
            for (position, k, v) in self.pinned.clone() {
                let buffer = &self.buffers[index];
                let Some(slot) = buffer.slots.iter().position(|&p| p == position) else { continue };
                if shifted[slot] == position {
                    continue;
                }
                let angles = rope.angles(&[shifted[slot]]);
                match write {
                    Some(write) => {
                        self.write_fused(write, [k, v], Some(&angles), &[index], &[slot])
                    }
                    None => {
                        let buffer = &mut self.buffers[index];
                        let (k, v) = (
                            select_heads(rotate(k, &angles), &buffer.kv_heads),
                            select_heads(v, &buffer.kv_heads),
                        );
                        buffer.overwrite(slot, k, v);
                    }
                }
            }
        }
    }

    /// Fills an empty cache with positions `0 … N−1` at once: `k, v: [batch, H_kv, N, d]`
    /// before RoPE, `rope` as in [`KvCache::append`]. Each buffer keeps what N appends would
    /// leave: the pinned positions and the last `reach` others (the ring's order of slots
    /// differs, which no query can tell: visibility is asked by position).
    pub fn fill(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>, rope: Option<&Rope>)
    where
        B: ModelBackend,
    {
        debug_assert!(self.is_empty(), "fill starts a cache");
        let n = k.dims()[2];
        let spec = &self.specs[0];
        let pinned = |j: usize| j < spec.sinks() || spec.is_global(j);
        if self.positions == CachePositions::Streaming && rope.is_some() {
            let rows = |x: &Tensor<B, 4>, j| x.clone().narrow(2, j, 1);
            let kept = (0..n).filter(|&j| pinned(j)).map(|j| (j, rows(&k, j), rows(&v, j)));
            self.pinned = kept.collect();
        }
        let k = match rope {
            Some(rope) => rope.forward(k, 0),
            None => k,
        };
        let unpinned: Vec<usize> = (0..n).filter(|&j| !pinned(j)).collect();
        for buffer in &mut self.buffers {
            let skip = buffer.reach.map_or(0, |reach| unpinned.len().saturating_sub(reach));
            let first_recent = unpinned.get(skip).copied().unwrap_or(n);
            let kept: Vec<usize> = (0..n).filter(|&j| pinned(j) || j >= first_recent).collect();
            // Selected even when every position is kept, into a buffer of the cache's own: the
            // projections' k and v are views of the layer's joined q|k|v product, which the
            // cache would otherwise keep alive whole (SmolLM2-135M's 604-token prompt: 70 MB).
            let rows = |x: Tensor<B, 4>| {
                let x = select_heads(x, &buffer.kv_heads);
                x.select(2, index_tensor::<B>(kept.iter().copied(), &k.device()))
            };
            buffer.keys = Some(rows(k.clone()));
            buffer.values = Some(rows(v.clone()));
            buffer.recent = (0..kept.len()).filter(|&slot| !pinned(kept[slot])).collect();
            buffer.slots = kept;
        }
        self.len = n;
        self.shift_pinned(rope);
    }

    /// Attends the query of the latest appended position, `q: [batch, H, 1, d]` before RoPE,
    /// to the keys its head sees → `[batch, H, 1, d]`, with the same `rope` as
    /// [`KvCache::append`], which comes first.
    ///
    /// A backend with a fused decode step ([`swa_attention::WindowedAttentionBackend::windowed_decode`]) runs
    /// it over every buffer at once under [`CachePositions::Absolute`]; otherwise (and when
    /// [`swa_attention::FUSED_OPS_VARIABLE`] turns the fused ops off) each buffer runs its tensor ops.
    pub fn attend(&self, q: Tensor<B, 4>, rope: Option<&Rope>) -> Tensor<B, 4>
    where
        B: ModelBackend,
    {
        let fused = B::windowed_decode().filter(|_| !fused_ops_off());
        // The fused step scores ALiBi by the slots' absolute positions.
        let absolute = self.positions == CachePositions::Absolute || self.opts.alibi.is_none();
        if let (Some(decode), true) = (fused, absolute) {
            return self.attend_fused(decode, q, rope);
        }
        let outputs: Vec<_> = self
            .buffers
            .iter()
            .map(|b| {
                let (outs, lses) = self.attend_buffer(b, q.clone(), rope);
                match outs.len() {
                    1 => outs.into_iter().next().expect("one output"),
                    _ => mix_branches(outs, lses),
                }
            })
            .collect();
        let out = Tensor::cat(outputs, 1);
        match self.head_order(q.dims()[1], &out.device()) {
            Some(index) => out.select(1, index),
            None => out,
        }
    }

    /// As [`KvCache::attend`], with the log-normaliser `lse: [batch, H, 1]` of the one core
    /// call (a cache of one spec: LongNet's mixture has no single denominator). Always the
    /// buffers' tensor ops: the fused decode step gives no `lse`.
    pub fn attend_with_lse(
        &self,
        q: Tensor<B, 4>,
        rope: Option<&Rope>,
    ) -> (Tensor<B, 4>, Tensor<B, 3>)
    where
        B: ModelBackend,
    {
        debug_assert_eq!(self.specs.len(), 1, "one core call has one lse");
        let (outs, lses): (Vec<_>, Vec<_>) = self
            .buffers
            .iter()
            .map(|b| {
                let (mut outs, mut lses) = self.attend_buffer(b, q.clone(), rope);
                (outs.remove(0), lses.remove(0))
            })
            .unzip();
        let (o, lse) = (Tensor::cat(outs, 1), Tensor::cat(lses, 1));
        match self.head_order(q.dims()[1], &o.device()) {
            Some(index) => (o.select(1, index.clone()), lse.select(1, index)),
            None => (o, lse),
        }
    }

    /// The index that puts the buffers' heads, concatenated, back in head order; `None` when
    /// they already are.
    fn head_order(&self, heads: usize, device: &B::Device) -> Option<Tensor<B, 1, Int>> {
        let order: Vec<usize> = self.buffers.iter().flat_map(|b| b.heads.iter().copied()).collect();
        if order.iter().enumerate().all(|(i, &h)| i == h) {
            return None;
        }
        let inverse = inverse_permutation(heads, order.into_iter().map(Some));
        Some(index_tensor::<B>(inverse, device))
    }

    /// The backend's fused decode step over every buffer, which turns the query by RoPE at its
    /// position.
    fn attend_fused(
        &self,
        decode: DecodeKernel<B>,
        q: Tensor<B, 4>,
        rope: Option<&Rope>,
    ) -> Tensor<B, 4>
    where
        B: ModelBackend,
    {
        let t = self.len - 1;
        let rotation = rope.map(|rope| rope.angles(&[t]));
        let primitive = |x: &Option<Tensor<B, 4>>| {
            x.clone().expect("append comes before attend").into_primitive().tensor()
        };
        let buffers: Vec<CachedBuffer<B>> = self
            .buffers
            .iter()
            .map(|buffer| CachedBuffer {
                keys: primitive(&buffer.keys),
                values: primitive(&buffer.values),
                kv_heads: &buffer.kv_heads,
                positions: &buffer.slots,
            })
            .collect();
        let step = DecodeStep {
            specs: &self.specs,
            opts: &self.opts,
            position: t,
            rope: rotation.as_ref(),
        };
        let o = decode(q.into_primitive().tensor(), &buffers, &step);
        Tensor::from_primitive(TensorPrimitive::Float(o))
    }

    /// One buffer's query heads against its slots, through every spec: each spec's output
    /// `[batch, heads of the buffer, 1, d]` and log-normaliser `[batch, heads of the buffer, 1]`.
    fn attend_buffer(
        &self,
        buffer: &Buffer<B>,
        q: Tensor<B, 4>,
        rope: Option<&Rope>,
    ) -> (Vec<Tensor<B, 4>>, Vec<Tensor<B, 3>>)
    where
        B: ModelBackend,
    {
        let (keys, values) = (buffer.keys.clone(), buffer.values.clone());
        let (keys, values) = keys.zip(values).expect("append comes before attend");
        let device = keys.device();
        let t = self.len - 1;
        // Where each key sits for ALiBi: its rotation's position, which RoPE already gave it.
        let key_positions = match self.positions {
            CachePositions::Absolute => buffer.slots.clone(),
            CachePositions::Streaming => buffer.shifted_positions(t),
        };
        let q = select_heads(q, &buffer.heads);
        let q = match rope {
            Some(rope) => rope.forward_at(q, &[t]),
            None => q,
        };
        let rows = buffer.heads.len();
        let (keys, values) = (expand_kv(keys, rows), expand_kv(values, rows));
        let slots = buffer.slots.len();
        let alibi = self.opts.alibi.as_ref().map(|slopes| {
            let distance = key_positions.iter().map(|&j| t as f32 - j as f32).collect();
            let slopes = buffer.heads.iter().map(|&h| slopes[h]).collect();
            (distance, slopes)
        });
        let (mut outs, mut lses) = (Vec::new(), Vec::new());
        for spec in &self.specs {
            let mask =
                spec.mask(buffer.heads.iter().copied(), [t], buffer.slots.iter().copied(), t + 1);
            let mask = Tensor::<B, 4, Bool>::from_data(
                TensorData::new(mask, [1, rows, 1, slots]),
                &device,
            );
            let alibi = alibi.clone().map(|(distance, slopes): (Vec<f32>, Vec<f32>)| Alibi {
                distance: Tensor::from_data(TensorData::new(distance, [1, 1, 1, slots]), &device),
                slopes: Tensor::from_data(TensorData::new(slopes, [1, rows, 1, 1]), &device),
            });
            let (o, lse) =
                attend(q.clone(), keys.clone(), values.clone(), mask, alibi, None, &self.opts);
            outs.push(o);
            lses.push(lse);
        }
        (outs, lses)
    }
}
