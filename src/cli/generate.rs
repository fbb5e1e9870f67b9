//! `generate`: continue a prompt with a trained run's model, or an untrained one of a preset,
//! through the bounded KV cache.

use std::path::PathBuf;

use clap::Args;
use swa_models::GenerateConfig;
use swa_training::TrainingBackend;
use swa_training::corpus::Corpus;

use super::{DeviceArgs, ModelArgs, load_run};
use crate::error::AppError;
use crate::runtime::{Job, run_on};

/// Flags of `generate`.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// A training run to generate with; without it, an untrained model of --preset.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// The prompt.
    #[arg(long, default_value = "In the beginning")]
    prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
    tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Sample among the k most likely tokens; 0 keeps all.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus sampling threshold in (0, 1].
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Sampler seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `generate`.
pub fn generate(args: GenerateArgs) -> Result<(), AppError> {
    struct Run(GenerateArgs);
    impl Job for Run {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let args = self.0;
            let (corpus, model) = match &args.out {
                Some(out) => {
                    let (config, model) = load_run::<B::InnerBackend>(out, &device)?;
                    (config.load_corpus()?, model)
                }
                None => {
                    let corpus = Corpus::embedded();
                    let (config, _, _) = args.model.config(corpus.vocab_size())?;
                    (corpus, config.init::<B::InnerBackend>(&device)?)
                }
            };
            let prompt = corpus.encode(&args.prompt);
            let config = GenerateConfig::new()
                .with_max_new_tokens(args.tokens)
                .with_temperature(args.temperature)
                .with_top_k(args.top_k)
                .with_top_p(args.top_p)
                .with_seed(args.seed);
            let tokens = model.generate(&[prompt], &config, &device)?;
            println!("{}{}", args.prompt, corpus.decode(&tokens[0]));
            Ok(())
        }
    }
    run_on(&args.device.placement(), Run(args))
}
