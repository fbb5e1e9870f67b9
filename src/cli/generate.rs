//! `generate`: continue a prompt with a trained run's model, an untrained one of a preset, or a
//! Hugging Face checkpoint (tokens streamed as they come), through the bounded KV cache after
//! one forward pass over the prompt.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use swa_attention::WindowedAttentionBackend;
use swa_attention::layers::CachePositions;
use swa_models::GenerateConfig;
use swa_training::TrainingBackend;
use swa_training::corpus::Corpus;

use super::hf_run::{HfRun, checkpoint};
use super::{DeviceArgs, ModelArgs, load_run};
use crate::error::AppError;
use crate::runtime::{Job, run_on};

/// Flags of `generate`.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// A training run to generate with; without it (and --hf), an untrained model of --preset.
    #[arg(long, conflicts_with = "hf")]
    out: Option<PathBuf>,
    /// A local Hugging Face model directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    hf: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// The prompt.
    #[arg(long, default_value = "In the beginning")]
    prompt: String,
    /// Tokens to generate (a checkpoint stops earlier at its end-of-sequence token).
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

impl GenerateArgs {
    fn sampling(&self) -> GenerateConfig {
        GenerateConfig::new()
            .with_max_new_tokens(self.tokens)
            .with_temperature(self.temperature)
            .with_top_k(self.top_k)
            .with_top_p(self.top_p)
            .with_seed(self.seed)
    }
}

/// `generate`.
pub fn generate(args: GenerateArgs) -> Result<(), AppError> {
    struct Run(GenerateArgs);
    impl Job for Run {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let args = self.0;
            if let Some(dir) = &args.hf {
                return generate_hf::<B::InnerBackend>(&args, dir, &device);
            }
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
            let tokens = model.generate(&[prompt], &args.sampling(), &device)?;
            println!("{}{}", args.prompt, corpus.decode(&tokens[0]));
            Ok(())
        }
    }
    run_on(&args.device.placement(), Run(args))
}

/// A checkpoint's continuation of the prompt, printed token by token: the text decoded so far
/// is printed past what was already shown, holding back an incomplete UTF-8 sequence.
fn generate_hf<B: WindowedAttentionBackend>(
    args: &GenerateArgs,
    dir: &Path,
    device: &B::Device,
) -> Result<(), AppError> {
    let run = HfRun::<B>::load(dir, device)?;
    let prompt = run.encode(dir, &args.prompt, true)?;
    let sampling = args.sampling().with_positions(CachePositions::Absolute);
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{}", args.prompt).ok();
    stdout.flush().ok();
    let (mut generated, mut shown, mut failure) = (Vec::new(), 0, None);
    run.model.generate_with(&[prompt], &sampling, device, |tokens| {
        if run.tokenizer.is_eos(tokens[0]) {
            return false;
        }
        generated.push(tokens[0]);
        match run.tokenizer.decode(&generated) {
            Ok(text) => {
                let complete = text.trim_end_matches('\u{FFFD}');
                if complete.len() > shown && complete.is_char_boundary(shown) {
                    write!(stdout, "{}", &complete[shown..]).ok();
                    stdout.flush().ok();
                    shown = complete.len();
                }
                true
            }
            Err(problem) => {
                failure = Some(problem);
                false
            }
        }
    })?;
    writeln!(stdout).ok();
    match failure {
        Some(problem) => Err(checkpoint(dir, problem)),
        None => Ok(()),
    }
}
