//! A GGUF file seen as a Hugging Face checkpoint: its metadata written as the `config.json`
//! transformers would write for it, and its tensors under transformers' names, shapes and
//! conventions, so that the directory path ([`crate::hf`]) reads both alike.
//!
//! Two conventions differ (llama.cpp's `convert_hf_to_gguf.py` changes them on the way in, and
//! they are changed back here, on load): llama's query and key rows are interleaved per head
//! for ggml's adjacent-pair RoPE, and Gemma's norm weights hold `1 + w`.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::{DType, TensorData};
use serde_json::json;

use super::file::{GgufFault, GgufFile, MetaValue};
use super::quants::GgmlType;
use crate::hf::HfProblem;
use swa_attention::packed::Packing;

/// The architectures read, by `general.architecture`, and the `model_type` each becomes.
const ARCHITECTURES: [(&str, &str); 4] =
    [("llama", "llama"), ("qwen2", "qwen2"), ("gemma2", "gemma2"), ("gemma3", "gemma3_text")];

/// Tensors outside the blocks: GGUF's name and transformers'.
const MODEL: [(&str, &str); 3] = [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// Tensors of a block, after `blk.{l}.` and `model.layers.{l}.`.
const BLOCK: [(&str, &str); 14] = [
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_q.bias", "self_attn.q_proj.bias"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_k.bias", "self_attn.k_proj.bias"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_v.bias", "self_attn.v_proj.bias"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
    ("post_attention_norm.weight", "post_attention_layernorm.weight"),
];

/// `ffn_norm`, the MLP's pre-norm: Llama's and Qwen2's `post_attention_layernorm`, Gemma's
/// `pre_feedforward_layernorm`; and Gemma's norm after the MLP.
const LLAMA_FFN_NORM: (&str, &str) = ("ffn_norm.weight", "post_attention_layernorm.weight");
const GEMMA_FFN_NORMS: [(&str, &str); 2] = [
    ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
    ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
];

/// What a tensor needs on load to be transformers' own.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Convert {
    /// Nothing.
    AsStored,
    /// Llama's query or key projection of this many heads: rows back to halves per head.
    Unpermute(usize),
    /// A Gemma norm: `1 + w` back to `w`.
    UnitOffset,
}

/// An open GGUF checkpoint: the file, its architecture, and its tensors by transformers' names.
pub struct GgufCheckpoint {
    file: GgufFile,
    /// `general.architecture`.
    architecture: String,
    /// transformers' name of each tensor: the GGUF name and what it needs on load.
    names: BTreeMap<String, (String, Convert)>,
}

impl GgufCheckpoint {
    /// Opens the GGUF file `path`: its header read and its architecture one swa-zoo runs.
    pub fn open(path: &Path) -> Result<Self, HfProblem> {
        let file = GgufFile::open(path).map_err(|fault| match fault {
            GgufFault::Corrupt(problem) => HfProblem::CorruptFile {
                file: path.file_name().unwrap_or_default().to_string_lossy().into_owned(),
                problem,
            },
            GgufFault::Unsupported(problem) => HfProblem::Gguf { problem },
        })?;
        let architecture = text(&file.metadata, "general.architecture")?.to_string();
        if !ARCHITECTURES.iter().any(|(arch, _)| *arch == architecture) {
            let read: Vec<&str> = ARCHITECTURES.iter().map(|(arch, _)| *arch).collect();
            let problem =
                format!("architecture `{architecture}` is not supported ({})", read.join(", "));
            return Err(HfProblem::Gguf { problem });
        }
        let mut checkpoint = Self { file, architecture, names: BTreeMap::new() };
        checkpoint.names = checkpoint.name_table()?;
        Ok(checkpoint)
    }

    /// Whether the architecture is Gemma's (norms stored as `1 + w`).
    fn gemma(&self) -> bool {
        self.architecture.starts_with("gemma")
    }

    /// The number `{architecture}.{key}`, if present.
    fn number(&self, key: &str) -> Option<f64> {
        self.file.metadata.get(&format!("{}.{key}", self.architecture)).and_then(MetaValue::as_f64)
    }

    /// The count `{architecture}.{key}`, if present.
    fn count(&self, key: &str) -> Option<u64> {
        self.file.metadata.get(&format!("{}.{key}", self.architecture)).and_then(MetaValue::as_u64)
    }

    /// The count `{architecture}.{key}`; an error naming the key if absent.
    fn required_count(&self, key: &str) -> Result<u64, HfProblem> {
        self.count(key).ok_or_else(|| HfProblem::Gguf {
            problem: format!("the metadata has no count `{}.{key}`", self.architecture),
        })
    }

    /// The text `{architecture}.{key}`, if present.
    fn text_of(&self, key: &str) -> Option<&str> {
        self.file.metadata.get(&format!("{}.{key}", self.architecture)).and_then(MetaValue::as_str)
    }

    /// The number `{architecture}.{key}`; an error naming the key if absent.
    fn required(&self, key: &str) -> Result<f64, HfProblem> {
        self.number(key).ok_or_else(|| HfProblem::Gguf {
            problem: format!("the metadata has no number `{}.{key}`", self.architecture),
        })
    }

    /// The GGUF name and conversion of each tensor, by transformers' name.
    fn name_table(&self) -> Result<BTreeMap<String, (String, Convert)>, HfProblem> {
        let heads = self.required_count("attention.head_count")? as usize;
        let kv_heads = self.count("attention.head_count_kv").map_or(heads, |n| n as usize);
        let ffn: Vec<(&str, &str)> = match self.gemma() {
            true => GEMMA_FFN_NORMS.to_vec(),
            false => vec![LLAMA_FFN_NORM],
        };
        let mut names = BTreeMap::new();
        for gguf in self.file.tensors.keys() {
            let hf = match gguf.strip_prefix("blk.").and_then(|rest| rest.split_once('.')) {
                Some((layer, part)) => BLOCK
                    .iter()
                    .chain(&ffn)
                    .find(|(g, _)| *g == part)
                    .map(|(_, hf)| format!("model.layers.{layer}.{hf}")),
                None => MODEL.iter().find(|(g, _)| g == gguf).map(|(_, hf)| hf.to_string()),
            };
            // A tensor with no transformers name (llama.cpp's `rope_freqs.weight`, …) is kept
            // under its own, so that the check against the model names it.
            let hf = hf.unwrap_or_else(|| gguf.clone());
            let convert = match () {
                _ if self.gemma() && hf.ends_with("norm.weight") => Convert::UnitOffset,
                _ if self.architecture == "llama" && hf.ends_with("q_proj.weight") => {
                    Convert::Unpermute(heads)
                }
                _ if self.architecture == "llama" && hf.ends_with("k_proj.weight") => {
                    Convert::Unpermute(kv_heads)
                }
                _ => Convert::AsStored,
            };
            names.insert(hf, (gguf.clone(), convert));
        }
        Ok(names)
    }

    /// Every tensor's shape, by transformers' name.
    pub fn shapes(&self) -> BTreeMap<String, Vec<usize>> {
        let shape = |gguf: &String| self.file.tensors[gguf].shape.clone();
        self.names.iter().map(|(hf, (gguf, _))| (hf.clone(), shape(gguf))).collect()
    }

    /// The tensor transformers names `name` (one of [`Self::shapes`]), as transformers holds
    /// it, in `dtype`.
    pub fn read(&mut self, name: &str, dtype: DType) -> Result<TensorData, String> {
        let (gguf, convert) = self.names[name].clone();
        let data = self.file.read(&gguf, dtype)?;
        Ok(match convert {
            Convert::AsStored => data,
            Convert::UnitOffset => {
                let values: Vec<f32> =
                    data.convert::<f32>().to_vec().map_err(|e| format!("{e:?}"))?;
                let shape = self.file.tensors[&gguf].shape.clone();
                TensorData::new(values.into_iter().map(|v| v - 1.0).collect(), shape)
                    .convert_dtype(dtype)
            }
            Convert::Unpermute(heads) => unpermute(data, heads)?,
        })
    }

    /// The block format of the tensor transformers names `name` where the file stores it
    /// packed in one that products read ([`GgmlType::packing`]).
    pub fn packing(&self, name: &str) -> Option<Packing> {
        self.kind(name).packing()
    }

    /// The ggml type the file stores the tensor transformers names `name` in.
    pub fn kind(&self, name: &str) -> GgmlType {
        self.file.tensors[&self.names[name].0].kind
    }

    /// The tensor transformers names `name` (a 2-D weight of rows a multiple of 32 long)
    /// packed in `packing`, rows in transformers' order: the file's own bytes where it stores
    /// the tensor in that format, else its values packed.
    pub fn read_packed(&mut self, name: &str, packing: Packing) -> Result<Vec<u8>, String> {
        let (gguf, convert) = self.names[name].clone();
        let shape = self.file.tensors[&gguf].shape.clone();
        if self.packing(name) != Some(packing) || convert == Convert::UnitOffset {
            let values =
                self.read(name, DType::F32)?.to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
            let mut bytes = Vec::with_capacity(packing.row_bytes(values.len()));
            packing.pack(&values, &mut bytes);
            return Ok(bytes);
        }
        let bytes = self.file.read_stored(&gguf)?;
        match convert {
            Convert::Unpermute(heads) => unpermute_rows(&bytes, shape[0], heads),
            _ => Ok(bytes),
        }
    }

    /// transformers' `tokenizer.json` for this file's tokenizer, as transformers' GGUF
    /// conversion builds it.
    pub fn tokenizer_json(&self) -> Result<String, HfProblem> {
        super::tokenizer::tokenizer_json(&self.file.metadata, &self.architecture)
    }

    /// transformers' `config.json` for this model: the family's fields from the metadata, the
    /// end-of-sequence id, and whether the output projection is the embedding's.
    pub fn config_json(&self) -> Result<String, HfProblem> {
        let model_type =
            ARCHITECTURES.iter().find(|(a, _)| *a == self.architecture).expect("checked").1;
        let embedding =
            self.file.tensors.get("token_embd.weight").ok_or_else(|| HfProblem::Gguf {
                problem: "no tensor `token_embd.weight`".into(),
            })?;
        let d_model = self.required_count("embedding_length")?;
        let heads = self.required_count("attention.head_count")?.max(1);
        let head_dim = self.count("attention.key_length").unwrap_or(d_model / heads);
        let layers = self.required_count("block_count")?;
        let mut config = json!({
            "model_type": model_type,
            "vocab_size": embedding.shape[0],
            "hidden_size": d_model,
            "intermediate_size": self.required_count("feed_forward_length")?,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": self.count("attention.head_count_kv").unwrap_or(heads),
            "head_dim": head_dim,
            "max_position_embeddings": self.count("context_length"),
            "rms_norm_eps": self.number("attention.layer_norm_rms_epsilon").unwrap_or(1e-6),
            "rope_theta": self.number("rope.freq_base").unwrap_or(10_000.0),
            "tie_word_embeddings": !self.file.tensors.contains_key("output.weight"),
            "eos_token_id": self.file.metadata.get("tokenizer.ggml.eos_token_id").and_then(MetaValue::as_u64),
        });
        if let Some(kind) = self.text_of("rope.scaling.type").filter(|k| *k != "none") {
            let factor = self.required("rope.scaling.factor")?;
            config["rope_scaling"] = json!({ "rope_type": kind, "factor": factor });
        }
        if self.file.tensors.contains_key("rope_freqs.weight") {
            let problem = "RoPE frequency factors (`rope_freqs.weight`, Llama 3's scaling as \
                           llama.cpp stores it) are not supported"
                .to_string();
            return Err(HfProblem::Gguf { problem });
        }
        if self.gemma() {
            config["hidden_activation"] = json!("gelu_pytorch_tanh");
            config["sliding_window"] = json!(self.count("attention.sliding_window"));
            // llama.cpp's rule: Gemma's 27B models scale by d_model / heads, the others by
            // the head dimension.
            let scalar = match layers {
                46 | 62 => d_model / heads,
                _ => head_dim,
            };
            config["query_pre_attn_scalar"] = json!(scalar);
        }
        match self.architecture.as_str() {
            "gemma2" => {
                config["attn_logit_softcapping"] = json!(self.number("attn_logit_softcapping"));
                config["final_logit_softcapping"] = json!(self.number("final_logit_softcapping"));
            }
            "gemma3" => {
                config["rope_local_base_freq"] =
                    json!(self.number("rope.freq_base_swa").unwrap_or(10_000.0));
                config["sliding_window_pattern"] = json!(6);
            }
            _ => {}
        }
        Ok(config.to_string())
    }
}

/// The text at `key` of `metadata`; an error naming the key if absent.
fn text<'a>(metadata: &'a BTreeMap<String, MetaValue>, key: &str) -> Result<&'a str, HfProblem> {
    metadata
        .get(key)
        .and_then(MetaValue::as_str)
        .ok_or_else(|| HfProblem::Gguf { problem: format!("the metadata has no text `{key}`") })
}

/// llama.cpp stores each head's rows of a llama query or key projection as `(pair, 2)`
/// interleaved where transformers has `(2, pair)` halves: row `h·d + i·(d/2) + p` of
/// transformers' is row `h·d + 2p + i` of the file (`d` the head's rows).
fn unpermute(data: TensorData, heads: usize) -> Result<TensorData, String> {
    let (shape, dtype) = (data.shape.clone(), data.dtype);
    let out = unpermute_rows(data.as_bytes(), shape[0], heads)?;
    Ok(TensorData::from_bytes_vec(out, shape, dtype))
}

/// [`unpermute`] on `rows` rows of bytes, each the same length (floats or packed blocks).
fn unpermute_rows(bytes: &[u8], rows: usize, heads: usize) -> Result<Vec<u8>, String> {
    if heads == 0 || !rows.is_multiple_of(2 * heads) {
        return Err(format!("{rows} rows do not split into {heads} heads of pairs"));
    }
    let (width, half) = (bytes.len() / rows, rows / heads / 2);
    let mut out = vec![0u8; bytes.len()];
    for row in 0..rows {
        let (head, within) = (row / (2 * half), row % (2 * half));
        let (i, p) = (within / half, within % half);
        let from = head * 2 * half + 2 * p + i;
        out[row * width..(row + 1) * width]
            .copy_from_slice(&bytes[from * width..(from + 1) * width]);
    }
    Ok(out)
}
