//! The training dashboard's metrics: loss, perplexity, bits per byte/character, tokens per
//! second (the learning rate is Burn's own `LearningRateMetric`).
//!
//! Every metric reads [`StepStats`], the loss of a step already synced to the host, so a step
//! costs one device read however many metrics are shown.

use std::sync::Arc;
use std::time::Instant;

use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Adaptor, Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes,
    NumericEntry, SerializedEntry,
};

/// What one step reports: the mean loss per scored token, how many tokens it read and, for a
/// synthetic task, how many of its scored positions it got right.
#[derive(Clone, Copy, Debug)]
pub struct StepStats {
    /// Mean cross-entropy, in nats per token.
    pub loss: f64,
    /// Tokens read in the step.
    pub tokens: usize,
    /// Scored positions whose most likely token is the target (synthetic tasks; else 0).
    pub correct: usize,
    /// Scored positions (synthetic tasks; else 0).
    pub scored: usize,
}

impl Adaptor<StepStats> for StepStats {
    fn adapt(&self) -> StepStats {
        *self
    }
}

/// Which quantity a [`StatMetric`] shows.
#[derive(Clone, Copy, Debug)]
pub enum Stat {
    /// Cross-entropy in nats.
    Loss,
    /// `exp(loss)`.
    Perplexity,
    /// `loss / ln 2`: bits per byte (bits per character on enwik8) for byte-level corpora.
    BitsPerToken,
    /// Fraction of a synthetic task's answers predicted right.
    Accuracy,
}

impl Stat {
    /// The value of this quantity in a step, and its weight in the epoch's mean: the tokens
    /// read (the scored positions, for accuracy).
    pub fn of(self, item: &StepStats) -> (f64, usize) {
        match self {
            Stat::Loss => (item.loss, item.tokens),
            Stat::Perplexity => (item.loss.exp(), item.tokens),
            Stat::BitsPerToken => (item.loss / std::f64::consts::LN_2, item.tokens),
            Stat::Accuracy => (item.correct as f64 / item.scored.max(1) as f64, item.scored.max(1)),
        }
    }
}

/// A numeric metric computed from [`StepStats`].
#[derive(Clone)]
pub struct StatMetric {
    stat: Stat,
    name: MetricName,
    state: NumericMetricState,
}

impl StatMetric {
    /// The metric of `stat`, named `name` on the dashboard (e.g. "Bits per byte").
    pub fn new(stat: Stat, name: &str) -> Self {
        Self { stat, name: Arc::new(name.to_string()), state: NumericMetricState::new() }
    }
}

impl Metric for StatMetric {
    type Input = StepStats;

    fn update(&mut self, item: &StepStats, _metadata: &MetricMetadata) -> SerializedEntry {
        let (value, weight) = self.stat.of(item);
        self.state.update(value, weight, FormatOptions::new(self.name()).precision(4))
    }

    fn clear(&mut self) {
        self.state.reset()
    }

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes { unit: None, higher_is_better: matches!(self.stat, Stat::Accuracy) }
            .into()
    }
}

impl Numeric for StatMetric {
    fn value(&self) -> NumericEntry {
        self.state.current_value()
    }

    fn running_value(&self) -> NumericEntry {
        self.state.running_value()
    }
}

/// Tokens per second, measured between consecutive steps.
#[derive(Clone)]
pub struct TokensPerSecond {
    name: MetricName,
    last: Option<Instant>,
    state: NumericMetricState,
}

impl TokensPerSecond {
    /// A new meter; its first step has no interval and reports 0.
    pub fn new() -> Self {
        Self {
            name: Arc::new("Tokens per second".to_string()),
            last: None,
            state: NumericMetricState::new(),
        }
    }
}

impl Default for TokensPerSecond {
    fn default() -> Self {
        Self::new()
    }
}

impl Metric for TokensPerSecond {
    type Input = StepStats;

    fn update(&mut self, item: &StepStats, _metadata: &MetricMetadata) -> SerializedEntry {
        let now = Instant::now();
        let rate = match self.last.replace(now) {
            Some(last) => item.tokens as f64 / now.duration_since(last).as_secs_f64().max(1e-9),
            None => 0.0,
        };
        self.state.update(rate, 1, FormatOptions::new(self.name()).precision(0))
    }

    fn clear(&mut self) {
        self.last = None;
        self.state.reset()
    }

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes { unit: Some("tok/s".into()), higher_is_better: true }.into()
    }
}

impl Numeric for TokensPerSecond {
    fn value(&self) -> NumericEntry {
        self.state.current_value()
    }

    fn running_value(&self) -> NumericEntry {
        self.state.running_value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_a_step() {
        let step =
            StepStats { loss: std::f64::consts::LN_2 * 3.0, tokens: 64, correct: 3, scored: 4 };
        let (loss, weight) = Stat::Loss.of(&step);
        assert_eq!((loss, weight), (step.loss, 64));
        assert!((Stat::Perplexity.of(&step).0 - 8.0).abs() < 1e-12);
        assert!((Stat::BitsPerToken.of(&step).0 - 3.0).abs() < 1e-12);
        assert_eq!(Stat::Accuracy.of(&step), (0.75, 4));
        let language = StepStats { correct: 0, scored: 0, ..step };
        assert_eq!(Stat::Accuracy.of(&language), (0.0, 1), "no scored positions: no division by 0");
    }
}
