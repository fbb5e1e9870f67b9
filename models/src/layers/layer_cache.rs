//! Decoding with a [`SelfAttention`] layer (docs/semantics.md §7): its state ([`LayerCache`]),
//! one token at a time ([`SelfAttention::step`]), and a whole prompt in one forward pass
//! ([`SelfAttention::prefill`]), which leaves the state that stepping through the prompt would.

use burn::tensor::{Tensor, backend::Backend};

use super::LayerError;
use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::linear::LinearState;
use crate::layers::mixer::Mixer;
use crate::layers::{SelfAttention, longnet};
use swa_attention::{ModelBackend, WindowSpec};

/// A layer's decoding state (docs/semantics.md §7), made by [`SelfAttention::cache`]. A clone is
/// an independent copy (tensors are shared until one of the copies writes).
#[derive(Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "one cache per layer: boxing would add an indirection to save a few hundred bytes"
)]
#[non_exhaustive]
pub enum LayerCache<B: Backend> {
    /// Windowed kinds: the bounded cache of the local projections, and for Longformer's global
    /// rows a cache of the global projections, kept only until the last global position.
    Windowed {
        /// Keys and values of the layer's ordinary projections.
        local: KvCache<B>,
        /// Keys and values of `Wk_g, Wv_g`, with the global positions.
        global: Option<(KvCache<B>, Vec<usize>)>,
    },
    /// Linear attention's recurrent state (docs/semantics.md §6).
    Linear(LinearState<B>),
}

impl<B: Backend> LayerCache<B> {
    /// Bytes held by the cached keys and values or the recurrent state.
    pub fn bytes(&self) -> usize {
        let bytes = |t: &Tensor<B, 3>| t.shape().num_elements() * t.dtype().size();
        match self {
            LayerCache::Windowed { local, global } => {
                local.bytes() + global.as_ref().map_or(0, |(cache, _)| cache.bytes())
            }
            LayerCache::Linear(state) => {
                let kv = state.kv.shape().num_elements() * state.kv.dtype().size();
                kv + bytes(&state.k_sum)
            }
        }
    }
}

impl<B: Backend> SelfAttention<B> {
    /// An empty decoding state for `batch` sequences. `positions` matters for sinks, where
    /// [`CachePositions::Streaming`] is StreamingLLM's position shift. Fails for an encoder
    /// (bidirectional Longformer), which cannot decode.
    pub fn cache(
        &self,
        batch: usize,
        positions: CachePositions,
        device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError> {
        if let Mixer::Linear(linear) = &self.mixer {
            return Ok(LayerCache::Linear(linear.empty_state(batch, device)));
        }
        if self.has_relative_positions() {
            return Err(LayerError::NoRelativeDecoding);
        }
        let specs = match self.kind.branches() {
            Some((segments, dilations)) => {
                longnet::branch_specs(&segments, &dilations, self.heads, self.kv_heads, usize::MAX)?
            }
            None => vec![self.kind.spec(self.heads, self.kv_heads)?],
        };
        let globals = specs[0].globals().to_vec();
        let local = KvCache::new(specs, self.scores.clone(), positions)?;
        let global = match globals.is_empty() {
            true => None,
            false => {
                let spec = WindowSpec::full(self.heads, self.kv_heads)?;
                Some((KvCache::new(vec![spec], self.scores.clone(), positions)?, globals))
            }
        };
        Ok(LayerCache::Windowed { local, global })
    }
}

impl<B: ModelBackend> SelfAttention<B> {
    /// One decoding step: `x: [batch, 1, d_model]` at the cache's next position →
    /// `[batch, 1, d_model]`, the same as row `position` of [`SelfAttention::forward`] over the
    /// whole prefix (with [`CachePositions::Absolute`]).
    pub fn step(&self, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let (mixer, local, global) = match (cache, &self.mixer) {
            (LayerCache::Linear(state), Mixer::Linear(linear)) => {
                let (y, next) = linear.step(x, state.clone());
                *state = next;
                return y;
            }
            (LayerCache::Windowed { local, global }, Mixer::Windowed(mixer)) => {
                (mixer, local, global)
            }
            _ => unreachable!("a layer's cache is made by its own `cache`"),
        };
        let position = local.len();
        let (q, k, v) = self.project(&mixer.local, x.clone());
        local.append(k, v, self.rope());
        let mut out = match self.has_sink_logits() {
            true => {
                let (o, lse) = local.attend_with_lse(q, self.rope());
                self.sink(o, lse)
            }
            false => local.attend(q, self.rope()),
        };
        if let (Some((cache, globals)), Some(projections)) = (global.as_mut(), &mixer.global) {
            let (q_g, k_g, v_g) = self.project(projections, x);
            cache.append(k_g, v_g, self.rope());
            if globals.contains(&position) {
                out = cache.attend(q_g, self.rope());
            }
            // No query after the last global position reads the global keys again.
            if globals.last() <= Some(&position) {
                *global = None;
            }
        }
        self.merge(mixer, out)
    }

    /// The forward pass over a prompt `x: [batch, N, d_model]` at positions `0 … N−1` →
    /// `[batch, N, d_model]`, filling `cache`, which must be empty, with what N calls of
    /// [`SelfAttention::step`] would leave in it: a windowed layer's last window, its sinks and
    /// globals, a full layer's every key, linear attention's sums.
    pub fn prefill(
        &self,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let (mixer, local, global) = match (cache, &self.mixer) {
            (LayerCache::Linear(state), Mixer::Linear(linear)) => {
                let (y, filled) = linear.prefill(x);
                *state = filled;
                return Ok(y);
            }
            (LayerCache::Windowed { local, global }, Mixer::Windowed(mixer)) => {
                (mixer, local, global)
            }
            _ => unreachable!("a layer's cache is made by its own `cache`"),
        };
        let n = x.dims()[1];
        let (q, k, v) = self.project(&mixer.local, x.clone());
        local.fill(k.clone(), v.clone(), self.rope());
        let projected = mixer.global.as_ref().map(|projections| self.project(projections, x));
        if let (Some((cache, globals)), Some((_, k_g, v_g))) = (global.as_mut(), &projected) {
            match globals.last().is_some_and(|&last| last < n) {
                true => *global = None,
                false => cache.fill(k_g.clone(), v_g.clone(), self.rope()),
            }
        }
        Ok(self.merge(mixer, self.attend(q, k, v, projected)?))
    }
}
