//! `train --hf`: a pretrained checkpoint fine-tuned into windows (MSWA §5.2, Appendix B.2.2),
//! every weight or LoRA adapters beside the norms and the embedding table, on text in the
//! checkpoint's own tokens, each window after its BOS.

use std::path::{Path, PathBuf};

use clap::Args;
use swa_models::DecoderConfig;
use swa_models::hf::{load_tokenizer, read_config};
use swa_models::layers::AttentionKind;
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_models::lora::{LoraConfig, LoraTarget};
use swa_training::corpus::Corpus;
use swa_training::train::TrainConfig;

use crate::error::AppError;

/// Flags of fine-tuning a pretrained checkpoint.
#[derive(Args, Debug)]
pub struct FineTuneArgs {
    /// Fine-tune this pretrained checkpoint (a GGUF file or a Hugging Face directory) in place of
    /// training --preset from scratch: its weights start the model, its tokenizer reads
    /// --corpus (default: the embedded Genesis), each window starts with its BOS. Defaults
    /// become MSWA's fine-tuning setup: sequences of 1024, lr 2e-5 after 20 warm-up steps, no
    /// weight decay.
    #[arg(long, conflicts_with_all = ["preset", "config", "words", "task"])]
    pub hf: Option<PathBuf>,
    /// With --hf: the attention to fine-tune into: `swa:W`, `mswa:W`, `mswa-h:W`, `mswa-l:W`
    /// (MSWA's geometric windows around the base W), `full`, or a JSON file of
    /// `AttentionKind`s (one for every layer, or one per layer). Default: the checkpoint's own.
    #[arg(long, requires = "hf")]
    pub attention: Option<String>,
    /// With --hf: train LoRA adapters of this rank (and the norms and the embedding table) in
    /// place of every weight; the adapters are merged into the weights when the model is saved.
    #[arg(long, requires = "hf")]
    pub lora_rank: Option<usize>,
    /// LoRA's α: the adapters' products are scaled by α / rank.
    #[arg(long, requires = "lora_rank", default_value_t = 16.0)]
    pub lora_alpha: f64,
    /// The projections LoRA adapts, in every block.
    #[arg(
        long,
        requires = "lora_rank",
        value_delimiter = ',',
        default_value = "q_proj,k_proj,v_proj,o_proj"
    )]
    pub lora_targets: Vec<LoraTarget>,
}

impl FineTuneArgs {
    /// A new fine-tuning run of `checkpoint` on `corpus` (a text file; `None`: the embedded
    /// Genesis): its folder (`out`, or `runs/<checkpoint>-<attention>`), configuration and
    /// corpus in the checkpoint's tokens.
    pub fn new_run(
        &self,
        checkpoint: &Path,
        corpus: Option<&Path>,
        out: Option<PathBuf>,
    ) -> Result<(PathBuf, TrainConfig, Corpus), AppError> {
        let (_, mut model) = read_config(checkpoint)?;
        if let Some(spec) = &self.attention {
            model.attention = attention(spec, &model)?;
        }
        let tokenizer = load_tokenizer(checkpoint, model.vocab_size)?;
        let lora = self.lora_rank.map(|rank| {
            LoraConfig::new()
                .with_rank(rank)
                .with_alpha(self.lora_alpha)
                .with_targets(self.lora_targets.clone())
        });
        let config = TrainConfig::new(model, 1024)
            .with_pretrained(Some(checkpoint.display().to_string()))
            .with_corpus(corpus.map(|p| p.display().to_string()))
            .with_lora(lora)
            .with_bos(tokenizer.bos().map(|id| id as u32))
            .with_learning_rate(2e-5)
            .with_warmup_steps(20)
            .with_weight_decay(0.0);
        let corpus = config.load_corpus()?;
        let out = out.unwrap_or_else(|| {
            let stem = checkpoint.file_stem().map_or("pretrained".into(), |s| s.to_string_lossy());
            let kind = self.attention.as_deref().unwrap_or("own").replace([':', '/', '.'], "-");
            PathBuf::from("runs").join(format!("{stem}-{kind}"))
        });
        Ok((out, config, corpus))
    }
}

/// The attention kinds `spec` names for `model`: a shorthand of MSWA's variants, or a JSON
/// file of kinds.
fn attention(spec: &str, model: &DecoderConfig) -> Result<Vec<AttentionKind>, AppError> {
    let problem = |problem: String| AppError::Flag { flag: "--attention", problem };
    if spec == "full" {
        return Ok(vec![AttentionKind::Full]);
    }
    let variants = [
        ("swa", MswaVariant::Swa),
        ("mswa", MswaVariant::Both),
        ("mswa-h", MswaVariant::Heads),
        ("mswa-l", MswaVariant::Layers),
    ];
    if let Some((name, window)) = spec.split_once(':')
        && let Some((_, variant)) = variants.iter().find(|(n, _)| *n == name)
    {
        let window: usize = window
            .parse()
            .map_err(|_| problem(format!("`{spec}`: the window `{window}` is not a number")))?;
        if *variant == MswaVariant::Swa {
            return Ok(vec![AttentionKind::Sliding { window }]);
        }
        let (layers, heads) = (model.layers, model.heads);
        let windows = mswa_windows(*variant, MswaStrategy::Geometric, window, layers, heads)
            .map_err(|e| problem(format!("`{spec}`: {e}")))?;
        let kinds = windows.into_iter().map(|windows| AttentionKind::MultiScale { windows });
        return Ok(kinds.collect());
    }
    let text = std::fs::read_to_string(spec).map_err(|e| {
        problem(format!(
            "`{spec}` is neither full, swa:W, mswa:W, mswa-h:W, mswa-l:W nor a readable file: {e}"
        ))
    })?;
    let kinds: Vec<AttentionKind> = match serde_json::from_str::<AttentionKind>(&text) {
        Ok(kind) => vec![kind],
        Err(_) => serde_json::from_str(&text)
            .map_err(|e| problem(format!("{spec}: not a kind or a list of kinds: {e}")))?,
    };
    if kinds.len() != 1 && kinds.len() != model.layers {
        let (got, layers) = (kinds.len(), model.layers);
        return Err(problem(format!("{spec}: {got} kinds for a model of {layers} layers")));
    }
    Ok(kinds)
}
