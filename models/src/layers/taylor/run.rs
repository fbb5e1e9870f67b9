//! Taylor linear attention in a layer: its own projections and RoPE, its running sums as the
//! decoding state and as the segment memory.

use burn::tensor::{Tensor, backend::Backend};

use super::{LinearAttention, LinearAttentionConfig, TaylorLinear};
use crate::layers::attend::{Attend, Heads, LayerCache, Shape};
use crate::layers::cache::CachePositions;
use crate::layers::segment_memory::LayerMemory;
use crate::layers::{LayerError, LayerOptions};
use swa_attention::ModelBackend;

impl<B: Backend> LinearAttention<B> {
    /// The module of `mechanism` in a layer of `shape` whose RoPE has base `rope_base`; fails
    /// for learned sink logits and relative positions (linear attention has no softmax and no
    /// scores). Its q and k have `d_f` features per head; it has no kv groups.
    pub(crate) fn new(
        mechanism: &TaylorLinear,
        shape: &Shape,
        options: &LayerOptions,
        rope_base: f64,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        if options.sink_logits {
            return Err(LayerError::SinkLogitsUnsupported { kind: "linear" });
        }
        if options.relative_positions {
            return Err(LayerError::RelativePositionsUnsupported { kind: "linear" });
        }
        let config = LinearAttentionConfig::new(shape.d_model, shape.heads)
            .with_feature_dim(mechanism.feature_dim)
            .with_rope_base(rope_base);
        Ok(config.init(device)?)
    }
}

/// Linear attention runs on its own projections and RoPE (`heads` is unused): the layer's
/// q and k norms are not applied.
impl<B: ModelBackend> Attend<B> for LinearAttention<B> {
    fn forward(&self, _: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        Ok(LinearAttention::forward(self, x))
    }

    fn attention_map(&self, _: &Heads<B>, _: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        Err(LayerError::NoAttentionMap { kind: "linear" })
    }

    fn cache(
        &self,
        _: &Heads<B>,
        batch: usize,
        _: CachePositions,
        device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError> {
        Ok(LayerCache::Linear(self.empty_state(batch, device)))
    }

    fn step(&self, _: &Heads<B>, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let LayerCache::Linear(state) = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let (y, next) = LinearAttention::step(self, x, state.clone());
        *state = next;
        y
    }

    fn prefill(
        &self,
        _: &Heads<B>,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let LayerCache::Linear(state) = cache else {
            unreachable!("a layer's cache is made by its own mechanism")
        };
        let (y, filled) = LinearAttention::prefill(self, x);
        *state = filled;
        Ok(y)
    }

    fn pins_positions(&self) -> bool {
        false
    }

    /// The sums over every earlier position.
    fn memory(
        &self,
        batch: usize,
        _: usize,
        device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        Ok(LayerMemory::Linear(self.empty_state(batch, device)))
    }

    fn forward_in_stream(
        &self,
        _: &Heads<B>,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let LayerMemory::Linear(state) = memory else {
            unreachable!("a layer's memory is made by its own mechanism")
        };
        let (y, next) = self.forward_from(x, state);
        *state = next;
        Ok(y)
    }
}
