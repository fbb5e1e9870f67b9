//! The synthetic tasks on the command line: `train --task mqar|passkey`, and their accuracy
//! after training and in `eval` (MQAR recall accuracy; passkey retrieval accuracy per distance,
//! including distances beyond the window W but within the stack's reach (W − 1)·L).

use std::path::Path;

use clap::{Args, ValueEnum};
use swa_attention::ModelBackend;
use swa_models::Decoder;
use swa_training::eval::{rebuild, with_eval_window};
use swa_training::synthetic::{SyntheticTask, model_accuracy, passkey_distances, receptive_field};
use swa_training::tasks::{Example, Passkey};
use swa_training::train::TrainConfig;

use crate::error::AppError;
use crate::report::csv::write_csv;

/// The synthetic tasks `train --task` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TaskChoice {
    /// Multi-query associative recall: key-value pairs, then every key asked for again.
    Mqar,
    /// Passkey retrieval: a number hidden in filler text, asked for at the end.
    Passkey,
}

/// Flags of `train` choosing a synthetic task.
#[derive(Args, Debug, Clone)]
pub struct TaskArgs {
    /// Train on a synthetic task instead of text; the loss and accuracy cover its answers only.
    #[arg(long, value_enum)]
    task: Option<TaskChoice>,
    /// MQAR: key-value pairs per example (default: sequence length / 8, at most 32).
    #[arg(long)]
    pairs: Option<usize>,
    /// Passkey: digits of the key.
    #[arg(long, default_value_t = 5)]
    digits: usize,
}

impl TaskArgs {
    /// The task chosen, for sequences of `seq_len` tokens; `None` is language modelling.
    pub fn task(&self, seq_len: usize) -> Option<SyntheticTask> {
        self.task.map(|choice| match choice {
            TaskChoice::Mqar => {
                SyntheticTask::mqar(self.pairs.unwrap_or((seq_len / 8).clamp(1, 32)))
            }
            TaskChoice::Passkey => SyntheticTask::passkey(self.digits),
        })
    }
}

/// Seeds of the examples scored after training and by `eval`: apart from the training
/// (`seed`) and validation (`seed + 1`) streams.
fn test_seed(config: &TrainConfig) -> u64 {
    config.seed.wrapping_add(2)
}

/// Prints the accuracy of a run's model on `count` fresh examples of its task.
pub fn report<B: ModelBackend>(
    config: &TrainConfig,
    task: &SyntheticTask,
    model: &Decoder<B>,
    count: usize,
    device: &B::Device,
) -> Result<(), AppError> {
    let examples = (0..count as u64)
        .map(|i| task.example(config.seq_len, test_seed(config), i))
        .collect::<Result<Vec<_>, _>>()?;
    let score = model_accuracy(model, &examples, config.batch_size, device)?;
    println!(
        "accuracy on {count} fresh {task:?} examples: {:.4} of answer tokens ({} of {}), {:.4} \
         of examples entirely right",
        score.token_accuracy(),
        score.correct,
        score.scored,
        score.exact_rate()
    );
    Ok(())
}

/// `eval` of a run trained on a task: accuracy per evaluation window and length (MQAR) or
/// distance (passkey), printed and written to `out/eval_task.csv`.
#[allow(clippy::too_many_arguments)]
pub fn eval<B: ModelBackend>(
    out: &Path,
    config: &TrainConfig,
    task: &SyntheticTask,
    model: &Decoder<B>,
    windows: &[usize],
    lengths: &[usize],
    distances: &[usize],
    count: usize,
    device: &B::Device,
) -> Result<(), AppError> {
    if let Some((w, l)) = receptive_field(&config.model) {
        println!("largest window W = {w}, layers L = {l}: reach (W − 1)·L = {}", (w - 1) * l);
    }
    // (length, distance) settings: MQAR and majority at each length; passkey at each distance,
    // in the training length or the shortest sequence that holds it.
    let settings: Vec<(usize, Option<usize>)> = match task {
        SyntheticTask::Passkey { digits } => {
            let distances = match distances.is_empty() {
                true => passkey_distances(&config.model, config.seq_len, *digits),
                false => distances.to_vec(),
            };
            distances
                .into_iter()
                .map(|d| (config.seq_len.max(Passkey::shortest_seq_len(d, *digits)), Some(d)))
                .collect()
        }
        // MQAR, majority, and any task without distances: at each length.
        _ => match lengths.is_empty() {
            true => vec![(config.seq_len, None)],
            false => lengths.iter().map(|&n| (n, None)).collect(),
        },
    };
    let examples = |len: usize, distance: Option<usize>| -> Result<Vec<Example>, AppError> {
        let sample = |i: u64| match (task, distance) {
            (SyntheticTask::Passkey { digits }, Some(d)) => {
                Passkey::new(len, d, *digits)?.sample(test_seed(config), i)
            }
            _ => task.example(len, test_seed(config), i),
        };
        Ok((0..count as u64).map(sample).collect::<Result<_, _>>()?)
    };
    let windows: Vec<Option<usize>> = match windows.is_empty() {
        true => vec![None],
        false => windows.iter().map(|&w| Some(w)).collect(),
    };
    let mut rows = Vec::new();
    for window in windows {
        let model = match window {
            Some(w) => rebuild(model, &with_eval_window(&config.model, w, 0)?, device)?,
            None => model.clone(),
        };
        let label = window.map_or("trained".into(), |w| w.to_string());
        for &(len, distance) in &settings {
            let score =
                model_accuracy(&model, &examples(len, distance)?, config.batch_size, device)?;
            let at = distance.map_or(String::new(), |d| format!("  distance {d:>6}"));
            println!(
                "window {label:>8}  length {len:>6}{at}  answer accuracy {:.4}  exact {:.4}",
                score.token_accuracy(),
                score.exact_rate()
            );
            let distance = distance.map_or(String::new(), |d| d.to_string());
            rows.push(vec![
                label.clone(),
                len.to_string(),
                distance,
                format!("{:.6}", score.token_accuracy()),
                format!("{:.6}", score.exact_rate()),
            ]);
        }
    }
    let csv = out.join("eval_task.csv");
    write_csv(&csv, &["window", "length", "distance", "accuracy", "exact"], &rows)?;
    println!("wrote {}", csv.display());
    Ok(())
}
