//! `eval-choice`: zero-shot multiple choice scored by log-likelihood, as lm-eval-harness scores
//! PIQA, HellaSwag and ARC (SWAT Table 1, MSWA Table 4).
//!
//! The tasks file is JSON Lines, one question a line:
//! `{"context": "Q: … A:", "choices": ["first", "second"], "answer": 1}`. Each choice is scored
//! as the continuation `" " + choice` of the context: the whole text is tokenized, and the
//! continuation's tokens are those past the context's own tokens. Its log-likelihood is the sum
//! of their log-probabilities. `acc` counts questions whose answer has the highest
//! log-likelihood; `acc_norm` divides each by the choice's length in characters first.

use std::path::{Path, PathBuf};

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};
use clap::Args;
use serde::Deserialize;
use swa_attention::ModelBackend;
use swa_models::Decoder;
use swa_training::TrainingBackend;

use super::{DeviceArgs, WeightArgs};
use crate::error::AppError;
use crate::runtime::{Job, run_on};
use swa_models::hf::{Pretrained, WeightPrecision};

/// Flags of `eval-choice`.
#[derive(Args, Debug)]
pub struct EvalChoiceArgs {
    /// A local Hugging Face model directory.
    #[arg(long)]
    hf: PathBuf,
    /// The questions, as JSON Lines: `{"context": …, "choices": [… ], "answer": k}` a line.
    #[arg(long)]
    tasks: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    weights: WeightArgs,
}

/// One question of the tasks file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The text every choice continues.
    pub context: String,
    /// The candidate continuations, two or more.
    pub choices: Vec<String>,
    /// The index of the right one.
    pub answer: usize,
}

/// The accuracies over the questions.
#[derive(Debug, PartialEq)]
pub struct ChoiceAccuracy {
    /// Share of questions whose answer has the largest summed log-likelihood.
    pub acc: f64,
    /// The same with each log-likelihood divided by its choice's length in characters.
    pub acc_norm: f64,
}

/// `acc` and `acc_norm` of `scores` (per question, per choice: log-likelihood and the choice's
/// length in characters) against `answers`. Ties go to the first choice, as `argmax` does.
pub fn accuracy(scores: &[Vec<(f64, usize)>], answers: &[usize]) -> ChoiceAccuracy {
    let argmax = |values: Vec<f64>| {
        values.iter().enumerate().fold(0, |best, (i, &v)| if v > values[best] { i } else { best })
    };
    let (mut acc, mut acc_norm) = (0, 0);
    for (choices, &answer) in scores.iter().zip(answers) {
        acc += usize::from(argmax(choices.iter().map(|c| c.0).collect()) == answer);
        let normalised = choices.iter().map(|&(ll, len)| ll / len.max(1) as f64).collect();
        acc_norm += usize::from(argmax(normalised) == answer);
    }
    let count = answers.len().max(1) as f64;
    ChoiceAccuracy { acc: acc as f64 / count, acc_norm: acc_norm as f64 / count }
}

/// The scores of every question: each choice's summed log-likelihood, and the accuracies.
#[derive(Debug)]
pub struct ChoiceResults {
    /// Per question, per choice, the summed log-likelihood of its continuation.
    pub log_likelihoods: Vec<Vec<f64>>,
    /// The answers, per question.
    pub answers: Vec<usize>,
    /// `acc` and `acc_norm` over the questions.
    pub accuracy: ChoiceAccuracy,
}

/// Scores the questions of `tasks` (JSON Lines) with the checkpoint in `dir`, its weights kept
/// in `weights`.
pub fn evaluate<B: ModelBackend>(
    dir: &Path,
    tasks: &Path,
    weights: WeightPrecision,
    device: &B::Device,
) -> Result<ChoiceResults, AppError> {
    let questions = read_questions(tasks)?;
    let run = Pretrained::<B>::load_with(dir, weights, device)?;
    let (mut scores, mut answers) = (Vec::new(), Vec::new());
    for question in &questions {
        let context = run.encode(&question.context, true)?;
        let mut choices = Vec::new();
        for choice in &question.choices {
            let whole = run.encode(&format!("{} {choice}", question.context), true)?;
            let ll = log_likelihood(&run.model, &context, &whole, device)?;
            choices.push((ll, choice.chars().count()));
        }
        scores.push(choices);
        answers.push(question.answer);
    }
    let accuracy = accuracy(&scores, &answers);
    let log_likelihoods = scores.iter().map(|c| c.iter().map(|s| s.0).collect()).collect();
    Ok(ChoiceResults { log_likelihoods, answers, accuracy })
}

/// `eval-choice`.
pub fn eval_choice(args: EvalChoiceArgs) -> Result<(), AppError> {
    struct EvalChoiceJob(EvalChoiceArgs, WeightPrecision);
    impl Job for EvalChoiceJob {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let (args, weights) = (self.0, self.1);
            let results = evaluate::<B::InnerBackend>(&args.hf, &args.tasks, weights, &device)?;
            for (q, lls) in results.log_likelihoods.iter().enumerate() {
                let lls: Vec<String> = lls.iter().map(|ll| format!("{ll:.4}")).collect();
                let answer = results.answers[q];
                println!("question {q}: answer {answer}  log-likelihoods [{}]", lls.join(", "));
            }
            let ChoiceAccuracy { acc, acc_norm } = results.accuracy;
            let count = results.answers.len();
            println!("{count} questions: acc {acc:.4}  acc_norm {acc_norm:.4}");
            Ok(())
        }
    }
    // Refused before any device starts.
    let weights = args.weights.precision(&args.device)?;
    run_on(&args.device.placement(), EvalChoiceJob(args, weights))
}

/// The questions of a JSON Lines file, each checked: at least two choices, the answer among
/// them. Blank lines are skipped.
pub fn read_questions(path: &Path) -> Result<Vec<Question>, AppError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| AppError::Io { path: path.into(), source })?;
    let bad = |line: usize, problem: String| AppError::Flag {
        flag: "--tasks",
        problem: format!("line {}: {problem}", line + 1),
    };
    let mut questions = Vec::new();
    for (line, json) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let question: Question =
            serde_json::from_str(json).map_err(|e| bad(line, e.to_string()))?;
        if question.choices.len() < 2 || question.answer >= question.choices.len() {
            let problem = format!(
                "needs two choices or more and an answer among them ({} choices, answer {})",
                question.choices.len(),
                question.answer
            );
            return Err(bad(line, problem));
        }
        questions.push(question);
    }
    if questions.is_empty() {
        return Err(AppError::Flag { flag: "--tasks", problem: "holds no question".into() });
    }
    Ok(questions)
}

/// The summed log-probability of `whole`'s tokens past the first `context.len()`, each given
/// those before it. The context must tokenize as a prefix of the whole and leave it longer.
fn log_likelihood<B: ModelBackend>(
    model: &Decoder<B>,
    context: &[usize],
    whole: &[usize],
    device: &B::Device,
) -> Result<f64, AppError> {
    if context.is_empty() || whole.len() <= context.len() || !whole.starts_with(context) {
        let problem = "a context must tokenize to a non-empty prefix of context + choice".into();
        return Err(AppError::Flag { flag: "--tasks", problem });
    }
    let n = whole.len();
    let ids = whole.iter().map(|&t| t as i64).collect();
    let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, n]), device);
    let logits = model.forward(tokens)?;
    let vocab = logits.dims()[2];
    let log_probs = log_softmax(logits, 2).into_data().convert::<f32>().to_vec::<f32>();
    let log_probs = log_probs.map_err(|e| AppError::Flag {
        flag: "--hf",
        problem: format!("unreadable logits: {e:?}"),
    })?;
    Ok((context.len()..n).map(|t| log_probs[(t - 1) * vocab + whole[t]] as f64).sum())
}
