//! Efficiency benchmarks (MSWA §5.3 / Figure 3, SWAT's efficiency experiment), shared by
//! `swa-zoo bench` (a quick run) and `benches/efficiency.rs` (the full one):
//! - [`decode`]: time to predict the next token at several positions and batch sizes, the
//!   KV-cache bytes of each kind, and per-token time against the position up to long contexts;
//! - [`streaming`]: windowed models against a full-attention model run StreamingLLM-style
//!   (sinks + recent window, docs/semantics.md §7);
//! - [`training`]: tokens per second and peak memory of one training step;
//! - [`heap`]: the counting allocator behind the peak-memory numbers;
//! - [`core_bench`]: what the benchmarks of the core itself share (the path a call takes, the anchors' CSV);
//! - [`suite`]: all of them at a full, a quick and a tiny size.
//!
//! Every number comes from running the models built here; nothing is estimated.

pub mod core_bench;
pub mod decode;
pub mod heap;
pub mod streaming;
pub mod suite;
pub mod training;

use burn::config::Config;
use swa_models::DecoderConfig;
use swa_models::layers::AttentionKind;
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};

use crate::error::AppError;

/// The attention a benchmark compares, as a recipe from one base window `W` to each layer's
/// kind (MSWA's differs per layer). Every model of a comparison is built from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchAttention {
    /// Full causal attention, the baseline.
    Full,
    /// A sliding window of `W` keys (SWA).
    Swa,
    /// MSWA: windows `W·f_l·f_h` over layers and heads, geometric `f = (1/4, 1/2, 1, 2)`
    /// (docs/semantics.md §3), so Σ windows is (15/16)² of SWA's.
    Mswa,
    /// SWAT: sigmoid, balanced ALiBi and RoPE over a window of `W` (docs/semantics.md §4).
    Swat,
    /// LongNet with segments `(W, 2W, 4W)` and dilations `(1, 2, 4)`: about `W` keys per branch
    /// (docs/semantics.md §5).
    LongNet,
}

impl BenchAttention {
    /// The name printed in tables.
    pub fn name(self) -> &'static str {
        match self {
            BenchAttention::Full => "full",
            BenchAttention::Swa => "SWA",
            BenchAttention::Mswa => "MSWA",
            BenchAttention::Swat => "SWAT",
            BenchAttention::LongNet => "LongNet",
        }
    }

    /// Whether the base window changes the model (every one but full attention).
    pub fn windowed(self) -> bool {
        self != BenchAttention::Full
    }
}

/// The model every attention is built into: only the attention differs.
#[derive(Config, Debug)]
pub struct BenchModel {
    /// Model width `d`.
    pub d_model: usize,
    /// Blocks `L` (at least 4 for MSWA's layer groups).
    pub layers: usize,
    /// Query heads `H`, also the kv heads (at least 4 for MSWA's head groups).
    pub heads: usize,
    /// Vocabulary size (the LM head's width).
    #[config(default = 256)]
    pub vocab: usize,
}

impl BenchModel {
    /// MSWA's Figure 3 model: 32 layers, 16 heads, d = 1024, with a 32000-token vocabulary.
    pub fn paper() -> Self {
        Self::new(1024, 32, 16).with_vocab(32000)
    }

    /// The scaled-down model of the CPU tables: 4 layers, 8 heads, d = 128, bytes.
    pub fn cpu() -> Self {
        Self::new(128, 4, 8)
    }

    /// A model for tests: 4 layers, 4 heads, d = 32.
    pub fn tiny() -> Self {
        Self::new(32, 4, 4)
    }

    /// The decoder of `attention` at base window `window`.
    pub fn config(
        &self,
        attention: BenchAttention,
        window: usize,
    ) -> Result<DecoderConfig, AppError> {
        let (layers, heads) = (self.layers, self.heads);
        let kinds = match attention {
            BenchAttention::Full => vec![AttentionKind::Full],
            BenchAttention::Swa => vec![AttentionKind::Sliding { window }],
            BenchAttention::Swat => vec![AttentionKind::swat(window)],
            BenchAttention::Mswa => {
                mswa_windows(MswaVariant::Both, MswaStrategy::Geometric, window, layers, heads)
                    .map_err(|e| AppError::step(format!("MSWA at window {window}"), e))?
                    .into_iter()
                    .map(|windows| AttentionKind::MultiScale { windows })
                    .collect()
            }
            BenchAttention::LongNet => {
                vec![AttentionKind::LongNet {
                    segments: vec![window, 2 * window, 4 * window],
                    dilations: vec![1, 2, 4],
                }]
            }
        };
        let config = DecoderConfig::new(kinds)
            .with_vocab_size(self.vocab)
            .with_d_model(self.d_model)
            .with_layers(layers)
            .with_heads(heads);
        config.validate().map_err(|e| AppError::step(format!("{} model", attention.name()), e))?;
        Ok(config)
    }

    /// One line describing the model.
    pub fn describe(&self) -> String {
        format!(
            "{} layers, {} heads, d = {}, vocabulary {}",
            self.layers, self.heads, self.d_model, self.vocab
        )
    }
}

/// The median of `values` (the lower middle one for an even count); NaN when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

/// The median wall time, in milliseconds, of `runs` calls of `call` (warm it up first: the first
/// call of a kernel compiles it).
pub fn median_ms(runs: usize, mut call: impl FnMut()) -> f64 {
    let times = (0..runs).map(|_| {
        let start = std::time::Instant::now();
        call();
        start.elapsed().as_secs_f64() * 1e3
    });
    median(times.collect())
}

/// Milliseconds to 3 significant decimals in a table cell.
fn ms(value: f64) -> String {
    format!("{value:.3}")
}

/// Bytes as MiB in a table cell.
fn mib(bytes: usize) -> String {
    format!("{:.2}", bytes as f64 / (1 << 20) as f64)
}
