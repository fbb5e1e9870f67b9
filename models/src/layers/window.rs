//! The module of every mechanism that differs from the others only in which keys a query sees
//! (full, sliding, MSWA, SWAT, sinks, LongNet, Longformer without global tokens, and any new
//! mechanism that brings window specs): one call of the windowed core per spec, and with several
//! specs (LongNet's branches, docs/semantics.md §5) their outputs mixed by their softmax
//! denominators. With one spec it runs the layer's options that need one softmax per row
//! (learned sink logits, §9) or one causal call (Transformer-XL's relative positions, §4).
//! Also the pieces the other windowed mechanisms share: the attention map read through the
//! mechanism's own forward.

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::sigmoid;
use burn::tensor::{DType, Tensor, backend::Backend};

use super::LayerError;
use crate::layers::LayerOptions;
use crate::layers::attend::{Attend, Heads, LayerCache, Projections, Shape};
use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::longnet::mixed_attention;
use crate::layers::mechanism::Mechanism;
use crate::layers::segment_memory::{Keep, LayerMemory, StreamRows};
use crate::layers::transformer_xl::RelativePositions;
use swa_attention::relative::distances_needed;
use swa_attention::{
    ModelBackend, Rope, ScoreFn, ScoreOptions, WindowSpec, windowed_attention_relative,
};

/// One call of the windowed core per spec over the layer's projections, several mixed by their
/// denominators (docs/semantics.md §2–§5, §9).
#[derive(Module, Debug)]
pub struct WindowedAttention<B: Backend> {
    /// q, k, v projections.
    pub(crate) local: Projections<B>,
    /// Output projection, `[H·d_h, d]`.
    pub(crate) output: Linear<B>,
    /// Learned sink logit `s_h` of each query head, `[H]`.
    pub(crate) sinks: Option<Param<Tensor<B, 1>>>,
    /// Transformer-XL's position terms, in place of RoPE (docs/semantics.md §4).
    pub(crate) relative: Option<RelativePositions<B>>,
    /// Which keys each query sees: one spec per call of the core (LongNet: one per branch).
    specs: Vec<WindowSpec>,
    /// Whether q and k are rotated with RoPE.
    rotates: bool,
    /// The mechanism's name, for errors.
    name: &'static str,
}

impl<B: Backend> WindowedAttention<B> {
    /// The module of `mechanism` in a layer of `heads` with `options`; fails, naming the
    /// mechanism, for an option it cannot run. Its specs are the mechanism's at an unbounded
    /// length (segments unclipped), which see the same keys at every length.
    pub fn new(
        mechanism: &dyn Mechanism,
        shape: &Shape,
        options: &LayerOptions,
        scores: &ScoreOptions,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        let specs = mechanism.specs(shape.heads, shape.kv_heads, usize::MAX)?;
        let name = mechanism.name();
        // Sink logits and relative positions need one softmax per row, so one call.
        let single = specs.len() == 1;
        let sinks = match options.sink_logits {
            true if !single => return Err(LayerError::SinkLogitsUnsupported { kind: name }),
            true if scores.score_fn != ScoreFn::Softmax => {
                return Err(LayerError::SinkLogitsUnsupported { kind: "sigmoid" });
            }
            true => Some(Param::from_tensor(Tensor::zeros([shape.heads], device))),
            false => None,
        };
        let relative = match options.relative_positions {
            // The core's relative scores need one causal call (docs/semantics.md §4).
            true if !single || !specs[0].is_causal() => {
                return Err(LayerError::RelativePositionsUnsupported { kind: name });
            }
            true => {
                Some(RelativePositions::new(shape.d_model, shape.heads, shape.head_dim, device))
            }
            false => None,
        };
        Ok(Self {
            local: shape.projections(options.qkv_bias, device),
            output: shape.output(device),
            sinks,
            rotates: mechanism.rotates() && relative.is_none(),
            relative,
            specs,
            name,
        })
    }

    /// The window specs, one per call of the core.
    pub(crate) fn specs(&self) -> &[WindowSpec] {
        &self.specs
    }
}

impl<B: ModelBackend> WindowedAttention<B> {
    /// The core's call for queries `q: [batch, H, N, d_h]` and keys and values
    /// `[batch, H_kv, M + N, d_v]` (before RoPE) placed by `rows` → `[batch, H, N, d_v]`.
    pub(crate) fn attend(
        &self,
        heads: &Heads<B>,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        rows: &StreamRows,
    ) -> Result<Tensor<B, 4>, LayerError> {
        let (q, k) = match self.rotates {
            true => rows.rotate(heads.rope, q, k),
            false => (q, k),
        };
        let [spec] = self.specs.as_slice() else {
            let specs: Vec<_> = self.specs.iter().map(|spec| rows.place(spec)).collect();
            return Ok(mixed_attention(q, k, v, &specs, heads.scores)?);
        };
        let spec = rows.place(spec);
        let (q, table) = match &self.relative {
            Some(relative) => {
                let distances = distances_needed(&spec, q.dims()[2]).max(1);
                let scale = heads.scores.scale_for(heads.head_dim);
                let (q, table) = relative.queries_and_table(q, distances, scale);
                (q, Some(table))
            }
            None => (q, None),
        };
        let (out, lse) = windowed_attention_relative(q, k, v, table, &spec, heads.scores)?;
        Ok(self.sink(out, lse))
    }

    /// With learned sink logits, `o · σ(lse − s_h)`: the softmax's denominator gains `exp(s_h)`
    /// with no value (docs/semantics.md §9). `o: [batch, H, N, d_h]`, `lse: [batch, H, N]`.
    fn sink(&self, o: Tensor<B, 4>, lse: Tensor<B, 3>) -> Tensor<B, 4> {
        match &self.sinks {
            Some(sinks) => with_sink_logits(o, lse, sinks.val()),
            None => o,
        }
    }

    /// What a stream's next segment needs kept (docs/semantics.md §10): the widest window's
    /// reach less one and the sinks; nothing for heads confined to segments (LongNet), which
    /// must tile the stream's segments, as the rows of a call count their segments from its
    /// first row. Fails for an encoder, for segmented heads beside others, and for sinks with
    /// relative positions (their distances would not be the stream's).
    fn keep(&self, full_memory: usize) -> Result<Keep, LayerError> {
        if self.specs.iter().any(|spec| !spec.is_causal()) {
            return Err(LayerError::MemoryUnsupported { kind: self.name });
        }
        let heads = || self.specs.iter().flat_map(|spec| spec.heads());
        if heads().all(|w| w.segment.is_some()) {
            return Ok(Keep::nothing());
        }
        let [spec] = self.specs.as_slice() else {
            return Err(LayerError::MemoryUnsupported { kind: self.name });
        };
        if heads().any(|w| w.segment.is_some()) {
            return Err(LayerError::MemoryUnsupported { kind: self.name });
        }
        let keep = Keep::of(spec, full_memory);
        if keep.sinks > 0 && self.relative.is_some() {
            let kind = "sinks with Transformer-XL relative positions";
            return Err(LayerError::MemoryUnsupported { kind });
        }
        Ok(keep)
    }

    /// The rotation the cache applies: none without RoPE.
    fn cache_rope<'a>(&self, heads: &'a Heads<B>) -> Option<&'a Rope> {
        self.rotates.then_some(heads.rope)
    }
}

impl<B: ModelBackend> Attend<B> for WindowedAttention<B> {
    fn forward(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        let n = x.dims()[1];
        let (q, k, v) = heads.project(&self.local, x);
        let out = self.attend(heads, q, k, v, &StreamRows::alone(n))?;
        Ok(heads.merge(&self.output, out))
    }

    fn attention_map(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        let n = x.dims()[1];
        let (q, k, _) = heads.project(&self.local, x.clone());
        identity_columns(heads, &x, |values| {
            self.attend(heads, q.clone(), k.clone(), values, &StreamRows::alone(n))
        })
    }

    fn cache(
        &self,
        heads: &Heads<B>,
        _batch: usize,
        positions: CachePositions,
        _device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError> {
        if self.relative.is_some() {
            return Err(LayerError::NoRelativeDecoding);
        }
        let cache = KvCache::new(self.specs.clone(), heads.scores.clone(), positions)?;
        Ok(LayerCache::Keys(cache))
    }

    fn step(&self, heads: &Heads<B>, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let LayerCache::Keys(cache) = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let rope = self.cache_rope(heads);
        let (q, k, v) = heads.project(&self.local, x);
        cache.append(k, v, rope);
        let out = match self.sinks.is_some() {
            true => {
                let (o, lse) = cache.attend_with_lse(q, rope);
                self.sink(o, lse)
            }
            false => cache.attend(q, rope),
        };
        heads.merge(&self.output, out)
    }

    fn prefill(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let LayerCache::Keys(cache) = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let n = x.dims()[1];
        let (q, k, v) = heads.project(&self.local, x);
        cache.fill(k.clone(), v.clone(), self.cache_rope(heads));
        let out = self.attend(heads, q, k, v, &StreamRows::alone(n))?;
        Ok(heads.merge(&self.output, out))
    }

    fn pins_positions(&self) -> bool {
        self.specs.iter().any(|spec| spec.sinks() > 0 || !spec.globals().is_empty())
    }

    /// Keeps the widest window's reach less one and the sinks (docs/semantics.md §10); nothing
    /// for heads confined to segments. Fails for an encoder, for segmented heads beside
    /// others, and for sinks with relative positions.
    fn memory(
        &self,
        _batch: usize,
        full_memory: usize,
        _device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        Ok(LayerMemory::hidden(self.keep(full_memory)?))
    }

    /// What `memory` refuses, and heads confined to segments (LongNet's) whose segments do
    /// not tile the stream's segments.
    fn check_segment(&self, segment: usize, _start: usize) -> Result<(), LayerError> {
        self.keep(0)?;
        let heads = self.specs.iter().flat_map(|spec| spec.heads());
        match heads.filter_map(|w| w.segment).find(|&s| s == 0 || !segment.is_multiple_of(s)) {
            Some(branch) => Err(LayerError::SegmentsInStream { segment, branch }),
            None => Ok(()),
        }
    }

    fn forward_in_stream(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let n = x.dims()[1];
        // The kept rows and the segment's in one product; the kept rows' queries are dropped.
        let (rows, placement) = memory.rows_before(x.clone());
        let (q, k, v) = heads.project(&self.local, rows);
        let q = q.narrow(2, placement.memory, n);
        let out = self.attend(heads, q, k, v, &placement)?;
        memory.remember(x);
        Ok(heads.merge(&self.output, out))
    }
}

/// The core's output with learned sink logits (docs/semantics.md §9): `o · σ(lse − s_h)`, as if
/// each head's softmax had one more key, of score `s_h` and value 0. `o: [batch, H, N, d]`,
/// `lse: [batch, H, N]`, `sinks: [H]` → `[batch, H, N, d]`; differentiable in all three. The gate
/// is computed in f32 (the core's `lse` is f32, docs/semantics.md §1), then cast to `o`'s dtype.
pub fn with_sink_logits<B: Backend>(
    o: Tensor<B, 4>,
    lse: Tensor<B, 3>,
    sinks: Tensor<B, 1>,
) -> Tensor<B, 4> {
    let s = sinks.unsqueeze_dims::<3>(&[0, 2]).cast(DType::F32);
    let dtype = o.dtype();
    o * sigmoid(lse.cast(DType::F32) - s).cast(dtype).unsqueeze_dim(3)
}

/// The attention weights of every head over `x: [batch, N, d_model]`, `[batch, H, N, N]`, read
/// through `attend`, a mechanism's own attention over given values `[batch, H_kv, N, d_h]`.
/// Its output is linear in the values, so columns of the identity as values give the weights,
/// `d_h` keys at a time: the weights come from the same code as the output, whatever the
/// mechanism and backend.
pub fn identity_columns<B: ModelBackend>(
    heads: &Heads<B>,
    x: &Tensor<B, 3>,
    mut attend: impl FnMut(Tensor<B, 4>) -> Result<Tensor<B, 4>, LayerError>,
) -> Result<Tensor<B, 4>, LayerError> {
    let [batch, n, _] = x.dims();
    let (d, chunks) = (heads.head_dim, n.div_ceil(heads.head_dim));
    let identity = Tensor::<B, 2>::eye(chunks * d, &x.device()).narrow(0, 0, n);
    let mut columns = Vec::with_capacity(chunks);
    for chunk in 0..chunks {
        let values = identity.clone().narrow(1, chunk * d, d).unsqueeze::<4>();
        columns.push(attend(values.expand([batch, heads.kv_heads, n, d]))?);
    }
    Ok(Tensor::cat(columns, 3).narrow(3, 0, n))
}
