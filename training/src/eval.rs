//! Evaluation: loss, perplexity and bits per byte at several lengths with windowed inference,
//! optionally with an evaluation window other than the training one (SWAT Table 2's "Eval
//! Window"), and the window × length grid of SWAT's Figure 2. [`decoded_loss`] scores token
//! by token through the KV cache, for StreamingLLM's position shift (docs/semantics.md §7).

use std::sync::Arc;

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor};
use swa_attention::ModelBackend;
use swa_attention::layer_ops::cross_entropy;
use swa_models::layers::CachePositions;
use swa_models::{Decoder, DecoderConfig};

use crate::error::TrainingError;
use crate::language_model::LanguageModel;
use crate::loader::{LoaderConfig, Sampling, WindowLoader};
use crate::stream_memory::{Stream, StreamMemory};

/// The model's configuration with every local window set to `window` keys and, when `sinks`
/// is not 0, `sinks` attention sinks (StreamingLLM). Full, sliding, sinks and SWAT layers have
/// the same weights whatever their window, so a trained model runs under the new config as is;
/// other kinds are an error naming the layer.
pub fn with_eval_window(
    config: &DecoderConfig,
    window: usize,
    sinks: usize,
) -> Result<DecoderConfig, TrainingError> {
    let mut config = config.clone();
    let kinds = (0..config.layers).map(|l| {
        let kind = config.kind_of(l);
        kind.at_eval_window(window, sinks)
            .ok_or_else(|| TrainingError::EvalWindow { layer: l, kind: kind.clone() })
    });
    config.attention = kinds.collect::<Result<_, _>>()?;
    Ok(config)
}

/// The same weights under another configuration with the same parameters.
pub fn rebuild<B: Backend>(
    model: &Decoder<B>,
    config: &DecoderConfig,
    device: &B::Device,
) -> Result<Decoder<B>, TrainingError> {
    let fresh = config.init::<B>(device)?;
    Ok(fresh.load_record(model.clone().into_record()))
}

/// Mean next-token loss (nats) over up to `batches` batches of `batch` consecutive windows of
/// `len` tokens from `tokens`, each starting with `bos` when it is set (a checkpoint whose
/// tokenizer adds one: [`LoaderConfig::with_bos`]).
pub fn mean_loss<B: ModelBackend>(
    model: &Decoder<B>,
    (tokens, bos): (Arc<Vec<u32>>, Option<u32>),
    len: usize,
    batch: usize,
    batches: usize,
    device: &B::Device,
) -> Result<f64, TrainingError> {
    let loader = LoaderConfig::new(len, batch)
        .with_steps(batches)
        .with_bos(bos)
        .init_text::<B>(tokens, device)
        .map_err(|e| e.in_loader(format!("evaluation at length {len}")))?;
    Ok(loss_over(&loader, &LanguageModel::new(model.clone())))
}

/// Mean next-token loss (nats) with segment memory (docs/semantics.md §10): `tokens` cut into
/// one stream per row of `batch`, each read from its start in up to `batches` consecutive
/// segments of `len` tokens, every layer keeping what its windows reach (full layers
/// `full_memory` positions), as a run with segment memory validates.
pub fn stream_loss<B: ModelBackend>(
    model: &Decoder<B>,
    tokens: Arc<Vec<u32>>,
    (len, batch, batches): (usize, usize, usize),
    full_memory: usize,
    device: &B::Device,
) -> Result<f64, TrainingError> {
    model.check_stream(len)?;
    let loader = LoaderConfig::new(len, batch)
        .with_steps(batches)
        .with_sampling(Sampling::Streams { continuing: false })
        .init_text::<B>(tokens, device)
        .map_err(|e| e.in_loader(format!("evaluation in streams of {len}-token segments")))?;
    let scorer = LanguageModel {
        memory: StreamMemory::new(full_memory),
        ..LanguageModel::new(model.clone())
    };
    Ok(loss_over(&loader, &scorer))
}

/// The mean loss of `scorer` over every batch of `loader`, weighted by tokens.
fn loss_over<B: ModelBackend>(loader: &WindowLoader<B>, scorer: &LanguageModel<B>) -> f64 {
    let (mut total, mut count) = (0.0, 0);
    for batch in burn::data::dataloader::DataLoader::iter(loader) {
        let out = scorer.loss(batch, Stream::Valid);
        total += out.loss.into_scalar().elem::<f64>() * out.tokens as f64;
        count += out.tokens;
    }
    total / count.max(1) as f64
}

/// Mean next-token loss (nats) of `model` decoding, one token at a time through its KV cache
/// with `positions`, the same windows as one batch of [`mean_loss`]: `batch` consecutive
/// windows of `len` tokens from `tokens`. With [`CachePositions::Absolute`] it equals
/// [`mean_loss`] over one batch; with [`CachePositions::Streaming`] sink layers number their
/// keys by cache slot, as StreamingLLM decodes (docs/semantics.md §7).
pub fn decoded_loss<B: ModelBackend>(
    model: &Decoder<B>,
    tokens: Arc<Vec<u32>>,
    len: usize,
    batch: usize,
    positions: CachePositions,
    device: &B::Device,
) -> Result<f64, TrainingError> {
    let loader = LoaderConfig::new(len, batch)
        .init_text::<B>(tokens, device)
        .map_err(|e| e.in_loader(format!("decoded evaluation at length {len}")))?;
    let windows = loader.batch(0, 0);
    let [rows, _] = windows.inputs.dims();
    let column = |t: &Tensor<B, 2, Int>, n: usize| t.clone().narrow(1, n, 1);
    let mut cache = model.cache(rows, positions, device)?;
    let mut total = 0.0;
    for n in 0..len {
        let logits = model.step(column(&windows.inputs, n).reshape([rows]), &mut cache);
        let targets = column(&windows.targets, n).reshape([rows]);
        total += cross_entropy(logits, targets).sum().into_scalar().elem::<f64>();
    }
    Ok(total / (rows * len) as f64)
}
