//! Batches of token windows for the Learner, reproducible from the seed, the epoch and the
//! step alone, so that a resumed run reads exactly the data it would have read.
//!
//! Burn's own data loader reshuffles from a generator whose state a checkpoint does not keep.
//! Here training batch `s` of epoch `e` is drawn from `(seed, e, s)`, and the loader counts its
//! epochs from the checkpoint it resumes, which is all the data position there is. A loader
//! of a [`SyntheticTask`] draws example `hash(seed, e, s, row)` the same way.
//!
//! In a multi-process run ([`crate::distributed`]) each step's batch is the run's rows
//! `rank·batch … (rank+1)·batch − 1` ([`WindowLoader::shard`]), so `P` processes of `batch`
//! rows read exactly what one process of `P·batch` rows reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use swa_models::SplitMix64;

use crate::batch::TokenBatch;
use crate::error::TrainingError;
use crate::synthetic::SyntheticTask;

/// What a loader reads.
#[derive(Clone, Debug)]
enum Source {
    /// Windows of a token stream.
    Text(Arc<Vec<u32>>),
    /// Examples of a synthetic task, drawn under `seed`.
    Task { task: SyntheticTask, seed: u64 },
}

/// How a loader picks its windows.
#[derive(Clone, Copy, Debug)]
pub enum Sampling {
    /// Random windows, drawn from the seed, epoch and step.
    Random {
        /// The run's seed.
        seed: u64,
    },
    /// Consecutive non-overlapping windows from the start, the same every epoch (validation).
    Sequential,
}

/// A loader of `steps` batches of `batch` windows of `len + 1` tokens per epoch.
#[derive(Clone)]
pub struct WindowLoader<B: Backend> {
    source: Source,
    len: usize,
    batch: usize,
    steps: usize,
    /// The step index of this loader's first batch: a slice of a loader (one device's share)
    /// reads its own steps.
    first_step: usize,
    /// The row index of this loader's first row: a process's shard of the run's batch.
    first_row: usize,
    /// The rows of one step of the whole run: `batch`, or `P·batch` over `P` processes.
    run_rows: usize,
    sampling: Sampling,
    /// The next epoch to hand out, shared by the loader's copies.
    epoch: Arc<AtomicUsize>,
    device: B::Device,
}

impl<B: Backend> WindowLoader<B> {
    /// A loader over `tokens`; `first_epoch` is the number of epochs already trained (the
    /// checkpoint resumed from, or 0). Sequential loaders are cut to the windows that exist.
    /// Fails when the split is too short for one window.
    pub fn new(
        tokens: Arc<Vec<u32>>,
        len: usize,
        batch: usize,
        steps: usize,
        sampling: Sampling,
        first_epoch: usize,
        device: B::Device,
    ) -> Result<Self, TrainingError> {
        if tokens.len() < len + 1 || len == 0 || batch == 0 {
            return Err(TrainingError::TooFewTokens {
                tokens: tokens.len(),
                window: len + 1,
                batch,
            });
        }
        let steps = match sampling {
            Sampling::Random { .. } => steps,
            Sampling::Sequential => steps.min(((tokens.len() - 1) / len / batch).max(1)),
        };
        let epoch = Arc::new(AtomicUsize::new(first_epoch));
        Ok(Self {
            source: Source::Text(tokens),
            len,
            batch,
            steps,
            first_step: 0,
            first_row: 0,
            run_rows: batch,
            sampling,
            epoch,
            device,
        })
    }

    /// A loader of `steps` batches of `batch` examples of `task`, `len` tokens each, drawn
    /// under `seed`. Fails when the task has no example of that length.
    #[allow(clippy::too_many_arguments)]
    pub fn task(
        task: SyntheticTask,
        seed: u64,
        len: usize,
        batch: usize,
        steps: usize,
        sampling: Sampling,
        first_epoch: usize,
        device: B::Device,
    ) -> Result<Self, TrainingError> {
        task.validate(len)?;
        if batch == 0 {
            return Err(TrainingError::EmptyBatch);
        }
        let epoch = Arc::new(AtomicUsize::new(first_epoch));
        Ok(Self {
            source: Source::Task { task, seed },
            len,
            batch,
            steps,
            first_step: 0,
            first_row: 0,
            run_rows: batch,
            sampling,
            epoch,
            device,
        })
    }

    /// The shard of process `rank` of `processes`: rows `rank·batch … (rank+1)·batch − 1` of
    /// every step of the run's batch of `processes·batch` rows.
    pub fn shard(self, rank: usize, processes: usize) -> Self {
        Self { first_row: rank * self.batch, run_rows: processes * self.batch, ..self }
    }

    /// The key of row `row` of step `step` in epoch `epoch`: a window offset (modulo the room)
    /// or an example index.
    fn key(&self, epoch: usize, step: usize, row: usize) -> u64 {
        match self.sampling {
            Sampling::Random { seed } => {
                [seed, epoch as u64, step as u64, (self.first_row + row) as u64]
                    .iter()
                    .fold(0x243F_6A88_85A3_08D3u64, |h, k| SplitMix64::mix(h ^ k))
            }
            Sampling::Sequential => {
                ((step * self.run_rows + self.first_row + row) * self.len) as u64
            }
        }
    }

    /// Batch `step` of epoch `epoch`.
    pub fn batch(&self, epoch: usize, step: usize) -> TokenBatch<B> {
        let tokens = match &self.source {
            Source::Text(tokens) => tokens,
            Source::Task { task, seed } => {
                let example = |row| {
                    task.example(self.len, *seed, self.key(epoch, step, row))
                        .expect("checked by WindowLoader::task")
                };
                return TokenBatch::from_examples(
                    (0..self.batch).map(example).collect::<Vec<_>>().as_slice(),
                    &self.device,
                );
            }
        };
        let width = self.len + 1;
        let room = (tokens.len() - width) as u64 + 1;
        let mut ids = Vec::with_capacity(self.batch * width);
        for row in 0..self.batch {
            let start = (self.key(epoch, step, row) % room) as usize;
            ids.extend(tokens[start..start + width].iter().map(|&t| t as i64));
        }
        let all =
            Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [self.batch, width]), &self.device);
        TokenBatch {
            inputs: all.clone().narrow(1, 0, self.len),
            targets: all.narrow(1, 1, self.len),
            scored: None,
        }
    }
}

struct Iter<'a, B: Backend> {
    loader: &'a WindowLoader<B>,
    epoch: usize,
    step: usize,
}

impl<B: Backend> Iterator for Iter<'_, B> {
    type Item = TokenBatch<B>;

    fn next(&mut self) -> Option<TokenBatch<B>> {
        (self.step < self.loader.steps).then(|| {
            self.step += 1;
            self.loader.batch(self.epoch, self.loader.first_step + self.step - 1)
        })
    }
}

impl<B: Backend> DataLoaderIterator<TokenBatch<B>> for Iter<'_, B> {
    fn progress(&self) -> Progress {
        Progress::new(self.step * self.loader.batch, self.loader.steps * self.loader.batch)
    }
}

impl<B: Backend> DataLoader<B, TokenBatch<B>> for WindowLoader<B> {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<TokenBatch<B>> + 'a> {
        let epoch = match self.sampling {
            Sampling::Random { .. } => self.epoch.fetch_add(1, Ordering::SeqCst),
            Sampling::Sequential => 0,
        };
        Box::new(Iter { loader: self, epoch, step: 0 })
    }

    fn num_items(&self) -> usize {
        self.steps * self.batch
    }

    fn to_device(&self, device: &B::Device) -> Arc<dyn DataLoader<B, TokenBatch<B>>> {
        Arc::new(Self { device: device.clone(), ..self.clone() })
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<B, TokenBatch<B>>> {
        let steps = (end.min(self.num_items()) - start.min(end)) / self.batch;
        let first_step = self.first_step + start / self.batch;
        // Each slice (one device's share) counts its epochs itself, from where this loader is.
        let epoch = Arc::new(AtomicUsize::new(self.epoch.load(Ordering::SeqCst)));
        Arc::new(Self { steps: steps.max(1), first_step, epoch, ..self.clone() })
    }
}
