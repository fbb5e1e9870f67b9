//! Training throughput: tokens per second and peak memory of one training step (forward and
//! backward of the next-token loss; the optimizer's update is the same for every kind and left
//! out) at several sequence lengths, per attention kind.

use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;
use swa_training::batch::TokenBatch;
use swa_training::language_model::LanguageModel;
use swa_training::stream_memory::Stream;

use super::heap::peak_during;
use super::{BenchAttention, BenchModel, mib};
use crate::error::AppError;
use crate::report::Table;

/// The training-step benchmark.
#[derive(Clone, Debug)]
pub struct TrainBench {
    /// The model every kind is built into.
    pub model: BenchModel,
    /// The kinds.
    pub attentions: Vec<BenchAttention>,
    /// The base window `W` of the windowed kinds.
    pub window: usize,
    /// Sequence lengths `N`.
    pub lengths: Vec<usize>,
    /// Sequences per step.
    pub batch: usize,
    /// Timed steps per length (their median is reported), after one untimed warm-up step at
    /// that length: CubeCL backends compile kernels and autotune matmuls per shape, which would
    /// otherwise land in the first timed step of each new length.
    pub steps: usize,
    /// Full attention is skipped where one layer's `H·N²` f32 scores would exceed this many
    /// bytes (its backward pass keeps them).
    pub full_score_bytes: usize,
    /// Whether the backend's tensors live in the host heap (CPU backends), where the counting
    /// allocator sees them; otherwise no peak memory is reported.
    pub host_memory: bool,
}

/// One kind at one length.
#[derive(Clone, Debug)]
pub struct TrainRow {
    /// The kind.
    pub attention: BenchAttention,
    /// Sequence length.
    pub len: usize,
    /// Why it did not run, if it did not.
    pub skipped: Option<String>,
    /// Milliseconds per step.
    pub ms: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// Most heap bytes held during the first timed step above what was live before it; `None`
    /// when not counted.
    pub peak_bytes: Option<usize>,
}

/// Runs the benchmark; rows in the order attentions × lengths. Skipped cells say why.
pub fn run<B>(bench: &TrainBench, device: &B::Device) -> Result<Vec<TrainRow>, AppError>
where
    B: AutodiffBackend + ModelBackend,
{
    let mut rows = Vec::new();
    for &attention in &bench.attentions {
        let config = bench.model.config(attention, bench.window)?;
        let model = LanguageModel::new(config.init::<B>(device)?);
        for &len in &bench.lengths {
            let score_bytes = bench.model.heads * len * len * 4;
            if attention == BenchAttention::Full && score_bytes > bench.full_score_bytes {
                let gib = score_bytes as f64 / (1u64 << 30) as f64;
                let skipped = Some(format!("one layer's H·N² f32 scores are {gib:.1} GiB"));
                rows.push(TrainRow {
                    attention,
                    len,
                    skipped,
                    ms: f64::NAN,
                    tokens_per_s: f64::NAN,
                    peak_bytes: None,
                });
                continue;
            }
            step(&model, bench.batch, len, device)?;
            let mut times = Vec::new();
            let mut peak_bytes = None;
            for i in 0..bench.steps.max(1) {
                let start = Instant::now();
                let (done, peak) = peak_during(|| step(&model, bench.batch, len, device));
                done?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
                if i == 0 && bench.host_memory {
                    peak_bytes = peak;
                }
            }
            let ms = super::median(times);
            let tokens_per_s = (bench.batch * len) as f64 / (ms / 1e3);
            rows.push(TrainRow { attention, len, skipped: None, ms, tokens_per_s, peak_bytes });
        }
    }
    Ok(rows)
}

/// One forward and backward pass over `batch` sequences of `len` tokens, waited for.
fn step<B>(
    model: &LanguageModel<B>,
    batch: usize,
    len: usize,
    device: &B::Device,
) -> Result<(), AppError>
where
    B: AutodiffBackend + ModelBackend,
{
    let vocab = model.decoder.vocab_size() as i64;
    let ids = |shift: usize| {
        let data: Vec<i64> =
            (0..batch * len).map(|i| ((i + shift) as i64 * 7919) % vocab).collect();
        Tensor::<B, 2, Int>::from_data(TensorData::new(data, [batch, len]), device)
    };
    let batch = TokenBatch { inputs: ids(0), targets: ids(1), scored: None, stream_start: None };
    let out = model.loss(batch, Stream::Train);
    let grads = out.loss.backward();
    drop(grads);
    Ok(B::sync(device)?)
}

/// The throughput table.
pub fn table(rows: &[TrainRow]) -> Table {
    let mut table = Table::new(&["kind", "N", "ms/step", "tokens/s", "peak MiB"]);
    for r in rows {
        let row = match &r.skipped {
            Some(why) => vec![
                r.attention.name().into(),
                r.len.to_string(),
                format!("skipped: {why}"),
                "—".into(),
                "—".into(),
            ],
            None => vec![
                r.attention.name().into(),
                r.len.to_string(),
                format!("{:.1}", r.ms),
                format!("{:.0}", r.tokens_per_s),
                r.peak_bytes.map_or("—".into(), mib),
            ],
        };
        table.rows.push(row);
    }
    table
}
