//! # MSWA (Xu et al., 2025): Table 3 at small scale, windows in hybrid models
//!
//! MSWA's Table 3 puts its windows beside linear attention: every consecutive triple of layers
//! is "linear, local, local" (docs/semantics.md §3, §6), where linear attention is Based's
//! 2nd-order Taylor feature map. This example trains, for the same token budget on real text,
//! all-linear attention, linear + SWA, linear + MSWA, and MSWA alone at the same depth and
//! width, and reports the relative cost `Σ_{l,h} W(l, h)` (linear layers hold no window)
//! normalised to MSWA, with validation bits per byte.
//!
//! Writes `table3.csv` to `--out` (default `target/examples/mswa_linear`).
//!
//! Run (four models of 400 steps, about 16 minutes on an idle 2-core CPU), on `data/kjv.txt`:
//! `cargo run --example mswa_linear`
//!
//! On a GPU, at the paper's width and depth:
//! ```sh
//! cargo run --release --features cuda --example mswa_linear -- --backend cuda --scale paper \
//!     --steps 20000 --batch-size 32
//! ```
//!
//! The tables it printed on a 2-core CPU, with what reproduces and what does not, are in
//! `docs/papers.md`.

use clap::Parser;
use swa_models::Preset;
use swa_models::layers::AttentionKind;
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_training::TrainingBackend;
use swa_zoo::AppError;
use swa_zoo::runtime::{Job, run_on};
use swa_zoo::study::{CostRow, Study, StudyArgs, cost_table};

/// Flags of the MSWA Table 3 example.
#[derive(Parser, Debug)]
#[command(about = "MSWA Table 3 (linear-attention hybrids) at small scale")]
pub struct Flags {
    #[command(flatten)]
    pub study: StudyArgs,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the study the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    let study = Study::open("mswa_linear", flags.study)?;
    run_on(&study.placement(), HybridStudy { study })
}

struct HybridStudy {
    study: Study,
}

impl Job for HybridStudy {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let (scale, study) = (self.study.scale(), &self.study);
        let hybrid = |local| Preset::mswa_hybrid(local, scale, 256);
        let (linear, linear_swa, linear_mswa) =
            (hybrid(None)?, hybrid(Some(MswaVariant::Swa))?, hybrid(Some(MswaVariant::Both))?);
        // MSWA alone at the hybrids' depth, width and base window (the SWA layers' window).
        let base = match linear_swa.config.kind_of(1) {
            AttentionKind::MultiScale { windows } => windows[0],
            other => {
                let problem = format!("its second layer should be local, not {other:?}");
                return Err(AppError::Preset { name: linear_swa.name.clone(), problem });
            }
        };
        let mut mswa = linear_swa.config.clone();
        mswa.attention = mswa_windows(
            MswaVariant::Both,
            MswaStrategy::Geometric,
            base,
            mswa.layers,
            mswa.heads,
        )?
        .into_iter()
        .map(|windows| AttentionKind::MultiScale { windows })
        .collect();
        let len = linear.train_len;
        let models = [
            ("linear", linear.config),
            ("linear + SWA", linear_swa.config),
            ("linear + MSWA", linear_mswa.config),
            ("MSWA", mswa),
        ];
        let reference = models[3].1.window_sum(len);
        let mut rows = Vec::new();
        for (name, config) in &models {
            let trained = study.train::<B>(name, config, len, study.steps(400), &device)?;
            let bits = study.bits(&trained.model, len, 8, study.pick(16, 1), &device)?;
            rows.push(CostRow {
                name: name.to_string(),
                window_sum: config.window_sum(len),
                bits,
                seconds: trained.seconds,
            });
        }
        let title = format!(
            "Table 3: {} layers, base window {base}, length {len}, cost relative to MSWA",
            models[3].1.layers
        );
        study.report("table3", &title, &cost_table(&rows, reference))
    }
}
