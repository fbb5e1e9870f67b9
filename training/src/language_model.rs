//! The decoder as a Learner model: next-token cross-entropy for training and validation, over
//! every position (language modelling) or over the scored positions of a synthetic task, whose
//! accuracy it counts too. In half-precision training its backward pass starts from the loss
//! times the loss scale of [`crate::mixed_precision`]. (In a multi-process run the optimizer
//! averages the gradients over the processes: [`crate::distributed::gradients::Averaged`].)

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, Transaction};
use burn::train::{InferenceStep, ItemLazy, TrainOutput, TrainStep};
use swa_attention::ModelBackend;
use swa_attention::layer_ops::cross_entropy;
use swa_models::Decoder;
use swa_models::lora::Lora;

use crate::batch::TokenBatch;
use crate::metrics::StepStats;
use crate::mixed_precision::LossScale;
use crate::stream_memory::{Stream, StreamMemory};

/// A decoder trained on next-token prediction.
#[derive(Module, Debug)]
pub struct LanguageModel<B: Backend> {
    /// The model.
    pub decoder: Decoder<B>,
    /// LoRA adapters on the model's projections (`swa_models::lora`), with the model's own
    /// weights frozen but the norms and the embedding table; `None`: every weight trains.
    pub lora: Option<Lora<B>>,
    /// The loss scale shared with [`crate::mixed_precision::MixedPrecision`] in half-precision
    /// training; `None` (f32) takes gradients of the loss itself. Not part of the record (the
    /// optimizer's record holds it).
    #[module(skip)]
    pub loss_scale: Option<LossScale>,
    /// With segment memory (docs/semantics.md §10), what each layer keeps of the training and
    /// validation streams, shared by every copy of the model; the training stream's is part of
    /// the record (a checkpoint keeps it). Off: batches are independent windows.
    pub memory: StreamMemory<B>,
}

/// The loss of a step, still on the device, and how many tokens it covers.
pub struct LossOutput<B: Backend> {
    /// Mean cross-entropy over the scored positions, `[1]`.
    pub loss: Tensor<B, 1>,
    /// Tokens read.
    pub tokens: usize,
    /// For a synthetic task: scored positions whose most likely token is the target, `[1]`,
    /// and how many positions are scored.
    pub hits: Option<(Tensor<B, 1, Int>, usize)>,
}

/// The loss of a step's output, read from the device: what the run's divergence check asks of
/// every step before its update ([`crate::train`]).
pub trait StepLoss {
    /// The step's loss.
    fn loss_value(&self) -> f64;
}

impl<B: Backend> StepLoss for LossOutput<B> {
    fn loss_value(&self) -> f64 {
        self.loss.clone().into_scalar().elem()
    }
}

impl<B: Backend> ItemLazy for LossOutput<B> {
    type ItemSync = StepStats;

    fn sync(self) -> StepStats {
        let mut transaction = Transaction::default().register(self.loss);
        if let Some((correct, _)) = &self.hits {
            transaction = transaction.register(correct.clone());
        }
        let values = transaction.execute();
        let first =
            |i: usize| values[i].clone().convert::<f64>().to_vec::<f64>().expect("a scalar")[0];
        let (correct, scored) = match self.hits {
            Some((_, scored)) => (first(1) as usize, scored),
            None => (0, 0),
        };
        StepStats { loss: first(0), tokens: self.tokens, correct, scored }
    }
}

impl<B: Backend> LanguageModel<B> {
    /// `decoder` trained in f32, without loss scaling.
    pub fn new(decoder: Decoder<B>) -> Self {
        Self { decoder, lora: None, loss_scale: None, memory: StreamMemory::off() }
    }

    /// The model as trained so far: the decoder with its adapters merged into its weights.
    pub fn merged(&self) -> Decoder<B> {
        match &self.lora {
            Some(lora) => lora.apply(self.decoder.clone()),
            None => self.decoder.clone(),
        }
    }
}

impl<B: ModelBackend> LanguageModel<B> {
    /// Mean next-token cross-entropy of `batch` (`[batch, N]` inputs and targets), over the
    /// scored positions when the batch has a mask (with the count of right answers there). A
    /// batch of stream segments reads and updates `stream`'s memory when the model has one.
    ///
    /// The configuration, the sequence length and the memory are checked before training
    /// starts, so the forward pass cannot fail here.
    pub fn loss(&self, batch: TokenBatch<B>, stream: Stream) -> LossOutput<B> {
        let [rows, n] = batch.inputs.dims();
        // With adapters, the weights `W + (α/r)·A·B` the gradient reaches A and B through.
        let decoder = self.merged();
        let logits = match batch.stream_start {
            Some(start) => self.memory.forward(stream, &decoder, batch.inputs, start),
            None => decoder.forward(batch.inputs),
        }
        .expect("checked before training");
        let vocab = logits.dims()[2];
        let (logits, targets) =
            (logits.reshape([rows * n, vocab]), batch.targets.reshape([rows * n]));
        let Some((scored, count)) = batch.scored else {
            let loss = cross_entropy(logits, targets).mean();
            return LossOutput { loss, tokens: rows * n, hits: None };
        };
        let (scored, count) = (scored.reshape([rows * n]), count.max(1));
        let right = logits.clone().argmax(1).reshape([rows * n]).equal(targets.clone()).int()
            * scored.clone();
        let loss = (cross_entropy(logits, targets) * scored.float()).sum().div_scalar(count as f64);
        LossOutput { loss, tokens: rows * n, hits: Some((right.sum(), count)) }
    }
}

impl<B> TrainStep for LanguageModel<B>
where
    B: AutodiffBackend + ModelBackend,
{
    type Input = TokenBatch<B>;
    type Output = LossOutput<B>;

    fn step(&self, batch: TokenBatch<B>) -> TrainOutput<LossOutput<B>> {
        let output = self.loss(batch, Stream::Train);
        let grads = match &self.loss_scale {
            Some(scale) => output.loss.clone().mul_scalar(scale.factor()).backward(),
            None => output.loss.backward(),
        };
        TrainOutput { grads: GradientsParams::from_grads(grads, self), item: output }
    }
}

impl<B: ModelBackend> InferenceStep for LanguageModel<B> {
    type Input = TokenBatch<B>;
    type Output = LossOutput<B>;

    fn step(&self, batch: TokenBatch<B>) -> LossOutput<B> {
        self.loss(batch, Stream::Valid)
    }
}
