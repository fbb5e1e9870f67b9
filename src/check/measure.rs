//! What one backend computes for a case: the weights it holds after loading, the logits and loss
//! of a batch, the gradients of one backward pass, the parameters after one AdamW step, and a
//! greedy decoding, all read back to the host.

use std::sync::Arc;

use burn::module::AutodiffModule;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;
use swa_models::layers::CachePositions;
use swa_models::{Decoder, ModelError};
use swa_training::TrainingBackend;
use swa_training::batch::TokenBatch;
use swa_training::language_model::LanguageModel;
use swa_training::stream_memory::Stream;

use super::cases::CheckCase;
use super::params::{Named, Weights, gradients, parameters, values};
use crate::error::AppError;

/// Learning rate of the AdamW step: the training default (`TrainConfig::learning_rate`).
pub const LEARNING_RATE: f64 = 1e-3;
/// Weight decay of the AdamW step: the training default (`TrainConfig::weight_decay`).
pub const WEIGHT_DECAY: f32 = 0.1;

/// One greedily decoded token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodedToken {
    /// The most likely token (the lowest id among equals).
    pub token: usize,
    /// Its logit minus the second largest logit: how far the choice is from a tie.
    pub margin: f32,
}

/// Everything a backend computed for one case, on the host.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The parameters as loaded, before anything ran.
    pub weights: Vec<Named>,
    /// Logits of the batch, `[batch, N, vocab]` flattened.
    pub logits: Vec<f32>,
    /// Mean next-token cross-entropy of the batch (the training loss).
    pub loss: f32,
    /// The loss's gradient for every parameter.
    pub gradients: Vec<Named>,
    /// The parameters after one AdamW step on those gradients.
    pub stepped: Vec<Named>,
    /// The tokens decoded greedily after the prompt, or why the model cannot decode (shared,
    /// so that an outcome can be copied).
    pub decoded: Result<Vec<DecodedToken>, Arc<ModelError>>,
}

/// Runs `case` with `weights` on backend `B`'s `device`.
pub fn measure<B>(
    case: &CheckCase,
    weights: &Weights,
    device: &B::Device,
) -> Result<Outcome, AppError>
where
    B: TrainingBackend,
{
    let decoder = weights.load::<B>(&case.config, device)?;
    let loaded = parameters(&decoder);
    let tokens = case.tokens();
    let decoded =
        decode(&decoder.valid(), &tokens[0][..case.prompt_len], case.decode_steps, device)
            .map_err(Arc::new);

    let batch = token_batch::<B>(&tokens, device);
    let model = LanguageModel::new(decoder);
    let logits = model.decoder.forward(batch.inputs.clone())?;
    let loss = model.loss(batch, Stream::Train).loss;
    let loss_value = values(loss.clone())[0];
    let grads = loss.backward();
    let gradients = gradients(&model.decoder, &grads);
    let grads = GradientsParams::from_grads(grads, &model);
    let mut optimizer = AdamWConfig::new().with_weight_decay(WEIGHT_DECAY).init();
    let model = optimizer.step(LEARNING_RATE, model, grads);
    Ok(Outcome {
        weights: loaded,
        logits: values(logits),
        loss: loss_value,
        gradients,
        stepped: parameters(&model.decoder),
        decoded,
    })
}

/// Inputs (each row but its last token) and targets (each row but its first).
fn token_batch<B: Backend>(rows: &[Vec<usize>], device: &B::Device) -> TokenBatch<B> {
    let columns = rows[0].len() - 1;
    let tensor = |range: std::ops::Range<usize>| {
        let ids: Vec<i64> =
            rows.iter().flat_map(|row| row[range.clone()].iter().map(|&t| t as i64)).collect();
        Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [rows.len(), columns]), device)
    };
    let (inputs, targets) = (tensor(0..columns), tensor(1..columns + 1));
    TokenBatch { inputs, targets, scored: None, stream_start: None }
}

/// Feeds `prompt` through the cache (StreamingLLM's position shift for sink layers, as
/// `generate` does by default), then decodes `steps` tokens greedily.
fn decode<B: ModelBackend>(
    model: &Decoder<B>,
    prompt: &[usize],
    steps: usize,
    device: &B::Device,
) -> Result<Vec<DecodedToken>, ModelError> {
    let mut cache = model.cache(1, CachePositions::Streaming, device)?;
    let token =
        |id: usize| Tensor::<B, 1, Int>::from_data(TensorData::new(vec![id as i64], [1]), device);
    let mut logits =
        prompt.iter().map(|&id| model.step(token(id), &mut cache)).last().expect("a prompt");
    let mut decoded = Vec::with_capacity(steps);
    for n in 0..steps {
        let next = greedy(&values(logits.clone()));
        decoded.push(next);
        if n + 1 < steps {
            logits = model.step(token(next.token), &mut cache);
        }
    }
    Ok(decoded)
}

/// The most likely token of a row of logits and its margin over the runner-up.
fn greedy(logits: &[f32]) -> DecodedToken {
    let (mut best, mut first, mut second) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (id, &logit) in logits.iter().enumerate() {
        if logit > first {
            (best, first, second) = (id, logit, first);
        } else if logit > second {
            second = logit;
        }
    }
    DecodedToken { token: best, margin: first - second }
}
