//! Batches of token windows for the Learner, reproducible from the seed, the epoch and the
//! step alone, so that a resumed run reads exactly the data it would have read.
//!
//! Burn's own data loader reshuffles from a generator whose state a checkpoint does not keep.
//! Here training batch `s` of epoch `e` is drawn from `(seed, e, s)`, and the loader counts its
//! epochs from the checkpoint it resumes, which is all the data position there is. A loader
//! of a [`SyntheticTask`] draws example `hash(seed, e, s, row)` the same way.
//!
//! In a multi-process run ([`crate::distributed`]) each step's batch is the run's rows
//! `rank·batch … (rank+1)·batch − 1` ([`LoaderConfig::with_shard`]), so `P` processes of `batch`
//! rows read exactly what one process of `P·batch` rows reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use swa_attention::rng::SplitMix64;

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
    /// Consecutive segments of one stream per row, for segment memory (docs/semantics.md §10):
    /// the tokens are cut into one contiguous part per row of the run's batch, and step `g`
    /// reads segment `g mod S` of every part (`S` segments fit in a part), so each stream
    /// starts again after `S` steps. Each batch says where its segments start
    /// ([`TokenBatch::stream_start`]).
    Streams {
        /// Whether the epochs continue the streams (training: step `g` counts every earlier
        /// epoch's steps) or each epoch reads them from the start (validation).
        continuing: bool,
    },
}

/// A loader of `steps` batches of `batch` windows of `len + 1` tokens per epoch (a text loader
/// with a BOS token: the BOS and `len` tokens of the text), made by [`LoaderConfig`].
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
    /// With [`Sampling::Streams`], the tokens of each row's part and the segments in it.
    parts: Option<(usize, usize)>,
    /// The token every text window starts with, if any ([`LoaderConfig::with_bos`]).
    bos: Option<u32>,
    /// The rows of one step of the whole run: `batch`, or `P·batch` over `P` processes.
    run_rows: usize,
    sampling: Sampling,
    /// The next epoch to hand out, shared by the loader's copies.
    epoch: Arc<AtomicUsize>,
    device: B::Device,
}

/// What a [`WindowLoader`] hands out, in Burn's configuration idiom: [`LoaderConfig::new`] takes
/// what every loader needs (the window length and the rows per batch), `with_*` the rest, and
/// [`LoaderConfig::init_text`] or [`LoaderConfig::init_task`] builds the loader over a token
/// stream or a synthetic task. One configuration serves both sources, so a run's training and
/// validation loaders differ only in the fields they set.
#[derive(Clone, Copy, Debug)]
pub struct LoaderConfig {
    /// Tokens per window: each row reads `len + 1` tokens (inputs and targets shifted by one).
    len: usize,
    /// Rows per batch (in a multi-process run, this process's rows).
    batch: usize,
    /// Batches per epoch; 1 unless set.
    steps: usize,
    /// How the windows are picked; [`Sampling::Sequential`] unless set.
    sampling: Sampling,
    /// Epochs already trained (the checkpoint resumed from); 0 unless set.
    first_epoch: usize,
    /// This process's rank and the run's processes; `(0, 1)` unless set.
    shard: (usize, usize),
    /// The token every text window starts with; none unless set.
    bos: Option<u32>,
}

impl LoaderConfig {
    /// A loader of one batch per epoch of `batch` windows of `len` tokens, read in order from
    /// the start, from epoch 0, for a run of one process.
    pub fn new(len: usize, batch: usize) -> Self {
        let sampling = Sampling::Sequential;
        Self { len, batch, steps: 1, sampling, first_epoch: 0, shard: (0, 1), bos: None }
    }

    /// Starts every window of text with `bos` when it is set, as a checkpoint whose tokenizer
    /// adds a BOS token was trained: a window is then the BOS and `len` tokens of the text, all
    /// `len` of them scored (the first predicted from the BOS alone), and sequential windows
    /// score every token of the text once. Segments of [`Sampling::Streams`] continue one
    /// another, so they take no BOS: [`LoaderConfig::init_text`] refuses the pair.
    pub fn with_bos(self, bos: Option<u32>) -> Self {
        Self { bos, ..self }
    }

    /// The tokens of the text one window reads: `len + 1`, or `len` after a BOS.
    fn text_width(&self) -> usize {
        self.len + usize::from(self.bos.is_none())
    }

    /// `steps` batches per epoch (a sequential text loader is cut to the windows that exist).
    pub fn with_steps(self, steps: usize) -> Self {
        Self { steps, ..self }
    }

    /// Picks the windows by `sampling`.
    pub fn with_sampling(self, sampling: Sampling) -> Self {
        Self { sampling, ..self }
    }

    /// Starts counting epochs at `first_epoch`, the number already trained, so that a resumed
    /// run reads the windows it would have read.
    pub fn with_first_epoch(self, first_epoch: usize) -> Self {
        Self { first_epoch, ..self }
    }

    /// The shard of process `rank` of `processes`: rows `rank·batch … (rank+1)·batch − 1` of
    /// every step of the run's batch of `processes·batch` rows.
    pub fn with_shard(self, rank: usize, processes: usize) -> Self {
        Self { shard: (rank, processes), ..self }
    }

    /// A loader of windows of `tokens` on `device`. Fails when the tokens are too short for one
    /// window, the window or batch is empty, or a BOS is asked of streams.
    pub fn init_text<B: Backend>(
        self,
        tokens: Arc<Vec<u32>>,
        device: &B::Device,
    ) -> Result<WindowLoader<B>, TrainingError> {
        let width = self.text_width();
        if tokens.len() < width || self.len == 0 || self.batch == 0 {
            return Err(TrainingError::TooFewTokens {
                tokens: tokens.len(),
                window: width,
                batch: self.batch,
            });
        }
        if let (Sampling::Streams { .. }, Some(_)) = (self.sampling, self.bos) {
            return Err(TrainingError::BosInStreams);
        }
        let processes = self.shard.1;
        let part = (tokens.len() - 1) / (self.batch * processes);
        let steps = match self.sampling {
            Sampling::Random { .. } => self.steps,
            Sampling::Sequential => {
                let windows = (tokens.len() - (width - self.len)) / self.len;
                self.steps.min((windows / self.batch).max(1))
            }
            Sampling::Streams { continuing: true } => self.steps,
            Sampling::Streams { continuing: false } => self.steps.min(part / self.len),
        };
        let mut loader = Self { steps, ..self }.init(Source::Text(tokens.clone()), device);
        if let Sampling::Streams { .. } = self.sampling {
            if part < self.len {
                return Err(TrainingError::TooFewTokens {
                    tokens: tokens.len(),
                    window: self.len + 1,
                    batch: self.batch * processes,
                });
            }
            loader.parts = Some((part, part / self.len));
        }
        Ok(loader)
    }

    /// A loader of examples of `task` drawn under `seed`, `len` tokens each, on `device`. Fails
    /// when the task has no example of that length, or the batch is empty.
    pub fn init_task<B: Backend>(
        self,
        task: SyntheticTask,
        seed: u64,
        device: &B::Device,
    ) -> Result<WindowLoader<B>, TrainingError> {
        task.validate(self.len)?;
        if self.batch == 0 {
            return Err(TrainingError::EmptyBatch);
        }
        Ok(self.init(Source::Task { task, seed }, device))
    }

    /// The loader of `source`, checked by the caller.
    fn init<B: Backend>(self, source: Source, device: &B::Device) -> WindowLoader<B> {
        let (rank, processes) = self.shard;
        WindowLoader {
            source,
            len: self.len,
            batch: self.batch,
            steps: self.steps,
            first_step: 0,
            first_row: rank * self.batch,
            parts: None,
            bos: self.bos,
            run_rows: processes * self.batch,
            sampling: self.sampling,
            epoch: Arc::new(AtomicUsize::new(self.first_epoch)),
            device: device.clone(),
        }
    }
}

impl<B: Backend> WindowLoader<B> {
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
            Sampling::Streams { .. } => {
                let (part, _) = self.parts.expect("set by init_text");
                ((self.first_row + row) * part + self.stream_start(epoch, step)) as u64
            }
        }
    }

    /// With [`Sampling::Streams`], the stream position where step `step` of epoch `epoch`
    /// reads: segment `g mod S` for the step's global index `g`.
    fn stream_start(&self, epoch: usize, step: usize) -> usize {
        let (_, segments) = self.parts.expect("set by init_text");
        let global = match self.sampling {
            Sampling::Streams { continuing: true } => epoch * self.steps + step,
            _ => step,
        };
        global % segments * self.len
    }

    /// Batch `step` of epoch `epoch`.
    pub fn batch(&self, epoch: usize, step: usize) -> TokenBatch<B> {
        let tokens = match &self.source {
            Source::Text(tokens) => tokens,
            Source::Task { task, seed } => {
                let example = |row| {
                    task.example(self.len, *seed, self.key(epoch, step, row))
                        .expect("checked by LoaderConfig::init_task")
                };
                return TokenBatch::from_examples(
                    (0..self.batch).map(example).collect::<Vec<_>>().as_slice(),
                    &self.device,
                );
            }
        };
        let text = self.len + usize::from(self.bos.is_none());
        let room = (tokens.len() - text) as u64 + 1;
        let mut ids = Vec::with_capacity(self.batch * (self.len + 1));
        for row in 0..self.batch {
            let start = (self.key(epoch, step, row) % room) as usize;
            ids.extend(self.bos.map(i64::from));
            ids.extend(tokens[start..start + text].iter().map(|&t| t as i64));
        }
        let shape = [self.batch, self.len + 1];
        let all = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, shape), &self.device);
        TokenBatch {
            inputs: all.clone().narrow(1, 0, self.len),
            targets: all.narrow(1, 1, self.len),
            scored: None,
            stream_start: self.parts.map(|_| self.stream_start(epoch, step)),
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
            Sampling::Random { .. } | Sampling::Streams { continuing: true } => {
                self.epoch.fetch_add(1, Ordering::SeqCst)
            }
            Sampling::Sequential | Sampling::Streams { continuing: false } => 0,
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
