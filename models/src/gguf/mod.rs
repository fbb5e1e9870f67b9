//! GGUF checkpoints (llama.cpp's format: one file with the configuration, the tokenizer and
//! quantized weights), read as the Hugging Face checkpoint they were converted from: every
//! `--hf` command and [`crate::hf::Pretrained::load`] take a `.gguf` file where they take a
//! directory. Tensors F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K are
//! dequantized on load into the weights' float type.

mod checkpoint;
mod file;
mod quants;
#[cfg(test)]
mod tests;
mod tokenizer;

pub use checkpoint::GgufCheckpoint;
pub use file::{GgufFault, GgufFile, GgufTensor, MetaValue};
pub use quants::GgmlType;

use std::path::Path;

/// Whether `path` names a GGUF file rather than a checkpoint directory: a file whose name ends
/// in `.gguf`.
pub fn is_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("gguf"))
}
