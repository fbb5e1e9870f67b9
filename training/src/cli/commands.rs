//! The commands behind the CLI's flags.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::config::Config;
use burn::tensor::backend::{AutodiffBackend, Backend};
use clap::{Args, ValueEnum};
use swa_attention::WindowedAttentionBackend;
use swa_models::{Decoder, DecoderConfig, GenerateConfig, Preset, Scale};

use super::backend::{Job, dispatch};
use super::{DeviceArgs, ModelArgs};
use crate::bench::suite::{self, Part, Suite};
use crate::corpus::{Corpus, bits_per_unit};
use crate::eval::{mean_loss, rebuild, with_eval_window};
use crate::language_model::LanguageModel;
use crate::loader::{Sampling, WindowLoader};
use crate::plot::{heat_map, write_csv};
use crate::train::{TrainConfig, train as run_training};

/// Flags of `train`.
#[derive(Args, Debug)]
pub struct TrainArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Text file to train on, byte-level (the enwik8 split and bits per character when the
    /// file is named `enwik8`). Default: the embedded Book of Genesis (KJV), no download.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Word-level vocabulary (WikiText style) of the words seen at least this often.
    #[arg(long)]
    words: Option<usize>,
    /// Run folder: train.json, checkpoint/, metric logs and model.mpk. Default: runs/<preset>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in --out from its last checkpoint, with its saved train.json.
    #[arg(long)]
    resume: bool,
    /// Training sequence length, independent of the windows (default: the preset's; SWAT's is 4·W).
    #[arg(long)]
    seq_len: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Training steps in all.
    #[arg(long)]
    steps: Option<usize>,
    /// Peak learning rate (AdamW, warmup then cosine decay).
    #[arg(long)]
    lr: Option<f64>,
    /// Warmup updates.
    #[arg(long)]
    warmup: Option<usize>,
    /// Steps between checkpoints.
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// Checkpoints kept.
    #[arg(long)]
    keep: Option<usize>,
    /// Batches accumulated per optimizer update.
    #[arg(long)]
    grad_accumulation: Option<usize>,
    /// Seed of the data order.
    #[arg(long)]
    seed: Option<u64>,
}

/// The model config of `--config`, or of `--preset` with its training length.
fn model_config(args: &ModelArgs, vocab: usize) -> Result<(DecoderConfig, usize, String), String> {
    if let Some(path) = &args.config {
        let config = DecoderConfig::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
        return Ok((config, 512, name));
    }
    let preset = Preset::by_name(&args.preset, vocab)
        .ok_or_else(|| format!("no preset named `{}`; `swa-zoo info --list` lists them", args.preset))?;
    Ok((preset.config, preset.train_len, preset.name))
}

/// `train`.
pub fn train(args: TrainArgs) -> Result<(), String> {
    let (out, mut config) = match args.resume {
        true => {
            let out = args.out.clone().ok_or("--resume needs --out, the run's folder")?;
            let file = out.join("train.json");
            let config = TrainConfig::load(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            (out, config)
        }
        false => {
            let corpus = args.corpus.as_ref().map(|p| p.display().to_string());
            let mut probe = TrainConfig::new(DecoderConfig::new(1, 1, 1, 1, 1, vec![]), 1).with_corpus(corpus);
            probe.word_min_count = args.words;
            let vocab = probe.load_corpus().map_err(|e| e.to_string())?.vocab_size();
            let (model, train_len, name) = model_config(&args.model, vocab)?;
            let out = args.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(name));
            (out, TrainConfig { model, seq_len: train_len, ..probe })
        }
    };
    let set = |target: &mut usize, value: Option<usize>| *target = value.unwrap_or(*target);
    set(&mut config.seq_len, args.seq_len);
    set(&mut config.batch_size, args.batch_size);
    set(&mut config.steps, args.steps);
    set(&mut config.warmup_steps, args.warmup);
    set(&mut config.checkpoint_every, args.checkpoint_every);
    set(&mut config.keep_checkpoints, args.keep);
    set(&mut config.grad_accumulation, args.grad_accumulation);
    config.learning_rate = args.lr.unwrap_or(config.learning_rate);
    config.seed = args.seed.unwrap_or(config.seed);
    struct Run(TrainConfig, PathBuf, bool);
    impl Job for Run {
        fn run<B>(self, device: B::Device) -> Result<(), String>
        where
            B: AutodiffBackend + WindowedAttentionBackend,
            B::InnerBackend: WindowedAttentionBackend,
        {
            let Run(config, out, resume) = self;
            let corpus = config.load_corpus().map_err(|e| e.to_string())?;
            let info = config.model.init::<B::InnerBackend>(&device).map_err(|e| e.to_string())?.info(&config.model, config.seq_len);
            println!("training {} on {} ({} parameters) into {}", corpus.name(), B::name(&device), info.parameters, out.display());
            let outcome = run_training::<B>(&config, &corpus, &out, resume, &device).map_err(|e| e.to_string())?;
            let loss = mean_loss(&outcome.model, Arc::new(corpus.valid().to_vec()), config.seq_len, config.batch_size, config.valid_batches, &device)
                .map_err(|e| e.to_string())?;
            println!("validation: loss {loss:.4}, {:.4} bits per token; model saved to {}", bits_per_unit(loss), out.join("model.mpk").display());
            let curve = crate::curve::plot_loss_curve(&out, config.checkpoint_every).map_err(|e| e.to_string())?;
            println!("loss curve: {}", curve.display());
            Ok(())
        }
    }
    dispatch(args.device.backend, args.device.device, Run(config, out, args.resume))
}

/// A trained run's config and model, from `out/train.json` and `out/model.mpk`.
fn load_run<B: Backend>(out: &Path, device: &B::Device) -> Result<(TrainConfig, Decoder<B>), String> {
    let file = out.join("train.json");
    let config = TrainConfig::load(&file).map_err(|e| format!("{}: {e} (is --out a training run?)", file.display()))?;
    let model = swa_models::weights::load_record(&config.model, &out.join("model.mpk"), device).map_err(|e| e.to_string())?;
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
            let corpus = config.load_corpus().map_err(|e| e.to_string())?;
            let lengths = match args.lengths.is_empty() {
                true => [1, 2, 4, 8, 16].iter().map(|m| m * config.seq_len).collect(),
                false => args.lengths.clone(),
            };
            let windows: Vec<Option<usize>> = match args.windows.is_empty() {
                true => vec![None],
                false => args.windows.iter().map(|&w| Some(w)).collect(),
            };
            let test = Arc::new(corpus.test().to_vec());
            let (mut rows, mut cells) = (Vec::new(), Vec::new());
            for window in &windows {
                let model = match window {
                    Some(w) => {
                        let windowed = with_eval_window(&config.model, *w, args.sinks).map_err(|e| e.to_string())?;
                        rebuild(&model, &windowed, &device).map_err(|e| e.to_string())?
                    }
                    None => model.clone(),
                };
                let mut row = Vec::new();
                for &len in &lengths {
                    let loss = mean_loss(&model, test.clone(), len, 1, args.sequences, &device).map_err(|e| e.to_string())?;
                    let label = window.map_or("trained".into(), |w| w.to_string());
                    println!("window {label:>8}  length {len:>6}  loss {loss:.4}  ppl {:.3}  bits {:.4}", loss.exp(), bits_per_unit(loss));
                    rows.push(vec![label, len.to_string(), format!("{loss:.6}"), format!("{:.6}", bits_per_unit(loss))]);
                    row.push(bits_per_unit(loss));
                }
                cells.push(row);
            }
            let csv = args.out.join("eval.csv");
            write_csv(&csv, &["window", "length", "loss", "bits"], &rows).map_err(|e| e.to_string())?;
            println!("wrote {}", csv.display());
            if windows.len() > 1 {
                let svg = args.out.join("eval_grid.svg");
                heat_map(&svg, "Bits per byte: evaluation window × length", "evaluation length", &lengths, "window", &args.windows, &cells, "bits")
                    .map_err(|e| e.to_string())?;
                println!("wrote {}", svg.display());
            }
            Ok(())
        }
    }
    dispatch(args.device.backend, args.device.device, Run(args))
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
    dispatch(args.device.backend, args.device.device, Run(args))
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
                println!("{:<34} train_len {:>5}  {}", preset.name, preset.train_len, preset.source);
            }
        }
        return Ok(());
    }
    let (config, _, name) = model_config(&args.model, 256)?;
    let model = config.init::<B>(&device).map_err(|e| e.to_string())?;
    let info = model.info(&config, args.context);
    println!("{name}\n{info}");
    let swa = DecoderConfig { attention: vec![swa_attention::layers::AttentionKind::Sliding { window: base_window(&config) }], ..config.clone() };
    println!("relative cost vs SWA of the same base window: {:.3}", info.relative_cost(swa.window_sum(args.context)));
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
                println!("quick efficiency suite on {} (the full one: cargo bench --bench efficiency)\n", B::name(&device));
                suite::run::<B>(&Suite::quick(), &parts, &device, |title, table| println!("{title}\n\n{}", table.markdown()))?;
            }
            if !matches!(args.suite, BenchSuite::All | BenchSuite::Preset) {
                return Ok(());
            }
            let corpus = Corpus::embedded();
            let (config, train_len, name) = model_config(&args.model, corpus.vocab_size())?;
            let len = args.seq_len.unwrap_or(train_len);
            let model = LanguageModel { decoder: config.init::<B>(&device).map_err(|e| e.to_string())? };
            let loader = WindowLoader::<B>::new(Arc::new(corpus.train().to_vec()), len, args.batch_size, args.steps + 1, Sampling::Random { seed: 0 }, 0, device.clone())?;
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
            println!("{name} on {}: N={len} batch={} → {:.1} ms/step, {:.0} tokens/s (forward+backward)", B::name(&device), args.batch_size, seconds * 1e3, tokens / seconds);
            Ok(())
        }
    }
    dispatch(args.device.backend, args.device.device, Run(args))
}
