//! `generate`: continue a prompt with a trained run's model, an untrained one of a preset, or a
//! Hugging Face checkpoint (tokens streamed as they come), through the bounded KV cache after
//! one forward pass over the prompt.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use swa_attention::ModelBackend;
use swa_models::GenerateConfig;
use swa_models::layers::CachePositions;
use swa_training::TrainingBackend;
use swa_training::corpus::Corpus;

use super::{DeviceArgs, ModelArgs, WeightArgs};
use crate::error::AppError;
use crate::runtime::{Job, run_on};
use swa_models::hf::{Pretrained, WeightPrecision};

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
    #[command(flatten)]
    weights: WeightArgs,
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
    struct GenerateJob(GenerateArgs, WeightPrecision);
    impl Job for GenerateJob {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let (args, weights) = (self.0, self.1);
            if let Some(dir) = &args.hf {
                return generate_hf::<B::InnerBackend>(&args, dir, weights, &device);
            }
            let (corpus, model) = match &args.out {
                Some(out) => {
                    let swa_training::TrainedRun { config, model } =
                        swa_training::TrainedRun::<B::InnerBackend>::load(out, &device)?;
                    (config.load_corpus()?, model)
                }
                None => {
                    let corpus = Corpus::embedded();
                    let (config, _, _) = args.model.config(corpus.vocab_size())?;
                    (corpus, config.init::<B::InnerBackend>(&device)?)
                }
            };
            let prompt = corpus.encode(&args.prompt);
            let mut timing = Timing::start(prompt.len());
            let tokens = model.generate_with(&[prompt], &args.sampling(), &device, |_| {
                timing.token();
                true
            })?;
            println!("{}{}", args.prompt, corpus.decode(&tokens[0]));
            eprintln!("{timing}");
            Ok(())
        }
    }
    // Refused before any device starts.
    let weights = args.weights.precision(&args.device)?;
    run_on(&args.device.placement(), GenerateJob(args, weights))
}

/// A checkpoint's continuation of the prompt, printed token by token: the text decoded so far
/// is printed past what was already shown, holding back an incomplete UTF-8 sequence.
fn generate_hf<B: ModelBackend>(
    args: &GenerateArgs,
    dir: &Path,
    weights: WeightPrecision,
    device: &B::Device,
) -> Result<(), AppError> {
    let run = Pretrained::<B>::load_with(dir, weights, device)?;
    let prompt = run.encode(&args.prompt, true)?;
    let sampling = args.sampling().with_positions(CachePositions::Absolute);
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{}", args.prompt).ok();
    stdout.flush().ok();
    let (mut generated, mut shown, mut failure) = (Vec::new(), 0, None);
    let mut timing = Timing::start(prompt.len());
    run.model.generate_with(&[prompt], &sampling, device, |tokens| {
        timing.token();
        if run.tokenizer.is_eos(tokens[0]) {
            return false;
        }
        generated.push(tokens[0]);
        match run.decode(&generated) {
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
    eprintln!("{timing}");
    match failure {
        Some(problem) => Err(problem.into()),
        None => Ok(()),
    }
}

/// The speed of a generation, from the moments its tokens were chosen: the prompt's forward
/// pass (prefill) ends when the first new token is chosen, and every later token is one decode
/// step (with its sampling and, for a checkpoint, its detokenising).
struct Timing {
    prompt: usize,
    start: Instant,
    /// When the first new token was chosen, and when the last one was.
    first: Option<Instant>,
    last: Option<Instant>,
    tokens: usize,
}

impl Timing {
    fn start(prompt: usize) -> Self {
        Self { prompt, start: Instant::now(), first: None, last: None, tokens: 0 }
    }

    /// A new token was chosen.
    fn token(&mut self) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.tokens += 1;
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (Some(first), Some(last)) = (self.first, self.last) else {
            return write!(f, "no token generated");
        };
        let prefill = first - self.start;
        write!(
            f,
            "prefill: {} tokens in {:.1} ms ({:.0} tokens/s)",
            self.prompt,
            ms(prefill),
            self.prompt as f64 / prefill.as_secs_f64()
        )?;
        if self.tokens > 1 {
            let steps = self.tokens - 1;
            write!(
                f,
                "; decode: {steps} tokens at {:.2} ms/token",
                ms(last - first) / steps as f64
            )?;
        }
        Ok(())
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
