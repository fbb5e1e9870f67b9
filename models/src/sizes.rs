//! The sizes a decoder configuration implies, checked before anything is built
//! (docs/reliability.md). A configuration read from a file (`config.json`, `train.json`) can ask
//! for anything; an allocation the machine cannot hold aborts the process, which no error can
//! report. So every size is held under a ceiling above any published model's
//! ([`DecoderConfig::check_sizes`], part of `validate`), the weights a configuration needs at
//! least ([`DecoderConfig::min_weights`]) are compared with what a checkpoint holds before its
//! model is built, and with the memory the machine has before random weights are drawn
//! ([`DecoderConfig::check_memory`]).

use crate::decoder::DecoderConfig;
use crate::error::ModelError;

/// Most layers a configuration may have (published decoders have at most a few hundred).
pub(crate) const MAX_LAYERS: usize = 1024;

/// Most query or kv heads.
const MAX_HEADS: usize = 1024;

/// Widest `d_model`, head dim or MLP hidden width.
const MAX_WIDTH: usize = 1 << 20;

/// Largest vocabulary.
const MAX_VOCAB: usize = 1 << 24;

impl DecoderConfig {
    /// Checks every size against its ceiling, naming the field.
    pub(crate) fn check_sizes(&self) -> Result<(), ModelError> {
        let arch = self.arch();
        let sizes = [
            ("DecoderConfig.layers", self.layers, MAX_LAYERS),
            ("DecoderConfig.heads", self.heads, MAX_HEADS),
            ("DecoderConfig.kv_heads", self.kv_heads(), MAX_HEADS),
            ("DecoderConfig.d_model", self.d_model, MAX_WIDTH),
            ("DecoderConfig.vocab_size", self.vocab_size, MAX_VOCAB),
            ("DecoderConfig.head_dim", arch.head_dim.unwrap_or(0), MAX_WIDTH),
            ("DecoderConfig.mlp_hidden", arch.mlp_hidden.unwrap_or(0), MAX_WIDTH),
        ];
        for (field, size, ceiling) in sizes {
            if size > ceiling {
                let problem = format!("{size} is above the most this library builds, {ceiling}");
                return Err(ModelError::Config { field, problem });
            }
        }
        Ok(())
    }

    /// A lower bound on the model's weights: the embedding, and per layer the query and output
    /// projections and the MLP. `None` when it overflows `usize`.
    pub fn min_weights(&self) -> Option<usize> {
        let d = self.d_model;
        let attention =
            d.checked_mul(self.heads)?.checked_mul(self.head_width())?.checked_mul(2)?;
        let mlp = d.checked_mul(self.mlp().hidden_width())?.checked_mul(3)?;
        let layer = attention.checked_add(mlp)?;
        self.vocab_size.checked_mul(d)?.checked_add(layer.checked_mul(self.layers)?)
    }

    /// Checks that the model's f32 weights fit the memory the machine has available (where the
    /// system says: Linux's `MemAvailable`), before they are drawn.
    pub(crate) fn check_memory(&self) -> Result<(), ModelError> {
        let needed = self.min_weights().and_then(|w| w.checked_mul(4)).unwrap_or(usize::MAX);
        match available_memory() {
            Some(available) if needed as u64 > available => Err(ModelError::Config {
                field: "DecoderConfig",
                problem: format!(
                    "its weights need at least {} in f32, more than the {} this machine has \
                     available",
                    gib(needed as u64),
                    gib(available)
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// `bytes` in GiB, for messages.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The memory available to new allocations (Linux's `MemAvailable`), or `None` where the
/// system does not say.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use crate::layers::AttentionKind;

    use super::*;

    #[test]
    fn sizes_past_their_ceiling_or_the_memory_are_errors_naming_them() {
        let config = DecoderConfig::new(vec![AttentionKind::Sliding { window: 4 }])
            .with_d_model(16)
            .with_layers(2)
            .with_heads(2);
        assert!(config.check_sizes().is_ok() && config.check_memory().is_ok());
        let mut deep = config.clone();
        deep.layers = 1_000_000_000_000;
        assert!(deep.validate().unwrap_err().to_string().starts_with("DecoderConfig.layers"));
        let mut wide = config.clone();
        wide.d_model = 1 << 20;
        wide.vocab_size = 1 << 24;
        let error = wide.check_memory().unwrap_err().to_string();
        assert!(error.contains("more than the") || available_memory().is_none(), "{error}");
        let mut huge = config;
        huge.d_model = usize::MAX / 2;
        assert_eq!(huge.min_weights(), None);
    }
}
