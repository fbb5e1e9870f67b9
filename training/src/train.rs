//! Training with burn-train's Learner: its terminal dashboard (or the plain log when stdout is
//! not a terminal), AdamW with warmup and cosine decay, gradient accumulation, checkpoints every
//! `checkpoint_every` steps keeping the last few, and exact resume.
//!
//! An epoch of the Learner is `checkpoint_every` steps, since the Learner checkpoints at epoch
//! ends. Resuming loads the model, optimizer and schedule of the last complete checkpoint, and
//! the loader draws the next epoch's windows from the seed and epoch number (see
//! [`crate::loader`]), so a killed and resumed run ends with the same step count and a loss
//! curve that continues without a jump.
//!
//! [`train_with`] takes Burn's execution strategy: one device, or Burn's multi-device data
//! parallelism.
//!
//! A device computing in f16 or bf16 trains with [`crate::mixed_precision`]: f32 master weights
//! stepped by AdamW, and loss scaling in f16.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::config::Config;
use burn::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamWConfig, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::DType;
use burn::tensor::backend::AutodiffBackend;
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::metric::LearningRateMetric;
use burn::train::{ExecutionStrategy, Learner, SupervisedTraining, TrainingStrategy};
use swa_attention::layers::AttentionKind;
use swa_models::{Decoder, DecoderConfig};

use crate::backend::TrainingBackend;
use crate::checkpoint::{check_model_checkpoint, last_checkpoint};
use crate::corpus::Corpus;
use crate::error::TrainingError;
use crate::language_model::LanguageModel;
use crate::loader::{Sampling, WindowLoader};
use crate::metrics::{Stat, StatMetric, TokensPerSecond};
use crate::mixed_precision::{LossScale, LossScaler, MixedPrecision};
use crate::renderer::{PlainRenderer, dashboard_available};
use crate::resume_logs::{renumber_resumed_logs, set_logs_aside};
use crate::schedule::WarmupCosine;
use crate::synthetic::SyntheticTask;

/// Configuration of a training run, saved as `train.json` in the run's folder.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// The model.
    pub model: DecoderConfig,
    /// Training sequence length, independent of the windows (SWAT's sliding-window training
    /// uses 4·W).
    pub seq_len: usize,
    /// Sequences per step.
    #[config(default = 8)]
    pub batch_size: usize,
    /// Training steps (batches) in all.
    #[config(default = 1000)]
    pub steps: usize,
    /// Steps between checkpoints (one Learner epoch).
    #[config(default = 100)]
    pub checkpoint_every: usize,
    /// Checkpoints kept; older ones are deleted.
    #[config(default = 3)]
    pub keep_checkpoints: usize,
    /// Batches whose gradients are summed before one optimizer update.
    #[config(default = 1)]
    pub grad_accumulation: usize,
    /// Peak learning rate of AdamW.
    #[config(default = 1e-3)]
    pub learning_rate: f64,
    /// Final learning rate, as a fraction of the peak.
    #[config(default = 0.1)]
    pub min_lr_ratio: f64,
    /// Linear warmup, in steps (batches).
    #[config(default = 100)]
    pub warmup_steps: usize,
    /// AdamW's decoupled weight decay.
    #[config(default = 0.1)]
    pub weight_decay: f32,
    /// Gradient norm clipping.
    #[config(default = 1.0)]
    pub grad_clip: f32,
    /// Validation batches at the end of each epoch.
    #[config(default = 8)]
    pub valid_batches: usize,
    /// Seed of the data order (and of nothing else: weights come from Burn's seeded RNG).
    #[config(default = 42)]
    pub seed: u64,
    /// The text file trained on; `None` is the embedded corpus.
    #[config(default = "None")]
    pub corpus: Option<String>,
    /// Word-level vocabulary of the words seen at least this often; `None` is byte-level.
    #[config(default = "None")]
    pub word_min_count: Option<usize>,
    /// A synthetic task to train on instead of the corpus; `None` is language modelling.
    #[config(default = "None")]
    pub task: Option<SyntheticTask>,
}

impl TrainConfig {
    /// Checks the run before any work, naming the field at fault.
    pub fn validate(&self) -> Result<(), TrainingError> {
        self.model.validate()?;
        let positive = [
            ("TrainConfig.seq_len", self.seq_len),
            ("TrainConfig.batch_size", self.batch_size),
            ("TrainConfig.steps", self.steps),
            ("TrainConfig.checkpoint_every", self.checkpoint_every),
            ("TrainConfig.keep_checkpoints", self.keep_checkpoints),
            ("TrainConfig.grad_accumulation", self.grad_accumulation),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(TrainingError::field(field, "must be at least 1"));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return Err(TrainingError::field(
                "TrainConfig.learning_rate",
                "must be positive and finite",
            ));
        }
        if let Some(task) = &self.task {
            task.validate(self.seq_len)?;
        }
        for l in 0..self.model.layers {
            if let Some(w) = self.model.kind_of(l).windows().and_then(|w| w.iter().copied().min())
                && w > self.seq_len
            {
                return Err(TrainingError::field(
                    "TrainConfig.seq_len",
                    format!(
                        "layer {l}'s window of {w} keys is larger than the training length {}, so \
                         it never slides; train with --seq-len {w} or more, or use full attention",
                        self.seq_len
                    ),
                ));
            }
            if let AttentionKind::Longformer { globals, .. } = self.model.kind_of(l)
                && let Some(g) = globals.iter().find(|&&g| g >= self.seq_len)
            {
                return Err(TrainingError::field(
                    "TrainConfig.seq_len",
                    format!("layer {l} has global position {g}, past the sequence"),
                ));
            }
        }
        Ok(())
    }

    /// The corpus this run trains on.
    pub fn load_corpus(&self) -> Result<Corpus, TrainingError> {
        match (&self.corpus, self.word_min_count) {
            (None, _) => Ok(Corpus::embedded()),
            (Some(path), None) => Corpus::bytes_from_file(Path::new(path)),
            (Some(path), Some(min_count)) => Corpus::words_from_file(Path::new(path), min_count),
        }
    }

    /// Learner epochs: `steps / checkpoint_every`, rounded up.
    pub fn epochs(&self) -> usize {
        self.steps.div_ceil(self.checkpoint_every)
    }
}

/// The model at the end of a run, and where its files are.
pub struct TrainOutcome<B: AutodiffBackend> {
    /// The trained model (without autodiff).
    pub model: Decoder<B::InnerBackend>,
    /// The run's folder: `train.json`, `checkpoint/`, the metric logs and `model.mpk`.
    pub out: PathBuf,
}

/// Trains `config` on `corpus` (or on its synthetic task) into the folder `out` on `device`,
/// resuming from its last checkpoint when `resume` is set. Shows Burn's dashboard on a
/// terminal and the plain log elsewhere.
pub fn train<B: TrainingBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    out: &Path,
    resume: bool,
    device: &B::Device,
) -> Result<TrainOutcome<B>, TrainingError> {
    train_with(config, corpus, out, resume, ExecutionStrategy::SingleDevice(device.clone()))
}

/// [`train`] under one of Burn's execution strategies. The learning-rate schedule counts
/// the scheduler steps the strategy takes: one per batch on one device and under DDP, one
/// per round of one batch per device under Burn's multi-device strategy.
pub fn train_with<B: TrainingBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    out: &Path,
    resume: bool,
    strategy: ExecutionStrategy<B>,
) -> Result<TrainOutcome<B>, TrainingError> {
    config.validate()?;
    let device = &strategy.main_device().clone();
    let scheduler_steps = match &strategy {
        ExecutionStrategy::MultiDevice(devices, _) => config.steps.div_ceil(devices.len()),
        _ => config.steps,
    };
    if config.model.vocab_size < corpus.vocab_size() {
        return Err(TrainingError::field(
            "DecoderConfig.vocab_size",
            format!(
                "{} is smaller than the corpus's {} tokens",
                config.model.vocab_size,
                corpus.vocab_size()
            ),
        ));
    }
    let io = |path: PathBuf| move |source| TrainingError::Io { path, source };
    std::fs::create_dir_all(out).map_err(io(out.to_path_buf()))?;
    let start = match resume {
        true => last_checkpoint(out)
            .ok_or_else(|| TrainingError::NoCheckpoint { dir: out.join("checkpoint") })?,
        false => 0,
    };
    if start == 0 && out.join("train.json").exists() {
        return Err(TrainingError::RunExists { out: out.to_path_buf() });
    }
    if start > 0 {
        let checkpoint = out.join("checkpoint").join(format!("model-{start}.mpk"));
        check_model_checkpoint::<B>(&config.model, &checkpoint, device)?;
    }
    let saved = out.join("train.json");
    config.save(&saved).map_err(io(saved))?;
    let (len, batch) = (config.seq_len, config.batch_size);
    let train_sampling = Sampling::Random { seed: config.seed };
    let (train_loader, valid_loader) = match &config.task {
        None => (
            WindowLoader::<B>::new(
                corpus.train(),
                len,
                batch,
                config.checkpoint_every,
                train_sampling,
                start,
                device.clone(),
            ),
            WindowLoader::<B::InnerBackend>::new(
                corpus.valid(),
                len,
                batch,
                config.valid_batches,
                Sampling::Sequential,
                0,
                device.clone(),
            ),
        ),
        Some(task) => (
            WindowLoader::<B>::task(
                task.clone(),
                config.seed,
                len,
                batch,
                config.checkpoint_every,
                train_sampling,
                start,
                device.clone(),
            ),
            WindowLoader::<B::InnerBackend>::task(
                task.clone(),
                config.seed.wrapping_add(1),
                len,
                batch,
                config.valid_batches,
                Sampling::Sequential,
                0,
                device.clone(),
            ),
        ),
    };
    let (train_loader, valid_loader) = (
        train_loader.map_err(|e| e.in_loader("train split"))?,
        valid_loader.map_err(|e| e.in_loader("valid split"))?,
    );
    let decoder = config.model.init::<B>(device)?;
    let schedule = WarmupCosine::new(
        config.learning_rate,
        config.learning_rate * config.min_lr_ratio,
        config.warmup_steps,
        scheduler_steps.max(1),
    );
    let adamw = AdamWConfig::new().with_weight_decay(config.weight_decay);
    let clipping = GradientClippingConfig::Norm(config.grad_clip);
    let run = Run {
        config,
        out,
        start,
        bits: format!("Bits per {}", corpus.unit_name()),
        strategy,
        train_loader,
        valid_loader,
        schedule,
    };
    if start > 0 {
        set_logs_aside(out).map_err(io(out.to_path_buf()))?;
    }
    // Half precision trains on f32 master weights; f32 runs Burn's AdamW as it is.
    let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
    let model = match float {
        DType::F32 => {
            run.launch(LanguageModel::new(decoder), adamw.with_grad_clipping(Some(clipping)).init())
        }
        half => {
            let loss_scale = LossScale::new(LossScaler::for_dtype(half));
            let optimizer =
                MixedPrecision::new(adamw.build(), Some(clipping.init()), loss_scale.clone());
            run.launch(LanguageModel { decoder, loss_scale: Some(loss_scale) }, optimizer)
        }
    };
    if start > 0 {
        renumber_resumed_logs(out, start).map_err(io(out.to_path_buf()))?;
    }
    swa_models::weights::save_record(&model, &out.join("model.mpk"))?;
    Ok(TrainOutcome { model, out: out.to_path_buf() })
}

/// What a run's Learner needs besides its model and optimizer.
struct Run<'a, B: AutodiffBackend> {
    config: &'a TrainConfig,
    out: &'a Path,
    start: usize,
    /// The name of the bits metric: bits per byte, character or word.
    bits: String,
    strategy: ExecutionStrategy<B>,
    train_loader: WindowLoader<B>,
    valid_loader: WindowLoader<B::InnerBackend>,
    schedule: WarmupCosine,
}

impl<B: TrainingBackend> Run<'_, B> {
    /// Trains `model` with `optimizer` under burn-train's Learner (dashboard or plain log,
    /// metrics, checkpoints, resume from `start`); returns the trained decoder without autodiff.
    fn launch<O>(self, model: LanguageModel<B>, optimizer: O) -> Decoder<B::InnerBackend>
    where
        O: Optimizer<LanguageModel<B>, B> + 'static,
    {
        let config = self.config;
        let bits = self.bits.as_str();
        let mut training = SupervisedTraining::new(
            self.out,
            Arc::new(self.train_loader),
            Arc::new(self.valid_loader),
        )
        .metric_train_numeric(StatMetric::new(Stat::Loss, "Loss"))
        .metric_valid_numeric(StatMetric::new(Stat::Loss, "Loss"))
        .metric_train_numeric(StatMetric::new(Stat::BitsPerToken, bits))
        .metric_valid_numeric(StatMetric::new(Stat::BitsPerToken, bits))
        .metric_train_numeric(StatMetric::new(Stat::Perplexity, "Perplexity"))
        .metric_valid_numeric(StatMetric::new(Stat::Perplexity, "Perplexity"))
        .metric_train_numeric(TokensPerSecond::new())
        .metric_train_numeric(LearningRateMetric::new())
        .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(config.keep_checkpoints))
        .grads_accumulation(config.grad_accumulation)
        .num_epochs(config.epochs())
        .with_training_strategy(TrainingStrategy::Default(self.strategy))
        .summary();
        if config.task.is_some() {
            training = training
                .metric_train_numeric(StatMetric::new(Stat::Accuracy, "Accuracy"))
                .metric_valid_numeric(StatMetric::new(Stat::Accuracy, "Accuracy"));
        }
        if !dashboard_available() {
            training = training.renderer(PlainRenderer::new((config.checkpoint_every / 10).max(1)));
        }
        if self.start > 0 {
            training = training.checkpoint(self.start);
        }
        training.launch(Learner::new(model, optimizer, self.schedule)).model.decoder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(window: usize, seq_len: usize) -> TrainConfig {
        let model = DecoderConfig::new(256, 16, 2, 2, 2, vec![AttentionKind::Sliding { window }]);
        TrainConfig::new(model, seq_len).with_steps(250).with_checkpoint_every(100)
    }

    #[test]
    fn epochs_round_the_steps_up() {
        assert_eq!(config(8, 16).epochs(), 3);
    }

    #[test]
    fn validation_names_the_field_at_fault() {
        assert!(config(8, 16).validate().is_ok());
        let message = |config: TrainConfig| config.validate().unwrap_err().to_string();
        assert!(message(config(32, 16)).starts_with("TrainConfig.seq_len: layer 0's window of 32"));
        assert!(message(config(8, 16).with_batch_size(0)).starts_with("TrainConfig.batch_size"));
        assert!(message(config(8, 16).with_learning_rate(f64::NAN)).contains("learning_rate"));
        let task = config(8, 16).with_task(Some(SyntheticTask::mqar(8)));
        assert!(message(task).starts_with("Mqar.seq_len"));
    }
}
