//! The `swa-zoo` command line: `train`, `eval`, `generate`, `attention-map`, `eval-choice`,
//! `export`, `info`, `bench` and `check-backends`.
//!
//! Window conventions, as in docs/semantics.md §2: a causal window `W` sees the W keys `i−W+1 … i`, the
//! query itself included; a Longformer window `w` is one-sided (`2w+1` keys; Hugging Face's
//! config value is two-sided, 2w).

mod attention_map;
mod bench;
mod check_backends;
mod eval;
pub mod eval_choice;
mod export;
mod finetune;
mod generate;
pub mod info;
mod tasks;
mod train;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use swa_models::hf::WeightPrecision;
use swa_models::{DecoderConfig, Preset};

use crate::choice::weights_flag;
use crate::error::AppError;
use crate::runtime::{BackendChoice, Placement, Precision};

/// Train, evaluate, sample from and benchmark windowed-attention transformers (SWA, MSWA, SWAT,
/// LongNet, Longformer, sinks) on Burn, and check every backend against the reference.
#[derive(Parser, Debug)]
#[command(name = "swa-zoo", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a model with Burn's dashboard (a plain log when stdout is not a terminal).
    Train(Box<train::TrainArgs>),
    /// Loss, perplexity and bits per byte (character, word) at several lengths, and the
    /// window × length grid.
    Eval(eval::EvalArgs),
    /// Continue a prompt with a trained (or untrained) model or a Hugging Face checkpoint,
    /// with a bounded KV cache.
    Generate(generate::GenerateArgs),
    /// Attention weights of chosen layers and heads over a prompt, one figure each (PNG or
    /// SVG): tokens or positions on the axes, a colour bar (linear or --log), and the edge of
    /// the head's window.
    AttentionMap(attention_map::AttentionMapArgs),
    /// Write a run's model as a Hugging Face directory (Mistral or Llama).
    Export(export::ExportArgs),
    /// Zero-shot multiple choice scored by log-likelihood (acc and acc_norm, as
    /// lm-eval-harness) for a Hugging Face checkpoint.
    EvalChoice(eval_choice::EvalChoiceArgs),
    /// Parameters, Σ windows, relative cost and KV-cache bytes of a model; `--list` the presets.
    Info(info::InfoArgs),
    /// The quick efficiency suite (decode latency, KV bytes, StreamingLLM, training throughput).
    Bench(bench::BenchArgs),
    /// Compare every attention kind on each backend of this build with ndarray (f32):
    /// logits, loss, gradients, one AdamW step and greedy decoding.
    CheckBackends(check_backends::CheckArgs),
}

/// Which model: a preset or a JSON config, overridable by flags of the command.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A preset name (see `swa-zoo info --list`), e.g. `mswa-table2-mswa-tiny`.
    #[arg(long, default_value = "mswa-table2-mswa-tiny")]
    preset: String,
    /// A model config as JSON (`DecoderConfig`), instead of the preset.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Where to run.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Backend: flex (CPU, default), ndarray (CPU), wgpu (Vulkan/Metal/DX12), cuda.
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
    /// Device index for wgpu (discrete GPU n) and cuda.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Float type: f32, or half precision on GPU backends (f16 on wgpu where the adapter has
    /// shader-f16; f16 or bf16 on cuda). The windowed-attention kernels accumulate in f32;
    /// training in half precision keeps f32 master weights for AdamW (and scales f16 losses).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
}

/// The float type of a checkpoint's weights once loaded.
#[derive(Args, Debug, Clone)]
pub struct WeightArgs {
    /// With --hf: keep the checkpoint's linear weights and embedding table in this type (f32,
    /// bf16, f16), or packed in ggml's blocks of 32 (q8_0, q4_0, q4_1: a GGUF file's own
    /// blocks, or a float checkpoint quantized on load), or as the file stores each (file), the
    /// computation staying in --precision. On flex, bf16 or f16 weights take half the memory of
    /// f32 and half the bytes per decoded token, Q4_1 a sixth; packed weights are flex's alone.
    /// Default: --precision.
    #[arg(long, value_parser = weights_flag(), requires = "hf")]
    weights: Option<WeightPrecision>,
}

impl WeightArgs {
    /// The library's weight precision for a run on `device`: narrower weights than the
    /// computation only on the CPU backends.
    pub fn precision(&self, device: &DeviceArgs) -> Result<WeightPrecision, AppError> {
        let Some(weights) = self.weights else {
            return Ok(WeightPrecision::Compute);
        };
        let cpu = matches!(device.backend, BackendChoice::Flex | BackendChoice::Ndarray);
        if !cpu && weights != device.precision.weights() {
            let (backend, precision) = (device.backend.name(), device.precision);
            return Err(AppError::Weights { weights, backend, precision });
        }
        Ok(weights)
    }
}

impl ModelArgs {
    /// The model config of `--config`, or of `--preset` with its training length, and its name.
    fn config(&self, vocab: usize) -> Result<(DecoderConfig, usize, String), AppError> {
        if let Some(path) = &self.config {
            let config: DecoderConfig = swa_training::config_file::load(path)?;
            let name =
                path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
            return Ok((config, 512, name));
        }
        let preset = Preset::by_name(&self.preset, vocab)
            .ok_or_else(|| AppError::UnknownPreset { name: self.preset.clone() })?;
        Ok((preset.config, preset.train_len, preset.name))
    }
}

impl DeviceArgs {
    /// One device, in the chosen precision.
    pub fn placement(&self) -> Placement {
        Placement { backend: self.backend, devices: vec![self.device], precision: self.precision }
    }
}

/// Parses the arguments and runs the command; the error names the problem.
pub fn main() -> Result<(), AppError> {
    run(Cli::parse())
}

/// Runs a parsed command line (`Cli::parse_from` in tests).
pub fn run(cli: Cli) -> Result<(), AppError> {
    match cli.command {
        Command::Train(args) => train::train(*args),
        Command::Eval(args) => eval::eval(args),
        Command::Generate(args) => generate::generate(args),
        Command::AttentionMap(args) => attention_map::attention_map(args),
        Command::EvalChoice(args) => eval_choice::eval_choice(args),
        Command::Export(args) => export::export(args),
        Command::Info(args) => info::info(args),
        Command::Bench(args) => bench::bench(args),
        Command::CheckBackends(args) => check_backends::check_backends(args),
    }
}
