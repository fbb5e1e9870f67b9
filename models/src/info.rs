//! `model.info()`: parameters, the summed windows of every head and layer (MSWA's cost
//! measure, docs/semantics.md §3) and the KV-cache size.

use std::fmt;

use burn::module::Module;
use burn::tensor::backend::Backend;
use swa_attention::layers::AttentionKind;

use crate::decoder::{Decoder, DecoderConfig};

/// A model's size and attention cost at a given context length.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    /// Trainable parameters.
    pub parameters: usize,
    /// The context length the cost is measured at.
    pub context: usize,
    /// `Σ_{l,h} W(l, h)`, windows clipped to the context: attention cost and KV-cache size in
    /// keys (full attention counts the whole context; linear attention 0).
    pub window_sum: usize,
    /// Bytes of K and V (f32) that one cached position costs, summed over the layers that keep a
    /// KV cache.
    pub kv_bytes_per_token: usize,
    /// Bytes of the whole KV cache (f32) at this context: each head keeps its window's keys.
    pub kv_cache_bytes: usize,
}

impl ModelInfo {
    /// The cost relative to a reference window sum, as MSWA's tables report it (SWA = 1).
    pub fn relative_cost(&self, reference_window_sum: usize) -> f64 {
        self.window_sum as f64 / reference_window_sum as f64
    }
}

impl DecoderConfig {
    /// `Σ_{l,h} W(l, h)` at context `n` (docs/semantics.md §3).
    pub fn window_sum(&self, n: usize) -> usize {
        (0..self.layers).map(|l| self.kind_of(l).window_sum(self.heads, n)).sum()
    }
}

impl<B: Backend> Decoder<B> {
    /// Parameters, window sum and KV-cache bytes of the model built from `config`, at context
    /// length `context`.
    pub fn info(&self, config: &DecoderConfig, context: usize) -> ModelInfo {
        let head_dim = config.d_model / config.heads;
        // Bytes of K and V per kv head and position; query heads share kv heads under GQA.
        let per_position = 2 * head_dim * std::mem::size_of::<f32>();
        let cached_layers = (0..config.layers)
            .filter(|&l| !matches!(config.kind_of(l), AttentionKind::Linear { .. }))
            .count();
        let window_sum = config.window_sum(context);
        ModelInfo {
            parameters: self.num_params(),
            context,
            window_sum,
            kv_bytes_per_token: cached_layers * config.kv_heads * per_position,
            kv_cache_bytes: window_sum * config.kv_heads / config.heads * per_position,
        }
    }
}

impl fmt::Display for ModelInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "parameters          {}", self.parameters)?;
        writeln!(f, "context             {}", self.context)?;
        writeln!(f, "Σ windows (keys)    {}", self.window_sum)?;
        writeln!(f, "KV bytes per token  {}", self.kv_bytes_per_token)?;
        write!(f, "KV cache bytes      {}", self.kv_cache_bytes)
    }
}
