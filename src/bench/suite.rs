//! The benchmarks as one suite, at three sizes: [`Suite::full`] (the `efficiency` bench),
//! [`Suite::quick`] (`swa-zoo bench`) and [`Suite::tiny`] (the test that the code runs).

use clap::ValueEnum;
use swa_training::TrainingBackend;

use super::decode::{self, DecodeBench, DecodeRow, FlatnessBench, FlatnessRow};
use super::streaming::{self, StreamingBench, StreamingRow};
use super::training::{self, TrainBench, TrainRow};
use super::{BenchAttention, BenchModel};
use crate::error::AppError;
use crate::report::Table;

/// The parts of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SuitePart {
    /// Decode latency and KV bytes per kind, window and batch (MSWA Figure 3).
    Decode,
    /// Per-token decode time against the position.
    Flatness,
    /// Windowed models against vanilla + StreamingLLM.
    Streaming,
    /// Training-step throughput and peak memory.
    Training,
}

impl SuitePart {
    /// Every part, in the order the suite runs them.
    pub const ALL: [SuitePart; 4] =
        [SuitePart::Decode, SuitePart::Flatness, SuitePart::Streaming, SuitePart::Training];
}

/// The settings of every part.
#[derive(Clone, Debug)]
pub struct Suite {
    /// Decode latency (Figure 3).
    pub decode: DecodeBench,
    /// Time per token against the position.
    pub flatness: FlatnessBench,
    /// StreamingLLM comparison.
    pub streaming: StreamingBench,
    /// Training throughput.
    pub training: TrainBench,
}

impl Suite {
    /// The full benchmark on `model`: Figure 3's grid at positions 500 … 2000 of 2048, flatness
    /// at positions 2k … 16k with W = 256 (full attention up to `full_max`), StreamingLLM at
    /// W = 256 with 4 sinks at positions 1k … 4k, training at N = 1k, 4k, 16k with W = 256.
    pub fn full(model: BenchModel, full_max: usize) -> Self {
        Self {
            decode: DecodeBench::figure3(model.clone()),
            flatness: FlatnessBench {
                model: model.clone(),
                attentions: vec![
                    BenchAttention::Full,
                    BenchAttention::Swa,
                    BenchAttention::Mswa,
                    BenchAttention::Swat,
                ],
                window: 256,
                positions: vec![2048, 4096, 8192, 16384],
                full_max,
                repeats: 41,
            },
            streaming: StreamingBench {
                model: model.clone(),
                window: 256,
                sinks: 4,
                batch: 1,
                positions: vec![1024, 2048, 3072, 4096],
                repeats: 5,
            },
            training: TrainBench {
                model,
                attentions: vec![
                    BenchAttention::Full,
                    BenchAttention::Swa,
                    BenchAttention::Mswa,
                    BenchAttention::LongNet,
                ],
                window: 256,
                lengths: vec![1024, 4096, 16384],
                batch: 1,
                steps: 1,
                full_score_bytes: 1 << 30,
                host_memory: true,
            },
        }
    }

    /// A run of a minute or two on a CPU: the same parts on shorter contexts, W = 64 for
    /// decoding, W = 128 for training at N = 512 and 1024.
    pub fn quick() -> Self {
        let model = BenchModel::cpu();
        let mut suite = Self::full(model, 2048);
        suite.decode.windows = vec![64];
        suite.decode.batches = vec![1, 8];
        suite.decode.positions = vec![100, 200, 300, 400];
        suite.decode.context = 512;
        suite.decode.repeats = 3;
        suite.flatness.window = 64;
        suite.flatness.positions = vec![256, 512, 1024, 2048];
        suite.flatness.repeats = 15;
        suite.streaming.window = 64;
        suite.streaming.positions = vec![512, 1024];
        suite.streaming.repeats = 3;
        suite.training.window = 128;
        suite.training.lengths = vec![512, 1024];
        suite
    }

    /// Seconds on a CPU, for tests: [`BenchModel::tiny`], windows of 16 and 32 (MSWA's smallest
    /// head window is a sixteenth of the base).
    pub fn tiny() -> Self {
        let mut suite = Self::quick();
        for model in [
            &mut suite.decode.model,
            &mut suite.flatness.model,
            &mut suite.streaming.model,
            &mut suite.training.model,
        ] {
            *model = BenchModel::tiny();
        }
        suite.decode.windows = vec![16, 32];
        suite.decode.batches = vec![1, 2];
        suite.decode.positions = vec![70, 80];
        suite.decode.context = 96;
        suite.decode.repeats = 2;
        suite.flatness.window = 16;
        suite.flatness.positions = vec![32, 64];
        suite.flatness.full_max = 32;
        suite.flatness.repeats = 2;
        suite.streaming.window = 16;
        suite.streaming.positions = vec![40];
        suite.streaming.repeats = 2;
        suite.training.window = 16;
        suite.training.lengths = vec![32, 64];
        suite.training.full_score_bytes = 4 * 4 * 32 * 32;
        suite
    }
}

/// What the suite measured; a part not run is empty.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// Figure 3 rows.
    pub decode: Vec<DecodeRow>,
    /// Time per token against the position.
    pub flatness: Vec<FlatnessRow>,
    /// StreamingLLM comparison.
    pub streaming: Vec<StreamingRow>,
    /// Training throughput.
    pub training: Vec<TrainRow>,
}

/// Runs `parts` of `suite` on backend `B` (decoding on its inner backend, without autodiff),
/// handing each part's title and table to `report` as soon as it is measured.
pub fn run<B>(
    suite: &Suite,
    parts: &[SuitePart],
    device: &B::Device,
    mut report: impl FnMut(&str, &Table),
) -> Result<Results, AppError>
where
    B: TrainingBackend,
{
    let mut results = Results::default();
    for part in parts {
        match part {
            SuitePart::Decode => {
                let bench = &suite.decode;
                results.decode = decode::run::<B::InnerBackend>(bench, device)?;
                let title = format!(
                    "Decode latency (median over positions {:?} of {}), {}",
                    bench.positions,
                    bench.context,
                    bench.model.describe()
                );
                report(&title, &decode::table(&results.decode));
            }
            SuitePart::Flatness => {
                let bench = &suite.flatness;
                results.flatness = decode::run_flatness::<B::InnerBackend>(bench, device)?;
                let title = format!(
                    "Time per token against the position, batch 1, W = {}, {}; full attention up to {}",
                    bench.window,
                    bench.model.describe(),
                    bench.full_max
                );
                report(&title, &decode::flatness_table(bench, &results.flatness));
            }
            SuitePart::Streaming => {
                let bench = &suite.streaming;
                results.streaming = streaming::run::<B::InnerBackend>(bench, device)?;
                let title = format!(
                    "StreamingLLM comparison, batch {}, median over positions {:?}, {}",
                    bench.batch,
                    bench.positions,
                    bench.model.describe()
                );
                report(&title, &streaming::table(&results.streaming));
            }
            SuitePart::Training => {
                let bench = &suite.training;
                results.training = training::run::<B>(bench, device)?;
                let title = format!(
                    "Training step (forward + backward), batch {}, W = {}, {}",
                    bench.batch,
                    bench.window,
                    bench.model.describe()
                );
                report(&title, &training::table(&results.training));
            }
        }
    }
    Ok(results)
}
