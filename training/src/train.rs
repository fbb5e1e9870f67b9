//! Training with burn-train's Learner: its terminal dashboard (or the plain log when stdout is
//! not a terminal), AdamW with warmup and cosine decay, gradient accumulation, checkpoints every
//! `checkpoint_every` steps keeping the last few, and exact resume.
//!
//! An epoch of the Learner is `checkpoint_every` steps, checkpointed at its end; a stop request
//! adds a checkpoint of the step it ends at (the run's own loop, `train/step_loop.rs`).
//! Checkpoints are numbered by the steps trained. Resuming loads the model, optimizer and
//! schedule of the last complete checkpoint, and the loader draws every batch from the seed,
//! epoch and step (see [`crate::loader`]), so a killed or stopped and resumed run ends with the
//! same step count and a loss curve that continues without a jump.
//!
//! [`train_with`] takes Burn's execution strategy: one device, or Burn's multi-device data
//! parallelism. [`train_in_cluster`] trains as one process of a multi-process run
//! ([`crate::distributed`], launched by MPI): each process reads its shard of every step's
//! batch and the optimizer averages the gradients over the processes once per optimizer step.
//! Rank 0 writes the run
//! (`train.json`, checkpoints, logs, `model.mpk`); rank `r > 0` writes its metric logs to
//! `out/rank-r` and resumes from rank 0's checkpoints, so `out` must be one folder that every
//! process reads (one machine, or a shared file system).
//!
//! A device computing in f16 or bf16 trains with [`crate::mixed_precision`]: f32 master weights
//! stepped by AdamW, and loss scaling in f16.

use std::path::{Path, PathBuf};

use burn::tensor::backend::AutodiffBackend;
use burn::train::ExecutionStrategy;
use swa_attention::rng::SplitMix64;
use swa_models::Decoder;
use swa_models::files::{WriteError, remove_leftovers, write_bytes_atomically};

use crate::backend::TrainingBackend;
use crate::checkpoint::{check_model_checkpoint, find_checkpoint};
use crate::corpus::Corpus;
use crate::distributed::cluster::Cluster;
use crate::distributed::gradients::{agree_on_weights, rank_zero_weights};
use crate::error::TrainingError;
use crate::language_model::LanguageModel;
use crate::loader::{LoaderConfig, Sampling, WindowLoader};
use crate::resume_logs::cut_logs;
use crate::run_lock::RunLock;
use crate::run_log::RunLog;
use crate::schedule::WarmupCosine;
use crate::stream_memory::StreamMemory;

pub use crate::train_config::TrainConfig;

mod learner;
mod step_loop;
use learner::Session;

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
///
/// While it trains, `SIGTERM` and `SIGINT` stop it after the step in flight with
/// [`TrainingError::Stopped`] (the process's own handlers come back afterwards), another
/// process training `out` makes it fail with [`TrainingError::RunLocked`], and a file it
/// cannot write with [`TrainingError::Write`] (docs/reliability.md).
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

/// [`train`] as one process of the multi-process run `cluster` (this MPI launch's processes,
/// joined with [`Cluster::join`]), on `device`: every process of the run calls it with the same
/// configuration and `out` (see the module's documentation), each step reading
/// `config.batch_size` sequences of its own.
pub fn train_in_cluster<B: TrainingBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    out: &Path,
    resume: bool,
    device: &B::Device,
    cluster: &Cluster,
) -> Result<TrainOutcome<B>, TrainingError> {
    let strategy = ExecutionStrategy::SingleDevice(device.clone());
    train_run(config, corpus, out, resume, strategy, Some(cluster))
}

/// [`train_with`], alone or as one process of `cluster`: checks the run, prepares its folder,
/// builds its loaders and model, trains, and saves the model.
fn train_run<B: TrainingBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    out: &Path,
    resume: bool,
    strategy: ExecutionStrategy<B>,
    cluster: Option<&Cluster>,
) -> Result<TrainOutcome<B>, TrainingError> {
    config.validate()?;
    check_vocabulary(config, corpus)?;
    let device = &strategy.main_device().clone();
    let scheduler_steps = scheduler_steps(config, &strategy);
    let (rank, processes) = cluster.as_ref().map_or((0, 1), |c| (c.rank(), c.nodes()));
    let _lock = lock_run(out, resume, cluster)?;
    let start = starting_checkpoint::<B>(config, out, resume, rank, device)?;
    check_several_devices(config, start, &strategy)?;
    let (logs, _log) = open_logs(out, rank)?;
    let end = config.epochs() * config.checkpoint_every;
    tracing::info!("training {} from step {start} to step {end}", out.display());
    if let Some(cluster) = &cluster {
        agree_on_start(cluster, config, start)?;
    }
    if rank == 0 {
        save_config(config, out)?;
    }
    let (train_loader, valid_loader) = loaders(config, corpus, start, (rank, processes), device)?;
    B::seed(device, config.seed);
    let (mut decoder, lora) = config.initial_model::<B>(start == 0, device)?;
    if config.segment_memory {
        check_segment_memory(config, &decoder, &strategy)?;
    }
    if let Some(cluster) = &cluster {
        decoder = rank_zero_weights(cluster, decoder);
    }
    let schedule = WarmupCosine::new(
        config.learning_rate,
        config.learning_rate * config.min_lr_ratio,
        config.warmup_steps,
        scheduler_steps.max(1),
    );
    let run = Session {
        config,
        out,
        logs: &logs,
        rank,
        cluster: cluster.cloned(),
        start,
        bits: format!("Bits per {}", corpus.unit_name()),
        strategy,
        train_loader,
        valid_loader,
        schedule,
    };
    if resume {
        cut_logs(&logs, start, config.checkpoint_every).map_err(TrainingError::Write)?;
    }
    let memory = match config.segment_memory {
        true => StreamMemory::new(config.full_memory()),
        false => StreamMemory::off(),
    };
    let model = match run.train(LanguageModel { memory, lora, ..LanguageModel::new(decoder) }) {
        // Every process stopped (or diverged) at the same step: they leave the run together, and the
        // launcher's `SIGTERM` when the first one exits cannot cut another's last line.
        Err(stopped @ (TrainingError::Stopped { .. } | TrainingError::Diverged { .. })) => {
            if let Some(cluster) = cluster {
                crate::stop::ignore_stop_signals();
                cluster.finish();
            }
            return Err(stopped);
        }
        trained => trained?,
    };
    let fingerprint = match &cluster {
        Some(cluster) => {
            let fingerprint = agree_on_weights(cluster, &model);
            cluster.finish();
            Some(fingerprint?)
        }
        None => None,
    };
    if rank == 0 {
        swa_models::weights::save_record(&model, &out.join("model.mpk"))?;
        tracing::info!("saved {}", out.join("model.mpk").display());
    }
    Ok(TrainOutcome { model, out: out.to_path_buf(), fingerprint })
}

/// Takes the run folder's lock ([`RunLock`]) before anything is written there: rank 0 takes
/// it (making the folder first, and refusing a fresh run where one is saved before the lock's
/// file is written) and the other processes of `cluster` wait for the outcome, so that they
/// write nothing (their logs, a resume's clean-up) unless rank 0 holds it.
fn lock_run(
    out: &Path,
    resume: bool,
    cluster: Option<&Cluster>,
) -> Result<Option<RunLock>, TrainingError> {
    let rank = cluster.map_or(0, Cluster::rank);
    let take = || {
        std::fs::create_dir_all(out).map_err(write_error(out))?;
        refuse_overwrite(out, resume)?;
        RunLock::take(out)
    };
    let lock = (rank == 0).then(take).transpose();
    if let Some(cluster) = cluster {
        // Every process says 1 but a rank 0 that could not take the lock (and says why itself).
        if let Err(problem) = cluster.agree(u64::from(lock.is_ok()), "run folder's lock") {
            lock?;
            return Err(TrainingError::Cluster { rank, problem });
        }
    }
    lock
}

/// Segment memory needs every layer to keep a bounded memory of segments of `seq_len` tokens,
/// and one device (each device would read other rows of the streams).
fn check_segment_memory<B: TrainingBackend>(
    config: &TrainConfig,
    decoder: &Decoder<B>,
    strategy: &ExecutionStrategy<B>,
) -> Result<(), TrainingError> {
    decoder.check_stream(config.seq_len)?;
    match strategy {
        ExecutionStrategy::SingleDevice(_) => Ok(()),
        _ => Err(TrainingError::field(
            "TrainConfig.segment_memory",
            "trains on one device per process (use MPI for several)",
        )),
    }
}

/// burn-train's loop for several devices resumes at an epoch's end only: a stop request's
/// checkpoint inside an epoch is resumed on one device (which trains to the epoch's end).
fn check_several_devices<B: AutodiffBackend>(
    config: &TrainConfig,
    start: usize,
    strategy: &ExecutionStrategy<B>,
) -> Result<(), TrainingError> {
    match strategy {
        ExecutionStrategy::SingleDevice(_) => Ok(()),
        _ if start.is_multiple_of(config.checkpoint_every) => Ok(()),
        _ => Err(TrainingError::field(
            "the devices",
            format!(
                "checkpoint {start} lies inside an epoch of {} steps (a stopped run's): resume \
                 it on one device, then on several from the next checkpoint",
                config.checkpoint_every
            ),
        )),
    }
}

/// The error of a failed write (a folder made, a log moved) on `path`.
fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> TrainingError {
    let path = path.to_path_buf();
    move |source| TrainingError::Write(WriteError { path, source })
}

/// Fails when the model's vocabulary is smaller than the corpus's: some tokens would have no
/// embedding.
fn check_vocabulary(config: &TrainConfig, corpus: &Corpus) -> Result<(), TrainingError> {
    if config.model.vocab_size >= corpus.vocab_size() {
        return Ok(());
    }
    Err(TrainingError::field(
        "DecoderConfig.vocab_size",
        format!(
            "{} is smaller than the corpus's {} tokens",
            config.model.vocab_size,
            corpus.vocab_size()
        ),
    ))
}

/// The scheduler steps `strategy` takes over the run: one per batch on one device and under
/// DDP, one per round of one batch per device under Burn's multi-device strategy.
fn scheduler_steps<B: AutodiffBackend>(
    config: &TrainConfig,
    strategy: &ExecutionStrategy<B>,
) -> usize {
    match strategy {
        ExecutionStrategy::MultiDevice(devices, _) => config.steps.div_ceil(devices.len()),
        #[cfg(feature = "ddp")]
        ExecutionStrategy::DistributedDataParallel { devices, .. } => {
            config.steps.div_ceil(devices.len())
        }
        _ => config.steps,
    }
}

/// Makes the run's folder `out` and finds the checkpoint the run starts from (0 for a fresh
/// start), checking that it holds `config`'s model. A fresh run of rank 0 fails where a run
/// already is ([`refuse_overwrite`] again: a run may have ended between the first ask and the
/// lock).
fn starting_checkpoint<B: swa_attention::LayerOpsBackend>(
    config: &TrainConfig,
    out: &Path,
    resume: bool,
    rank: usize,
    device: &B::Device,
) -> Result<usize, TrainingError> {
    std::fs::create_dir_all(out).map_err(write_error(out))?;
    let start = match resume {
        true => resume_point(out)?,
        false => 0,
    };
    if rank == 0 {
        refuse_overwrite(out, resume)?;
    }
    if start > 0 {
        let checkpoint = out.join("checkpoint").join(format!("model-{start}.mpk"));
        check_model_checkpoint::<B>(config, &checkpoint, device)?;
    }
    Ok(start)
}

/// A new run never overwrites a saved one: a fresh run (not `resume`) fails where `out` holds
/// a `train.json`.
fn refuse_overwrite(out: &Path, resume: bool) -> Result<(), TrainingError> {
    match !resume && out.join("train.json").exists() {
        true => Err(TrainingError::RunExists { out: out.to_path_buf() }),
        false => Ok(()),
    }
}

/// Makes the folder process `rank` writes its logs to (the run's folder for rank 0, `rank-r`
/// in it for the others) and opens the run's `experiment.log` there, for as long as the
/// returned [`RunLog`] lives.
fn open_logs(out: &Path, rank: usize) -> Result<(PathBuf, RunLog), TrainingError> {
    let logs = match rank {
        0 => out.to_path_buf(),
        r => out.join(format!("rank-{r}")),
    };
    std::fs::create_dir_all(&logs).map_err(write_error(&logs))?;
    // Opened here, where each rank's log has its own folder (the Learner is told to install
    // no logger).
    let path = logs.join("experiment.log");
    let log = RunLog::open(&path).map_err(write_error(&path))?;
    Ok((logs, log))
}

/// Writes `config` to the run's `train.json`, atomically.
fn save_config(config: &TrainConfig, out: &Path) -> Result<(), TrainingError> {
    let saved = out.join("train.json");
    let json = serde_json::to_string_pretty(config).expect("a configuration serializes");
    write_bytes_atomically(&saved, json.as_bytes()).map_err(TrainingError::Write)
}

/// The run's training loader (random windows or task examples, continuing from epoch `start`,
/// process `rank`'s shard of `processes`) and its validation loader. Every process validates
/// the run's whole batch, so the numbers match a run of one.
fn loaders<B: AutodiffBackend>(
    config: &TrainConfig,
    corpus: &Corpus,
    start: usize,
    (rank, processes): (usize, usize),
    device: &B::Device,
) -> Result<(WindowLoader<B>, WindowLoader<B::InnerBackend>), TrainingError> {
    let (train_sampling, valid_sampling) = match config.segment_memory {
        true => (Sampling::Streams { continuing: true }, Sampling::Streams { continuing: false }),
        false => (Sampling::Random { seed: config.seed }, Sampling::Sequential),
    };
    let train = LoaderConfig::new(config.seq_len, config.batch_size)
        .with_bos(config.bos)
        .with_steps(config.checkpoint_every)
        .with_sampling(train_sampling)
        .with_first_epoch(start / config.checkpoint_every)
        .with_shard(rank, processes);
    let valid = LoaderConfig::new(config.seq_len, config.batch_size * processes)
        .with_bos(config.bos)
        .with_steps(config.valid_batches)
        .with_sampling(valid_sampling);
    let (train_loader, valid_loader) = match &config.task {
        None => (train.init_text(corpus.train(), device), valid.init_text(corpus.valid(), device)),
        Some(task) => (
            train.init_task(task.clone(), config.seed, device),
            valid.init_task(task.clone(), config.seed.wrapping_add(1), device),
        ),
    };
    Ok((
        train_loader.map_err(|e| e.in_loader("train split"))?,
        valid_loader.map_err(|e| e.in_loader("valid split"))?,
    ))
}

/// Checks that every process of `cluster` trains the same configuration from the same
/// checkpoint.
fn agree_on_start(
    cluster: &Cluster,
    config: &TrainConfig,
    start: usize,
) -> Result<(), TrainingError> {
    let text = serde_json::to_string(config).expect("a configuration serializes");
    let fingerprint = text
        .bytes()
        .chain(start.to_le_bytes())
        .fold(0x9E37_79B9_7F4A_7C15u64, |h, b| SplitMix64::mix(h ^ b as u64));
    let what = "training configuration or checkpoint";
    cluster
        .agree(fingerprint, what)
        .map_err(|problem| TrainingError::Cluster { rank: cluster.rank(), problem })
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
