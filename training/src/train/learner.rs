//! A run's Learner: burn-train's supervised training of a [`LanguageModel`] with its metrics,
//! renderer, checkpoints and resume, set up once [`super::train_run`] has the run's loaders,
//! model and schedule.

use std::path::Path;
use std::sync::Arc;

use burn::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamWConfig, Optimizer};
use burn::record::{Record, Recorder};
use burn::tensor::DType;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::train::metric::LearningRateMetric;
use burn::train::{
    ExecutionStrategy, Learner, LearningComponentsTypes, SupervisedTraining, TrainingStrategy,
};
use swa_models::Decoder;
use swa_models::panics::without_panics;
use swa_models::weights::recorder_problem;

use crate::backend::TrainingBackend;
use crate::checkpoint::last_checkpoint;
use crate::checkpoint_file::{CheckpointRecorder, SaveOnly, record_path};
use crate::distributed::Cluster;
use crate::distributed::gradients::Averaged;
use crate::error::TrainingError;
use crate::language_model::LanguageModel;
use crate::loader::WindowLoader;
use crate::metric_logs::RunMetricLogger;
use crate::metrics::{Stat, StatMetric, TokensPerSecond};
use crate::mixed_precision::{LossScale, LossScaler, MixedPrecision};
use crate::renderer::{PlainRenderer, dashboard_available};
use crate::schedule::WarmupCosine;
use crate::stop::{RunStop, SignalStop, received};
use crate::train::TrainConfig;

use super::step_loop::StepLoop;

/// What a run's Learner needs besides its model and optimizer.
pub(super) struct Session<'a, B: AutodiffBackend> {
    pub(super) config: &'a TrainConfig,
    /// The run's folder: its checkpoints are there.
    pub(super) out: &'a Path,
    /// Where this process's Learner writes its logs (and, for rank 0, its checkpoints).
    pub(super) logs: &'a Path,
    /// This process's rank; 0 alone.
    pub(super) rank: usize,
    /// The processes of a multi-process run, whose gradients the optimizer averages.
    pub(super) cluster: Option<Cluster>,
    pub(super) start: usize,
    /// The name of the bits metric: bits per byte, character or word.
    pub(super) bits: String,
    pub(super) strategy: ExecutionStrategy<B>,
    pub(super) train_loader: WindowLoader<B>,
    pub(super) valid_loader: WindowLoader<B::InnerBackend>,
    pub(super) schedule: WarmupCosine,
}

impl<B: TrainingBackend> Session<'_, B> {
    /// Trains `model` with AdamW under the run's gradient clipping: Burn's AdamW as it is on a
    /// device computing in f32, and on f32 master weights with loss scaling in f16 or bf16.
    pub(super) fn train(
        self,
        model: LanguageModel<B>,
    ) -> Result<Decoder<B::InnerBackend>, TrainingError> {
        let adamw = AdamWConfig::new().with_weight_decay(self.config.weight_decay);
        let clipping = GradientClippingConfig::Norm(self.config.grad_clip);
        let device = self.strategy.main_device();
        let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
        let cluster = self.cluster.clone();
        match float {
            DType::F32 => {
                let inner = adamw.with_grad_clipping(Some(clipping)).init();
                self.launch(model, Averaged { cluster, inner })
            }
            half => {
                let loss_scale = LossScale::new(LossScaler::for_dtype(half));
                let inner =
                    MixedPrecision::new(adamw.build(), Some(clipping.init()), loss_scale.clone());
                let model = LanguageModel { loss_scale: Some(loss_scale), ..model };
                self.launch(model, Averaged { cluster, inner })
            }
        }
    }

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
        .with_application_logger(None)
        .summary();
        let stop = RunStop::new(training.interrupter());
        let every = config.checkpoint_every;
        let logger = RunMetricLogger::new(self.logs, self.start / every + 1, stop.clone());
        training = training.with_metric_logger(logger);
        let mut recorder = CheckpointRecorder::new(config.keep_checkpoints).with_stop(stop.clone());
        let mut learner = Learner::new(model, optimizer, self.schedule);
        let own_loop = matches!(self.strategy, ExecutionStrategy::SingleDevice(_));
        match self.strategy {
            ExecutionStrategy::SingleDevice(device) => {
                if self.start > 0 {
                    learner = load_checkpoint(learner, (self.out, self.start), &device)?;
                }
                let (start, cluster) = (self.start, self.cluster.clone());
                let steps = StepLoop { device, every, start, stop: stop.clone(), cluster };
                training =
                    training.with_training_strategy(TrainingStrategy::Custom(Arc::new(steps)));
            }
            several => {
                // burn-train's own loop, which numbers checkpoints by epoch and loads its own.
                recorder = recorder.numbered_by_epoch(every);
                if self.start > 0 {
                    training = training.checkpoint(self.start / every);
                }
                training = training.with_training_strategy(TrainingStrategy::Default(several));
            }
        }
        if config.task.is_some() {
            training = training
                .metric_train_numeric(StatMetric::new(Stat::Accuracy, "Accuracy"))
                .metric_valid_numeric(StatMetric::new(Stat::Accuracy, "Accuracy"));
        }
        if self.rank == 0 {
            training =
                training.with_file_checkpointer(recorder).with_checkpointing_strategy(SaveOnly);
        }
        // Several processes share the launcher's terminal (rank 0's is a pseudo-terminal that
        // cannot enter raw mode), so only a process alone shows the dashboard.
        if self.cluster.is_some() || !dashboard_available() {
            training = training.renderer(PlainRenderer::new((config.checkpoint_every / 10).max(1)));
        }
        // Under MPI too: the request travels to the other processes (`StepLoop`), and the
        // watchdog ends a process that cannot agree on it.
        let signals = SignalStop::install(&stop);
        let trained = training.launch(learner).model.merged();
        drop(signals);
        if let Some(failure) = stop.take_failure() {
            return Err(TrainingError::Write(failure));
        }
        if let Some(at) = stop.divergence() {
            let (dir, checkpoint) = (self.out.join("checkpoint"), last_checkpoint(self.out));
            return Err(TrainingError::Diverged { at, dir, checkpoint });
        }
        // burn-train's own loop stops at an epoch's end without saying where (and its
        // dashboard clears the Interrupter as training ends): its last checkpoint tells.
        let checkpoint = match stop.stop_step() {
            Some(step) => Some(step),
            None if own_loop => return Ok(trained),
            None => match last_checkpoint(self.out) {
                last if last == Some(every * config.epochs()) => return Ok(trained),
                last => last,
            },
        };
        let asked = match self.cluster {
            Some(_) => "another process's stop request",
            None => "the dashboard's quit",
        };
        let (reason, dir) = (received().unwrap_or(asked), self.out.join("checkpoint"));
        let at_stop = stop.stop_step().is_some();
        Err(TrainingError::Stopped { reason, dir, checkpoint, at_stop })
    }
}

/// `learner` with the checkpoint of step `start` of the run in `out` loaded, as the Learner
/// reads it (every process reads rank 0's files).
fn load_checkpoint<B, LC>(
    mut learner: Learner<LC>,
    (out, start): (&Path, usize),
    device: &B::Device,
) -> Result<Learner<LC>, TrainingError>
where
    B: AutodiffBackend,
    LC: LearningComponentsTypes<Backend = B>,
{
    let dir = out.join("checkpoint");
    let file = |part| record_path(&dir, part, start);
    learner.load_model(checkpoint_part::<B, _>(&file("model"), device)?);
    learner.load_optim(checkpoint_part::<B, _>(&file("optim"), device)?);
    learner.load_scheduler(checkpoint_part::<B, _>(&file("scheduler"), device)?);
    Ok(learner)
}

/// One part (model, optimizer or scheduler) of a Learner checkpoint, read as the Learner
/// reads it.
fn checkpoint_part<B: Backend, R: Record<B>>(
    path: &Path,
    device: &B::Device,
) -> Result<R, TrainingError> {
    let unreadable =
        |problem| TrainingError::CheckpointUnreadable { path: path.to_path_buf(), problem };
    let recorder = CheckpointRecorder::default();
    without_panics("Burn's record loader", || Recorder::<B>::load(&recorder, path.into(), device))
        .map_err(unreadable)?
        .map_err(|e| unreadable(recorder_problem(&e)))
}
