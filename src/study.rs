//! Small-scale paper studies: what the per-paper examples in `examples/` share.
//!
//! An example names its models and its tables; a [`Study`] gives it the rest: the command-line
//! flags every example takes ([`StudyArgs`]), the corpus, an output folder, a training run per
//! model ([`Study::train`]; [`Study::train_task`] on a synthetic task) through the same Learner
//! as `swa-zoo train`, validation bits per byte at any length ([`Study::bits`]), and tables
//! printed as Markdown and written as CSV ([`Study::report`]). Figures are drawn with
//! [`crate::report::plot`] into [`Study::path`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use swa_attention::ModelBackend;
use swa_models::{Decoder, DecoderConfig, PresetSize};
use swa_training::TrainingBackend;
use swa_training::corpus::{Corpus, bits_per_unit};
use swa_training::synthetic::SyntheticTask;
use swa_training::train::{TrainConfig, train};

use crate::error::AppError;
use crate::report::table::Table;
use crate::runtime::{BackendChoice, Placement, Precision};

/// The default corpus of the examples: the repository's `data/kjv.txt`, by an absolute path
/// fixed at build time, so that it does not depend on the working directory.
pub const DEFAULT_CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/kjv.txt");

/// The flags every example takes.
#[derive(Args, Clone, Debug)]
pub struct StudyArgs {
    /// Byte-level text to train and evaluate on (90/5/5 split; the enwik8 split for a file
    /// named `enwik8`): a file's PATH, or `embedded` for the Book of Genesis compiled into the
    /// binary. Default: the King James Bible, `data/kjv.txt` in this repository, wherever the
    /// example runs from.
    #[arg(long, default_value = DEFAULT_CORPUS)]
    pub corpus: String,
    /// Folder of the tables (CSV), figures (SVG) and training runs. The example owns it: its
    /// previous runs there are replaced. Default: `target/examples/<example>`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Training steps per model; each example has its own default, sized for a 2-core CPU.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Sequences per training step.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Peak learning rate (AdamW, warmup then cosine decay).
    #[arg(long, default_value_t = 2e-3)]
    pub learning_rate: f64,
    /// `tiny` models for a CPU, or the `paper`'s dimensions for a GPU.
    #[arg(long, value_enum, default_value = "tiny")]
    pub scale: StudyScale,
    /// Backend: flex (fastest CPU), ndarray, wgpu or cuda (the last two need their feature).
    #[arg(long, value_enum, default_value = "flex")]
    pub backend: BackendChoice,
    /// Device index on wgpu or cuda.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Three steps per model on the embedded corpus, with small evaluations: the test suite's
    /// smoke run, which checks that the example still runs end to end.
    #[arg(long)]
    pub smoke: bool,
}

/// [`PresetSize`] as a flag value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StudyScale {
    /// A few hundred thousand parameters.
    Tiny,
    /// The dimensions of the paper's table.
    Paper,
}

/// A model trained by [`Study::train`].
pub struct Trained<B: burn::tensor::backend::Backend> {
    /// The trained weights.
    pub model: Decoder<B>,
    /// Its configuration.
    pub config: DecoderConfig,
    /// Wall time of the training run, in seconds.
    pub seconds: f64,
}

/// One example's corpus, flags and output folder.
pub struct Study {
    args: StudyArgs,
    corpus: Corpus,
    out: PathBuf,
}

impl Study {
    /// Loads the corpus and clears `out/runs`, naming the file or folder at fault.
    pub fn open(example: &str, args: StudyArgs) -> Result<Self, AppError> {
        let corpus = match (args.smoke, args.corpus.as_str()) {
            (true, _) | (_, "embedded") => Corpus::embedded(),
            (false, path) => Corpus::bytes_from_file(Path::new(path))
                .map_err(|source| AppError::StudyCorpus { source })?,
        };
        let out = args.out.clone().unwrap_or_else(|| Path::new("target/examples").join(example));
        let runs = out.join("runs");
        if runs.exists() {
            std::fs::remove_dir_all(&runs)
                .map_err(|source| AppError::Io { path: runs.clone(), source })?;
        }
        std::fs::create_dir_all(&runs)
            .map_err(|source| AppError::Io { path: runs.clone(), source })?;
        Ok(Self { args, corpus, out })
    }

    /// Where the flags say to run.
    pub fn placement(&self) -> Placement {
        Placement {
            backend: self.args.backend,
            devices: vec![self.args.device],
            precision: Precision::F32,
        }
    }

    /// The model scale.
    pub fn scale(&self) -> PresetSize {
        match self.args.scale {
            StudyScale::Tiny => PresetSize::Tiny,
            StudyScale::Paper => PresetSize::Paper,
        }
    }

    /// Whether this is the smoke run.
    pub fn smoke(&self) -> bool {
        self.args.smoke
    }

    /// `--steps`, else `default`; 3 in the smoke run.
    pub fn steps(&self, default: usize) -> usize {
        match self.args.smoke {
            true => 3,
            false => self.args.steps.unwrap_or(default),
        }
    }

    /// `full`, or `smoke` in the smoke run: for evaluation batches and sweep sizes.
    pub fn pick<T>(&self, full: T, smoke: T) -> T {
        if self.args.smoke { smoke } else { full }
    }

    /// The corpus.
    pub fn corpus(&self) -> &Corpus {
        &self.corpus
    }

    /// `file` in the output folder.
    pub fn path(&self, file: &str) -> PathBuf {
        self.out.join(file)
    }

    /// Trains `model` on sequences of `seq_len` tokens for `steps` steps into `out/runs/<name>`.
    pub fn train<B: TrainingBackend>(
        &self,
        name: &str,
        model: &DecoderConfig,
        seq_len: usize,
        steps: usize,
        device: &B::Device,
    ) -> Result<Trained<B::InnerBackend>, AppError> {
        self.train_config::<B>(name, self.config(model, seq_len, steps), device)
    }

    /// [`Study::train`] on examples of a synthetic `task` instead of the corpus: the loss and
    /// the logged accuracy cover the task's scored positions only.
    pub fn train_task<B: TrainingBackend>(
        &self,
        name: &str,
        model: &DecoderConfig,
        task: &SyntheticTask,
        seq_len: usize,
        steps: usize,
        device: &B::Device,
    ) -> Result<Trained<B::InnerBackend>, AppError> {
        self.train_config::<B>(
            name,
            self.config(model, seq_len, steps).with_task(Some(task.clone())),
            device,
        )
    }

    /// The run of `model` the flags describe, for an example to adjust before
    /// [`Study::train_config`] (e.g. a larger batch, for equal tokens per step).
    pub fn config(&self, model: &DecoderConfig, seq_len: usize, steps: usize) -> TrainConfig {
        TrainConfig::new(model.clone(), seq_len)
            .with_steps(steps)
            .with_batch_size(self.args.batch_size)
            .with_checkpoint_every(steps.div_ceil(4).max(1))
            .with_keep_checkpoints(1)
            .with_learning_rate(self.args.learning_rate)
            .with_warmup_steps((steps / 10).max(1))
            .with_valid_batches(2)
            .with_corpus((self.corpus.name() != "genesis").then(|| self.args.corpus.clone()))
    }

    /// Trains `config` into `out/runs/<name>`.
    pub fn train_config<B: TrainingBackend>(
        &self,
        name: &str,
        config: TrainConfig,
        device: &B::Device,
    ) -> Result<Trained<B::InnerBackend>, AppError> {
        println!("== {name}: {} steps at length {} ==", config.steps, config.seq_len);
        let start = Instant::now();
        let outcome =
            train::<B>(&config, &self.corpus, &self.out.join("runs").join(name), false, device)
                .map_err(|e| AppError::step(name, e))?;
        Ok(Trained {
            model: outcome.model,
            config: config.model,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Validation bits per byte of `model` over `batches` batches of `batch` windows of `len`
    /// tokens.
    pub fn bits<B: ModelBackend>(
        &self,
        model: &Decoder<B>,
        len: usize,
        batch: usize,
        batches: usize,
        device: &B::Device,
    ) -> Result<f64, AppError> {
        let loss = swa_training::eval::mean_loss(
            model,
            (self.corpus.valid(), None),
            len,
            batch,
            batches,
            device,
        )?;
        Ok(bits_per_unit(loss))
    }

    /// Validation bits per byte of `model` reading `batch` streams of the validation text in
    /// `batches` consecutive segments of `len` tokens with segment memory (docs/semantics.md
    /// §10), full-attention layers keeping `full_memory` positions: how a run with segment
    /// memory is scored.
    pub fn stream_bits<B: ModelBackend>(
        &self,
        model: &Decoder<B>,
        (len, batch, batches): (usize, usize, usize),
        full_memory: usize,
        device: &B::Device,
    ) -> Result<f64, AppError> {
        let valid = self.corpus.valid();
        let segments = (len, batch, batches);
        let loss = swa_training::eval::stream_loss(model, valid, segments, full_memory, device)?;
        Ok(bits_per_unit(loss))
    }

    /// Prints `table` under `title` as Markdown and writes it to `out/<file>.csv`.
    pub fn report(&self, file: &str, title: &str, table: &Table) -> Result<(), AppError> {
        println!("\n### {title}\n\n{}", table.markdown());
        Ok(table.write_csv(&self.path(&format!("{file}.csv")))?)
    }
}

/// A row of MSWA's tables: a model's window sum, validation bits and training time.
#[derive(Clone, Debug)]
pub struct CostRow {
    /// The model's label.
    pub name: String,
    /// `Σ_{l,h} W(l, h)` at the training length (docs/semantics.md §3).
    pub window_sum: usize,
    /// Validation bits per byte.
    pub bits: f64,
    /// Training wall time, in seconds.
    pub seconds: f64,
}

/// MSWA's table layout: each row's window sum, its cost relative to `reference` (a window
/// sum), bits per byte and training time.
pub fn cost_table(rows: &[CostRow], reference: usize) -> Table {
    let mut table =
        Table::new(&["model", "Σ windows", "relative cost", "valid bits/byte", "train s"]);
    for row in rows {
        table.rows.push(vec![
            row.name.clone(),
            row.window_sum.to_string(),
            format!("{:.2}", row.window_sum as f64 / reference as f64),
            format!("{:.3}", row.bits),
            format!("{:.0}", row.seconds),
        ]);
    }
    table
}
