//! # MSWA (Xu et al., 2025): Tables 2, 5 and 6 at small scale
//!
//! Multi-scale window attention gives each head and layer its own window (docs/semantics.md
//! §3). This example trains, for the same token budget on real text:
//! - **Table 2**: SWA, MSWA-h, MSWA-l and MSWA at one base window, and full attention; it
//!   reports the relative cost `Σ_{l,h} W(l, h)` normalised to MSWA, and validation bits per
//!   byte (the paper's bpc on enwik8);
//! - **Table 5**: SWA and MSWA at each `--base-windows` value;
//! - **Table 6**: MSWA with the reversed (shallow layers largest) and arithmetic allocations.
//!
//! Writes `table2.csv`, `table5.csv`, `table6.csv` and `table5.svg` (bits per byte against
//! base window) to `--out` (default `target/examples/mswa`).
//!
//! Run (11 models of 400 steps, about 13 minutes on an idle 2-core CPU), on `data/kjv.txt`:
//! `cargo run --release --example mswa`
//!
//! On a GPU, at the paper's width and depth:
//! ```sh
//! cargo run --release --features cuda --example mswa -- --backend cuda --scale paper \
//!     --steps 20000 --batch-size 32 --corpus enwik8
//! ```
//!
//! The tables it printed on a 2-core CPU, with what reproduces and what does not, are in
//! `docs/papers.md`.

use burn::tensor::{Int, Tensor};
use clap::Parser;
use swa_attention::ModelBackend;
use swa_models::layers::AttentionKind;
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_models::{Architecture, Decoder, DecoderConfig, Preset};
use swa_training::TrainingBackend;
use swa_zoo::AppError;
use swa_zoo::report::plot::line_plot;
use swa_zoo::report::table::Table;
use swa_zoo::runtime::{Job, run_on};
use swa_zoo::study::{CostRow, Study, StudyArgs, cost_table};

/// Flags of the MSWA example.
#[derive(Parser, Debug)]
#[command(about = "MSWA Tables 2, 5 and 6 at small scale")]
pub struct Flags {
    #[command(flatten)]
    pub study: StudyArgs,
    /// Base windows of the Table 5 sweep; SWA and MSWA are trained at each. MSWA's smallest
    /// window is w/16, so w ≥ 16.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    pub base_windows: Vec<usize>,
    /// Transformer-XL's setup, as MSWA trains its Table 2 (§5.1.1): Table 2's rows again with
    /// segment memory and relative positions, reported beside the standard setup with each
    /// model's memory per layer. Tables 5 and 6 are skipped.
    #[arg(long)]
    pub transformer_xl: bool,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the study the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    let study = Study::open("mswa", flags.study)?;
    let base_windows = study.pick(flags.base_windows, vec![16]);
    let transformer_xl = flags.transformer_xl;
    run_on(&study.placement(), MswaStudy { study, base_windows, transformer_xl })
}

struct MswaStudy {
    study: Study,
    base_windows: Vec<usize>,
    transformer_xl: bool,
}

/// The Table 2 configuration of `variant` with its windows re-allocated from `base` under
/// `strategy`.
fn mswa_config(
    variant: MswaVariant,
    strategy: MswaStrategy,
    base: usize,
    study: &Study,
) -> Result<DecoderConfig, AppError> {
    let mut config = Preset::mswa(variant, study.scale(), 256)?.config;
    let windows = mswa_windows(variant, strategy, base, config.layers, config.heads)?;
    config.attention =
        windows.into_iter().map(|windows| AttentionKind::MultiScale { windows }).collect();
    Ok(config)
}

impl MswaStudy {
    fn train<B: TrainingBackend>(
        &self,
        name: String,
        config: &DecoderConfig,
        len: usize,
        device: &B::Device,
    ) -> Result<CostRow, AppError> {
        let trained = self.study.train::<B>(&name, config, len, self.study.steps(400), device)?;
        let batches = self.study.pick(16, 1);
        let bits = self.study.bits(&trained.model, len, 8, batches, device)?;
        Ok(CostRow { name, window_sum: config.window_sum(len), bits, seconds: trained.seconds })
    }

    /// Table 2's rows (`rows`, trained in the standard setup from `configs`) trained again
    /// under Transformer-XL's setup: segment memory (full attention keeping `len` positions,
    /// Transformer-XL's memory length) and relative positions in place of RoPE, scored on
    /// streams of the validation text. Reports both setups side by side with each model's
    /// memory per layer.
    fn transformer_xl<B: TrainingBackend>(
        &self,
        rows: &[CostRow],
        configs: &[DecoderConfig],
        (base, len): (usize, usize),
        device: &B::Device,
    ) -> Result<(), AppError> {
        let mut table = Table::new(&[
            "model",
            "relative cost",
            "memory/layer (positions)",
            "bits/byte, standard",
            "bits/byte, Transformer-XL",
            "train s, Transformer-XL",
        ]);
        let reference = rows[3].window_sum;
        for (row, config) in rows.iter().zip(configs) {
            let mut model = config.clone();
            model.architecture = Some(Architecture { relative_positions: true, ..model.arch() });
            let steps = self.study.steps(400);
            let run = self.study.config(&model, len, steps).with_segment_memory(true);
            let name = format!("{} (Transformer-XL)", row.name);
            let trained = self.study.train_config::<B>(&name, run, device)?;
            let batches = self.study.pick(16, 1);
            let bits = self.study.stream_bits(&trained.model, (len, 8, batches), len, device)?;
            let positions = memory_per_layer(&trained.model, len, device)?;
            table.rows.push(vec![
                row.name.clone(),
                format!("{:.2}", row.window_sum as f64 / reference as f64),
                format!("{positions:.0}"),
                format!("{:.3}", row.bits),
                format!("{bits:.3}"),
                format!("{:.0}", trained.seconds),
            ]);
        }
        self.study.report(
            "table2_transformer_xl",
            &format!("Table 2 in both setups: base window {base}, length {len}"),
            &table,
        )
    }
}

/// The positions each layer of `model` keeps with segment memory, averaged over its layers:
/// read from the memory itself after two segments of `len` tokens, full layers keeping `len`.
fn memory_per_layer<B: ModelBackend>(
    model: &Decoder<B>,
    len: usize,
    device: &B::Device,
) -> Result<f64, AppError> {
    let mut memory = model.memory(1, len, device)?;
    for _ in 0..2 {
        let tokens = Tensor::<B, 2, Int>::zeros([1, len], device);
        model.forward_in_stream(tokens, &mut memory)?;
    }
    let kept: Vec<usize> = memory.kept_positions().into_iter().flatten().collect();
    Ok(kept.iter().sum::<usize>() as f64 / kept.len().max(1) as f64)
}

impl Job for MswaStudy {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let scale = self.study.scale();
        let swa = Preset::mswa(MswaVariant::Swa, scale, 256)?;
        let len = swa.train_len;
        // SWA gives every head of every layer the base window.
        let base = swa.config.window_sum(len) / (swa.config.layers * swa.config.heads);
        let geometric = MswaStrategy::Geometric;
        // Every sweep configuration is built before training, so a base window too small for
        // MSWA's smallest multiplier (w/16) fails at once.
        let mut sweep = Vec::new();
        for &w in &self.base_windows {
            for (i, variant) in [MswaVariant::Swa, MswaVariant::Both].into_iter().enumerate() {
                let config = mswa_config(variant, geometric, w, &self.study)
                    .map_err(|e| AppError::step(format!("--base-windows {w}"), e))?;
                sweep.push((w, i, config));
            }
        }

        let (mut table2_rows, mut table2_configs) = (Vec::new(), Vec::new());
        for (label, variant) in [
            ("SWA", MswaVariant::Swa),
            ("MSWA-h", MswaVariant::Heads),
            ("MSWA-l", MswaVariant::Layers),
            ("MSWA", MswaVariant::Both),
        ] {
            let config = mswa_config(variant, geometric, base, &self.study)?;
            table2_rows.push(self.train::<B>(
                format!("{label} w={base}"),
                &config,
                len,
                &device,
            )?);
            table2_configs.push(config);
        }
        let full = Preset::mswa_full(1024, scale, 256);
        table2_rows.push(self.train::<B>("full attention".into(), &full.config, len, &device)?);
        table2_configs.push(full.config);
        let reference = table2_rows[3].window_sum;
        self.study.report(
            "table2",
            &format!("Table 2: base window {base}, length {len}, cost relative to MSWA"),
            &cost_table(&table2_rows, reference),
        )?;
        if self.transformer_xl {
            let sizes = (base, len);
            return self.transformer_xl::<B>(&table2_rows, &table2_configs, sizes, &device);
        }

        let mut table5_rows = Vec::new();
        let mut series = vec![("SWA".to_string(), Vec::new()), ("MSWA".to_string(), Vec::new())];
        for (w, i, config) in sweep {
            let row = match w == base {
                true => table2_rows[3 * i].clone(),
                false => {
                    self.train::<B>(format!("{} w={w}", series[i].0), &config, len, &device)?
                }
            };
            series[i].1.push((w as f64, row.bits));
            table5_rows.push(row);
        }
        self.study.report(
            "table5",
            "Table 5: base window sweep, cost relative to MSWA at the Table 2 base",
            &cost_table(&table5_rows, reference),
        )?;
        line_plot(
            self.study.path("table5.svg"),
            "MSWA Table 5: base window sweep",
            "base window",
            "valid bits/byte",
            &series,
            true,
            false,
        )?;

        let mut table6_rows =
            vec![CostRow { name: "MSWA geometric".into(), ..table2_rows.swap_remove(3) }];
        for (label, strategy) in [
            ("MSWA reversed", MswaStrategy::Reversed),
            ("MSWA arithmetic", MswaStrategy::Arithmetic),
        ] {
            let config = mswa_config(MswaVariant::Both, strategy, base, &self.study)?;
            table6_rows.push(self.train::<B>(label.into(), &config, len, &device)?);
        }
        self.study.report(
            "table6",
            "Table 6: window allocation strategies, cost relative to MSWA geometric",
            &cost_table(&table6_rows, reference),
        )
    }
}
