//! The small decoder that the decoding tests of swa-models and the launch counts of
//! swa-training run, and the tokens they feed it.

use swa_models::DecoderConfig;
use swa_models::layers::AttentionKind;

/// A decoder of `attention` (at least 2 layers): a vocabulary of 32, `d_model` 16, 2 kv heads.
pub fn config(attention: Vec<AttentionKind>) -> DecoderConfig {
    let layers = attention.len().max(2);
    DecoderConfig::new(attention)
        .with_vocab_size(32)
        .with_d_model(16)
        .with_layers(layers)
        .with_kv_heads(Some(2))
}

/// `n` fixed tokens of [`config`]'s vocabulary.
pub fn token_ids(n: usize) -> Vec<i64> {
    (0..n).map(|i| ((i * 7919 + 13) % 32) as i64).collect()
}
