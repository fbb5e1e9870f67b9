//! `bench`: the quick efficiency suite ([`crate::bench`]), then the training throughput of
//! --preset.

use std::time::Instant;

use clap::{Args, ValueEnum};
use swa_training::TrainingBackend;
use swa_training::corpus::Corpus;
use swa_training::language_model::LanguageModel;
use swa_training::loader::{LoaderConfig, Sampling};
use swa_training::stream_memory::Stream;

use super::{DeviceArgs, ModelArgs};
use crate::bench::suite::{self, Suite, SuitePart};
use crate::error::AppError;
use crate::runtime::{Job, run_on};

/// Flags of `bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Sequence length (default: the preset's training length).
    #[arg(long)]
    seq_len: Option<usize>,
    /// Sequences per step.
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    /// Timed steps, after one warm-up step.
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// What to run: the quick efficiency suite (decode latency and KV bytes, time per token
    /// against the position, StreamingLLM, training throughput; `cargo bench --bench efficiency`
    /// runs the full one), one part of it, or only the --preset throughput line.
    #[arg(long, value_enum, default_value_t = BenchSuite::All)]
    suite: BenchSuite,
}

/// The parts `bench --suite` chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchSuite {
    /// Every part of the quick suite, then the --preset throughput line.
    All,
    /// Decode latency and KV bytes per kind, window and batch (MSWA Figure 3).
    Decode,
    /// Time per token against the position.
    Flatness,
    /// SWA and SWAT against a vanilla model run with StreamingLLM's sinks.
    Streaming,
    /// Training-step throughput per kind and sequence length.
    Training,
    /// Only the forward+backward throughput of --preset on the embedded corpus.
    Preset,
}

/// `bench`: the quick efficiency suite, then forward+backward steps per second of --preset on
/// the embedded corpus.
pub fn bench(args: BenchArgs) -> Result<(), AppError> {
    struct BenchJob(BenchArgs);
    impl Job for BenchJob {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let args = self.0;
            let parts: Vec<SuitePart> = match args.suite {
                BenchSuite::All => SuitePart::ALL.to_vec(),
                BenchSuite::Decode => vec![SuitePart::Decode],
                BenchSuite::Flatness => vec![SuitePart::Flatness],
                BenchSuite::Streaming => vec![SuitePart::Streaming],
                BenchSuite::Training => vec![SuitePart::Training],
                BenchSuite::Preset => vec![],
            };
            if !parts.is_empty() {
                println!(
                    "quick efficiency suite on {} (the full one: cargo bench --bench efficiency)\n",
                    B::name(&device)
                );
                suite::run::<B>(&Suite::quick(), &parts, &device, |title, table| {
                    println!("{title}\n\n{}", table.markdown())
                })?;
            }
            if !matches!(args.suite, BenchSuite::All | BenchSuite::Preset) {
                return Ok(());
            }
            let corpus = Corpus::embedded();
            let (config, train_len, name) = args.model.config(corpus.vocab_size())?;
            let len = args.seq_len.unwrap_or(train_len);
            let model = LanguageModel::new(config.init::<B>(&device)?);
            let loader = LoaderConfig::new(len, args.batch_size)
                .with_steps(args.steps + 1)
                .with_sampling(Sampling::Random { seed: 0 })
                .init_text::<B>(corpus.train(), &device)?;
            let mut start = Instant::now();
            for step in 0..=args.steps {
                let out = model.loss(loader.batch(0, step), Stream::Train);
                let _ = out.loss.backward();
                let _ = B::sync(&device);
                if step == 0 {
                    start = Instant::now();
                }
            }
            let seconds = start.elapsed().as_secs_f64() / args.steps.max(1) as f64;
            let tokens = (args.batch_size * len) as f64;
            println!(
                "{name} on {}: N={len} batch={} → {:.1} ms/step, {:.0} tokens/s (forward+backward)",
                B::name(&device),
                args.batch_size,
                seconds * 1e3,
                tokens / seconds
            );
            Ok(())
        }
    }
    run_on(&args.device.placement(), BenchJob(args))
}
