//! `eval`: loss, perplexity and bits per unit of a training run at several lengths and
//! evaluation windows (the window × length grid of SWAT's Figure 2), or the accuracy of a run
//! trained on a synthetic task.

use std::path::PathBuf;

use clap::Args;
use swa_training::TrainingBackend;
use swa_training::corpus::bits_per_unit;
use swa_training::eval::{mean_loss, rebuild, with_eval_window};

use super::{DeviceArgs, load_run};
use crate::error::AppError;
use crate::report::csv::write_csv;
use crate::report::plot::heat_map;
use crate::runtime::{Job, run_on};

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
pub fn eval(args: EvalArgs) -> Result<(), AppError> {
    struct Run(EvalArgs);
    impl Job for Run {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
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
            let corpus = config.load_corpus()?;
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
                        let windowed = with_eval_window(&config.model, *w, args.sinks)?;
                        rebuild(&model, &windowed, &device)?
                    }
                    None => model.clone(),
                };
                let mut row = Vec::new();
                for &len in &lengths {
                    let loss = mean_loss(&model, test.clone(), len, 1, args.sequences, &device)?;
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
            write_csv(&csv, &["window", "length", "loss", "bits"], &rows)?;
            println!("wrote {}", csv.display());
            if windows.len() > 1 {
                let svg = args.out.join("eval_grid.svg");
                heat_map(
                    &svg,
                    &format!("Bits per {}: evaluation window × length", corpus.unit_name()),
                    "evaluation length",
                    &lengths,
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
    run_on(&args.device.placement(), Run(args))
}
