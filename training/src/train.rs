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
//! parallelism. [`train_in_cluster`] trains as one process of a multi-process run
//! ([`crate::distributed`]): each process reads its shard of every step's batch and the
//! gradients are averaged over the processes inside the Learner's step. Rank 0 writes the run
//! (`train.json`, checkpoints, logs, `model.mpk`); rank `r > 0` writes its metric logs to
//! `out/rank-r` and resumes from rank 0's checkpoints, so `out` must be one folder that every
//! process reads (one machine, or a shared file system).
//!
//! A device computing in f16 or bf16 trains with [`crate::mixed_precision`]: f32 master weights
//! stepped by AdamW, and loss scaling in f16.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamWConfig, Optimizer};
use burn::record::{Record, Recorder};
use burn::tensor::DType;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::train::metric::LearningRateMetric;
use burn::train::{
    ApplicationLoggerInstaller, ExecutionStrategy, FileApplicationLoggerInstaller, Learner,
    SupervisedTraining, TrainingStrategy,
};
use swa_models::files::{remove_leftovers, write_bytes_atomically};
use swa_models::panics::without_panics;
use swa_models::records::MigratingRecorder;
use swa_models::weights::recorder_problem;
use swa_models::{Decoder, SplitMix64};

use crate::backend::TrainingBackend;
use crate::checkpoint::{check_model_checkpoint, find_checkpoint};
use crate::checkpoint_file::{CheckpointRecorder, SaveOnly};
use crate::corpus::Corpus;
use crate::distributed::cluster::{Cluster, ClusterConfig};
use crate::distributed::gradients::{agree_on_weights, rank_zero_weights};
use crate::error::TrainingError;
use crate::language_model::LanguageModel;
use crate::loader::{Sampling, WindowLoader};
use crate::metrics::{Stat, StatMetric, TokensPerSecond};
use crate::mixed_precision::{LossScale, LossScaler, MixedPrecision};
use crate::renderer::{PlainRenderer, dashboard_available};
use crate::resume_logs::{discard_logs, renumber_resumed_logs, set_logs_aside};
use crate::schedule::WarmupCosine;

pub use crate::train_config::TrainConfig;

/// The model at the end of a run, and where its files are.
pub struct TrainOutcome<B: AutodiffBackend> {
    /// The trained model (without autodiff).
    pub model: Decoder<B::InnerBackend>,
    /// The run's folder: `train.json`, `checkpoint/`, the metric logs and `model.mpk`.
    pub out: PathBuf,
    /// In a multi-process run, the fingerprint of the trained weights
    /// ([`weights_fingerprint`](crate::distributed::gradients::weights_fingerprint)), checked
    /// to be the same in every process; `None` alone.
    pub fingerprint: Option<u64>,
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
    train_run(config, corpus, out, resume, strategy, None)
}

/// [`train`] as process `cluster.rank` of the multi-process run `cluster`, on `device`: every
/// process of the run calls it with the same configuration and `out` (see the module's
/// documentation), each step reading `config.batch_size` sequences of its own.
pub fn train_in_cluster<B: TrainingBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    out: &Path,
    resume: bool,
    device: &B::Device,
    cluster: &ClusterConfig,
) -> Result<TrainOutcome<B>, TrainingError> {
    let strategy = ExecutionStrategy::SingleDevice(device.clone());
    train_run(config, corpus, out, resume, strategy, Some(cluster))
}

/// [`train_with`], alone or as one process of `cluster`.
fn train_run<B: TrainingBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    out: &Path,
    resume: bool,
    strategy: ExecutionStrategy<B>,
    cluster: Option<&ClusterConfig>,
) -> Result<TrainOutcome<B>, TrainingError> {
    config.validate()?;
    let device = &strategy.main_device().clone();
    let scheduler_steps = match &strategy {
        ExecutionStrategy::MultiDevice(devices, _) => config.steps.div_ceil(devices.len()),
        #[cfg(feature = "ddp")]
        ExecutionStrategy::DistributedDataParallel { devices, .. } => {
            config.steps.div_ceil(devices.len())
        }
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
        true => resume_point(out)?,
        false => 0,
    };
    let (rank, processes) = cluster.map_or((0, 1), |c| (c.rank, c.nodes));
    if !resume && rank == 0 && out.join("train.json").exists() {
        return Err(TrainingError::RunExists { out: out.to_path_buf() });
    }
    if start > 0 {
        let checkpoint = out.join("checkpoint").join(format!("model-{start}.mpk"));
        check_model_checkpoint::<B>(&config.model, &checkpoint, device)?;
    }
    // Rank 0 writes the run; the others their logs, in a folder of their own.
    let logs = match rank {
        0 => out.to_path_buf(),
        r => out.join(format!("rank-{r}")),
    };
    std::fs::create_dir_all(&logs).map_err(io(logs.clone()))?;
    // The Learner's log file, installed before the cluster's server would install its own
    // terminal log (the first one installed in a process stays). A process that already has
    // one (a second run in a test) keeps it, as the Learner would.
    let _ = FileApplicationLoggerInstaller::new(logs.join("experiment.log")).install();
    let cluster = match cluster {
        Some(cluster) => Some(join(cluster, config, start)?),
        None => None,
    };
    if rank == 0 {
        let saved = out.join("train.json");
        let json = serde_json::to_string_pretty(config).map_err(std::io::Error::other);
        json.and_then(|json| {
            write_bytes_atomically(&saved, json.as_bytes()).map_err(std::io::Error::other)
        })
        .map_err(io(saved))?;
    }
    // Every process validates the run's whole batch, so the numbers match a run of one.
    let (len, batch) = (config.seq_len, config.batch_size);
    let valid_batch = batch * processes;
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
                valid_batch,
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
                valid_batch,
                config.valid_batches,
                Sampling::Sequential,
                0,
                device.clone(),
            ),
        ),
    };
    let (train_loader, valid_loader) = (
        train_loader.map_err(|e| e.in_loader("train split"))?.shard(rank, processes),
        valid_loader.map_err(|e| e.in_loader("valid split"))?,
    );
    B::seed(device, config.seed);
    let mut decoder = config.model.init::<B>(device)?;
    if let Some(cluster) = &cluster {
        decoder = rank_zero_weights(cluster, decoder);
    }
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
        logs: &logs,
        rank,
        start,
        bits: format!("Bits per {}", corpus.unit_name()),
        strategy,
        train_loader,
        valid_loader,
        schedule,
    };
    match start {
        0 if resume => discard_logs(&logs).map_err(io(logs.clone()))?,
        0 => {}
        _ => set_logs_aside(&logs).map_err(io(logs.clone()))?,
    }
    let model = LanguageModel { decoder, loss_scale: None, cluster: cluster.clone() };
    // Half precision trains on f32 master weights; f32 runs Burn's AdamW as it is.
    let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
    let model = match float {
        DType::F32 => run.launch(model, adamw.with_grad_clipping(Some(clipping)).init())?,
        half => {
            let loss_scale = LossScale::new(LossScaler::for_dtype(half));
            let optimizer =
                MixedPrecision::new(adamw.build(), Some(clipping.init()), loss_scale.clone());
            run.launch(LanguageModel { loss_scale: Some(loss_scale), ..model }, optimizer)?
        }
    };
    if start > 0 {
        renumber_resumed_logs(&logs, start).map_err(io(logs.clone()))?;
    }
    let fingerprint = match &cluster {
        Some(cluster) => {
            let fingerprint = agree_on_weights(cluster, &model, device);
            cluster.finish();
            Some(fingerprint?)
        }
        None => None,
    };
    if rank == 0 {
        swa_models::weights::save_record(&model, &out.join("model.mpk"))?;
    }
    Ok(TrainOutcome { model, out: out.to_path_buf(), fingerprint })
}

/// Joins the run `cluster` and checks that every process trains the same configuration from
/// the same checkpoint.
fn join(
    cluster: &ClusterConfig,
    config: &TrainConfig,
    start: usize,
) -> Result<Cluster, TrainingError> {
    let text = serde_json::to_string(config).expect("a configuration serializes");
    let fingerprint = text
        .bytes()
        .chain(start.to_le_bytes())
        .fold(0x9E37_79B9_7F4A_7C15u64, |h, b| SplitMix64::mix(h ^ b as u64));
    Cluster::join(cluster, fingerprint)
}

/// The checkpoint a `--resume` of the run in `out` starts from: the newest complete one, saying
/// which and why any newer one was skipped; 0 (a fresh start, said so) for a run killed before
/// its first checkpoint (at most an unfinished one), or not started. Checkpoints none of which
/// is usable, one of them damaged after it was written, are an error naming each. Leftovers of
/// a killed writer are removed.
fn resume_point(out: &Path) -> Result<usize, TrainingError> {
    let dir = out.join("checkpoint");
    remove_leftovers(&dir);
    let search = find_checkpoint(out);
    for skipped in &search.skipped {
        eprintln!("--resume: skipping {skipped}");
    }
    match search.found {
        Some(epoch) => {
            eprintln!("--resume: continuing from checkpoint {epoch} in {}", dir.display());
            Ok(epoch)
        }
        None if !search.damaged => {
            eprintln!("--resume: {} has no checkpoint yet; starting the run afresh", out.display());
            Ok(0)
        }
        None => Err(TrainingError::NoUsableCheckpoint { dir, problems: search.skipped }),
    }
}

/// What a run's Learner needs besides its model and optimizer.
struct Run<'a, B: AutodiffBackend> {
    config: &'a TrainConfig,
    /// The run's folder: its checkpoints are there.
    out: &'a Path,
    /// Where this process's Learner writes its logs (and, for rank 0, its checkpoints).
    logs: &'a Path,
    /// This process's rank; 0 alone.
    rank: usize,
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
    /// Ranks above 0 write no checkpoint and resume from rank 0's.
    fn launch<O>(
        self,
        model: LanguageModel<B>,
        optimizer: O,
    ) -> Result<Decoder<B::InnerBackend>, TrainingError>
    where
        O: Optimizer<LanguageModel<B>, B> + 'static,
    {
        let config = self.config;
        let bits = self.bits.as_str();
        let device = self.strategy.main_device().clone();
        let mut training = SupervisedTraining::new(
            self.logs,
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
        .grads_accumulation(config.grad_accumulation)
        .num_epochs(config.epochs())
        .with_training_strategy(TrainingStrategy::Default(self.strategy))
        .with_application_logger(None)
        .summary();
        if config.task.is_some() {
            training = training
                .metric_train_numeric(StatMetric::new(Stat::Accuracy, "Accuracy"))
                .metric_valid_numeric(StatMetric::new(Stat::Accuracy, "Accuracy"));
        }
        if self.rank == 0 {
            training = training
                .with_file_checkpointer(CheckpointRecorder::new(config.keep_checkpoints))
                .with_checkpointing_strategy(SaveOnly);
        }
        if self.rank > 0 || !dashboard_available() {
            training = training.renderer(PlainRenderer::new((config.checkpoint_every / 10).max(1)));
        }
        let mut learner = Learner::new(model, optimizer, self.schedule);
        if self.start > 0 {
            // Rank 0's Learner loads its checkpoint itself; the others load the same files.
            training = training.checkpoint(self.start);
            if self.rank > 0 {
                let device = &device;
                let file = |part: &str| {
                    self.out.join("checkpoint").join(format!("{part}-{}.mpk", self.start))
                };
                learner.load_model(checkpoint_part::<B, _>(&file("model"), device)?);
                learner.load_optim(checkpoint_part::<B, _>(&file("optim"), device)?);
                learner.load_scheduler(checkpoint_part::<B, _>(&file("scheduler"), device)?);
            }
        }
        Ok(training.launch(learner).model.decoder)
    }
}

/// One part (model, optimizer or scheduler) of a Learner checkpoint, read as the Learner
/// reads it.
fn checkpoint_part<B: Backend, R: Record<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<R, TrainingError> {
    let unreadable =
        |problem| TrainingError::CheckpointUnreadable { path: path.to_path_buf(), problem };
    let recorder = MigratingRecorder;
    without_panics("Burn's record loader", || Recorder::<B>::load(&recorder, path.into(), device))
        .map_err(unreadable)?
        .map_err(|e| unreadable(recorder_problem(e)))
}
