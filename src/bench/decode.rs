//! Decode latency and KV-cache bytes, after MSWA §5.3 / Figure 3: the time to predict the next
//! token at positions 500, 1000, 1500 and 2000 of a 2048-token context (the median of the four),
//! per batch size and attention kind, with the bounded cache of docs/semantics.md §7; and the per-token
//! time against the position, which stays flat for windowed kinds and grows for full attention.

use std::time::Instant;

use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;
use swa_models::layers::CachePositions;
use swa_models::{Decoder, DecoderCache};

use super::{BenchAttention, BenchModel, median, mib, ms};
use crate::error::AppError;
use crate::report::Table;

/// The Figure 3 benchmark.
#[derive(Clone, Debug)]
pub struct DecodeBench {
    /// The model every kind is built into.
    pub model: BenchModel,
    /// The kinds; full attention runs once per batch, the others once per window.
    pub attentions: Vec<BenchAttention>,
    /// Base windows `W`.
    pub windows: Vec<usize>,
    /// Batch sizes.
    pub batches: Vec<usize>,
    /// Positions whose next-token time is measured (the median over them is reported).
    pub positions: Vec<usize>,
    /// The context length: every run decodes this many tokens, and the KV-cache bytes are
    /// read when it is full.
    pub context: usize,
    /// Steps timed from each position on (`p … p + repeats − 1`), their median taken.
    pub repeats: usize,
}

impl DecodeBench {
    /// MSWA's Figure 3 setting: full, SWA, MSWA and SWAT at windows 128, 256, 512; batches 1,
    /// 8, 16, 64, 128; positions 500 … 2000 of 2048.
    pub fn figure3(model: BenchModel) -> Self {
        Self {
            model,
            attentions: vec![
                BenchAttention::Full,
                BenchAttention::Swa,
                BenchAttention::Mswa,
                BenchAttention::Swat,
            ],
            windows: vec![128, 256, 512],
            batches: vec![1, 8, 16, 64, 128],
            positions: vec![500, 1000, 1500, 2000],
            context: 2048,
            repeats: 5,
        }
    }
}

/// One line of the Figure 3 table.
#[derive(Clone, Debug)]
pub struct DecodeRow {
    /// The kind.
    pub attention: BenchAttention,
    /// Its base window; `None` for full attention.
    pub window: Option<usize>,
    /// Sequences decoded together.
    pub batch: usize,
    /// Milliseconds per step at each position (median of the repeats).
    pub per_position_ms: Vec<f64>,
    /// The median of `per_position_ms`.
    pub ms: f64,
    /// Bytes of the KV cache per sequence with the context full.
    pub kv_bytes: usize,
    /// The same predicted by `Decoder::info` at the context length.
    pub info_kv_bytes: usize,
}

/// Runs the benchmark; rows in the order attentions × windows × batches.
pub fn run<B: ModelBackend>(
    bench: &DecodeBench,
    device: &B::Device,
) -> Result<Vec<DecodeRow>, AppError> {
    if bench.positions.iter().any(|&p| p + bench.repeats > bench.context) {
        let problem = format!(
            "decode positions plus {} repeats must fit in the context of {}",
            bench.repeats, bench.context
        );
        return Err(AppError::BenchSettings { problem });
    }
    let mut rows = Vec::new();
    for &attention in &bench.attentions {
        let windows: Vec<Option<usize>> = match attention.windowed() {
            true => bench.windows.iter().map(|&w| Some(w)).collect(),
            false => vec![None],
        };
        for window in windows {
            let config = bench.model.config(attention, window.unwrap_or(1))?;
            let model = config.init::<B>(device)?;
            let info_kv_bytes = model.info(&config, bench.context).kv_cache_bytes;
            for &batch in &bench.batches {
                let timing = time_steps(
                    &model,
                    batch,
                    CachePositions::Absolute,
                    &bench.positions,
                    bench.repeats,
                    bench.context,
                    device,
                )?;
                rows.push(DecodeRow {
                    attention,
                    window,
                    batch,
                    ms: median(timing.per_position_ms.clone()),
                    per_position_ms: timing.per_position_ms,
                    kv_bytes: timing.cache_bytes / batch,
                    info_kv_bytes,
                });
            }
        }
    }
    Ok(rows)
}

/// What [`time_steps`] measured.
pub struct StepTiming {
    /// Milliseconds per step at each requested position (median of the repeats).
    pub per_position_ms: Vec<f64>,
    /// Bytes held by the cache after the last step.
    pub cache_bytes: usize,
}

/// Decodes `steps` tokens for `batch` sequences, feeding each step's greedy token to the next,
/// and times the steps at `positions[i] … positions[i] + repeats − 1`. A timed step starts after
/// the device is idle and ends when the next tokens are on the host.
pub fn time_steps<B: ModelBackend>(
    model: &Decoder<B>,
    batch: usize,
    positions: CachePositions,
    at: &[usize],
    repeats: usize,
    steps: usize,
    device: &B::Device,
) -> Result<StepTiming, AppError> {
    let mut cache = model.cache(batch, positions, device)?;
    let first: Vec<i64> = (0..batch as i64).map(|b| b % model.vocab_size() as i64).collect();
    let mut tokens = Tensor::<B, 1, Int>::from_data(TensorData::new(first, [batch]), device);
    let mut samples = vec![Vec::new(); at.len()];
    for position in 0..steps {
        let timed = at.iter().position(|&p| (p..p + repeats).contains(&position));
        if timed.is_some() {
            B::sync(device)?;
        }
        let start = Instant::now();
        tokens = greedy_step(model, tokens, &mut cache);
        if let Some(i) = timed {
            tokens.to_data();
            samples[i].push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let per_position_ms = samples.into_iter().map(median).collect();
    Ok(StepTiming { per_position_ms, cache_bytes: cache.bytes() })
}

/// The Figure 3 table: time per token, its ratio to full attention at the same batch, and the
/// KV-cache bytes per sequence relative to full attention ("relative cost").
pub fn table(rows: &[DecodeRow]) -> Table {
    let mut table = Table::new(&[
        "kind",
        "W",
        "batch",
        "ms/token",
        "vs full",
        "KV MiB/seq",
        "KV vs full",
        "KV = info",
    ]);
    let full = |batch: usize| {
        rows.iter().find(|r| r.attention == BenchAttention::Full && r.batch == batch)
    };
    for r in rows {
        let (vs_full, kv_vs_full) = match full(r.batch) {
            Some(f) => (
                format!("{:.2}×", r.ms / f.ms),
                format!("{:.4}", r.kv_bytes as f64 / f.kv_bytes as f64),
            ),
            None => ("—".into(), "—".into()),
        };
        let window = r.window.map_or("—".into(), |w| w.to_string());
        let agrees = if r.kv_bytes == r.info_kv_bytes { "yes" } else { "no" };
        table.rows.push(vec![
            r.attention.name().into(),
            window,
            r.batch.to_string(),
            ms(r.ms),
            vs_full,
            mib(r.kv_bytes),
            kv_vs_full,
            agrees.into(),
        ]);
    }
    table
}

/// Per-token time against the position, batch 1.
#[derive(Clone, Debug)]
pub struct FlatnessBench {
    /// The model every kind is built into.
    pub model: BenchModel,
    /// The kinds.
    pub attentions: Vec<BenchAttention>,
    /// The base window of the windowed kinds.
    pub window: usize,
    /// Positions measured, increasing.
    pub positions: Vec<usize>,
    /// Full attention is measured only at positions up to this one (its steps grow with the
    /// position, so reaching the last one costs the most).
    pub full_max: usize,
    /// Rounds of interleaved steps timed at every position, their median taken.
    pub repeats: usize,
}

/// One kind's per-token times; `None` where a position was not measured.
#[derive(Clone, Debug)]
pub struct FlatnessRow {
    /// The kind.
    pub attention: BenchAttention,
    /// Milliseconds per token at each position of the bench.
    pub ms: Vec<Option<f64>>,
}

impl FlatnessRow {
    /// Time at the last measured position over the time at the first.
    pub fn growth(&self) -> f64 {
        let measured: Vec<f64> = self.ms.iter().flatten().copied().collect();
        measured.last().zip(measured.first()).map_or(f64::NAN, |(last, first)| last / first)
    }
}

/// Runs the flatness benchmark. Each kind decodes once up to its last position, forking its
/// cache at every measured position; then rounds step every fork once in turn, so the machine's
/// slow and fast spells fall on all positions alike (timing them one after the other left
/// single positions 1.4× off at random on a shared VM), and the time at a position is the median
/// over the rounds.
pub fn run_flatness<B: ModelBackend>(
    bench: &FlatnessBench,
    device: &B::Device,
) -> Result<Vec<FlatnessRow>, AppError> {
    let mut rows = Vec::new();
    for &attention in &bench.attentions {
        let config = bench.model.config(attention, bench.window)?;
        let model = config.init::<B>(device)?;
        let limit = if attention.windowed() { usize::MAX } else { bench.full_max };
        let at: Vec<usize> = bench.positions.iter().copied().filter(|&p| p <= limit).collect();
        let mut times = interleaved_ms(&model, &at, bench.repeats, device)?.into_iter();
        let ms = bench
            .positions
            .iter()
            .map(|p| at.contains(p).then(|| times.next()).flatten())
            .collect();
        rows.push(FlatnessRow { attention, ms });
    }
    Ok(rows)
}

/// Milliseconds per decoding step, batch 1, at each of the increasing positions `at`: the
/// median over `rounds` interleaved rounds, after one untimed round in which each fork takes
/// buffers of its own.
fn interleaved_ms<B: ModelBackend>(
    model: &Decoder<B>,
    at: &[usize],
    rounds: usize,
    device: &B::Device,
) -> Result<Vec<f64>, AppError> {
    let mut cache = model.cache(1, CachePositions::Absolute, device)?;
    let mut tokens = Tensor::<B, 1, Int>::zeros([1], device);
    let mut forks = Vec::with_capacity(at.len());
    for &position in at {
        while cache.len() < position {
            tokens = greedy_step(model, tokens, &mut cache);
        }
        forks.push((cache.clone(), tokens.clone()));
    }
    let mut samples = vec![Vec::with_capacity(rounds); at.len()];
    for round in 0..=rounds {
        for ((cache, tokens), samples) in forks.iter_mut().zip(&mut samples) {
            B::sync(device)?;
            let start = Instant::now();
            *tokens = greedy_step(model, tokens.clone(), cache);
            tokens.to_data();
            if round > 0 {
                samples.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    Ok(samples.into_iter().map(median).collect())
}

/// One decoding step of `tokens: [batch]`, returning the most likely next tokens `[batch]`.
fn greedy_step<B: ModelBackend>(
    model: &Decoder<B>,
    tokens: Tensor<B, 1, Int>,
    cache: &mut DecoderCache<B>,
) -> Tensor<B, 1, Int> {
    let batch = tokens.dims()[0];
    model.step(tokens, cache).argmax(1).reshape([batch])
}

/// The flatness table: ms per token at each position, and last over first.
pub fn flatness_table(bench: &FlatnessBench, rows: &[FlatnessRow]) -> Table {
    let mut header = vec!["kind".to_string()];
    header.extend(bench.positions.iter().map(|p| format!("ms @ {p}")));
    header.push("last / first".to_string());
    let mut table = Table { header, rows: Vec::new() };
    for r in rows {
        let mut row = vec![r.attention.name().to_string()];
        row.extend(r.ms.iter().map(|t| t.map_or("—".into(), ms)));
        row.push(format!("{:.2}", r.growth()));
        table.rows.push(row);
    }
    table
}
