//! `train`: a run with Burn's Learner on a corpus or a synthetic task, on one device or
//! several, in the chosen precision; or one process of a multi-process run launched by MPI
//! (`mpirun -np N swa-zoo train --mpi`), each process with one device.

use std::path::PathBuf;

use burn::train::ExecutionStrategy;
use clap::Args;
use swa_attention::ModelBackend;
use swa_models::files::WriteError;
use swa_models::{Architecture, Decoder};
use swa_training::corpus::{Corpus, bits_per_unit};
use swa_training::distributed::{Cluster, ClusterConfig};
use swa_training::eval::{mean_loss, stream_loss};
use swa_training::train::{TrainConfig, train_in_cluster, train_with};
use swa_training::{TrainingBackend, TrainingError};

use super::finetune::FineTuneArgs;
use super::tasks::TaskArgs;
use super::{DeviceArgs, ModelArgs};
use crate::error::AppError;
use crate::runtime::{Job, Placement, run_on};

/// Flags of `train`.
#[derive(Args, Debug)]
pub struct TrainArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Devices for data-parallel training, e.g. `0,1` (wgpu, cuda), under Burn's multi-device
    /// strategy. Replaces --device.
    #[arg(long, value_delimiter = ',')]
    devices: Vec<usize>,
    #[command(flatten)]
    task: TaskArgs,
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
    /// Training steps in all, rounded up to whole checkpoint intervals.
    #[arg(long)]
    steps: Option<usize>,
    /// Peak learning rate (AdamW, warmup then cosine decay).
    #[arg(long)]
    lr: Option<f64>,
    /// Warmup steps.
    #[arg(long)]
    warmup: Option<usize>,
    /// Steps between checkpoints (each followed by a validation). Default: the configuration's
    /// (100 for a new run), or --steps where that is fewer.
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
    #[command(flatten)]
    transformer_xl: TransformerXlArgs,
    #[command(flatten)]
    finetune: FineTuneArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Flags of Transformer-XL's training setup (MSWA §5.1.1 trains its Table 2 with it), for a
/// new run.
#[derive(Args, Debug)]
struct TransformerXlArgs {
    /// Segment memory (Transformer-XL §3.2; docs/semantics.md §10): each row of the batch reads
    /// its own stream in consecutive segments of --seq-len tokens, and each layer keeps what
    /// its windows reach of the earlier segments. Validation reads its streams the same way.
    #[arg(long)]
    segment_memory: bool,
    /// With --segment-memory, the positions full-attention layers keep (Transformer-XL's memory
    /// length; default: --seq-len).
    #[arg(long)]
    full_memory: Option<usize>,
    /// Transformer-XL's relative positions (§3.3; docs/semantics.md §4) in every layer, in
    /// place of RoPE.
    #[arg(long)]
    relative_positions: bool,
}

/// Flags of a multi-process run.
#[derive(Args, Debug)]
struct ClusterArgs {
    /// Train as one process of the MPI launch that started this one (`mpirun -np N swa-zoo
    /// train --mpi …`, or `srun`): rank and size come from MPI, every process reads
    /// --batch-size sequences per step, rank 0 writes the run. Needs the `mpi` build.
    #[arg(long)]
    mpi: bool,
    /// Seconds a process waits for the others until the first step is done (joining, sharing
    /// the weights, a first step that compiles or autotunes) before it stops with an error.
    #[arg(long, default_value_t = 600)]
    join_timeout: u64,
    /// Seconds a process waits for the others at a later step before it stops with an error.
    #[arg(long, default_value_t = 120)]
    step_timeout: u64,
}

impl ClusterArgs {
    /// The run this process is part of, joined; `None` alone.
    fn join(&self) -> Result<Option<Cluster>, AppError> {
        if !self.mpi {
            return Ok(None);
        }
        let config = ClusterConfig::new()
            .with_join_timeout_secs(self.join_timeout)
            .with_step_timeout_secs(self.step_timeout);
        Ok(Some(Cluster::join(&config)?))
    }
}

/// `train`: the run's configuration and corpus (a new run's from the flags, a resumed one's
/// from its `train.json`), the flags that override it, then the run on the chosen devices.
pub fn train(args: TrainArgs) -> Result<(), AppError> {
    let (out, mut config, corpus) = match (args.resume, &args.finetune.hf) {
        (true, _) => resumed_run(&args)?,
        (false, Some(checkpoint)) => {
            args.finetune.new_run(checkpoint, args.corpus.as_deref(), args.out.clone())?
        }
        (false, None) => new_run(&args)?,
    };
    apply_flags(&args, &mut config);
    if !args.resume {
        config.task = args.task.task(config.seq_len);
    }
    if args.cluster.mpi && !args.devices.is_empty() {
        return Err(AppError::Flag {
            flag: "--devices",
            problem: "cannot be used with --mpi: each process of a run trains on one device \
                      (--device); launch one process per device"
                .into(),
        });
    }
    let cluster = args.cluster.join()?;
    let devices = match args.devices.is_empty() {
        true => vec![args.device.device],
        false => args.devices.clone(),
    };
    let place =
        Placement { backend: args.device.backend, devices, precision: args.device.precision };
    run_on(&place, TrainJob { config, corpus, out, resume: args.resume, cluster })
}

/// The folder, saved configuration and corpus of the run `--resume` continues.
fn resumed_run(args: &TrainArgs) -> Result<(PathBuf, TrainConfig, Corpus), AppError> {
    let out = args.out.clone().ok_or_else(|| AppError::Flag {
        flag: "--resume",
        problem: "needs --out, the run's folder".into(),
    })?;
    let config: TrainConfig = swa_training::config_file::load(&out.join("train.json"))?;
    let corpus = config.load_corpus()?;
    Ok((out, config, corpus))
}

/// A new run's folder, configuration (without its task, which takes the final sequence length)
/// and corpus: the corpus first, since the model's vocabulary is the corpus's.
fn new_run(args: &TrainArgs) -> Result<(PathBuf, TrainConfig, Corpus), AppError> {
    let corpus = Corpus::load(args.corpus.as_deref(), args.words)?;
    let (model, train_len, name) = args.model.config(corpus.vocab_size())?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(name));
    let mut config = TrainConfig::new(model, train_len)
        .with_corpus(args.corpus.as_ref().map(|p| p.display().to_string()))
        .with_segment_memory(args.transformer_xl.segment_memory)
        .with_full_memory(args.transformer_xl.full_memory);
    config.word_min_count = args.words;
    if args.transformer_xl.relative_positions {
        let architecture = Architecture { relative_positions: true, ..config.model.arch() };
        config.model.architecture = Some(architecture);
    }
    Ok((out, config, corpus))
}

/// Overrides `config` with the flags given; the rest stays as configured (a new run's defaults,
/// or what a resumed run saved).
fn apply_flags(args: &TrainArgs, config: &mut TrainConfig) {
    let set = |target: &mut usize, value: Option<usize>| *target = value.unwrap_or(*target);
    set(&mut config.seq_len, args.seq_len);
    set(&mut config.batch_size, args.batch_size);
    set(&mut config.steps, args.steps);
    set(&mut config.warmup_steps, args.warmup);
    set(&mut config.checkpoint_every, args.checkpoint_every);
    if args.checkpoint_every.is_none() {
        // A short run is one interval: the default of 100 would train 100 steps.
        config.checkpoint_every = config.checkpoint_every.min(config.steps);
    }
    set(&mut config.keep_checkpoints, args.keep);
    set(&mut config.grad_accumulation, args.grad_accumulation);
    config.learning_rate = args.lr.unwrap_or(config.learning_rate);
    config.seed = args.seed.unwrap_or(config.seed);
}

/// Ends this process of a multi-process run whose write failed, mid-run and alone: at once,
/// with the line and status of a failed write, and without `MPI_Finalize`, which would wait for
/// the other processes (still training, or waiting for this one); the MPI launcher then stops
/// them.
fn leave_the_run(failure: WriteError) -> ! {
    let error = AppError::Training(TrainingError::Write(failure));
    error.report();
    std::process::exit(error.exit_code())
}

/// A training run, as a job on whichever backend the flags chose.
struct TrainJob {
    config: TrainConfig,
    /// The corpus `config` names, loaded once.
    corpus: Corpus,
    /// The run's folder.
    out: PathBuf,
    /// Continue from the run's last checkpoint.
    resume: bool,
    /// The multi-process run this process is part of; `None` alone.
    cluster: Option<Cluster>,
}

impl Job for TrainJob {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        self.run_with::<B>(ExecutionStrategy::SingleDevice(device))
    }

    fn run_with<B: TrainingBackend>(self, strategy: ExecutionStrategy<B>) -> Result<(), AppError> {
        let TrainJob { config, corpus, out, resume, cluster } = &self;
        let device = strategy.main_device().clone();
        config.validate()?;
        let (untrained, _) = config.initial_model::<B::InnerBackend>(!resume, &device)?;
        self.announce::<B>(&untrained, &device);
        if config.task.is_none() && !resume {
            let loss = self.validation_loss(&untrained, &device)?;
            let model = match &config.pretrained {
                Some(checkpoint) => format!("{checkpoint} under this run's attention"),
                None => "an untrained model of this config".into(),
            };
            println!(
                "validation before training ({model}): loss {loss:.4}, {:.4} bits per {}",
                bits_per_unit(loss),
                corpus.unit_name()
            );
        }
        let outcome = match cluster {
            Some(cluster) => {
                match train_in_cluster::<B>(config, corpus, out, *resume, &device, cluster) {
                    Err(TrainingError::Write(failure)) => leave_the_run(failure),
                    trained => trained?,
                }
            }
            None => train_with::<B>(config, corpus, out, *resume, strategy)?,
        };
        match &config.task {
            Some(task) => super::tasks::report(config, task, &outcome.model, 64, &device)?,
            None => {
                let loss = self.validation_loss(&outcome.model, &device)?;
                println!(
                    "validation: loss {loss:.4}, {:.4} bits per {}",
                    bits_per_unit(loss),
                    corpus.unit_name()
                );
            }
        }
        self.finish(outcome.fingerprint)
    }
}

impl TrainJob {
    /// This process's rank and the run's processes: `(0, 1)` alone.
    fn rank(&self) -> (usize, usize) {
        self.cluster.as_ref().map_or((0, 1), |c| (c.rank(), c.nodes()))
    }

    /// Says what trains on what, with how many parameters, into which folder.
    fn announce<B: TrainingBackend>(&self, model: &Decoder<B::InnerBackend>, device: &B::Device) {
        let config = &self.config;
        let info = model.info(&config.model, config.seq_len);
        let data =
            config.task.as_ref().map_or(self.corpus.name().to_string(), |task| format!("{task:?}"));
        let process = match &self.cluster {
            Some(c) => format!(" as rank {} of {} processes", c.rank(), c.nodes()),
            None => String::new(),
        };
        println!(
            "training {data} on {}{process} ({} parameters) into {}",
            B::name(device),
            info.parameters,
            self.out.display()
        );
    }

    /// `model`'s mean loss on the validation split, over the run's validation batches. A run of
    /// several processes validates its whole batch, as one process would.
    fn validation_loss<B: ModelBackend>(
        &self,
        model: &Decoder<B>,
        device: &B::Device,
    ) -> Result<f64, AppError> {
        let config = &self.config;
        let batch = config.batch_size * self.rank().1;
        let valid = self.corpus.valid();
        let (len, batches) = (config.seq_len, config.valid_batches);
        Ok(match config.segment_memory {
            true => stream_loss(model, valid, (len, batch, batches), config.full_memory(), device)?,
            false => mean_loss(model, (valid, config.bos), len, batch, batches, device)?,
        })
    }

    /// Says where the run's files are (rank 0: the model and its loss curve, which it plots;
    /// the others: their logs) and, in a multi-process run, that the weights agree.
    fn finish(&self, fingerprint: Option<u64>) -> Result<(), AppError> {
        let (rank, processes) = self.rank();
        if let Some(fingerprint) = fingerprint {
            println!(
                "weights identical on all {processes} processes (fingerprint {fingerprint:016x})"
            );
        }
        if rank > 0 {
            let logs = self.out.join(format!("rank-{rank}"));
            println!("rank {rank}'s logs are in {}", logs.display());
            return Ok(());
        }
        println!("model saved to {}", self.out.join("model.mpk").display());
        let curve = crate::report::curve::plot_loss_curve(&self.out, self.config.checkpoint_every)?;
        println!("loss curve: {}", curve.display());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use swa_models::DecoderConfig;
    use swa_models::layers::AttentionKind;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        train: TrainArgs,
    }

    /// The checkpoint interval after `flags` on a new run's defaults (100 steps).
    fn interval(flags: &[&str]) -> usize {
        let args = Flags::parse_from(std::iter::once("train").chain(flags.iter().copied())).train;
        let model = DecoderConfig::new(vec![AttentionKind::Full]);
        let mut config = TrainConfig::new(model, 16);
        apply_flags(&args, &mut config);
        config.checkpoint_every
    }

    #[test]
    fn a_run_shorter_than_the_default_interval_is_one_interval() {
        assert_eq!(interval(&["--steps", "25"]), 25);
        assert_eq!(interval(&["--steps", "250"]), 100);
        assert_eq!(interval(&["--steps", "25", "--checkpoint-every", "50"]), 50);
    }
}
