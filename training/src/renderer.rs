//! The plain log renderer: when stdout is not a terminal (CI, pipes, files), training prints a
//! line of metrics every few steps instead of Burn's terminal dashboard.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use burn::train::metric::{MetricDefinition, MetricEntry, MetricId};
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};

/// Whether Burn's terminal dashboard can draw: stdout is a terminal.
pub fn dashboard_available() -> bool {
    std::io::stdout().is_terminal()
}

/// Prints `[train] epoch 2/10 step 120/1000 | Loss 1.23 | …` every `every` steps, and the
/// validation means at the end of each epoch.
pub struct PlainRenderer {
    every: usize,
    names: HashMap<MetricId, String>,
    train: Vec<(MetricId, String)>,
    valid: Vec<(MetricId, String)>,
    started: Instant,
}

impl PlainRenderer {
    /// A renderer printing every `every` training steps (at least 1).
    pub fn new(every: usize) -> Self {
        let started = Instant::now();
        Self {
            every: every.max(1),
            names: HashMap::new(),
            train: Vec::new(),
            valid: Vec::new(),
            started,
        }
    }

    fn record(entries: &mut Vec<(MetricId, String)>, state: MetricState) {
        let entry: MetricEntry = match state {
            MetricState::Generic(entry) | MetricState::Numeric(entry, _) => entry,
        };
        let text = entry.serialized_entry.formatted;
        // The formatted entry reads "epoch <running> - batch <current>": keep the current value.
        let current = text.rsplit("batch ").next().unwrap_or(&text).to_string();
        match entries.iter_mut().find(|(id, _)| *id == entry.metric_id) {
            Some(slot) => slot.1 = current,
            None => entries.push((entry.metric_id, current)),
        }
    }

    fn line(&self, split: &str, item: &TrainingProgress, entries: &[(MetricId, String)]) -> String {
        let mut line = format!(
            "[{split} {:>6.0}s] epoch {}/{}",
            self.started.elapsed().as_secs_f64(),
            item.global_progress.items_processed,
            item.global_progress.items_total
        );
        if let Some(iteration) = item.iteration {
            line += &format!(" step {iteration}");
        }
        for (id, value) in entries {
            let name = self.names.get(id).map_or("?", String::as_str);
            line += &format!(" | {name} {value}");
        }
        line
    }
}

impl MetricsRendererTraining for PlainRenderer {
    fn update_train(&mut self, state: MetricState) {
        Self::record(&mut self.train, state);
    }

    fn update_valid(&mut self, state: MetricState) {
        Self::record(&mut self.valid, state);
    }

    fn render_train(&mut self, item: TrainingProgress, _indicators: Vec<ProgressType>) {
        if item.iteration.is_some_and(|i| i % self.every == 0) {
            println!("{}", self.line("train", &item, &self.train));
        }
    }

    fn render_valid(&mut self, item: TrainingProgress, _indicators: Vec<ProgressType>) {
        let done = item.progress.as_ref().is_some_and(|p| p.items_processed >= p.items_total);
        if done {
            println!("{}", self.line("valid", &item, &self.valid));
        }
    }
}

impl MetricsRendererEvaluation for PlainRenderer {
    fn update_test(&mut self, _name: EvaluationName, state: MetricState) {
        Self::record(&mut self.valid, state);
    }

    fn render_test(&mut self, _item: EvaluationProgress, _indicators: Vec<ProgressType>) {}
}

impl MetricsRenderer for PlainRenderer {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name);
    }
}
