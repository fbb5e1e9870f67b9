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

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;

    #[test]
    fn warmup_then_cosine_to_the_floor() {
        let schedule = WarmupCosine::new(1.0, 0.1, 4, 12);
        assert_eq!(schedule.rate(1), 0.25);
        assert_eq!(schedule.rate(4), 1.0);
        assert!((schedule.rate(8) - 0.55).abs() < 1e-12, "halfway down the cosine");
        assert!((schedule.rate(12) - 0.1).abs() < 1e-12);
        assert!((schedule.rate(20) - 0.1).abs() < 1e-12, "the floor after the last step");
    }

    #[test]
    fn a_resumed_schedule_continues_the_curve() {
        let mut schedule = WarmupCosine::new(1.0, 0.1, 4, 12);
        let rates: Vec<f64> = (0..6).map(|_| LrScheduler::step(&mut schedule)).collect();
        let record = LrScheduler::to_record::<NdArray>(&schedule);
        let mut resumed = WarmupCosine::new(1.0, 0.1, 4, 12).load_record::<NdArray>(record);
        assert_eq!(rates[5], schedule.rate(6));
        assert_eq!(LrScheduler::step(&mut resumed), schedule.rate(7));
    }
}
