//! `info`: parameters, Σ windows, relative cost and KV-cache bytes of a model, or the list of
//! presets.

use std::path::PathBuf;

use clap::Args;
use swa_models::layers::AttentionKind;
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_models::{DecoderConfig, Preset, PresetSize};

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
    /// A local Hugging Face model directory: its layers and the KV-cache bytes of each (from
    /// config.json alone; no weights are read).
    #[arg(long, conflicts_with = "list")]
    hf: Option<PathBuf>,
}

/// `info`.
pub fn info(args: InfoArgs) -> Result<(), AppError> {
    type B = burn::backend::NdArray;
    let device = Default::default();
    if args.list {
        for scale in [PresetSize::Paper, PresetSize::Tiny] {
            for preset in Preset::all(scale, 256)? {
                println!(
                    "{:<34} train_len {:>5}  {}",
                    preset.name, preset.train_len, preset.source
                );
            }
        }
        return Ok(());
    }
    if let Some(dir) = &args.hf {
        let (family, config) = swa_models::hf::read_config(dir)?;
        println!("{} ({}), context {}", dir.display(), family.model_type(), args.context);
        let bytes = config.kv_layer_bytes(args.context);
        for (l, bytes) in bytes.iter().enumerate() {
            println!(
                "layer {l:>3}  {:<24}  KV cache bytes {bytes}",
                format!("{:?}", config.kind_of(l))
            );
        }
        println!("KV cache bytes (f32) {}", bytes.iter().sum::<usize>());
        return Ok(());
    }
    let (config, _, name) = args.model.config(256)?;
    let model = config.init::<B>(&device)?;
    let info = model.info(&config, args.context);
    println!("{name}\n{info}");
    match swa_reference(&config) {
        Some(swa) => println!(
            "relative cost vs SWA of the same base window (w = {}): {:.3}",
            swa.base,
            info.relative_cost(swa.config.window_sum(args.context))
        ),
        None => println!("relative cost vs SWA: no layer has a base window"),
    }
    Ok(())
}

/// SWA at the base window of a model: every layer a sliding window of `base` keys, the rest
/// of the model as it is. The reference of MSWA's relative cost (docs/semantics.md §3).
pub struct SwaReference {
    /// The base window `w`.
    pub base: usize,
    /// The SWA model.
    pub config: DecoderConfig,
}

/// The SWA reference of `config`: its base window is the window of its first sliding, SWAT or
/// sinks layer or, for multi-scale layers, the `w` that [`mswa_windows`] allocates their
/// windows from (under one of its variants and strategies). `None` when no layer has a window,
/// or the multi-scale windows are no MSWA allocation.
pub fn swa_reference(config: &DecoderConfig) -> Option<SwaReference> {
    let kinds: Vec<&AttentionKind> = (0..config.layers).map(|l| config.kind_of(l)).collect();
    let sliding = kinds.iter().find_map(|kind| match kind.windows()?.as_slice() {
        [window] => Some(*window),
        _ => None,
    });
    let base = sliding.or_else(|| mswa_base(config.heads, &kinds))?;
    let attention = vec![AttentionKind::Sliding { window: base }];
    Some(SwaReference { base, config: DecoderConfig { attention, ..config.clone() } })
}

/// The base window `w` from which [`mswa_windows`] gives the multi-scale layers among `kinds`
/// their windows, with `heads` heads per layer. The allocation's multiplier 1 gives some head
/// the window `w` itself, so `w` is one of the windows.
fn mswa_base(heads: usize, kinds: &[&AttentionKind]) -> Option<usize> {
    let windows: Vec<Vec<usize>> = kinds
        .iter()
        .filter(|kind| matches!(kind, AttentionKind::MultiScale { .. }))
        .filter_map(|kind| kind.windows())
        .collect();
    let mut candidates: Vec<usize> = windows.iter().flatten().copied().collect();
    candidates.sort_unstable();
    candidates.dedup();
    let variants = [MswaVariant::Swa, MswaVariant::Heads, MswaVariant::Layers, MswaVariant::Both];
    let strategies = [MswaStrategy::Geometric, MswaStrategy::Arithmetic, MswaStrategy::Reversed];
    candidates.into_iter().find(|&base| {
        variants.iter().any(|&variant| {
            strategies.iter().any(|&strategy| {
                mswa_windows(variant, strategy, base, windows.len(), heads).ok().as_ref()
                    == Some(&windows)
            })
        })
    })
}
