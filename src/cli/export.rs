//! `export`: a training run's model written as a Hugging Face directory (config.json and
//! model.safetensors) that transformers and `--hf` read, when a supported family expresses it
//! (one sliding window on every layer: Mistral; full attention: Llama), with the tokenizer of
//! the checkpoint it was fine-tuned from.

use std::path::PathBuf;

use burn::backend::NdArray;
use clap::Args;

use crate::error::AppError;

/// Flags of `export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The training run (its train.json and model.mpk).
    #[arg(long)]
    out: PathBuf,
    /// The directory to write; it must not hold a checkpoint already.
    #[arg(long)]
    to: PathBuf,
}

/// `export`, on the CPU: it only copies weights.
pub fn export(args: ExportArgs) -> Result<(), AppError> {
    let swa_training::TrainedRun { config, model } =
        swa_training::TrainedRun::<NdArray>::load(&args.out, &Default::default())?;
    let family = swa_models::hf::export_decoder(&model, &config.model, &args.to)?;
    println!("wrote {} as {}", args.to.display(), family.model_type());
    // A fine-tuned checkpoint keeps its tokenizer, so that `--hf` and transformers read it whole.
    if let Some(source) = &config.pretrained {
        let vocab = config.model.vocab_size;
        swa_models::hf::export_tokenizer(std::path::Path::new(source), &args.to, vocab)?;
        println!("with the tokenizer of {source}");
    }
    Ok(())
}
