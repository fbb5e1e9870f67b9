//! The commands behind the CLI's flags.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::backend::{AutodiffBackend, Backend};
use clap::{Args, ValueEnum};
use swa_attention::WindowedAttentionBackend;
use swa_models::{Decoder, DecoderConfig, GenerateConfig, Preset, Scale};

use super::backend::{Job, run_on};
use super::{DeviceArgs, ModelArgs};
use crate::bench::suite::{self, Part, Suite};
use crate::corpus::{Corpus, bits_per_unit};
use crate::eval::{mean_loss, rebuild, with_eval_window};
use crate::language_model::LanguageModel;
use crate::loader::{Sampling, WindowLoader};
use crate::plot::{heat_map, write_csv};
use crate::train::TrainConfig;

/// The model config of `--config`, or of `--preset` with its training length.
pub(super) fn model_config(
    args: &ModelArgs,
    vocab: usize,
) -> Result<(DecoderConfig, usize, String), String> {
    if let Some(path) = &args.config {
        let config: DecoderConfig = crate::config_file::load(path)?;
        let name = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
        return Ok((config, 512, name));
    }
    let preset = Preset::by_name(&args.preset, vocab).ok_or_else(|| {
        format!("no preset named `{}`; `swa-zoo info --list` lists them", args.preset)
    })?;
    Ok((preset.config, preset.train_len, preset.name))
}

/// A trained run's config and model, from `out/train.json` and `out/model.mpk`.
fn load_run<B: Backend>(
    out: &Path,
    device: &B::Device,
) -> Result<(TrainConfig, Decoder<B>), String> {
    let file = out.join("train.json");
    let config: TrainConfig =
        crate::config_file::load(&file).map_err(|e| format!("{e} (is --out a training run?)"))?;
    let model = swa_models::weights::load_record(&config.model, &out.join("model.mpk"), device)
        .map_err(|e| e.to_string())?;
    Ok((config, model))
}

/// Flags of `eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The training run to evaluate (its train.json and model.mpk).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    /// Evaluation lengths (SWAT Table 2: 128 … 16384). Default: the training length × 1, 2, 4, 8, 16.
    #[arg(long, value_delimiter = ',')]
    lengths: Vec<usize>,
    /// Evaluation windows W (keys, self included) replacing the trained ones; several give the
    /// window × length grid of SWAT Figure 2. Default: the trained windows.
    #[arg(long, value_delimiter = ',')]
    windows: Vec<usize>,
    /// Attention sinks kept with each evaluation window (StreamingLLM).
    #[arg(long, default_value_t = 0)]
    sinks: usize,
    /// Sequences per length.
    #[arg(long, default_value_t = 4)]
    sequences: usize,
    /// Runs trained on passkey retrieval: the distances to test. Default: W/2, W, 2W and the
    /// stack's reach (W − 1)·L, for the largest window W and L layers.
    #[arg(long, value_delimiter = ',')]
    distances: Vec<usize>,
    /// Runs trained on a synthetic task: examples per setting.
    #[arg(long, default_value_t = 64)]
    examples: usize,
}

/// `eval`.
pub fn eval(args: EvalArgs) -> Result<(), String> {
    struct Run(EvalArgs);
    impl Job for Run {
        fn run<B>(self, device: B::Device) -> Result<(), String>
        where
            B: AutodiffBackend + WindowedAttentionBackend,
            B::InnerBackend: WindowedAttentionBackend,
        {
            let args = self.0;
            let (config, model) = load_run::<B::InnerBackend>(&args.out, &device)?;
            if let Some(task) = &config.task {
                let (windows, lengths, distances) = (&args.windows, &args.lengths, &args.distances);
                return super::tasks::eval(
                    &args.out,
                    &config,
                    task,
                    &model,
                    windows,
                    lengths,
                    distances,
                    args.examples,
                    &device,
                );
            }
            let corpus = config.load_corpus().map_err(|e| e.to_string())?;
            let lengths = match args.lengths.is_empty() {
                true => [1, 2, 4, 8, 16].iter().map(|m| m * config.seq_len).collect(),
                false => args.lengths.clone(),
            };
            let windows: Vec<Option<usize>> = match args.windows.is_empty() {
                true => vec![None],
                false => args.windows.iter().map(|&w| Some(w)).collect(),
            };
            let test = corpus.test();
            let (mut rows, mut cells) = (Vec::new(), Vec::new());
            for window in &windows {
                let model = match window {
                    Some(w) => {
                        let windowed = with_eval_window(&config.model, *w, args.sinks)
                            .map_err(|e| e.to_string())?;
                        rebuild(&model, &windowed, &device).map_err(|e| e.to_string())?
                    }
                    None => model.clone(),
                };
                let mut row = Vec::new();
                for &len in &lengths {
                    let loss = mean_loss(&model, test.clone(), len, 1, args.sequences, &device)
                        .map_err(|e| e.to_string())?;
                    let label = window.map_or("trained".into(), |w| w.to_string());
                    println!(
                        "window {label:>8}  length {len:>6}  loss {loss:.4}  ppl {:.3}  bits {:.4}",
                        loss.exp(),
                        bits_per_unit(loss)
                    );
                    rows.push(vec![
                        label,
                        len.to_string(),
                        format!("{loss:.6}"),
                        format!("{:.6}", bits_per_unit(loss)),
                    ]);
                    row.push(bits_per_unit(loss));
                }
                cells.push(row);
            }
            let csv = args.out.join("eval.csv");
            write_csv(&csv, &["window", "length", "loss", "bits"], &rows)
                .map_err(|e| e.to_string())?;
            println!("wrote {}", csv.display());
            if windows.len() > 1 {
                let svg = args.out.join("eval_grid.svg");
                heat_map(
                    &svg,
                    "Bits per byte: evaluation window × length",
                    "evaluation length",
                    &lengths,
                    "window",
                    &args.windows,
                    &cells,
                    "bits",
                )
                .map_err(|e| e.to_string())?;
                println!("wrote {}", svg.display());
            }
            Ok(())
        }
    }
    run_on(&args.device.placement(), Run(args))
}

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
pub fn generate(args: GenerateArgs) -> Result<(), String> {
    struct Run(GenerateArgs);
    impl Job for Run {
        fn run<B>(self, device: B::Device) -> Result<(), String>
        where
            B: AutodiffBackend + WindowedAttentionBackend,
            B::InnerBackend: WindowedAttentionBackend,
        {
            let args = self.0;
            let (corpus, model) = match &args.out {
                Some(out) => {
                    let (config, model) = load_run::<B::InnerBackend>(out, &device)?;
                    (config.load_corpus().map_err(|e| e.to_string())?, model)
                }
                None => {
                    let corpus = Corpus::embedded();
                    let (config, _, _) = model_config(&args.model, corpus.vocab_size())?;
                    (corpus, config.init::<B::InnerBackend>(&device).map_err(|e| e.to_string())?)
                }
            };
            let prompt = corpus.encode(&args.prompt);
            let config = GenerateConfig::new()
                .with_max_new_tokens(args.tokens)
                .with_temperature(args.temperature)
                .with_top_k(args.top_k)
                .with_top_p(args.top_p)
                .with_seed(args.seed);
            let tokens = model.generate(&[prompt], &config, &device).map_err(|e| e.to_string())?;
            println!("{}{}", args.prompt, corpus.decode(&tokens[0]));
            Ok(())
        }
    }
    run_on(&args.device.placement(), Run(args))
}

/// Flags of `info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Context length at which windows and the KV cache are counted.
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// List the presets with their sizes and sources.
    #[arg(long)]
    list: bool,
}

/// `info`.
pub fn info(args: InfoArgs) -> Result<(), String> {
    type B = burn::backend::NdArray;
    let device = Default::default();
    if args.list {
        for scale in [Scale::Paper, Scale::Tiny] {
            for preset in Preset::all(scale, 256).map_err(|e| e.to_string())? {
                println!(
                    "{:<34} train_len {:>5}  {}",
                    preset.name, preset.train_len, preset.source
                );
            }
        }
        return Ok(());
    }
    let (config, _, name) = model_config(&args.model, 256)?;
    let model = config.init::<B>(&device).map_err(|e| e.to_string())?;
    let info = model.info(&config, args.context);
    println!("{name}\n{info}");
    let swa = DecoderConfig {
        attention: vec![swa_attention::layers::AttentionKind::Sliding {
            window: base_window(&config),
        }],
        ..config.clone()
    };
    println!(
        "relative cost vs SWA of the same base window: {:.3}",
        info.relative_cost(swa.window_sum(args.context))
    );
    Ok(())
}

/// The base window of a config: the largest window of its first windowed layer's heads, over 4
/// for MSWA (whose largest head window is 4w), else that window.
fn base_window(config: &DecoderConfig) -> usize {
    use swa_attention::layers::AttentionKind::*;
    (0..config.layers)
        .find_map(|l| match config.kind_of(l) {
            Sliding { window } | Swat { window, .. } | Sinks { window, .. } => Some(*window),
            MultiScale { windows } => windows.iter().max().map(|w| w / 4),
            _ => None,
        })
        .unwrap_or(1)
}

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
pub fn bench(args: BenchArgs) -> Result<(), String> {
    struct Run(BenchArgs);
    impl Job for Run {
        fn run<B>(self, device: B::Device) -> Result<(), String>
        where
            B: AutodiffBackend + WindowedAttentionBackend,
            B::InnerBackend: WindowedAttentionBackend,
        {
            let args = self.0;
            let parts: Vec<Part> = match args.suite {
                BenchSuite::All => Part::ALL.to_vec(),
                BenchSuite::Decode => vec![Part::Decode],
                BenchSuite::Flatness => vec![Part::Flatness],
                BenchSuite::Streaming => vec![Part::Streaming],
                BenchSuite::Training => vec![Part::Training],
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
            let (config, train_len, name) = model_config(&args.model, corpus.vocab_size())?;
            let len = args.seq_len.unwrap_or(train_len);
            let model = LanguageModel::new(config.init::<B>(&device).map_err(|e| e.to_string())?);
            let loader = WindowLoader::<B>::new(
                corpus.train(),
                len,
                args.batch_size,
                args.steps + 1,
                Sampling::Random { seed: 0 },
                0,
                device.clone(),
            )?;
            let mut start = Instant::now();
            for step in 0..=args.steps {
                let out = model.loss(loader.batch(0, step));
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
    run_on(&args.device.placement(), Run(args))
}
