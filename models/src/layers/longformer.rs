//! Longformer (docs/semantics.md §2): a dilated window per head, and global positions whose
//! queries attend to every key (causally in a decoder) through their own projections
//! `Wq_g, Wk_g, Wv_g`, replacing the local result for those rows. The local rows are one call
//! of the core with the Longformer window spec, whose global keys every query sees. Without
//! global positions the layer runs as any window ([`crate::layers::window`]).

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use super::LayerError;
use super::mechanism::{Mechanism, expect_per_head};
use crate::layers::LayerOptions;
use crate::layers::attend::{Attend, Heads, LayerCache, Projections, Shape};
use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::segment_memory::{Keep, LayerMemory, StreamRows};
use crate::layers::window::identity_columns;
use swa_attention::expand_kv;
use swa_attention::index::{index_tensor, inverse_permutation};
use swa_attention::scores::attend;
use swa_attention::{AttentionError, ModelBackend, ScoreOptions, WindowSpec, windowed_attention};

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
            (false, _) => "Longformer with global tokens",
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

/// Longformer's module with global positions: the local projections and window, and the
/// global rows' projections of their own.
#[derive(Module, Debug)]
pub struct LongformerAttention<B: Backend> {
    /// q, k, v projections of every row.
    pub(crate) local: Projections<B>,
    /// `Wq_g, Wk_g, Wv_g`, initialised as copies of `local`.
    pub(crate) global: Projections<B>,
    /// Output projection, `[H·d_h, d]`.
    pub(crate) output: Linear<B>,
    /// The window spec, with the global positions.
    spec: WindowSpec,
}

impl<B: Backend> LongformerAttention<B> {
    /// The module of `mechanism`, which has global positions; fails for learned sink logits
    /// and relative positions, whose rows the global rows would replace.
    pub(crate) fn new(
        mechanism: &Longformer,
        shape: &Shape,
        options: &LayerOptions,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        let kind = mechanism.name();
        if options.sink_logits {
            return Err(LayerError::SinkLogitsUnsupported { kind });
        }
        if options.relative_positions {
            return Err(LayerError::RelativePositionsUnsupported { kind });
        }
        let local = shape.projections(options.qkv_bias, device);
        let global = local.copy();
        let output = shape.output(device);
        let spec = mechanism.spec(shape.heads, shape.kv_heads)?;
        Ok(Self { local, global, output, spec })
    }
}

impl<B: ModelBackend> LongformerAttention<B> {
    /// The local call over rows placed by `rows`: `q: [batch, H, N, d_h]`, `k, v:
    /// [batch, H_kv, M + N, d_v]` before RoPE → `[batch, H, N, d_v]`.
    fn attend_local(
        &self,
        heads: &Heads<B>,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        rows: &StreamRows,
    ) -> Result<Tensor<B, 4>, LayerError> {
        let (q, k) = rows.rotate(heads.rope, q, k);
        Ok(windowed_attention(q, k, v, &rows.place(&self.spec), heads.scores)?.0)
    }

    /// The local rows at positions `0 … N−1` with the global rows in place: local q, k, v and
    /// the global projections' of the same shapes, before RoPE.
    fn attend(
        &self,
        heads: &Heads<B>,
        (q, k, v): (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>),
        (q_g, k_g, v_g): (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>),
    ) -> Result<Tensor<B, 4>, LayerError> {
        let out = self.attend_local(heads, q, k, v, &StreamRows::alone(q_g.dims()[2]))?;
        let (q_g, k_g) = (heads.rope.forward(q_g, 0), heads.rope.forward(k_g, 0));
        Ok(replace_global_rows(out, q_g, k_g, v_g, &self.spec, heads.scores))
    }
}

impl<B: Backend> LongformerAttention<B> {
    /// What a stream's next segment needs kept: the window's reach and the global rows for
    /// good; fails for an encoder, whose rows see later keys, which a memory of earlier
    /// segments cannot hold.
    fn keep(&self, full_memory: usize) -> Result<Keep, LayerError> {
        match self.spec.is_causal() {
            true => Ok(Keep::of(&self.spec, full_memory)),
            false => Err(LayerError::MemoryUnsupported { kind: "bidirectional Longformer" }),
        }
    }
}

impl<B: ModelBackend> Attend<B> for LongformerAttention<B> {
    fn forward(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        let local = heads.project(&self.local, x.clone());
        let out = self.attend(heads, local, heads.project(&self.global, x))?;
        Ok(heads.merge(&self.output, out))
    }

    fn attention_map(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        let (q, k, _) = heads.project(&self.local, x.clone());
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
        let local = KvCache::new(vec![self.spec.clone()], scores.clone(), positions)?;
        let full = WindowSpec::full(heads.heads, heads.kv_heads)?;
        let global = KvCache::new(vec![full], scores, positions)?;
        Ok(LayerCache::Longformer { local, global: Some((global, self.spec.globals().to_vec())) })
    }

    fn step(&self, heads: &Heads<B>, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let LayerCache::Longformer { local, global } = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let (rope, position) = (Some(heads.rope), local.len());
        let (q, k, v) = heads.project(&self.local, x.clone());
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
        heads.merge(&self.output, out)
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
        let (q, k, v) = heads.project(&self.local, x.clone());
        local.fill(k.clone(), v.clone(), rope);
        let (q_g, k_g, v_g) = heads.project(&self.global, x);
        if let Some((cache, globals)) = global.as_mut() {
            match globals.last().is_some_and(|&last| last < n) {
                true => *global = None,
                false => cache.fill(k_g.clone(), v_g.clone(), rope),
            }
        }
        let out = self.attend(heads, (q, k, v), (q_g, k_g, v_g))?;
        Ok(heads.merge(&self.output, out))
    }

    fn pins_positions(&self) -> bool {
        true
    }

    /// Keeps the window's reach and the global rows for good; fails for an encoder.
    fn memory(
        &self,
        _batch: usize,
        full_memory: usize,
        _device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        Ok(LayerMemory::hidden(self.keep(full_memory)?))
    }

    /// The stream's first segment must hold every global position: a global query sees every
    /// earlier position, which only the first segment holds without memory.
    fn check_segment(&self, segment: usize, start: usize) -> Result<(), LayerError> {
        self.keep(0)?;
        match self.spec.globals().iter().max() {
            Some(&position) if start == 0 && position >= segment => {
                Err(LayerError::GlobalPastFirstSegment { position, segment })
            }
            _ => Ok(()),
        }
    }

    fn forward_in_stream(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        if memory.start() == 0 {
            // The stream's first segment, which holds the global rows.
            let out = self.forward(heads, x.clone())?;
            memory.remember(x);
            return Ok(out);
        }
        let n = x.dims()[1];
        let (rows, placement) = memory.rows_before(x.clone());
        let (q, k, v) = heads.project(&self.local, rows);
        let q = q.narrow(2, placement.memory, n);
        let out = self.attend_local(heads, q, k, v, &placement)?;
        memory.remember(x);
        Ok(heads.merge(&self.output, out))
    }
}
