//! `eval`: loss, perplexity and bits per unit of a training run at several lengths and
//! evaluation windows (the window × length grid of SWAT's Figure 2), or the accuracy of a run
//! trained on a synthetic task.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use swa_attention::ModelBackend;
use swa_models::{Decoder, DecoderConfig};
use swa_training::TrainingBackend;
use swa_training::corpus::bits_per_unit;
use swa_training::eval::{mean_loss, rebuild, stream_loss, with_eval_window};

use super::{DeviceArgs, WeightArgs};
use crate::error::AppError;
use crate::report::csv::write_csv;
use crate::report::plot::heat_map;
use crate::runtime::{Job, run_on};
use swa_models::hf::{Pretrained, WeightPrecision};

/// Flags of `eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The training run to evaluate (its train.json and model.mpk).
    #[arg(long, conflicts_with = "hf", required_unless_present = "hf")]
    out: Option<PathBuf>,
    /// A local Hugging Face model directory instead: perplexity per token of --corpus under
    /// window inference (SWAT's experiment 2). Results go to `runs/eval/<checkpoint>`.
    #[arg(long, requires = "corpus")]
    hf: Option<PathBuf>,
    /// The text to evaluate on: with --hf, required; with --out, in place of the run's test
    /// split, read in the run's units (bytes, words, or its checkpoint's tokens after its BOS),
    /// e.g. text held out from a fine-tuning corpus, scored alike for every model.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Where to write eval.csv and the grid. Default: the run's folder with --out,
    /// `runs/eval/<checkpoint>` with --hf.
    #[arg(long)]
    to: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    weights: WeightArgs,
    /// Evaluation lengths (SWAT Table 2: 128 … 16384). Default: the training length × 1, 2, 4,
    /// 8, 16; with --hf, 128, 256, 512.
    #[arg(long, value_delimiter = ',')]
    lengths: Vec<usize>,
    /// Evaluation windows W (keys, self included) replacing the trained ones; several give the
    /// window × length grid of SWAT Figure 2. Default: the trained windows.
    #[arg(long, value_delimiter = ',')]
    windows: Vec<usize>,
    /// Attention sinks kept with each evaluation window (StreamingLLM).
    #[arg(long, default_value_t = 0)]
    sinks: usize,
    /// Sequences per length; for a run trained with segment memory, also the segments of the
    /// one stream it is scored on with its memory.
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
pub fn eval(args: EvalArgs) -> Result<(), AppError> {
    struct EvalJob(EvalArgs, WeightPrecision);
    impl Job for EvalJob {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let (args, weights) = (self.0, self.1);
            let Some(out) = &args.out else {
                let dir = args.hf.clone().expect("clap requires --out or --hf");
                return eval_hf::<B::InnerBackend>(&args, &dir, weights, &device);
            };
            let swa_training::TrainedRun { config, model } =
                swa_training::TrainedRun::<B::InnerBackend>::load(out, &device)?;
            if let Some(task) = &config.task {
                let (windows, lengths, distances) = (&args.windows, &args.lengths, &args.distances);
                return super::tasks::eval(
                    out,
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
            let corpus = config.load_corpus()?;
            let tokens = match &args.corpus {
                None => corpus.test(),
                Some(path) => {
                    let ids = corpus.encode(&read_text(path)?).into_iter().map(|t| t as u32);
                    Arc::new(ids.collect())
                }
            };
            let lengths = match args.lengths.is_empty() {
                true => [1, 2, 4, 8, 16].iter().map(|m| m * config.seq_len).collect(),
                false => args.lengths.clone(),
            };
            let to = args.to.clone().unwrap_or_else(|| out.clone());
            let grid = Grid { args: &args, lengths, unit: corpus.unit_name(), to };
            grid.run(&config.model, &model, (tokens.clone(), config.bos), &device)?;
            if config.segment_memory {
                // A run trained with segment memory is also scored as it validated: one stream
                // of --sequences segments, every layer keeping what its windows reach.
                let (len, full) = (config.seq_len, config.full_memory());
                let segments = (len, 1, args.sequences);
                let loss = stream_loss(&model, tokens, segments, full, &device)?;
                println!(
                    "segment memory: {} segments of {len} in one stream: loss {loss:.4}  bits {:.4}",
                    args.sequences,
                    bits_per_unit(loss)
                );
            }
            Ok(())
        }
    }
    // Refused before any device starts.
    let weights = args.weights.precision(&args.device)?;
    run_on(&args.device.placement(), EvalJob(args, weights))
}

/// The window × length grid of one model: loss, perplexity and bits per unit at every length,
/// under each evaluation window (or the model's own), written as `eval.csv` and, with several
/// windows, the heat map `eval_grid.svg` in `to`.
struct Grid<'a> {
    args: &'a EvalArgs,
    lengths: Vec<usize>,
    /// What a token is: byte, character, word or token.
    unit: &'static str,
    to: PathBuf,
}

impl Grid<'_> {
    fn run<B: ModelBackend>(
        &self,
        config: &DecoderConfig,
        model: &Decoder<B>,
        text: (Arc<Vec<u32>>, Option<u32>),
        device: &B::Device,
    ) -> Result<(), AppError> {
        let args = self.args;
        let windows: Vec<Option<usize>> = match args.windows.is_empty() {
            true => vec![None],
            false => args.windows.iter().map(|&w| Some(w)).collect(),
        };
        let (mut rows, mut cells) = (Vec::new(), Vec::new());
        for window in &windows {
            let model = match window {
                Some(w) => rebuild(model, &with_eval_window(config, *w, args.sinks)?, device)?,
                None => model.clone(),
            };
            let mut row = Vec::new();
            for &len in &self.lengths {
                let loss = mean_loss(&model, text.clone(), len, 1, args.sequences, device)?;
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
        std::fs::create_dir_all(&self.to)
            .map_err(|source| AppError::Io { path: self.to.clone(), source })?;
        let csv = self.to.join("eval.csv");
        write_csv(&csv, &["window", "length", "loss", "bits"], &rows)?;
        println!("wrote {}", csv.display());
        if windows.len() > 1 {
            let svg = self.to.join("eval_grid.svg");
            heat_map(
                &svg,
                &format!("Bits per {}: evaluation window × length", self.unit),
                "evaluation length",
                &self.lengths,
                "window",
                &args.windows,
                &cells,
                "bits",
            )?;
            println!("wrote {}", svg.display());
        }
        Ok(())
    }
}

/// `eval --hf`: the grid for a checkpoint over `--corpus`, tokenized by its tokenizer, every
/// sequence starting with the BOS token when the tokenizer adds one (as the checkpoint was
/// trained, and as transformers and lm-eval score it).
fn eval_hf<B: ModelBackend>(
    args: &EvalArgs,
    dir: &Path,
    weights: WeightPrecision,
    device: &B::Device,
) -> Result<(), AppError> {
    let run = Pretrained::<B>::load_with(dir, weights, device)?;
    let path = args.corpus.as_ref().expect("clap requires --corpus with --hf");
    let tokens: Vec<u32> =
        run.encode(&read_text(path)?, false)?.into_iter().map(|t| t as u32).collect();
    let bos = run.tokenizer.bos().map(|t| t as u32);
    let lengths = match args.lengths.is_empty() {
        true => vec![128, 256, 512],
        false => args.lengths.clone(),
    };
    let name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    let to = args.to.clone().unwrap_or_else(|| Path::new("runs/eval").join(name));
    let grid = Grid { args, lengths, unit: "token", to };
    grid.run(&run.config, &run.model, (Arc::new(tokens), bos), device)
}

/// The text of the file at `path`.
fn read_text(path: &Path) -> Result<String, AppError> {
    std::fs::read_to_string(path).map_err(|source| AppError::Io { path: path.into(), source })
}
