//! The run's training loop on one device (alone, or as one process of an MPI run):
//! burn-train's single-device loop (an epoch of `checkpoint_every` steps, its validation, a
//! checkpoint) with two changes, so that a stop request loses no step:
//!
//! - checkpoints are numbered by the steps (batches) trained, and the loop starts from any
//!   step: a resumed run skips the steps of the epoch in progress that its checkpoint already
//!   holds (the loader draws every batch from the seed, epoch and step, [`crate::loader`]);
//! - a stop request (`SIGTERM`, `SIGINT`, the dashboard's quit) ends the epoch at the next
//!   optimizer step (after its accumulated batches), and that step is checkpointed. Under MPI
//!   the request is summed over the processes after every optimizer step (one float), so that
//!   every process stops at the same step and rank 0 writes one checkpoint.
//!
//! A failed write ([`RunStop::write_failed`]) ends the loop after the batch in flight, without
//! a checkpoint: the last complete one stays as it is. So does a divergence
//! ([`RunStop::diverged_at`]): a batch's loss that is not finite, checked before its update, or
//! a validation loss or weight that is not, checked before a checkpoint (under MPI each check
//! agreed by every process, one float): nothing after it is written. A gradient that overflows
//! on a finite loss shows in the next check (in half precision, loss scaling skips such a step
//! as before).

use burn::data::dataloader::Progress;
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::GradientsAccumulator;
use burn::tensor::Device;
use burn::tensor::backend::Backend;
use burn::tensor::backend::DeviceOps;
use burn::tensor::{ElementConversion, Tensor};
use burn::train::{
    EventProcessorTraining, InferenceStep, Learner, LearnerEvent, LearningComponentsTypes,
    SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainStep,
    TrainingBackend, TrainingComponents, TrainingItem, TrainingModel, ValidLoader,
};

use crate::distributed::Cluster;
use crate::language_model::StepLoss;
use crate::stop::RunStop;

/// The training loop of a run on one device, from step `start`.
pub(super) struct StepLoop<LC: LearningComponentsTypes> {
    /// The device the run trains on.
    pub(super) device: Device<TrainingBackend<LC>>,
    /// Steps per epoch: the run's `checkpoint_every`.
    pub(super) every: usize,
    /// The steps trained before this run: the checkpoint it resumes, 0 for a fresh run.
    pub(super) start: usize,
    /// The run's stop request and write failure.
    pub(super) stop: RunStop,
    /// The processes of a multi-process run, which agree on a stop request.
    pub(super) cluster: Option<Cluster>,
}

impl<LC: LearningComponentsTypes> StepLoop<LC> {
    /// Whether the run stops after this optimizer step: a stop request here, or (under MPI)
    /// in any process. Every process calls it at the same steps.
    fn stop_agreed(&self) -> bool {
        let requested = self.stop.was_stopped();
        match &self.cluster {
            Some(cluster) => cluster.any(requested, "the stop request's all-reduce"),
            None => requested,
        }
    }

    /// Whether the run diverged at `step`: `what` (of `value`) not finite here or (under MPI)
    /// in any process, recorded in the run's stop. Every process calls it at the same steps.
    fn diverged(&self, step: usize, what: &'static str, value: f64) -> bool {
        let here = !value.is_finite();
        let any = match &self.cluster {
            Some(cluster) => cluster.any(here, "the divergence check's all-reduce"),
            None => here,
        };
        if any {
            self.stop.diverged_at(step, what, value);
        }
        any
    }

    /// Trains steps `from + 1 ..= every` of `epoch` (counted from 1 among `epochs`), the
    /// batches before `from` skipped; returns the last step trained: `every`, or fewer when a
    /// stop request, a failed write or a divergence ended the epoch.
    fn train_epoch(
        &self,
        learner: &mut Learner<LC>,
        loader: &TrainLoader<LC>,
        (epoch, epochs, from): (usize, usize, usize),
        processor: &mut SupervisedTrainingEventProcessor<LC>,
        accumulation: Option<usize>,
    ) -> usize
    where
        <TrainingModel<LC> as TrainStep>::Output: StepLoss,
    {
        let global = Progress::new(epoch, epochs);
        let mut iterator = loader.iter();
        for _ in 0..from {
            iterator.next();
        }
        let (mut step, mut accumulator, mut accumulated) = (from, GradientsAccumulator::new(), 0);
        while let Some(item) = iterator.next() {
            step += 1;
            learner.lr_step();
            let progress = iterator.progress();
            let output = learner.train_step(item);
            let loss = output.item.loss_value();
            if self.diverged((epoch - 1) * self.every + step, "the loss", loss) {
                break;
            }
            let stepped = match accumulation {
                Some(accumulation) => {
                    accumulator.accumulate(&learner.model(), output.grads);
                    accumulated += 1;
                    let full = accumulated >= accumulation;
                    if full {
                        learner.optimizer_step(accumulator.grads());
                        accumulated = 0;
                    }
                    full
                }
                None => {
                    learner.optimizer_step(output.grads);
                    true
                }
            };
            let lr = Some(learner.lr_current());
            let item = TrainingItem::new(output.item, progress, global.clone(), Some(step), lr);
            processor.process_train(LearnerEvent::ProcessedItem(item));
            if self.stop.has_failed() || (stepped && self.stop_agreed()) {
                break;
            }
        }
        processor.process_train(LearnerEvent::EndEpoch(epoch));
        step
    }

    /// Validates `learner`'s model on the whole validation loader at the end of `epoch`;
    /// returns the worst batch loss: the first that is not finite, else the largest.
    fn validate(
        &self,
        learner: &Learner<LC>,
        loader: &ValidLoader<LC>,
        global: Progress,
        processor: &mut SupervisedTrainingEventProcessor<LC>,
    ) -> f64
    where
        <LC::InferenceModel as InferenceStep>::Output: StepLoss,
    {
        let model = learner.model().valid();
        let mut iterator = loader.iter();
        let (mut iteration, mut worst) = (0, 0.0_f64);
        while let Some(item) = iterator.next() {
            iteration += 1;
            let progress = iterator.progress();
            let item = model.step(item);
            let loss = item.loss_value();
            if !loss.is_finite() || worst.is_finite() && loss > worst {
                worst = loss;
            }
            let item = TrainingItem::new(item, progress, global.clone(), Some(iteration), None);
            processor.process_valid(LearnerEvent::ProcessedItem(item));
        }
        processor.process_valid(LearnerEvent::EndEpoch(global.items_processed));
        worst
    }
}

/// The sum of every weight of `model`: not finite when one of them is not.
fn finite_sum<B: Backend, M: Module<B>>(model: &M) -> f64 {
    struct Sum(f64);
    impl<B: Backend> ModuleVisitor<B> for Sum {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 += param.val().sum().into_scalar().elem::<f64>();
        }
    }
    let mut sum = Sum(0.0);
    model.visit(&mut sum);
    sum.0
}

impl<LC: LearningComponentsTypes> SupervisedLearningStrategy<LC> for StepLoop<LC>
where
    <TrainingModel<LC> as TrainStep>::Output: StepLoss,
    <LC::InferenceModel as InferenceStep>::Output: StepLoss,
{
    /// Trains from step `start` to the end of the last epoch, validating and checkpointing at
    /// every epoch's end, and checkpointing the step a stop request ends at. The Learner comes
    /// with the checkpoint already loaded (`starting_epoch` is not used); the run sets no early
    /// stopping.
    fn fit(
        &self,
        components: TrainingComponents<LC>,
        mut learner: Learner<LC>,
        train: TrainLoader<LC>,
        valid: ValidLoader<LC>,
        _starting_epoch: usize,
    ) -> (TrainingModel<LC>, SupervisedTrainingEventProcessor<LC>) {
        let train = train.to_device(&self.device);
        let valid = valid.to_device(self.device.inner());
        learner.fork(&self.device);
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let (epochs, accumulation) = (components.num_epochs, components.grad_accumulation);
        let (total, mut done) = (self.every * epochs, self.start);
        while done < total && !self.stop.has_failed() {
            let epoch = done / self.every + 1;
            let span = (epoch, epochs, done % self.every);
            let step = self.train_epoch(&mut learner, &train, span, &mut processor, accumulation);
            done = (epoch - 1) * self.every + step;
            let complete = step == self.every;
            if complete && !self.stop.has_failed() && self.stop.divergence().is_none() {
                let global = Progress::new(epoch, epochs);
                let loss = self.validate(&learner, &valid, global, &mut processor);
                self.diverged(done, "the validation loss", loss);
            }
            if self.stop.divergence().is_none() {
                self.diverged(done, "a weight", finite_sum(&learner.model()));
            }
            if self.stop.has_failed() || self.stop.divergence().is_some() {
                break;
            }
            if let Some(checkpointer) = &mut checkpointer {
                checkpointer.checkpoint(&learner, done, &components.event_store);
            }
            // A request during the last epoch's validation lets the run end as it would have.
            if !complete || (done < total && self.stop_agreed()) {
                self.stop.stopped_at(done);
                break;
            }
        }
        (learner.model(), processor)
    }
}
