//! Longformer (docs/semantics.md §2): a dilated window per head, and global positions whose
//! queries attend to every key (causally in a decoder) through their own projections
//! `Wq_g, Wk_g, Wv_g`, replacing the local result for those rows. The local rows are any
//! window's ([`crate::layers::window`]): one call of the core with the Longformer window spec,
//! whose global keys every query sees; so is the whole layer without global positions.

use burn::module::Module;
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use super::LayerError;
use super::mechanism::{Mechanism, expect_per_head};
use crate::layers::LayerOptions;
use crate::layers::attend::{Attend, Heads, LayerCache, Projections, Shape};
use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::segment_memory::{LayerMemory, StreamRows};
use crate::layers::window::{WindowedAttention, identity_columns};
use swa_attention::expand_kv;
use swa_attention::index::{index_tensor, inverse_permutation};
use swa_attention::scores::attend;
use swa_attention::{AttentionError, ModelBackend, ScoreOptions, WindowSpec};

/// Replaces the rows of `local: [batch, H, N, d]` at the spec's global positions with
/// attention of `q_g: [batch, H, N, d]` over `k_g, v_g: [batch, H_kv, N, d]`, every key the
/// spec shows a global query, scored with `opts`. Returns `[batch, H, N, d]`. O(|G|·N).
pub fn replace_global_rows<B: Backend>(
    local: Tensor<B, 4>,
    q_g: Tensor<B, 4>,
    k_g: Tensor<B, 4>,
    v_g: Tensor<B, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Tensor<B, 4> {
    let globals = spec.globals();
    let [_, heads, n, _] = local.dims();
    if globals.is_empty() {
        return local;
    }
    let device = local.device();
    let count = globals.len();
    let rows = index_tensor::<B>(globals.iter().copied(), &device);
    let mask = spec.mask(0..heads, globals.iter().copied(), 0..n, n);
    let mask =
        Tensor::<B, 4, Bool>::from_data(TensorData::new(mask, [1, heads, count, n]), &device);
    let (k_g, v_g) = (expand_kv(k_g, heads), expand_kv(v_g, heads));
    let (global, _) = attend(q_g.select(2, rows), k_g, v_g, mask, None, None, opts);
    // The rows of `local`, then the global rows appended: a global position reads the last
    // slot that holds it, its global row.
    let slots = (0..n).chain(globals.iter().copied()).map(Some);
    let index = index_tensor::<B>(inverse_permutation(n, slots), &device);
    Tensor::cat(vec![local, global], 2).select(2, index)
}

/// Longformer's mechanism: a dilated window per head, global positions, causal or not.
pub(crate) struct Longformer<'a> {
    pub(crate) window: usize,
    pub(crate) dilations: &'a [usize],
    pub(crate) globals: &'a [usize],
    pub(crate) causal: bool,
}

impl Mechanism for Longformer<'_> {
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        expect_per_head("Longformer.dilations", self.dilations.len(), heads)?;
        let spec = WindowSpec::longformer(self.window, self.dilations, kv_heads, self.causal)?;
        Ok(spec.with_globals(self.globals.iter().copied()))
    }

    fn window_sum(&self, heads: usize, n: usize) -> usize {
        let local = if self.causal { self.window + 1 } else { 2 * self.window + 1 };
        heads * (local + self.globals.len()).min(n)
    }

    fn name(&self) -> &'static str {
        match (self.globals.is_empty(), self.causal) {
            (false, true) => "Longformer with global tokens",
            (false, false) => "bidirectional Longformer with global tokens",
            (true, false) => "bidirectional Longformer",
            (true, true) => "Longformer",
        }
    }

    fn label(&self, head: usize) -> String {
        let dilation = self.dilations.get(head).map_or("?".to_string(), usize::to_string);
        let mut text = format!("Longformer w={} dilation {dilation}", self.window);
        if !self.globals.is_empty() {
            text += &format!(" globals {}", super::longnet::list(self.globals));
        }
        if !self.causal {
            text += " bidirectional";
        }
        text
    }
}

/// Longformer's module with global positions: the local rows as any window's (the layer's
/// projections, one call of the core with the Longformer spec, its global keys included), and
/// the global rows' projections of their own.
#[derive(Module, Debug)]
pub struct LongformerAttention<B: Backend> {
    /// The local rows: q, k, v and output projections and the window spec with the global
    /// positions.
    pub(crate) local: WindowedAttention<B>,
    /// `Wq_g, Wk_g, Wv_g`, initialised as copies of the local q, k, v projections.
    pub(crate) global: Projections<B>,
}

impl<B: Backend> LongformerAttention<B> {
    /// The module of `mechanism`, which has global positions; fails for learned sink logits
    /// and relative positions, whose rows the global rows would replace.
    pub(crate) fn new(
        mechanism: &Longformer,
        shape: &Shape,
        options: &LayerOptions,
        scores: &ScoreOptions,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        let kind = mechanism.name();
        if options.sink_logits {
            return Err(LayerError::SinkLogitsUnsupported { kind });
        }
        if options.relative_positions {
            return Err(LayerError::RelativePositionsUnsupported { kind });
        }
        let local = WindowedAttention::new(mechanism, shape, options, scores, device)?;
        let global = local.local.copy();
        Ok(Self { local, global })
    }

    /// The window spec, with the global positions.
    fn spec(&self) -> &WindowSpec {
        &self.local.specs()[0]
    }
}

impl<B: ModelBackend> LongformerAttention<B> {
    /// The local rows at positions `0 … N−1` with the global rows in place: local q, k, v and
    /// the global projections' of the same shapes, before RoPE.
    fn attend(
        &self,
        heads: &Heads<B>,
        (q, k, v): (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>),
        (q_g, k_g, v_g): (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>),
    ) -> Result<Tensor<B, 4>, LayerError> {
        let out = self.local.attend(heads, q, k, v, &StreamRows::alone(q_g.dims()[2]))?;
        let (q_g, k_g) = (heads.rope.forward(q_g, 0), heads.rope.forward(k_g, 0));
        Ok(replace_global_rows(out, q_g, k_g, v_g, self.spec(), heads.scores))
    }
}

impl<B: ModelBackend> Attend<B> for LongformerAttention<B> {
    fn forward(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        let local = heads.project(&self.local.local, x.clone());
        let out = self.attend(heads, local, heads.project(&self.global, x))?;
        Ok(heads.merge(&self.local.output, out))
    }

    fn attention_map(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        let (q, k, _) = heads.project(&self.local.local, x.clone());
        let (q_g, k_g, _) = heads.project(&self.global, x.clone());
        identity_columns(heads, &x, |values| {
            let local = (q.clone(), k.clone(), values.clone());
            self.attend(heads, local, (q_g.clone(), k_g.clone(), values))
        })
    }

    /// The local cache, and one of every key for the global rows until the last of them.
    fn cache(
        &self,
        heads: &Heads<B>,
        _batch: usize,
        positions: CachePositions,
        _device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError> {
        let scores = heads.scores.clone();
        let local = KvCache::new(vec![self.spec().clone()], scores.clone(), positions)?;
        let full = WindowSpec::full(heads.heads, heads.kv_heads)?;
        let global = KvCache::new(vec![full], scores, positions)?;
        let globals = self.spec().globals().to_vec();
        Ok(LayerCache::Longformer { local, global: Some((global, globals)) })
    }

    fn step(&self, heads: &Heads<B>, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let LayerCache::Longformer { local, global } = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let (rope, position) = (Some(heads.rope), local.len());
        let (q, k, v) = heads.project(&self.local.local, x.clone());
        local.append(k, v, rope);
        let mut out = local.attend(q, rope);
        if let Some((cache, globals)) = global.as_mut() {
            let (q_g, k_g, v_g) = heads.project(&self.global, x);
            cache.append(k_g, v_g, rope);
            if globals.contains(&position) {
                out = cache.attend(q_g, rope);
            }
            // No query after the last global position reads the global keys again.
            if globals.last() <= Some(&position) {
                *global = None;
            }
        }
        heads.merge(&self.local.output, out)
    }

    fn prefill(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let LayerCache::Longformer { local, global } = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let (rope, n) = (Some(heads.rope), x.dims()[1]);
        let (q, k, v) = heads.project(&self.local.local, x.clone());
        local.fill(k.clone(), v.clone(), rope);
        let (q_g, k_g, v_g) = heads.project(&self.global, x);
        if let Some((cache, globals)) = global.as_mut() {
            match globals.last().is_some_and(|&last| last < n) {
                true => *global = None,
                false => cache.fill(k_g.clone(), v_g.clone(), rope),
            }
        }
        let out = self.attend(heads, (q, k, v), (q_g, k_g, v_g))?;
        Ok(heads.merge(&self.local.output, out))
    }

    fn pins_positions(&self) -> bool {
        true
    }

    /// The local rows' memory: the window's reach, and the global rows for good.
    fn memory(
        &self,
        batch: usize,
        full_memory: usize,
        device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        self.local.memory(batch, full_memory, device)
    }

    /// The local rows' refusals, and the stream's first segment must hold every global
    /// position: a global query sees every earlier position, which only the first segment
    /// holds without memory.
    fn check_segment(&self, segment: usize, start: usize) -> Result<(), LayerError> {
        self.local.check_segment(segment, start)?;
        match self.spec().globals().iter().max() {
            Some(&position) if start == 0 && position >= segment => {
                Err(LayerError::GlobalPastFirstSegment { position, segment })
            }
            _ => Ok(()),
        }
    }

    /// The first segment, which holds the global rows, as the forward pass; every later one
    /// as the local rows alone (no global query is left).
    fn forward_in_stream(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        if memory.start() > 0 {
            return self.local.forward_in_stream(heads, x, memory);
        }
        let out = self.forward(heads, x.clone())?;
        memory.remember(x);
        Ok(out)
    }
}
