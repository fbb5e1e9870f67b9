//! `info`: parameters, Σ windows, relative cost and KV-cache bytes of a model, or the list of
//! presets.

use clap::Args;
use swa_models::{DecoderConfig, Preset, Scale};

use super::ModelArgs;
use crate::error::AppError;

/// Flags of `info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Context length at which windows and the KV cache are counted.
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// List the presets with their sizes and sources.
    #[arg(long)]
    list: bool,
}

/// `info`.
pub fn info(args: InfoArgs) -> Result<(), AppError> {
    type B = burn::backend::NdArray;
    let device = Default::default();
    if args.list {
        for scale in [Scale::Paper, Scale::Tiny] {
            for preset in Preset::all(scale, 256)? {
                println!(
                    "{:<34} train_len {:>5}  {}",
                    preset.name, preset.train_len, preset.source
                );
            }
        }
        return Ok(());
    }
    let (config, _, name) = args.model.config(256)?;
    let model = config.init::<B>(&device)?;
    let info = model.info(&config, args.context);
    println!("{name}\n{info}");
    let swa = DecoderConfig {
        attention: vec![swa_attention::layers::AttentionKind::Sliding {
            window: base_window(&config),
        }],
        ..config.clone()
    };
    println!(
        "relative cost vs SWA of the same base window: {:.3}",
        info.relative_cost(swa.window_sum(args.context))
    );
    Ok(())
}

/// The base window of a config: the largest window of its first windowed layer's heads, over 4
/// for MSWA (whose largest head window is 4w), else that window.
fn base_window(config: &DecoderConfig) -> usize {
    use swa_attention::layers::AttentionKind::*;
    (0..config.layers)
        .find_map(|l| match config.kind_of(l) {
            Sliding { window } | Swat { window, .. } | Sinks { window, .. } => Some(*window),
            MultiScale { windows } => windows.iter().max().map(|w| w / 4),
            _ => None,
        })
        .unwrap_or(1)
}
