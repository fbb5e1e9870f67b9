//! `export_decoder`: a model trained here written as a Hugging Face directory that
//! [`super::load_decoder`] and transformers both read, when one supported family expresses it:
//! one sliding window on every layer is Mistral, full attention on every layer is Llama.

use std::fs;
use std::path::Path;

use burn::tensor::DType;
use burn::tensor::backend::Backend;
use serde_json::{Value, json};
use swa_attention::RopeScaling;

use crate::files::WriteError;
use crate::gguf::{GgufCheckpoint, is_gguf};
use crate::hf::{Family, HfProblem, config_text, load_tokenizer, names};
use crate::layers::AttentionKind;
use crate::mlp::MlpActivation;
use crate::stored::{self, Layout};
use crate::weights::write_atomically;
use crate::{Decoder, DecoderConfig, ModelError};

/// Writes `model` (built from `config`) into the new directory `dir` as `config.json` and
/// `model.safetensors` (f32, PyTorch's `[out, in]` layout, transformers' names), and returns the
/// family it was written as. Fails, saying why, when no family expresses the model, and
/// without touching anything when `dir` already holds a checkpoint.
pub fn export_decoder<B: Backend>(
    model: &Decoder<B>,
    config: &DecoderConfig,
    dir: &Path,
) -> Result<Family, ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    let (family, json) = family_config(config).map_err(fail)?;
    for file in ["config.json", "model.safetensors"] {
        if dir.join(file).exists() {
            return Err(fail(HfProblem::WouldOverwrite { file: file.into() }));
        }
    }
    fs::create_dir_all(dir)
        .map_err(|source| ModelError::Write(WriteError { path: dir.to_path_buf(), source }))?;
    let heads = (config.heads, config.kv_heads());
    let name = |part: &str| names::to_checkpoint(part, family);
    let layout = Layout { name: &name, transposed: true };
    // transformers 4.x refuses a safetensors file whose `format` is not a framework's name.
    let metadata = [("format", "pt")];
    write_atomically(&dir.join("model.safetensors"), |temp| {
        stored::write(model, heads, &layout, Some(DType::F32), &metadata, temp)
    })?;
    write_atomically(&dir.join("config.json"), |temp| fs::write(temp, pretty(&json)))?;
    Ok(family)
}

/// Writes the tokenizer of the pretrained checkpoint `source` (a GGUF file or a Hugging Face
/// directory) into `dir`, which [`export_decoder`] wrote from a model fine-tuned from it:
/// `tokenizer.json` (the directory's own, or the one transformers' GGUF conversion builds), the
/// directory's `tokenizer_config.json` and `special_tokens_map.json` where it has them (for a
/// GGUF file, a `tokenizer_config.json` naming its BOS and EOS), and the source's
/// `bos_token_id`, `eos_token_id` and `pad_token_id` in `dir`'s `config.json`. Each file is
/// written whole or not at all.
pub fn export_tokenizer(source: &Path, dir: &Path, vocab_size: usize) -> Result<(), ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: source.to_path_buf(), problem };
    let write = |name: &str, text: String| {
        write_atomically(&dir.join(name), |temp| fs::write(temp, text.as_bytes()))
    };
    let tokenizer_json = match is_gguf(source) {
        true => {
            GgufCheckpoint::open(source).and_then(|file| file.tokenizer_json()).map_err(fail)?
        }
        false => fs::read_to_string(source.join("tokenizer.json"))
            .map_err(|e| fail(HfProblem::Tokenizer { problem: e.to_string() }))?,
    };
    let tokenizer = load_tokenizer(source, vocab_size)?;
    let mut ids: Value = serde_json::from_str(&config_text(source)?).unwrap_or_default();
    // A GGUF file's metadata says whether its tokenizer adds a BOS, not always which.
    if let (Value::Null, Some(bos)) = (&ids["bos_token_id"], tokenizer.bos()) {
        ids["bos_token_id"] = json!(bos);
    }
    let mut files = vec![("tokenizer.json", tokenizer_json)];
    if is_gguf(source) {
        let piece = |key: &str| ids[key].as_u64().and_then(|id| tokenizer.piece(id as usize));
        let mut config = json!({"tokenizer_class": "PreTrainedTokenizerFast"});
        for (key, token) in [("bos_token_id", "bos_token"), ("eos_token_id", "eos_token")] {
            if let Some(piece) = piece(key) {
                config[token] = Value::String(piece);
            }
        }
        files.push(("tokenizer_config.json", pretty(&config)));
    } else {
        for name in ["tokenizer_config.json", "special_tokens_map.json"] {
            if let Ok(text) = fs::read_to_string(source.join(name)) {
                files.push((name, text));
            }
        }
    }
    for (name, text) in files {
        write(name, text)?;
    }
    let path = dir.join("config.json");
    let text = fs::read_to_string(&path)
        .map_err(|source| ModelError::Write(WriteError { path: path.clone(), source }))?;
    let mut config: Value = serde_json::from_str(&text).unwrap_or_default();
    for key in ["bos_token_id", "eos_token_id", "pad_token_id"] {
        if !ids[key].is_null() {
            config[key] = ids[key].clone();
        }
    }
    write("config.json", pretty(&config))
}

/// `value` as indented JSON with a final newline.
fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("a JSON value prints") + "\n"
}

/// The family that expresses `config`, and its `config.json`: the 5.x fields with the 4.x
/// RoPE fields beside them, so that either version reads it.
fn family_config(config: &DecoderConfig) -> Result<(Family, Value), HfProblem> {
    let refuse = |reason: String| Err(HfProblem::NotExportable { reason });
    let kinds: Vec<&AttentionKind> = (0..config.layers).map(|l| config.kind_of(l)).collect();
    let (family, window) = match kinds[0] {
        AttentionKind::Sliding { window } => (Family::Mistral, Some(*window)),
        AttentionKind::Full => (Family::Llama, None),
        other => return refuse(format!("layer 0 is {other:?}; Mistral needs sliding, Llama full")),
    };
    if let Some(l) = (1..kinds.len()).find(|&l| kinds[l] != kinds[0]) {
        return refuse(format!("layer {l} is {:?} but layer 0 is {:?}", kinds[l], kinds[0]));
    }
    let arch = config.arch();
    let unsupported = [
        (arch.mlp_activation != MlpActivation::Silu, "the tanh GELU"),
        (arch.norm_unit_offset, "(1 + w) norms"),
        (arch.post_norms, "post-norms"),
        (arch.scale_embeddings, "scaled embeddings"),
        (arch.qkv_bias, "q/k/v biases"),
        (arch.attention_scale.is_some(), "a query scale"),
        (arch.attention_softcap.is_some() || arch.final_softcap.is_some(), "softcaps"),
        (arch.qk_norm, "q/k norms"),
        (arch.sink_logits, "learned sink logits"),
        (arch.local_rope_base.is_some(), "a RoPE base for local layers"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(has, _)| *has) {
        return refuse(format!("{} has no {what}", family.model_type()));
    }
    let scaling = match arch.rope_scaling {
        None => None,
        Some(RopeScaling::Linear { factor }) => {
            Some(json!({"rope_type": "linear", "factor": factor}))
        }
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        }) => Some(json!({
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_position,
        })),
        Some(other) => return refuse(format!("config.json has no form for {other:?}")),
    };
    let mut rope_parameters = json!({"rope_type": "default", "rope_theta": config.rope_base});
    if let Some(Value::Object(scaling)) = &scaling {
        rope_parameters = json!({"rope_theta": config.rope_base});
        rope_parameters.as_object_mut().expect("an object").extend(scaling.clone());
    }
    let architecture = match family {
        Family::Mistral => "MistralForCausalLM",
        _ => "LlamaForCausalLM",
    };
    let json = json!({
        "architectures": [architecture],
        "model_type": family.model_type(),
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": config.mlp().hidden_width(),
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_width(),
        "hidden_act": "silu",
        "rms_norm_eps": arch.norm_epsilon,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": config.tie_embeddings,
        "sliding_window": window,
        "attention_bias": false,
        "mlp_bias": false,
        "rope_parameters": rope_parameters,
        "rope_theta": config.rope_base,
        "rope_scaling": scaling,
        "torch_dtype": "float32",
        "dtype": "float32",
    });
    Ok((family, json))
}
