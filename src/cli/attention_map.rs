//! `attention-map`: the attention weights of chosen layers and heads over a prompt, one figure
//! each (row = query, column = key, light = heavy), for a Hugging Face checkpoint or a run
//! trained here. Each figure has the query and key positions on its axes (the tokens on
//! prompts of at most 48 tokens), a colour bar, a title naming the layer, head, attention kind
//! and window, and the edge of the head's window drawn over the map; `--log` colours by log10
//! of the weight. Where the sinks sit (SWAT's experiment 4) shows as a light first column.
//! The figures are drawn by [`crate::report::attention_map`].

use std::path::{Path, PathBuf};

use burn::tensor::{Int, Tensor, TensorData};
use clap::{Args, ValueEnum};
use swa_attention::ModelBackend;
use swa_models::{Decoder, DecoderConfig};
use swa_training::TrainingBackend;

use super::{DeviceArgs, WeightArgs};
use crate::error::AppError;
use crate::report::attention_map::{AttentionFigure, ImageFormat, draw};
use crate::runtime::{Job, run_on};
use swa_models::hf::{Pretrained, WeightPrecision};

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
    #[command(flatten)]
    weights: WeightArgs,
    /// The prompt.
    #[arg(long, default_value = "In the beginning God created the heaven and the earth.")]
    prompt: String,
    /// Layers to draw, from 0.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    layers: Vec<usize>,
    /// Query heads to draw, from 0.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    heads: Vec<usize>,
    /// Colour by log10 of the weight, floored at 1e-4, rather than by the weight: the small
    /// weights of a trained head, which the linear scale shows as one dark colour, separate.
    #[arg(long)]
    log: bool,
    /// The figures' file format.
    #[arg(long, value_enum, default_value_t = Formats::Png)]
    format: Formats,
    /// Folder for the figures, `layer{l}_head{h}.png` or `.svg` (created). Default:
    /// `attention-maps` inside the run, or `runs/attention-maps/<checkpoint>` for --hf.
    #[arg(long)]
    to: Option<PathBuf>,
}

/// What `--format` names.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Formats {
    /// A PNG image.
    Png,
    /// An SVG drawing.
    Svg,
    /// Both: a PNG and an SVG of each map.
    Both,
}

impl Formats {
    /// The file formats to write.
    fn list(self) -> &'static [ImageFormat] {
        match self {
            Formats::Png => &[ImageFormat::Png],
            Formats::Svg => &[ImageFormat::Svg],
            Formats::Both => &[ImageFormat::Png, ImageFormat::Svg],
        }
    }
}

/// The prompt's tokens: their ids, and each one's text for the tick labels.
struct Prompt {
    ids: Vec<usize>,
    texts: Vec<String>,
}

/// `attention-map`.
pub fn attention_map(args: AttentionMapArgs) -> Result<(), AppError> {
    struct AttentionMapJob(AttentionMapArgs, WeightPrecision);
    impl Job for AttentionMapJob {
        fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
            let (args, weights) = (self.0, self.1);
            let (config, model, prompt, to) = match (&args.hf, &args.out) {
                (Some(dir), _) => {
                    let run = Pretrained::<B::InnerBackend>::load_with(dir, weights, &device)?;
                    let ids = run.encode(&args.prompt, true)?;
                    let text = |&id: &usize| match run.decode(&[id]) {
                        Ok(text) if text.is_empty() => Ok(run.tokenizer.piece(id).unwrap_or(text)),
                        decoded => decoded,
                    };
                    let texts = ids.iter().map(text).collect::<Result<_, _>>()?;
                    let name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
                    let to = Path::new("runs/attention-maps").join(name);
                    (run.config, run.model, Prompt { ids, texts }, to)
                }
                (None, Some(out)) => {
                    let swa_training::TrainedRun { config, model } =
                        swa_training::TrainedRun::<B::InnerBackend>::load(out, &device)?;
                    let corpus = config.load_corpus()?;
                    let ids = corpus.encode(&args.prompt);
                    let texts = ids.iter().map(|&id| corpus.decode(&[id])).collect();
                    (config.model, model, Prompt { ids, texts }, out.join("attention-maps"))
                }
                (None, None) => unreachable!("clap requires --hf or --out"),
            };
            let to = args.to.clone().unwrap_or(to);
            draw_maps(&model, &config, prompt, &args, &to, &device)
        }
    }
    // Refused before any device starts.
    let weights = args.weights.precision(&args.device)?;
    run_on(&args.device.placement(), AttentionMapJob(args, weights))
}

/// Writes `layer{l}_head{h}.png` (or `.svg`) into `to` for every chosen layer and head.
fn draw_maps<B: ModelBackend>(
    model: &Decoder<B>,
    config: &DecoderConfig,
    prompt: Prompt,
    args: &AttentionMapArgs,
    to: &Path,
    device: &B::Device,
) -> Result<(), AppError> {
    let n = prompt.ids.len();
    if n == 0 {
        return Err(AppError::Flag { flag: "--prompt", problem: "has no tokens".into() });
    }
    let ids = prompt.ids.iter().map(|&t| t as i64).collect();
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
            let weights = values[head * n * n..(head + 1) * n * n].to_vec();
            let figure =
                AttentionFigure::for_layer(config, layer, head, weights, prompt.texts.clone())?;
            let figure = AttentionFigure { log: args.log, ..figure };
            for &format in args.format.list() {
                let path = to.join(format!("layer{layer}_head{head}.{}", format.extension()));
                draw(&figure, &path, format)?;
                println!("wrote {} ({n} × {n} tokens)", path.display());
            }
        }
    }
    Ok(())
}
