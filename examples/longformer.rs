//! # Longformer (Beltagy et al., 2020): global attention on a classification task, at small scale
//!
//! Longformer's windows are local, so the CLS token of a classifier cannot see a long document
//! through them; the paper makes CLS a *global* token, with its own projections, that attends
//! to every position and is attended to by all (§3.1, §6; docs/semantics.md §2). This example
//! trains Longformer encoders (`causal: false`) for the same steps on the synthetic majority task
//! ([`swa_training::tasks::Majority`]): `--markers` markers A or B at random positions of the
//! whole sequence among random filler, and the answer (which marker occurs more often) asked at
//! the CLS token, position 0, and nowhere else. The models:
//! - **Longformer**: the preset (one-sided window w, dilation 2 on the last two heads), with a
//!   global CLS;
//! - the same **without the global**, then without any dilation, then with dilations 2 and 4 on
//!   the last two heads: the receptive field of CLS grows with dilation but does not cover the
//!   sequence;
//! - **full bidirectional attention** (window ≥ N), the upper bound.
//!
//! For each it prints the positions CLS can read through the stack ([`influence`], exact, with
//! the gaps of dilated heads) and the best accuracy any reader of only those positions can
//! reach (the majority of the markers it sees; [`Majority::best_accuracy`]), beside the
//! accuracy of the trained model on held-out examples; chance is 0.5. Writes `accuracy.csv` and
//! `accuracy.svg` (accuracy against the positions CLS reads) to `--out` (default
//! `target/examples/longformer`). The task is synthetic: `--corpus` is not read for training.
//!
//! Run (about 5 minutes on a 2-core CPU): `cargo run --example longformer`
//!
//! On a GPU, at the paper's width and depth (window 256, 12 layers, sequences of 4096; not run
//! here). There the stack without globals reaches 12·256·2 = 6144 positions ahead with the
//! preset's dilation, past the end of the sequence; only the no-dilation model (12·256 = 3072)
//! falls short:
//! ```sh
//! cargo run --release --features cuda --example longformer -- --backend cuda --scale paper \
//!     --steps 5000 --batch-size 16 --markers 15
//! ```
//!
//! The tables it printed on a 2-core CPU, with what reproduces and what does not, are in
//! `docs/papers.md`.

use clap::Parser;
use swa_models::layers::AttentionKind;
use swa_models::{DecoderConfig, Preset};
use swa_training::TrainingBackend;
use swa_training::synthetic::{SyntheticTask, influence, model_accuracy};
use swa_training::tasks::{Example, Majority};
use swa_zoo::AppError;
use swa_zoo::report::Table;
use swa_zoo::report::plot::line_plot;
use swa_zoo::runtime::{Job, run_on};
use swa_zoo::study::{Study, StudyArgs};

/// Flags of the Longformer example.
#[derive(Parser, Debug)]
#[command(
    about = "Longformer: a global CLS token against windows and dilation on a classification task"
)]
pub struct Flags {
    #[command(flatten)]
    pub study: StudyArgs,
    /// Markers A or B per example (odd): the evidence CLS must gather.
    #[arg(long, default_value_t = 5)]
    pub markers: usize,
    /// Held-out examples scored per model.
    #[arg(long, default_value_t = 1024)]
    pub examples: usize,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the study the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    let study = Study::open("longformer", flags.study)?;
    let examples = study.pick(flags.examples, 16);
    run_on(&study.placement(), LongformerStudy { study, markers: flags.markers, examples })
}

struct LongformerStudy {
    study: Study,
    markers: usize,
    examples: usize,
}

/// One model of the comparison: the preset's encoder with its own window, dilations and globals.
struct Variant {
    name: &'static str,
    config: DecoderConfig,
}

/// The preset Longformer encoder, without its global CLS, with other dilations, and full
/// bidirectional attention (a window as long as the sequence).
fn variants(preset: &Preset) -> Result<Vec<Variant>, AppError> {
    let AttentionKind::Longformer { window, dilations, .. } = preset.config.kind_of(0).clone()
    else {
        let problem = "not a Longformer preset".into();
        return Err(AppError::Preset { name: preset.name.clone(), problem });
    };
    let heads = dilations.len();
    // Dilation on the last two heads: the preset's 2, 2, or 2 then 4.
    let last_two = |second_last: usize, last: usize| -> Vec<usize> {
        (0..heads)
            .map(|h| {
                if h + 1 == heads {
                    last
                } else if h + 2 == heads {
                    second_last
                } else {
                    1
                }
            })
            .collect()
    };
    let encoder = |window: usize, dilations: Vec<usize>, globals: Vec<usize>| DecoderConfig {
        attention: vec![AttentionKind::Longformer { window, dilations, globals, causal: false }],
        ..preset.config.clone()
    };
    Ok(vec![
        Variant { name: "Longformer, global CLS", config: preset.config.clone() },
        Variant { name: "no global", config: encoder(window, dilations.clone(), vec![]) },
        Variant { name: "no global, no dilation", config: encoder(window, vec![1; heads], vec![]) },
        Variant {
            name: "no global, dilation 2 and 4",
            config: encoder(window, last_two(2, 4), vec![]),
        },
        Variant {
            name: "full bidirectional",
            config: encoder(preset.train_len, vec![1; heads], vec![]),
        },
    ])
}

/// The window and dilations of a variant, as the table shows them.
fn describe(config: &DecoderConfig) -> (String, String, String) {
    match config.kind_of(0) {
        AttentionKind::Longformer { window, dilations, globals, .. } => {
            let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(" ");
            (
                window.to_string(),
                list(dilations),
                if globals.is_empty() { "-".into() } else { list(globals) },
            )
        }
        other => (format!("{other:?}"), String::new(), String::new()),
    }
}

/// One trained model's row.
struct Outcome {
    name: &'static str,
    config: DecoderConfig,
    /// Positions whose tokens can reach CLS's output.
    read: usize,
    /// The farthest of them.
    farthest: usize,
    /// Mean accuracy of the best reader of those positions alone.
    best: f64,
    accuracy: f64,
    seconds: f64,
}

impl Job for LongformerStudy {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let preset = Preset::longformer(false, self.study.scale(), 256);
        let len = preset.train_len;
        let task = SyntheticTask::majority(self.markers);
        task.validate(len)?;
        // Held out: the training stream is seed 42, validation 43.
        let held_out: Vec<Example> =
            (0..self.examples as u64).map(|i| task.example(len, 7, i)).collect::<Result<_, _>>()?;
        let steps = self.study.steps(500);

        let mut rows = Vec::new();
        for variant in variants(&preset)? {
            let seen = influence(&variant.config, len, 0)?;
            let best = held_out.iter().map(|e| Majority::best_accuracy(e, &seen)).sum::<f64>()
                / held_out.len() as f64;
            let trained = self.study.train_task::<B>(
                variant.name,
                &variant.config,
                &task,
                len,
                steps,
                &device,
            )?;
            let score = model_accuracy(&trained.model, &held_out, 32, &device)?;
            rows.push(Outcome {
                name: variant.name,
                config: variant.config,
                read: seen.iter().filter(|&&s| s).count(),
                farthest: seen.iter().rposition(|&s| s).unwrap_or(0),
                best,
                accuracy: score.token_accuracy(),
                seconds: trained.seconds,
            });
        }

        let mut table = Table::new(&[
            "model",
            "w",
            "dilations",
            "globals",
            &format!("CLS reads (of {len})"),
            "farthest",
            "best possible",
            "accuracy",
            "train s",
        ]);
        for row in &rows {
            let (window, dilations, globals) = describe(&row.config);
            table.rows.push(vec![
                row.name.into(),
                window,
                dilations,
                globals,
                row.read.to_string(),
                row.farthest.to_string(),
                format!("{:.3}", row.best),
                format!("{:.3}", row.accuracy),
                format!("{:.0}", row.seconds),
            ]);
        }
        let layers = preset.config.layers;
        let title = format!(
            "Majority of {} markers spread over positions 1…{} of {len}, asked at CLS \
             (position 0); {steps} steps per model, {} held-out examples, chance 0.500; \
             {layers} layers",
            self.markers,
            len - 1,
            held_out.len()
        );
        self.study.report("accuracy", &title, &table)?;

        let mut sorted: Vec<&Outcome> = rows.iter().collect();
        sorted.sort_by_key(|r| r.read);
        let points = |value: fn(&Outcome) -> f64| {
            sorted.iter().map(|r| (r.read as f64, value(r))).collect::<Vec<_>>()
        };
        let series = vec![
            ("trained model".to_string(), points(|r| r.accuracy)),
            ("best possible from those positions".to_string(), points(|r| r.best)),
            ("chance".to_string(), points(|_| 0.5)),
        ];
        line_plot(
            self.study.path("accuracy.svg"),
            "Longformer: majority vote at CLS",
            "positions CLS reads",
            "held-out accuracy",
            &series,
            false,
            false,
        )?;
        Ok(())
    }
}
