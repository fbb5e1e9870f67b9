//! # LongNet (Ding et al., 2023): dilated attention scales linearly, at small scale
//!
//! LongNet splits the sequence into segments of `w_b` tokens and keeps every `r_b`-th row and
//! key of a segment, over several branches mixed by their softmax denominators
//! (docs/semantics.md §5), so each query sees about `Σ_b w_b / r_b` keys whatever the length
//! `N`. This example reproduces, at the size of `Preset::longnet(Tiny)` (d = 48, 6 heads,
//! segments (16, 32, 64), dilations (1, 2, 4)):
//! - **Scaling** (the paper's O(N·d) against O(N²·d) of Table 1, and its runtime comparison
//!   of Figure 5, there on GPUs with FlashAttention and sequence parallelism): time and peak
//!   memory of one attention layer (the q/k/v/output projections and the attention; batch
//!   1), forward alone and forward with backward, against the sequence length `N`, for dilated
//!   attention and full causal attention. Time is the median of `--repeats` calls after a
//!   warm-up; memory is the most heap bytes held during a call, counted by this binary's
//!   allocator (CPU backends only: on a GPU it is n/a). Full attention stops at `--full-max`.
//!   A second table gives `time(N_max) / time(N_min)` against `N_max / N_min`, and the
//!   exponent `k` of `time ∝ N^k` fitted to all lengths (1: linear, 2: quadratic).
//! - **Language modelling** (the paper's Table 2, in spirit): the tiny LongNet decoder and a
//!   full-attention decoder of the same size trained for the same steps on the same text,
//!   with validation bits per byte at the training length and at `--eval-len`.
//!
//! Writes `scaling.csv`, `scaling_ratios.csv`, `lm.csv`, `scaling_time.svg` and
//! `scaling_memory.svg` (log-log) to `--out` (default `target/examples/longnet`).
//!
//! Run (about 4 to 7 minutes on this shared 2-core CPU, on `data/kjv.txt`):
//! `cargo run --example longnet`
//!
//! On a GPU, at the paper's width and branches (memory is not counted there; not yet run):
//! ```sh
//! cargo run --features cuda --example longnet -- --backend cuda --scale paper \
//!     --lengths 8192,16384,32768,65536,131072 --full-max 32768 --train-len 8192 \
//!     --eval-len 32768 --steps 20000 --batch-size 16 --corpus enwik8
//! ```
//!
//! The tables it printed on a 2-core CPU, with what reproduces and what does not, are in
//! `docs/papers.md`.

use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use clap::Parser;
use swa_models::layers::{AttentionKind, SelfAttention, SelfAttentionConfig};
use swa_models::{DecoderConfig, Preset};
use swa_training::TrainingBackend;
use swa_zoo::AppError;
use swa_zoo::bench::heap::{counting, peak_during};
use swa_zoo::bench::median_ms;
use swa_zoo::report::Table;
use swa_zoo::report::plot::line_plot;
use swa_zoo::runtime::{BackendChoice, Job, run_on};
use swa_zoo::study::{Study, StudyArgs};

/// Counts heap bytes for the memory columns. Left out of the test build, which includes this
/// file as a module: a binary has one global allocator, and the smoke test does not need one
/// (its memory cells read n/a).
#[cfg(not(test))]
#[global_allocator]
static ALLOC: swa_zoo::bench::heap::CountingAllocator = swa_zoo::bench::heap::CountingAllocator;

/// Flags of the LongNet example.
#[derive(Parser, Debug)]
#[command(about = "LongNet: dilated vs full attention scaling, and a short LM run")]
pub struct Flags {
    #[command(flatten)]
    pub study: StudyArgs,
    /// Sequence lengths of the scaling tables; dilated attention runs at all of them.
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024,2048,4096,8192,16384,32768")]
    pub lengths: Vec<usize>,
    /// Longest length at which full attention runs (its scores grow as N²).
    #[arg(long, default_value_t = 4096)]
    pub full_max: usize,
    /// Timed calls per cell of the scaling table (their median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Training length of the language models; default: the preset's.
    #[arg(long)]
    pub train_len: Option<usize>,
    /// A second, longer evaluation length of the language models.
    #[arg(long, default_value_t = 512)]
    pub eval_len: usize,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the study the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    if flags.lengths.is_empty() || flags.lengths.contains(&0) {
        let problem = "needs at least one length, each at least 1".into();
        return Err(AppError::Flag { flag: "--lengths", problem });
    }
    if flags.lengths.iter().all(|&n| n > flags.full_max) {
        let problem = format!(
            "{} is below every --lengths value: full attention would not run",
            flags.full_max
        );
        return Err(AppError::Flag { flag: "--full-max", problem });
    }
    let batch_size = flags.study.batch_size;
    let study = Study::open("longnet", flags.study)?;
    let job = LongNetStudy {
        lengths: study.pick(flags.lengths, vec![64, 128]),
        full_max: study.pick(flags.full_max, 128),
        repeats: study.pick(flags.repeats.max(1), 1),
        train_len: flags.train_len,
        eval_len: study.pick(flags.eval_len, 128),
        batch_size,
        study,
    };
    run_on(&job.study.placement(), job)
}

/// The study, with the flags it reads (smoke-run sizes already picked).
struct LongNetStudy {
    study: Study,
    lengths: Vec<usize>,
    full_max: usize,
    repeats: usize,
    train_len: Option<usize>,
    eval_len: usize,
    batch_size: usize,
}

/// The two attention kinds compared.
const KINDS: [&str; 2] = ["dilated", "full"];

/// Time (ms) and peak heap (bytes, when counted) of forward alone and of forward with backward.
struct Cell {
    kind: &'static str,
    len: usize,
    forward_ms: f64,
    backward_ms: f64,
    forward_bytes: Option<usize>,
    backward_bytes: Option<usize>,
}

/// Runs `call` once to warm up, then `repeats` times under the allocation counter: the median
/// time and the peak heap of the calls (the same for each call, as each frees what it holds).
fn measure(
    repeats: usize,
    mut call: impl FnMut() -> Result<(), AppError>,
) -> Result<(f64, Option<usize>), AppError> {
    call()?;
    let mut failure = None;
    let (ms, peak) = peak_during(|| {
        median_ms(repeats, || {
            if let Err(e) = call() {
                failure = Some(e);
            }
        })
    });
    failure.map_or(Ok((ms, peak)), Err)
}

/// Waits for the device's queued work, naming the failure.
fn sync<B: Backend>(device: &B::Device) -> Result<(), AppError> {
    Ok(B::sync(device)?)
}

/// `value` with `decimals`, or a dash when it is not a number.
fn number(value: f64, decimals: usize) -> String {
    if value.is_finite() { format!("{value:.decimals$}") } else { "—".into() }
}

/// LongNet's segments `w` and dilations `r`, or the kind as debug text.
fn branches(kind: &AttentionKind) -> String {
    match kind {
        AttentionKind::LongNet { segments, dilations } => {
            format!("w = {segments:?}, r = {dilations:?}")
        }
        other => format!("{other:?}"),
    }
}

/// The least-squares slope of `ln y` against `ln x`: the exponent `k` of `y ∝ x^k` fitted to all
/// the points (1: linear, 2: quadratic); NaN for fewer than two lengths.
fn log_log_slope(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x.ln(), y.ln())).collect();
    let mean =
        |part: fn(&(f64, f64)) -> f64| logs.iter().map(part).sum::<f64>() / logs.len() as f64;
    let (mx, my) = (mean(|p| p.0), mean(|p| p.1));
    let covariance: f64 = logs.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let variance: f64 = logs.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    covariance / variance
}

/// Bytes as MiB, or n/a when not counted.
fn mib(bytes: Option<usize>) -> String {
    bytes.map_or("n/a".into(), |b| number(b as f64 / (1 << 20) as f64, 2))
}

impl LongNetStudy {
    /// Time and memory of one `kind` layer at length `len`; memory only where `host` (the
    /// backend's tensors live in the counted heap).
    fn cell<B: TrainingBackend>(
        &self,
        kind: &'static str,
        attention: &AttentionKind,
        len: usize,
        config: &DecoderConfig,
        host: bool,
        device: &B::Device,
    ) -> Result<Cell, AppError> {
        let layer: SelfAttention<B> = SelfAttentionConfig::new(
            config.d_model,
            config.heads,
            config.kv_heads(),
            attention.clone(),
        )
        .init(device)
        .map_err(|e| AppError::step(format!("{kind} layer"), e))?;
        let x = Tensor::<B, 3>::random(
            [1, len, config.d_model],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let (inference, x_inner) = (layer.valid(), x.clone().inner());
        let at = |e| AppError::step(format!("{kind} attention at N = {len}"), e);
        let (forward_ms, forward_bytes) = measure(self.repeats, || {
            drop(inference.forward(x_inner.clone()).map_err(at)?);
            sync::<B::InnerBackend>(device)
        })?;
        let (backward_ms, backward_bytes) = measure(self.repeats, || {
            drop(layer.forward(x.clone()).map_err(at)?.sum().backward());
            sync::<B>(device)
        })?;
        println!(
            "{kind:>7} N = {len:>6}: forward {forward_ms:9.2} ms, forward+backward {backward_ms:9.2} ms"
        );
        let host = |bytes: Option<usize>| bytes.filter(|_| host);
        Ok(Cell {
            kind,
            len,
            forward_ms,
            backward_ms,
            forward_bytes: host(forward_bytes),
            backward_bytes: host(backward_bytes),
        })
    }

    /// Both kinds at every length, full attention up to `full_max`, in the order lengths × kinds.
    fn scaling<B: TrainingBackend>(
        &self,
        config: &DecoderConfig,
        device: &B::Device,
    ) -> Result<Vec<Cell>, AppError> {
        let host =
            matches!(self.study.placement().backend, BackendChoice::Flex | BackendChoice::Ndarray)
                && counting();
        let dilated = config.kind_of(0).clone();
        let mut cells = Vec::new();
        for &len in &self.lengths {
            cells.push(self.cell::<B>(KINDS[0], &dilated, len, config, host, device)?);
            if len <= self.full_max {
                cells.push(self.cell::<B>(
                    KINDS[1],
                    &AttentionKind::Full,
                    len,
                    config,
                    host,
                    device,
                )?);
            }
        }
        Ok(cells)
    }

    /// The scaling table, its end-to-end ratios, and the log-log figures.
    fn report_scaling(&self, cells: &[Cell], layer: &str) -> Result<(), AppError> {
        let mut table = Table::new(&[
            "N",
            "attention",
            "forward ms",
            "fwd+bwd ms",
            "forward MiB",
            "fwd+bwd MiB",
        ]);
        for c in cells {
            table.rows.push(vec![
                c.len.to_string(),
                c.kind.into(),
                number(c.forward_ms, 2),
                number(c.backward_ms, 2),
                mib(c.forward_bytes),
                mib(c.backward_bytes),
            ]);
        }
        self.study.report(
            "scaling",
            &format!(
                "Scaling: one attention layer ({layer}), batch 1, median of {} calls",
                self.repeats
            ),
            &table,
        )?;

        let mut ratios = Table::new(&[
            "attention",
            "N_min",
            "N_max",
            "N ratio",
            "fwd time ratio",
            "fwd k",
            "fwd+bwd time ratio",
            "fwd+bwd k",
            "fwd+bwd mem",
        ]);
        let (mut time_series, mut memory_series) = (Vec::new(), Vec::new());
        for kind in KINDS {
            let rows: Vec<&Cell> = cells.iter().filter(|c| c.kind == kind).collect();
            let points = |value: &dyn Fn(&Cell) -> f64| {
                rows.iter().map(|c| (c.len as f64, value(c))).collect::<Vec<_>>()
            };
            let mebibytes =
                |bytes: Option<usize>| bytes.map_or(f64::NAN, |b| b as f64 / (1 << 20) as f64);
            let (forward, backward) = (points(&|c| c.forward_ms), points(&|c| c.backward_ms));
            let memory = points(&|c| mebibytes(c.backward_bytes));
            let ratio = |p: &[(f64, f64)]| p[p.len() - 1].1 / p[0].1;
            let (first, last) = (rows[0].len, rows[rows.len() - 1].len);
            ratios.rows.push(vec![
                kind.into(),
                first.to_string(),
                last.to_string(),
                number(last as f64 / first as f64, 0),
                number(ratio(&forward), 1),
                number(log_log_slope(&forward), 2),
                number(ratio(&backward), 1),
                number(log_log_slope(&backward), 2),
                number(ratio(&memory), 1),
            ]);
            time_series.push((format!("{kind} forward"), forward));
            time_series.push((format!("{kind} forward+backward"), backward));
            memory_series
                .push((format!("{kind} forward"), points(&|c| mebibytes(c.forward_bytes))));
            memory_series.push((format!("{kind} forward+backward"), memory));
        }
        let title = "Scaling ratios: time(N_max) / time(N_min) against N_max / N_min; \
                     k fitted to time ∝ N^k over all lengths";
        self.study.report("scaling_ratios", title, &ratios)?;
        let plot = |file: &str, title: &str, y: &str, series: &[(String, Vec<(f64, f64)>)]| {
            line_plot(self.study.path(file), title, "sequence length N", y, series, true, true)
        };
        plot(
            "scaling_time.svg",
            "LongNet: dilated vs full attention, one layer",
            "milliseconds",
            &time_series,
        )?;
        if cells.iter().any(|c| c.backward_bytes.is_some()) {
            plot("scaling_memory.svg", "LongNet: peak heap of one layer", "MiB", &memory_series)?;
        }
        Ok(())
    }

    /// The tiny LongNet decoder and a full-attention decoder of its size, trained alike.
    fn language_models<B: TrainingBackend>(
        &self,
        preset: &Preset,
        device: &B::Device,
    ) -> Result<(), AppError> {
        let len = self.train_len.unwrap_or(preset.train_len);
        let full = DecoderConfig { attention: vec![AttentionKind::Full], ..preset.config.clone() };
        let steps = self.study.steps(600);
        let batches = self.study.pick(16, 1);
        let (at_len, at_eval) = (
            format!("valid bits/byte, N = {len}"),
            format!("valid bits/byte, N = {}", self.eval_len),
        );
        let mut table = Table::new(&["model", "train s", &at_len, &at_eval]);
        for (name, config) in [("longnet", &preset.config), ("full", &full)] {
            let trained = self.study.train::<B>(name, config, len, steps, device)?;
            let bits = self.study.bits(&trained.model, len, 8, batches, device)?;
            let long = self.study.bits(&trained.model, self.eval_len, 8, batches, device)?;
            let label = if name == "full" {
                "full attention".to_string()
            } else {
                format!("LongNet, {}", branches(config.kind_of(0)))
            };
            table.rows.push(vec![
                label,
                number(trained.seconds, 0),
                number(bits, 3),
                number(long, 3),
            ]);
        }
        let title =
            format!("Language modelling: {steps} steps at length {len}, batch {}", self.batch_size);
        self.study.report("lm", &title, &table)
    }
}

impl Job for LongNetStudy {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let preset = Preset::longnet(self.study.scale(), 256);
        let c = &preset.config;
        let layer =
            format!("d = {}, {} heads, LongNet {}", c.d_model, c.heads, branches(c.kind_of(0)));
        let cells = self.scaling::<B>(c, &device)?;
        self.report_scaling(&cells, &layer)?;
        self.language_models::<B>(&preset, &device)
    }
}
