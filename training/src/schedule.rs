//! The learning-rate schedule of MSWA's setup: linear warmup, then cosine decay to a floor.

use burn::optim::LearningRate;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::Backend;

/// Linear warmup over `warmup` steps to `peak`, then cosine decay to `floor` at step `total`,
/// and `floor` after it. Its record is the step count, so a resumed run continues the curve.
#[derive(Clone, Debug)]
pub struct WarmupCosine {
    peak: f64,
    floor: f64,
    warmup: usize,
    total: usize,
    step: usize,
}

impl WarmupCosine {
    /// A schedule at step 0.
    pub fn new(peak: f64, floor: f64, warmup: usize, total: usize) -> Self {
        Self { peak, floor, warmup, total, step: 0 }
    }

    /// The rate at step `step` (1-based: the first update uses step 1).
    pub fn rate(&self, step: usize) -> f64 {
        if step <= self.warmup {
            return self.peak * step as f64 / self.warmup.max(1) as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let progress = ((step - self.warmup) as f64 / span).min(1.0);
        self.floor
            + 0.5 * (self.peak - self.floor) * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

impl LrScheduler for WarmupCosine {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> LearningRate {
        self.step += 1;
        self.rate(self.step)
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.step
    }

    fn load_record<B: Backend>(mut self, step: usize) -> Self {
        self.step = step;
        self
    }
}
