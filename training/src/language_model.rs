//! The decoder as a Learner model: next-token cross-entropy for training and validation.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, Transaction};
use burn::train::{InferenceStep, ItemLazy, TrainOutput, TrainStep};
use swa_attention::WindowedAttentionBackend;
use swa_models::Decoder;

use crate::loader::TokenBatch;
use crate::metrics::StepStats;

/// A decoder trained on next-token prediction.
#[derive(Module, Debug)]
pub struct LanguageModel<B: Backend> {
    /// The model.
    pub decoder: Decoder<B>,
}

/// The loss of a step, still on the device, and how many tokens it covers.
pub struct LossOutput<B: Backend> {
    /// Mean cross-entropy, `[1]`.
    pub loss: Tensor<B, 1>,
    /// Tokens predicted.
    pub tokens: usize,
}

impl<B: Backend> ItemLazy for LossOutput<B> {
    type ItemSync = StepStats;

    fn sync(self) -> StepStats {
        let [loss] = Transaction::default()
            .register(self.loss)
            .execute()
            .try_into()
            .expect("one tensor registered");
        let loss = loss.convert::<f64>().to_vec::<f64>().expect("f64 loss")[0];
        StepStats { loss, tokens: self.tokens }
    }
}

impl<B: WindowedAttentionBackend> LanguageModel<B> {
    /// Mean next-token cross-entropy of `batch` (`[batch, N]` inputs and targets).
    ///
    /// The configuration and sequence length are checked before training starts, so the
    /// forward pass cannot fail here.
    pub fn loss(&self, batch: TokenBatch<B>) -> LossOutput<B> {
        let [rows, n] = batch.inputs.dims();
        let logits = self.decoder.forward(batch.inputs).expect("checked before training");
        let vocab = logits.dims()[2];
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.reshape([rows * n, vocab]), batch.targets.reshape([rows * n]));
        LossOutput { loss, tokens: rows * n }
    }
}

impl<B> TrainStep for LanguageModel<B>
where
    B: AutodiffBackend + WindowedAttentionBackend,
{
    type Input = TokenBatch<B>;
    type Output = LossOutput<B>;

    fn step(&self, batch: TokenBatch<B>) -> TrainOutput<LossOutput<B>> {
        let output = self.loss(batch);
        let grads = output.loss.backward();
        TrainOutput::new(self, grads, output)
    }
}

impl<B: WindowedAttentionBackend> InferenceStep for LanguageModel<B> {
    type Input = TokenBatch<B>;
    type Output = LossOutput<B>;

    fn step(&self, batch: TokenBatch<B>) -> LossOutput<B> {
        self.loss(batch)
    }
}
