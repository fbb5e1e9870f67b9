//! `train`: a run with Burn's Learner on a corpus or a synthetic task, on one device or
//! several, in the chosen precision; or one process of a multi-process run (`--nodes`), each
//! process with one device.

use std::path::PathBuf;

use burn::train::ExecutionStrategy;
use clap::Args;
use swa_models::DecoderConfig;
use swa_training::TrainingBackend;
use swa_training::corpus::bits_per_unit;
use swa_training::distributed::ClusterConfig;
use swa_training::eval::mean_loss;
use swa_training::train::{TrainConfig, train_in_cluster, train_with};

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
    /// Training steps in all.
    #[arg(long)]
    steps: Option<usize>,
    /// Peak learning rate (AdamW, warmup then cosine decay).
    #[arg(long)]
    lr: Option<f64>,
    /// Warmup steps.
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
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Flags of a multi-process run.
#[derive(Args, Debug)]
struct ClusterArgs {
    /// Processes in a multi-process data-parallel run, on this machine or several, one device
    /// each; every process reads --batch-size sequences per step. Needs --coordinator.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// This process's rank, 0 … nodes − 1; rank 0 writes the run (checkpoints, logs, model).
    #[arg(long, default_value_t = 0)]
    node_rank: usize,
    /// HOST:PORT of the run's coordinator (`swa-zoo coordinator --port PORT`).
    #[arg(long)]
    coordinator: Option<String>,
    /// HOST:PORT the other processes reach this one at. Default with a coordinator on
    /// 127.0.0.1: the coordinator's port + 1 + rank.
    #[arg(long)]
    listen: Option<String>,
    /// Seconds a process waits for the others (to join, or at a step) before it stops with an
    /// error.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

impl ClusterArgs {
    /// The run this process is part of; `None` alone.
    fn config(&self) -> Result<Option<ClusterConfig>, AppError> {
        let Some(coordinator) = &self.coordinator else {
            return match self.nodes {
                1 => Ok(None),
                n => Err(AppError::Flag {
                    flag: "--coordinator",
                    problem: format!(
                        "is needed: a run of {n} processes meets at its coordinator (HOST:PORT)"
                    ),
                }),
            };
        };
        Ok(Some(
            ClusterConfig::new(self.nodes, self.node_rank, coordinator.clone())
                .with_listen(self.listen.clone())
                .with_timeout_secs(self.timeout),
        ))
    }
}

/// `train`.
pub fn train(args: TrainArgs) -> Result<(), AppError> {
    let (out, mut config) = match args.resume {
        true => {
            let out = args.out.clone().ok_or_else(|| AppError::Flag {
                flag: "--resume",
                problem: "needs --out, the run's folder".into(),
            })?;
            let file = out.join("train.json");
            let config: TrainConfig = swa_training::config_file::load(&file)?;
            (out, config)
        }
        false => {
            let corpus = args.corpus.as_ref().map(|p| p.display().to_string());
            let mut probe = TrainConfig::new(
                DecoderConfig::new(vec![])
                    .with_vocab_size(1)
                    .with_d_model(1)
                    .with_layers(1)
                    .with_heads(1),
                1,
            )
            .with_corpus(corpus);
            probe.word_min_count = args.words;
            let vocab = probe.load_corpus()?.vocab_size();
            let (model, train_len, name) = args.model.config(vocab)?;
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
    if !args.resume {
        config.task = args.task.task(config.seq_len);
    }
    let cluster = args.cluster.config()?;
    if cluster.is_some() && !args.devices.is_empty() {
        return Err(AppError::Flag {
            flag: "--devices",
            problem: "cannot be used with --nodes: each process of a run trains on one device \
                      (--device); start one process per device"
                .into(),
        });
    }
    struct Run(TrainConfig, PathBuf, bool, Option<ClusterConfig>);
    impl Job for Run {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            self.run_with::<B>(ExecutionStrategy::SingleDevice(device))
        }

        fn run_with<B: TrainingBackend>(
            self,
            strategy: ExecutionStrategy<B>,
        ) -> Result<(), AppError> {
            let Run(config, out, resume, cluster) = self;
            let (rank, processes) = cluster.as_ref().map_or((0, 1), |c| (c.rank, c.nodes));
            // A run of several processes validates its whole batch, as one process would.
            let valid_batch = config.batch_size * processes;
            let device = strategy.main_device().clone();
            let corpus = config.load_corpus()?;
            config.validate()?;
            let untrained = config.model.init::<B::InnerBackend>(&device)?;
            let info = untrained.info(&config.model, config.seq_len);
            let data =
                config.task.as_ref().map_or(corpus.name().to_string(), |task| format!("{task:?}"));
            let process = match &cluster {
                Some(c) => format!(" as rank {rank} of {} processes", c.nodes),
                None => String::new(),
            };
            println!(
                "training {data} on {}{process} ({} parameters) into {}",
                B::name(&device),
                info.parameters,
                out.display()
            );
            if config.task.is_none() && !resume {
                let loss = mean_loss(
                    &untrained,
                    corpus.valid(),
                    config.seq_len,
                    valid_batch,
                    config.valid_batches,
                    &device,
                )?;
                println!(
                    "validation before training (an untrained model of this config): loss \
                     {loss:.4}, {:.4} bits per {}",
                    bits_per_unit(loss),
                    corpus.unit_name()
                );
            }
            let outcome = match &cluster {
                Some(cluster) => {
                    train_in_cluster::<B>(&config, &corpus, &out, resume, &device, cluster)?
                }
                None => train_with::<B>(&config, &corpus, &out, resume, strategy)?,
            };
            match &config.task {
                Some(task) => super::tasks::report(&config, task, &outcome.model, 64, &device)?,
                None => {
                    let loss = mean_loss(
                        &outcome.model,
                        corpus.valid(),
                        config.seq_len,
                        valid_batch,
                        config.valid_batches,
                        &device,
                    )?;
                    println!(
                        "validation: loss {loss:.4}, {:.4} bits per {}",
                        bits_per_unit(loss),
                        corpus.unit_name()
                    );
                }
            }
            if let Some(fingerprint) = outcome.fingerprint {
                println!(
                    "weights identical on all {processes} processes (fingerprint {fingerprint:016x})"
                );
            }
            if rank > 0 {
                println!(
                    "rank {rank}'s logs are in {}",
                    out.join(format!("rank-{rank}")).display()
                );
                return Ok(());
            }
            println!("model saved to {}", out.join("model.mpk").display());
            let curve = crate::report::curve::plot_loss_curve(&out, config.checkpoint_every)?;
            println!("loss curve: {}", curve.display());
            Ok(())
        }
    }
    let devices = match args.devices.is_empty() {
        true => vec![args.device.device],
        false => args.devices.clone(),
    };
    let place =
        Placement { backend: args.device.backend, devices, precision: args.device.precision };
    run_on(&place, Run(config, out, args.resume, cluster))
}
