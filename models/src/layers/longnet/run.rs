//! LongNet's module in a layer: the layer's projections, one call of the core per branch, the
//! branches mixed by their denominators; decoding with one spec per branch, and a segment
//! memory that keeps nothing.

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Tensor, backend::Backend};

use super::{LongNet, branch_specs, longnet_attention};
use crate::layers::attend::{Attend, Heads, LayerCache, Projections, Shape};
use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::segment_memory::{Keep, LayerMemory, StreamRows};
use crate::layers::window::identity_columns;
use crate::layers::{LayerError, LayerOptions};
use swa_attention::ModelBackend;

/// LongNet's module: the layer's projections, one call of the core per branch, the branches
/// mixed by their denominators.
#[derive(Module, Debug)]
pub struct LongNetAttention<B: Backend> {
    /// q, k, v projections.
    pub(crate) local: Projections<B>,
    /// Output projection, `[H·d_h, d]`.
    pub(crate) output: Linear<B>,
    /// Segment length `w_b` of each branch.
    segments: Vec<usize>,
    /// Dilation `r_b` of each branch.
    dilations: Vec<usize>,
}

impl<B: Backend> LongNetAttention<B> {
    /// The module of `mechanism`'s branches; fails for learned sink logits and relative
    /// positions, which need one softmax per row and one call.
    pub(crate) fn new(
        mechanism: &LongNet,
        shape: &Shape,
        options: &LayerOptions,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        if options.sink_logits {
            return Err(LayerError::SinkLogitsUnsupported { kind: "LongNet" });
        }
        if options.relative_positions {
            return Err(LayerError::RelativePositionsUnsupported { kind: "LongNet" });
        }
        Ok(Self {
            local: shape.projections(options.qkv_bias, device),
            output: shape.output(device),
            segments: mechanism.segments.to_vec(),
            dilations: mechanism.dilations.to_vec(),
        })
    }
}

impl<B: ModelBackend> LongNetAttention<B> {
    /// The branches over rows placed by `rows` (their queries all the rows: LongNet keeps no
    /// memory), `q: [batch, H, N, d_h]`, `k, v: [batch, H_kv, N, d_v]` before RoPE.
    fn attend(
        &self,
        heads: &Heads<B>,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        rows: &StreamRows,
    ) -> Result<Tensor<B, 4>, LayerError> {
        let (q, k) = rows.rotate(heads.rope, q, k);
        Ok(longnet_attention(q, k, v, &self.segments, &self.dilations, heads.scores)?)
    }
}

impl<B: ModelBackend> Attend<B> for LongNetAttention<B> {
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

    /// One spec per branch, the segments unclipped: the cache keeps the current segment.
    fn cache(
        &self,
        heads: &Heads<B>,
        _batch: usize,
        positions: CachePositions,
        _device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError> {
        let (h, kv) = (heads.heads, heads.kv_heads);
        let specs = branch_specs(&self.segments, &self.dilations, h, kv, usize::MAX)?;
        Ok(LayerCache::Keys(KvCache::new(specs, heads.scores.clone(), positions)?))
    }

    fn step(&self, heads: &Heads<B>, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let LayerCache::Keys(cache) = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let (q, k, v) = heads.project(&self.local, x);
        cache.append(k, v, Some(heads.rope));
        heads.merge(&self.output, cache.attend(q, Some(heads.rope)))
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
        cache.fill(k.clone(), v.clone(), Some(heads.rope));
        let out = self.attend(heads, q, k, v, &StreamRows::alone(n))?;
        Ok(heads.merge(&self.output, out))
    }

    fn pins_positions(&self) -> bool {
        false
    }

    /// Nothing: a stream of whole LongNet segments needs none (docs/semantics.md §10).
    fn memory(
        &self,
        _batch: usize,
        _full_memory: usize,
        _device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        Ok(LayerMemory::hidden(Keep::nothing()))
    }

    /// Every branch's segments must tile the stream's segments.
    fn check_segment(&self, segment: usize, _start: usize) -> Result<(), LayerError> {
        match self.segments.iter().find(|&&s| s == 0 || !segment.is_multiple_of(s)) {
            Some(&branch) => Err(LayerError::LongNetSegmentsInStream { segment, branch }),
            None => Ok(()),
        }
    }

    fn forward_in_stream(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let (rows, placement) = memory.rows_before(x.clone());
        let (q, k, v) = heads.project(&self.local, rows);
        let out = self.attend(heads, q, k, v, &placement)?;
        memory.remember(x);
        Ok(heads.merge(&self.output, out))
    }
}
