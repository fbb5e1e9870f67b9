//! The models the suite compares: one tiny decoder per attention kind (width 32, 4 query heads
//! over 2 kv heads so that every windowed kind also runs GQA, 2 layers, 48 tokens), or a named
//! preset.

use swa_attention::rng::SplitMix64;
use swa_models::layers::AttentionKind;
use swa_models::{Architecture, DecoderConfig, Preset};

/// Vocabulary of the built-in cases.
const VOCAB: usize = 64;
/// Width of the built-in cases.
const D_MODEL: usize = 32;

/// One model to compare across backends, with its inputs.
#[derive(Clone, Debug)]
pub struct CheckCase {
    /// Name in the report (the attention kind, or the preset's name).
    pub name: String,
    /// The model.
    pub config: DecoderConfig,
    /// Sequences in the batch of the forward and backward pass.
    pub batch: usize,
    /// Tokens per sequence of that batch.
    pub seq_len: usize,
    /// Prompt length of the greedy decoding (taken from the batch's first sequence).
    pub prompt_len: usize,
    /// Tokens decoded greedily after the prompt.
    pub decode_steps: usize,
    /// Seed of the weights and the tokens.
    pub seed: u64,
}

impl CheckCase {
    /// A case of `config` with the suite's sizes: 2 sequences of `seq_len` tokens, a prompt of
    /// 4 tokens and 64 decoded tokens.
    pub fn new(name: &str, config: DecoderConfig, seq_len: usize) -> Self {
        Self {
            name: name.into(),
            config,
            batch: 2,
            seq_len,
            prompt_len: 4,
            decode_steps: 64,
            seed: 7,
        }
    }

    /// The case of preset `name` (see `swa-zoo info --list`), byte-level, at its training length
    /// capped at 128 tokens; `None` if no preset has that name.
    pub fn preset(name: &str) -> Option<Self> {
        let preset = Preset::by_name(name, 256)?;
        Some(Self::new(&preset.name, preset.config, preset.train_len.min(128)))
    }

    /// The input tokens, `batch` rows of `seq_len + 1` ids in `[0, vocab)` from the seed: a row's
    /// first `seq_len` are the inputs and its last `seq_len` the next-token targets.
    pub fn tokens(&self) -> Vec<Vec<usize>> {
        let vocab = self.config.vocab_size as u64;
        let mut stream = SplitMix64::new(self.seed ^ 0x746f_6b65_6e73);
        (0..self.batch)
            .map(|_| (0..=self.seq_len).map(|_| (stream.next_u64() % vocab) as usize).collect())
            .collect()
    }
}

/// One tiny case per attention kind, in the README's order: full, SWA, MSWA, SWAT, LongNet,
/// Longformer decoder and encoder, sinks, linear, and the linear + local hybrid; then MSWA with
/// Transformer-XL's relative positions (docs/semantics.md §4), which does not decode.
pub fn attention_kinds() -> Vec<CheckCase> {
    let mswa = |base: usize| AttentionKind::MultiScale {
        windows: vec![base, 2 * base, 4 * base, 8 * base],
    };
    let longformer = |causal| AttentionKind::Longformer {
        window: 4,
        dilations: vec![1, 1, 2, 2],
        globals: vec![0, 20],
        causal,
    };
    let linear = AttentionKind::Linear { feature_dim: 8 };
    let kinds: Vec<(&str, Vec<AttentionKind>)> = vec![
        ("full", vec![AttentionKind::Full]),
        ("swa", vec![AttentionKind::Sliding { window: 8 }]),
        ("mswa", vec![mswa(2), mswa(4)]),
        ("swat", vec![AttentionKind::swat(8)]),
        (
            "longnet",
            vec![AttentionKind::LongNet { segments: vec![8, 16, 32], dilations: vec![1, 2, 4] }],
        ),
        ("longformer-decoder", vec![longformer(true)]),
        ("longformer-encoder", vec![longformer(false)]),
        ("sinks", vec![AttentionKind::Sinks { sinks: 2, window: 8 }]),
        ("linear", vec![linear.clone()]),
        ("hybrid", vec![linear, mswa(2), mswa(4)]),
        ("mswa-relative", vec![mswa(2), mswa(4)]),
    ];
    kinds
        .into_iter()
        .map(|(name, attention)| {
            let layers = attention.len().max(2);
            let relative = Architecture { relative_positions: true, ..Architecture::default() };
            let config = DecoderConfig::new(attention)
                .with_vocab_size(VOCAB)
                .with_d_model(D_MODEL)
                .with_layers(layers)
                .with_kv_heads(Some(2))
                .with_architecture((name == "mswa-relative").then_some(relative));
            CheckCase::new(name, config, 48)
        })
        .collect()
}
