//! `model.info()`: parameters, the summed windows of every head and layer (MSWA's cost
//! measure, docs/semantics.md §3) and the KV-cache size.

use std::fmt;

use burn::module::Module;
use burn::tensor::backend::Backend;

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
    /// The same, layer by layer: a windowed layer's stays at its window, a full layer's is the
    /// whole context, a linear layer's 0 (its recurrent state is not a KV cache).
    pub kv_layer_bytes: Vec<usize>,
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

    /// Bytes of K and V (f32) that one cached position of one kv head costs.
    fn kv_bytes_per_position(&self) -> usize {
        2 * self.head_width() * std::mem::size_of::<f32>()
    }

    /// Bytes of each layer's KV cache (f32) at context `n`: each query head keeps its window's
    /// keys, read through its kv head (GQA).
    pub fn kv_layer_bytes(&self, n: usize) -> Vec<usize> {
        (0..self.layers)
            .map(|l| {
                let keys = self.kind_of(l).window_sum(self.heads, n);
                keys * self.kv_heads() / self.heads * self.kv_bytes_per_position()
            })
            .collect()
    }
}

impl<B: Backend> Decoder<B> {
    /// Parameters, window sum and KV-cache bytes of the model built from `config`, at context
    /// length `context`.
    pub fn info(&self, config: &DecoderConfig, context: usize) -> ModelInfo {
        let keeps_keys = |l| {
            let specs = config.kind_of(l).specs(config.heads, config.kv_heads(), context);
            specs.is_ok_and(|specs| !specs.is_empty())
        };
        let cached_layers = (0..config.layers).filter(|&l| keeps_keys(l)).count();
        let kv_layer_bytes = config.kv_layer_bytes(context);
        ModelInfo {
            parameters: self.num_params(),
            context,
            window_sum: config.window_sum(context),
            kv_bytes_per_token: cached_layers * config.kv_heads() * config.kv_bytes_per_position(),
            kv_cache_bytes: kv_layer_bytes.iter().sum(),
            kv_layer_bytes,
        }
    }
}

impl fmt::Display for ModelInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "parameters          {}", self.parameters)?;
        writeln!(f, "context             {}", self.context)?;
        writeln!(f, "Σ windows (keys)    {}", self.window_sum)?;
        writeln!(f, "KV bytes per token  {}", self.kv_bytes_per_token)?;
        writeln!(f, "KV cache bytes      {}", self.kv_cache_bytes)?;
        write!(f, "  per layer         {:?}", self.kv_layer_bytes)
    }
}

#[cfg(test)]
mod tests {
    use crate::layers::AttentionKind;
    use burn::backend::NdArray;

    use crate::decoder::DecoderConfig;

    /// Width 8 and vocabulary 16; two query heads of width 4 sharing one kv head; a sliding
    /// layer of 4 keys and a linear layer of 4 features per head.
    fn config() -> DecoderConfig {
        let kinds =
            vec![AttentionKind::Sliding { window: 4 }, AttentionKind::Linear { feature_dim: 4 }];
        DecoderConfig::new(kinds)
            .with_vocab_size(16)
            .with_d_model(8)
            .with_layers(2)
            .with_heads(2)
            .with_kv_heads(Some(1))
    }

    #[test]
    fn window_sums_clip_to_the_context() {
        assert_eq!(config().window_sum(2), 2 * 2);
        assert_eq!(config().window_sum(10), 2 * 4);
    }

    #[test]
    fn parameters_and_kv_cache() {
        let model = config().init::<NdArray>(&Default::default()).unwrap();
        let info = model.info(&config(), 10);
        // Each block: two norms and the SwiGLU MLP (hidden width 64); the sliding layer's
        // q, k, v, o are 8×8, 8×4, 8×4, 8×8; the linear layer's four are 8×8. Then the
        // embedding and the LM head, 16×8 each, and the final norm.
        let block = 2 * 8 + 3 * 8 * 64;
        let attention = (64 + 32 + 32 + 64) + 4 * 64;
        assert_eq!(info.parameters, 2 * block + attention + 2 * 16 * 8 + 8);
        // Only the sliding layer caches: K and V of its one kv head, 4 f32 each.
        assert_eq!(info.kv_bytes_per_token, 2 * 4 * 4);
        // Its 2 heads' windows of 4 keys, read through the one kv head.
        assert_eq!(info.window_sum, 8);
        assert_eq!(info.kv_cache_bytes, 4 * info.kv_bytes_per_token);
        assert_eq!(info.kv_layer_bytes, vec![info.kv_cache_bytes, 0]);
        assert_eq!(info.relative_cost(16), 0.5);
    }
}
