//! Text generation with the bounded cache (docs/semantics.md §7): the prompt fills the caches in
//! one forward pass ([`Decoder::prefill`]), then each new token is sampled from the last logits
//! and fed back.

use crate::layers::CachePositions;
use burn::config::Config;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;

use crate::sampling::Sampler;
use crate::{Decoder, ModelError};

/// Configuration of [`Decoder::generate`].
#[derive(Config, Debug)]
pub struct GenerateConfig {
    /// Tokens to generate after the prompt.
    #[config(default = 64)]
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 always picks the most likely token (greedy).
    #[config(default = 1.0)]
    pub temperature: f32,
    /// Sample among the `k` most likely tokens only; 0 keeps them all.
    #[config(default = 0)]
    pub top_k: usize,
    /// Sample among the fewest most likely tokens whose probability reaches `p` (nucleus
    /// sampling), in (0, 1]; 1 keeps them all.
    #[config(default = 1.0)]
    pub top_p: f32,
    /// Seed of the sampler: the same seed, model and prompt give the same tokens.
    #[config(default = 0)]
    pub seed: u64,
    /// Positions of cached keys: StreamingLLM's shift for sink layers (docs/semantics.md §7), or
    /// absolute positions as in training.
    #[config(default = "CachePositions::Streaming")]
    pub positions: CachePositions,
}

impl GenerateConfig {
    /// Checks the sampling parameters, naming the field at fault.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field, problem: String| Err(ModelError::Config { field, problem });
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(
                "GenerateConfig.temperature",
                format!("must be finite and >= 0, got {}", self.temperature),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("GenerateConfig.top_p", format!("must be in (0, 1], got {}", self.top_p));
        }
        Ok(())
    }
}

impl<B: ModelBackend> Decoder<B> {
    /// Continues each prompt (token ids, all of one length ≥ 1) by `max_new_tokens` tokens and
    /// returns the new tokens of each. Memory stays bounded by the windows however long it runs.
    pub fn generate(
        &self,
        prompts: &[Vec<usize>],
        config: &GenerateConfig,
        device: &B::Device,
    ) -> Result<Vec<Vec<usize>>, ModelError> {
        self.generate_with(prompts, config, device, |_| true)
    }

    /// As [`Decoder::generate`], calling `on_tokens` with each new token of every prompt as soon
    /// as it is chosen (to stream them); generation stops early when it returns `false`.
    pub fn generate_with(
        &self,
        prompts: &[Vec<usize>],
        config: &GenerateConfig,
        device: &B::Device,
        mut on_tokens: impl FnMut(&[usize]) -> bool,
    ) -> Result<Vec<Vec<usize>>, ModelError> {
        config.validate()?;
        let bad = |problem: String| ModelError::Config { field: "generate.prompts", problem };
        let length = prompts.first().map_or(0, Vec::len);
        if length == 0 || prompts.iter().any(|p| p.len() != length) {
            return Err(bad("needs at least one prompt, all of one length >= 1".into()));
        }
        let vocab = self.vocab_size();
        if let Some(t) = prompts.iter().flatten().find(|&&t| t >= vocab) {
            return Err(bad(format!("token {t} is outside the vocabulary of {vocab}")));
        }
        let batch = prompts.len();
        let column = |tokens: Vec<i64>| {
            Tensor::<B, 1, Int>::from_data(TensorData::new(tokens, [batch]), device)
        };
        let (mut logits, mut cache) = match self.prefills_as_steps(config.positions) {
            true => {
                let ids = prompts.iter().flatten().map(|&t| t as i64).collect();
                let tokens = Tensor::from_data(TensorData::new(ids, [batch, length]), device);
                let (logits, cache) = self.prefill(tokens)?;
                (Some(logits), cache)
            }
            false => {
                let mut cache = self.cache(batch, config.positions, device)?;
                let mut logits = None;
                for n in 0..length {
                    let column_n = column(prompts.iter().map(|p| p[n] as i64).collect());
                    logits = Some(self.step(column_n, &mut cache));
                }
                (logits, cache)
            }
        };
        let mut sampler = Sampler::new(config.temperature, config.top_k, config.top_p, config.seed);
        let mut outputs = vec![Vec::with_capacity(config.max_new_tokens); batch];
        for n in 0..config.max_new_tokens {
            let values = logits.take().expect("the prompt is not empty").into_data();
            let values = values.convert::<f32>().to_vec::<f32>().expect("f32 logits");
            for (row, output) in values.chunks(vocab).zip(&mut outputs) {
                output.push(sampler.sample(row));
            }
            let chosen: Vec<usize> = outputs.iter().map(|o| o[n]).collect();
            if !on_tokens(&chosen) {
                break;
            }
            if n + 1 < config.max_new_tokens {
                let next = outputs.iter().map(|o| o[n] as i64).collect();
                logits = Some(self.step(column(next), &mut cache));
            }
        }
        Ok(outputs)
    }

    /// Whether one forward pass over the prompt leaves the cache that stepping would: always
    /// with absolute positions, and with StreamingLLM's shift when no layer pins positions
    /// (sinks, Longformer's globals): RoPE sees only distances, which the shift keeps among
    /// consecutive positions.
    fn prefills_as_steps(&self, positions: CachePositions) -> bool {
        positions == CachePositions::Absolute
            || !self.blocks().iter().any(|b| b.attention().pins_positions())
    }
}
