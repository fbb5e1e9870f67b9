//! # SWAT (Fu et al., 2025): Tables 2 and 3 and the passkey test at small scale
//!
//! SWAT is sliding-window attention trained on sequences longer than the window, with sigmoid
//! scores, balanced ALiBi and RoPE (docs/semantics.md §1, §4). This example trains, for the
//! same token budget on real text, at SWAT's analysis size scaled down (6 heads, 2 layers,
//! W = 16):
//! - **Table 2**: a vanilla-trained model (training length = W) and a sliding-window-trained
//!   one (training length = 4W), both SWAT layers, beside a softmax Transformer trained at W,
//!   for the same steps and tokens (4× the batch at length W); all evaluated with windowed
//!   inference (window W) at lengths W … 16W;
//! - **Table 3**: the ablation of softmax vs sigmoid, and RoPE vs ALiBi at the splits 6:0,
//!   4:2, 3:3 (the paper's 12:0, 8:4, 6:6 for 12 heads) vs both (AliRoPE), trained at 4W and
//!   evaluated at 4W and 16W;
//! - **passkey**: SWAT (W = 64, 2 layers) trained on passkey retrieval, its accuracy as the
//!   distance grows past W, up to the stack's reach (W − 1)·L and beyond.
//!
//! Writes `table2.csv`, `table2.svg` (bits per byte against evaluation length), `table3.csv`
//! and `passkey.csv` to `--out` (default `target/examples/swat`).
//!
//! Run (14 models, about 11 minutes on an idle 2-core CPU), on `data/kjv.txt`:
//! `cargo run --example swat`
//!
//! On a GPU, at the analysis model's size (12 heads, 12 layers, W = 256):
//! ```sh
//! cargo run --release --features cuda --example swat -- --backend cuda --scale paper \
//!     --steps 20000 --batch-size 32
//! ```
//!
//! The tables it printed on a 2-core CPU, with what reproduces and what does not, are in
//! `docs/papers.md`.

use clap::Parser;
use swa_attention::alibi::SlopeMagnitudes;
use swa_attention::{ModelBackend, ScoreFn};
use swa_models::layers::{AttentionKind, SwatPositions};
use swa_models::{DecoderConfig, Preset};
use swa_training::TrainingBackend;
use swa_training::eval::{rebuild, with_eval_window};
use swa_training::synthetic::{SyntheticTask, model_accuracy, receptive_field};
use swa_training::tasks::Passkey;
use swa_zoo::AppError;
use swa_zoo::report::Table;
use swa_zoo::report::plot::line_plot;
use swa_zoo::runtime::{Job, run_on};
use swa_zoo::study::{Study, StudyArgs};

/// Flags of the SWAT example.
#[derive(Parser, Debug)]
#[command(about = "SWAT Tables 2 and 3 and the passkey test at small scale")]
pub struct Flags {
    #[command(flatten)]
    pub study: StudyArgs,
    /// The parts to run.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "table2,table3,passkey")]
    pub parts: Vec<StudyPart>,
    /// Evaluation lengths of Table 2, as multiples of the window.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub length_multiples: Vec<usize>,
}

/// A part of the study.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StudyPart {
    /// Vanilla against sliding-window training across evaluation lengths.
    Table2,
    /// The score function × positional encoding ablation.
    Table3,
    /// Passkey retrieval by distance.
    Passkey,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the study the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    let study = Study::open("swat", flags.study)?;
    let length_multiples = study.pick(flags.length_multiples, vec![1, 4]);
    run_on(&study.placement(), SwatStudy { study, length_multiples, parts: flags.parts })
}

struct SwatStudy {
    study: Study,
    length_multiples: Vec<usize>,
    parts: Vec<StudyPart>,
}

/// A SWAT layer of window `window` with the given score function and positions; `distance`
/// heads of ALiBi (`None`: the balanced half).
fn swat(
    window: usize,
    score_fn: ScoreFn,
    positions: SwatPositions,
    distance: Option<usize>,
) -> AttentionKind {
    AttentionKind::Swat {
        window,
        distance_heads: distance,
        magnitudes: SlopeMagnitudes::Code,
        score_fn,
        positions,
    }
}

impl SwatStudy {
    /// Validation bits per byte of `model` under windowed inference with window `w`, at each of
    /// `lengths`, on about the same number of tokens per length.
    fn bits_at<B: ModelBackend>(
        &self,
        model: &swa_models::Decoder<B>,
        config: &DecoderConfig,
        w: usize,
        lengths: &[usize],
        device: &B::Device,
    ) -> Result<Vec<f64>, AppError> {
        let model = rebuild(model, &with_eval_window(config, w, 0)?, device)?;
        let tokens = self.study.pick(16 * lengths[lengths.len() - 1], lengths[0]);
        lengths
            .iter()
            .map(|&len| self.study.bits(&model, len, (tokens / len).max(1), 1, device))
            .collect()
    }

    /// Table 2: vanilla against sliding-window training, across evaluation lengths.
    fn table2<B: TrainingBackend>(
        &self,
        base: &DecoderConfig,
        w: usize,
        device: &B::Device,
    ) -> Result<(), AppError> {
        let study = &self.study;
        let lengths: Vec<usize> = self.length_multiples.iter().map(|m| m * w).collect();
        let softmax =
            DecoderConfig { attention: vec![AttentionKind::Sliding { window: w }], ..base.clone() };
        let runs = [
            ("softmax Transformer, trained at W", &softmax, w),
            ("SWAT, trained at W (vanilla)", base, w),
            ("SWAT, trained at 4W (sliding)", base, 4 * w),
        ];
        let names: Vec<String> = lengths.iter().map(|l| format!("N={l}")).collect();
        let header: Vec<&str> =
            ["model"].into_iter().chain(names.iter().map(String::as_str)).collect();
        let mut table = Table::new(&header);
        let mut series = Vec::new();
        let steps = study.steps(1200);
        for (name, config, len) in runs {
            // The same steps and tokens for every run: 4× the batch at length W.
            let run = study.config(config, len, steps);
            let batch = run.batch_size * 4 * w / len;
            let trained = study.train_config::<B>(name, run.with_batch_size(batch), device)?;
            let bits = self.bits_at(&trained.model, config, w, &lengths, device)?;
            table.rows.push(
                [name.to_string()]
                    .into_iter()
                    .chain(bits.iter().map(|b| format!("{b:.3}")))
                    .collect(),
            );
            series.push((name.to_string(), lengths.iter().map(|&l| l as f64).zip(bits).collect()));
        }
        line_plot(
            study.path("table2.svg"),
            "SWAT Table 2: windowed inference (W = 16)",
            "evaluation length",
            "valid bits/byte",
            &series,
            true,
            false,
        )?;
        let title = format!(
            "Table 2: validation bits/byte with window W = {w}; {steps} steps of the same tokens"
        );
        study.report("table2", &title, &table)
    }

    /// Table 3: score function × positional encoding, trained at 4W.
    fn table3<B: TrainingBackend>(
        &self,
        base: &DecoderConfig,
        w: usize,
        device: &B::Device,
    ) -> Result<(), AppError> {
        let (study, heads) = (&self.study, base.heads);
        let splits = [heads, 2 * heads / 3, heads / 2];
        let mut positions: Vec<(String, SwatPositions, Option<usize>)> =
            vec![("RoPE".into(), SwatPositions::Rope, None)];
        positions.extend(
            splits.iter().map(|&r| {
                (format!("ALiBi {r}:{}", heads - r), SwatPositions::Alibi, Some(heads - r))
            }),
        );
        positions.push((
            format!("AliRoPE {}:{}", heads / 2, heads / 2),
            SwatPositions::AliRope,
            None,
        ));
        let scores = [("softmax", ScoreFn::Softmax), ("sigmoid", ScoreFn::Sigmoid { beta: 0.0 })];
        let mut table =
            Table::new(&["scores", "positions", &format!("N={}", 4 * w), &format!("N={}", 16 * w)]);
        for (score_name, score_fn) in scores {
            for (position_name, position, distance) in &positions {
                let config = DecoderConfig {
                    attention: vec![swat(w, score_fn, *position, *distance)],
                    ..base.clone()
                };
                let name = format!("{score_name} {position_name}");
                let trained = study.train::<B>(&name, &config, 4 * w, study.steps(600), device)?;
                let bits = self.bits_at(&trained.model, &config, w, &[4 * w, 16 * w], device)?;
                table.rows.push(vec![
                    score_name.into(),
                    position_name.clone(),
                    format!("{:.3}", bits[0]),
                    format!("{:.3}", bits[1]),
                ]);
            }
        }
        study.report(
            "table3",
            &format!("Table 3: ablation, window {w}, trained at {}, validation bits/byte", 4 * w),
            &table,
        )
    }

    /// Passkey retrieval accuracy by distance, for a SWAT stack whose reach `(W − 1)·L` is
    /// longer than the shortest passkey distance (the key's sentence and the question take
    /// `digits + 53` bytes), trained at length 256 on every distance that fits.
    fn passkey<B: TrainingBackend>(&self, device: &B::Device) -> Result<(), AppError> {
        let study = &self.study;
        let (w, digits) = (64, 3);
        let mut config = Preset::vanilla(study.scale(), 256).config;
        config.attention = vec![AttentionKind::swat(w)];
        config.layers = 2;
        let (_, layers) = receptive_field(&config).expect("a SWAT stack has a receptive field");
        let reach = (w - 1) * layers;
        let len = 256;
        let trained = study.train_task::<B>(
            "passkey",
            &config,
            &SyntheticTask::passkey(digits),
            len,
            study.steps(1500),
            device,
        )?;
        // Inside the window, past it but within reach, at the reach, and beyond it.
        let mut distances =
            vec![Passkey::min_distance(digits), (w + reach) / 2, reach, reach + w / 2, 2 * reach];
        distances.retain(|&d| d >= Passkey::min_distance(digits));
        distances.sort_unstable();
        distances.dedup();
        let count = study.pick(64, 4);
        let mut table =
            Table::new(&["distance", "past W", "within reach", "digit accuracy", "exact"]);
        for d in distances {
            let task = Passkey::new(len.max(Passkey::shortest_seq_len(d, digits)), d, digits)?;
            let examples =
                (0..count as u64).map(|i| task.sample(7, i)).collect::<Result<Vec<_>, _>>()?;
            let score = model_accuracy(&trained.model, &examples, 8, device)?;
            let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
            table.rows.push(vec![
                d.to_string(),
                yes(d >= w),
                yes(d <= reach),
                format!("{:.3}", score.token_accuracy()),
                format!("{:.3}", score.exact_rate()),
            ]);
        }
        let title = format!(
            "Passkey: W = {w}, L = {layers}, reach (W − 1)·L = {reach}, {digits} digits \
             (chance 0.1 per digit), trained at length {len}"
        );
        study.report("passkey", &title, &table)
    }
}

impl Job for SwatStudy {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let preset = Preset::swat_analysis(self.study.scale(), 256);
        let w = preset.train_len / 4;
        for part in &self.parts {
            match part {
                StudyPart::Table2 => self.table2::<B>(&preset.config, w, &device)?,
                StudyPart::Table3 => self.table3::<B>(&preset.config, w, &device)?,
                StudyPart::Passkey => self.passkey::<B>(&device)?,
            }
        }
        Ok(())
    }
}
