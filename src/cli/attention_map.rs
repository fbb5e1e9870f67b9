//! `attention-map`: the attention weights of chosen layers and heads over a prompt, one PNG heat
//! map each (row = query, column = key, light = heavy), for a Hugging Face checkpoint or a run
//! trained here. Where the sinks sit (SWAT's experiment 4) shows as a light first column.

use std::path::{Path, PathBuf};

use burn::tensor::{Int, Tensor, TensorData};
use clap::Args;
use swa_attention::WindowedAttentionBackend;
use swa_models::Decoder;
use swa_training::TrainingBackend;

use super::DeviceArgs;
use crate::error::AppError;
use crate::report::png::heat_map_png;
use crate::runtime::{Job, run_on};
use swa_models::hf::Pretrained;

/// Flags of `attention-map`.
#[derive(Args, Debug)]
pub struct AttentionMapArgs {
    /// A local Hugging Face model directory.
    #[arg(long, conflicts_with = "out", required_unless_present = "out")]
    hf: Option<PathBuf>,
    /// A training run (its train.json and model.mpk).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
    /// The prompt.
    #[arg(long, default_value = "In the beginning God created the heaven and the earth.")]
    prompt: String,
    /// Layers to draw, from 0.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    layers: Vec<usize>,
    /// Query heads to draw, from 0.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    heads: Vec<usize>,
    /// Folder for the images (created). Default: `attention-maps` inside the run, or
    /// `runs/attention-maps/<checkpoint>` for --hf.
    #[arg(long)]
    to: Option<PathBuf>,
}

/// `attention-map`.
pub fn attention_map(args: AttentionMapArgs) -> Result<(), AppError> {
    struct Run(AttentionMapArgs);
    impl Job for Run {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let args = self.0;
            let (model, tokens, to) = match (&args.hf, &args.out) {
                (Some(dir), _) => {
                    let run = Pretrained::<B::InnerBackend>::load(dir, &device)?;
                    let tokens = run.encode(&args.prompt, true)?;
                    let name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
                    (run.model, tokens, Path::new("runs/attention-maps").join(name))
                }
                (None, Some(out)) => {
                    let swa_training::TrainedRun { config, model } =
                        swa_training::TrainedRun::<B::InnerBackend>::load(out, &device)?;
                    let tokens = config.load_corpus()?.encode(&args.prompt);
                    (model, tokens, out.join("attention-maps"))
                }
                (None, None) => unreachable!("clap requires --hf or --out"),
            };
            draw(&model, &tokens, &args, &args.to.clone().unwrap_or(to), &device)
        }
    }
    run_on(&args.device.placement(), Run(args))
}

/// Writes `layer{l}_head{h}.png` into `to` for every chosen layer and head.
fn draw<B: WindowedAttentionBackend>(
    model: &Decoder<B>,
    tokens: &[usize],
    args: &AttentionMapArgs,
    to: &Path,
    device: &B::Device,
) -> Result<(), AppError> {
    let n = tokens.len();
    if n == 0 {
        return Err(AppError::Flag { flag: "--prompt", problem: "has no tokens".into() });
    }
    let ids = tokens.iter().map(|&t| t as i64).collect();
    let input = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, n]), device);
    let maps = model.attention_maps(input, &args.layers)?;
    std::fs::create_dir_all(to).map_err(|source| AppError::Io { path: to.into(), source })?;
    for (&layer, map) in args.layers.iter().zip(maps) {
        let heads = map.dims()[1];
        if let Some(&head) = args.heads.iter().find(|&&h| h >= heads) {
            let problem = format!("names head {head}, but layer {layer} has {heads} heads");
            return Err(AppError::Flag { flag: "--heads", problem });
        }
        let values = map.into_data().convert::<f32>().to_vec::<f32>().map_err(|e| {
            AppError::Flag { flag: "--layers", problem: format!("unreadable weights: {e:?}") }
        })?;
        for &head in &args.heads {
            let path = to.join(format!("layer{layer}_head{head}.png"));
            heat_map_png(&path, &values[head * n * n..(head + 1) * n * n], n, n)?;
            println!("wrote {} ({n} × {n} tokens)", path.display());
        }
    }
    Ok(())
}
