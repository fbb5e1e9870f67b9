//! # Window inference and attention sinks (SWAT §2.2, Figure 2; StreamingLLM)
//!
//! A model trained with full attention can be run with a sliding window at inference, so that
//! memory stays bounded on long inputs. SWAT's §2.2 (its Figure 2 heat map of window × length)
//! shows that this breaks a vanilla softmax model once the first tokens leave the window, and
//! StreamingLLM repairs it by keeping a few *sink* tokens visible (docs/semantics.md §2, §7). This
//! example trains, for the same token budget on real text:
//! - a vanilla model (full causal softmax attention, trained at length `T`), evaluated with
//!   full attention, with a sliding window, and with the window plus 4 sinks: in parallel
//!   with absolute positions, and decoded token by token as StreamingLLM does, its cached
//!   keys numbered by cache slot (docs/semantics.md §7);
//! - a SWAT model (sigmoid, balanced ALiBi, RoPE; window `T/4`, trained at `T`), evaluated
//!   with the same windows;
//!
//! at evaluation lengths from `T` to `8T`, and prints validation bits per byte per window and
//! length. With absolute positions a sink's RoPE distance grows with the length, past any
//! distance seen in training; StreamingLLM's slot positions keep it within the window.
//!
//! Writes `grid.csv` (every row of the table) and one heat map of window × length per model
//! and mode (`vanilla-window.svg`, `vanilla-sinks.svg`, `vanilla-streaming.svg`,
//! `swat-window.svg`) to `--out`
//! (default `target/examples/streaming`).
//!
//! Run (two models of 1000 steps, then 68 evaluations; the time it took on a 2-core CPU is in
//! `docs/papers.md`), on `data/kjv.txt`:
//! `cargo run --example streaming`
//!
//! On a GPU, at MSWA's Table 2 size (T = 1024):
//! ```sh
//! cargo run --release --features cuda --example streaming -- --backend cuda --scale paper \
//!     --steps 20000 --batch-size 32
//! ```
//!
//! The tables it printed on a 2-core CPU, with what reproduces and what does not, are in
//! `docs/papers.md`.

use clap::Parser;
use swa_attention::ModelBackend;
use swa_models::layers::{AttentionKind, CachePositions};
use swa_models::{Decoder, DecoderConfig, Preset};
use swa_training::TrainingBackend;
use swa_training::corpus::bits_per_unit;
use swa_training::eval::{decoded_loss, rebuild, with_eval_window};
use swa_zoo::AppError;
use swa_zoo::report::Table;
use swa_zoo::report::plot::heat_map;
use swa_zoo::runtime::{Job, run_on};
use swa_zoo::study::{Study, StudyArgs};

/// Flags of the window-inference example.
#[derive(Parser, Debug)]
#[command(
    about = "Window inference with and without attention sinks (SWAT Figure 2, StreamingLLM)"
)]
pub struct Flags {
    #[command(flatten)]
    pub study: StudyArgs,
    /// Evaluation lengths, as multiples of the training length.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub length_multiples: Vec<usize>,
    /// Evaluation windows, as fractions `T/k` of the training length `T`.
    #[arg(long, value_delimiter = ',', default_value = "8,4,2,1")]
    pub window_divisors: Vec<usize>,
    /// Attention sinks kept visible in the sinks mode.
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the study the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    let study = Study::open("streaming", flags.study)?;
    let job = StreamingStudy {
        length_multiples: study.pick(flags.length_multiples, vec![1, 2]),
        window_divisors: study.pick(flags.window_divisors, vec![4]),
        sinks: flags.sinks,
        study,
    };
    run_on(&job.study.placement(), job)
}

struct StreamingStudy {
    study: Study,
    length_multiples: Vec<usize>,
    window_divisors: Vec<usize>,
    sinks: usize,
}

impl StreamingStudy {
    /// Bits per byte of `model` run under `config` at each evaluation length, on the same 16
    /// validation windows per length for every row: in parallel with absolute positions, or
    /// decoded token by token with StreamingLLM's slot positions.
    fn row<B: ModelBackend>(
        &self,
        model: &Decoder<B>,
        config: &DecoderConfig,
        lengths: &[usize],
        streaming: bool,
        device: &B::Device,
    ) -> Result<Vec<f64>, AppError> {
        let model = rebuild(model, config, device)?;
        let windows = self.study.pick(16, 1);
        let bits = |len: usize| match streaming {
            false => self.study.bits(&model, len, windows, 1, device),
            true => decoded_loss(
                &model,
                self.study.corpus().valid(),
                len,
                windows,
                CachePositions::Streaming,
                device,
            )
            .map(bits_per_unit)
            .map_err(AppError::from),
        };
        lengths.iter().map(|&len| bits(len)).collect()
    }
}

impl Job for StreamingStudy {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let study = &self.study;
        let vanilla = Preset::vanilla(study.scale(), 256);
        let t = vanilla.train_len;
        let mut swat = vanilla.config.clone();
        swat.attention = vec![AttentionKind::swat(t / 4)];
        let steps = study.steps(1000);
        let vanilla_model = study.train::<B>("vanilla", &vanilla.config, t, steps, &device)?.model;
        let swat_model = study.train::<B>("swat", &swat, t, steps, &device)?.model;

        let lengths: Vec<usize> = self.length_multiples.iter().map(|m| m * t).collect();
        let windows: Vec<usize> = self.window_divisors.iter().map(|k| t / k).collect();
        let length_names: Vec<String> = lengths.iter().map(|l| format!("N={l}")).collect();
        let header: Vec<&str> = ["model", "inference"]
            .into_iter()
            .chain(length_names.iter().map(String::as_str))
            .collect();
        let mut table = Table::new(&header);
        let mut push = |model: &str, inference: String, bits: &[f64]| {
            let cells = bits.iter().map(|b| format!("{b:.3}"));
            table.rows.push([model.to_string(), inference].into_iter().chain(cells).collect());
        };

        let full = self.row(&vanilla_model, &vanilla.config, &lengths, false, &device)?;
        push("vanilla", "full attention".into(), &full);
        let s = self.sinks;
        let modes = [
            ("vanilla", "window", &vanilla_model, &vanilla.config, 0, false),
            ("vanilla", "sinks", &vanilla_model, &vanilla.config, s, false),
            ("vanilla", "streaming", &vanilla_model, &vanilla.config, s, true),
            ("swat", "window", &swat_model, &swat, 0, false),
        ];
        for (name, mode, model, config, sinks, streaming) in modes {
            let mut cells = Vec::new();
            for &w in &windows {
                let config = with_eval_window(config, w, sinks)?;
                let bits = self.row(model, &config, &lengths, streaming, &device)?;
                let inference = match (sinks, streaming) {
                    (0, _) => format!("window {w}"),
                    (s, false) => format!("window {w} + {s} sinks, absolute positions"),
                    (s, true) => {
                        format!("window {w} + {s} sinks, StreamingLLM (decoded, slot positions)")
                    }
                };
                push(name, inference, &bits);
                cells.push(bits);
            }
            let title = format!("{name}, {mode} inference: bits/byte (trained at {t})");
            heat_map(
                study.path(&format!("{name}-{mode}.svg")),
                &title,
                "evaluation length",
                &lengths,
                "window",
                &windows,
                &cells,
                "bits/byte",
            )?;
        }
        let title = format!(
            "Validation bits/byte by evaluation length; trained at T = {t} for {steps} steps, SWAT window {}",
            t / 4
        );
        study.report("grid", &title, &table)
    }
}
