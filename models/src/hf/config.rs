//! A Hugging Face `config.json` read as a [`DecoderConfig`] (docs/semantics.md §9), in the form
//! transformers 4.x writes (`rope_theta`, `rope_scaling`, `rope_local_base_freq`,
//! `sliding_window_pattern`, `use_sliding_window` / `max_window_layers`) and the form 5.x writes
//! (`rope_parameters`, per layer type or not, and `layer_types`).

use std::collections::BTreeMap;

use crate::layers::AttentionKind;
use serde::Deserialize;
use serde_json::Value;
use swa_attention::RopeScaling;

use crate::architecture::Architecture;
use crate::decoder::DecoderConfig;
use crate::hf::{Family, HfProblem};
use crate::mlp::MlpActivation;
use crate::sizes::MAX_LAYERS;

/// The fields of a `config.json` that swa-zoo reads; the others (token ids, dtype, …) are
/// ignored.
#[derive(Debug, Deserialize)]
struct Raw {
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    hidden_act: Option<String>,
    hidden_activation: Option<String>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    max_window_layers: Option<usize>,
    sliding_window_pattern: Option<usize>,
    layer_types: Option<Vec<String>>,
    query_pre_attn_scalar: Option<f64>,
    attn_logit_softcapping: Option<f32>,
    final_logit_softcapping: Option<f32>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
}

/// One layer's attention as the checkpoint describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LayerType {
    Full,
    Sliding,
}

/// RoPE of one layer type: base and scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RopeOf {
    base: f64,
    scaling: Option<RopeScaling>,
}

/// Reads `config.json`'s text as the family and decoder it describes; fails, naming the field,
/// on what swa-zoo cannot express. The decoder is not yet validated
/// ([`DecoderConfig::validate`]).
pub fn parse(text: &str) -> Result<(Family, DecoderConfig), HfProblem> {
    let raw: Raw =
        serde_json::from_str(text).map_err(|e| HfProblem::BadConfig { problem: e.to_string() })?;
    let family = Family::from_model_type(&raw.model_type)?;
    let kinds = layer_types(&raw, family)?
        .into_iter()
        .map(|t| match (t, raw.sliding_window) {
            (LayerType::Full, _) => Ok(AttentionKind::Full),
            (LayerType::Sliding, Some(window)) if window > 0 => {
                Ok(AttentionKind::Sliding { window })
            }
            (LayerType::Sliding, _) => Err(HfProblem::BadField {
                field: "sliding_window",
                problem: "a sliding layer needs a window of at least 1".into(),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (global, local) = rope(&raw, family)?;
    let global_layers = (0..kinds.len()).filter(|&l| kinds[l] == AttentionKind::Full).collect();
    let gemma = matches!(family, Family::Gemma2 | Family::Gemma3);
    let activation = raw.hidden_activation.as_deref().or(raw.hidden_act.as_deref());
    let mlp_activation = match activation {
        None | Some("silu") => MlpActivation::Silu,
        Some("gelu_pytorch_tanh") | Some("gelu_tanh") => MlpActivation::GeluTanh,
        Some(other) => {
            return Err(HfProblem::BadField {
                field: "hidden_act",
                problem: format!("`{other}` is not supported (silu, gelu_pytorch_tanh)"),
            });
        }
    };
    let config = DecoderConfig::new(kinds)
        .with_vocab_size(raw.vocab_size)
        .with_d_model(raw.hidden_size)
        .with_layers(raw.num_hidden_layers)
        .with_heads(raw.num_attention_heads)
        .with_kv_heads(Some(raw.num_key_value_heads.unwrap_or(raw.num_attention_heads)))
        .with_tie_embeddings(raw.tie_word_embeddings.unwrap_or(gemma))
        .with_rope_base(global.base)
        .with_architecture(Some(Architecture {
            head_dim: raw.head_dim,
            mlp_hidden: Some(raw.intermediate_size),
            mlp_activation,
            norm_epsilon: raw.rms_norm_eps.unwrap_or(1e-6),
            norm_unit_offset: gemma,
            post_norms: gemma,
            scale_embeddings: gemma,
            qkv_bias: family == Family::Qwen2 || raw.attention_bias.unwrap_or(false),
            attention_scale: raw.query_pre_attn_scalar.map(|s| s.powf(-0.5) as f32),
            // Gemma 3 keeps the field but transformers ignores it: only Gemma 2 caps its scores.
            attention_softcap: raw.attn_logit_softcapping.filter(|_| family == Family::Gemma2),
            final_softcap: raw.final_logit_softcapping,
            qk_norm: family == Family::Gemma3,
            sink_logits: false,
            relative_positions: false,
            rope_scaling: global.scaling,
            local_rope_base: local.filter(|l| *l != global).map(|l| l.base),
            global_layers,
        }));
    if local.is_some_and(|l| l.scaling.is_some()) {
        return Err(HfProblem::BadField {
            field: "rope_parameters",
            problem: "a RoPE scaling on sliding layers is not supported".into(),
        });
    }
    Ok((family, config))
}

/// Each layer's type: `layer_types` when given (5.x, gpt-oss), else the family's rule in 4.x.
fn layer_types(raw: &Raw, family: Family) -> Result<Vec<LayerType>, HfProblem> {
    let layers = raw.num_hidden_layers;
    // Before a vector of them is built: a count from the file can be anything.
    if layers > MAX_LAYERS {
        return Err(HfProblem::BadField {
            field: "num_hidden_layers",
            problem: format!("{layers} is above the most this library builds, {MAX_LAYERS}"),
        });
    }
    if let Some(types) = &raw.layer_types {
        if types.len() != layers {
            return Err(HfProblem::BadField {
                field: "layer_types",
                problem: format!("{} entries for {layers} layers", types.len()),
            });
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                "full_attention" => Ok(LayerType::Full),
                "sliding_attention" => Ok(LayerType::Sliding),
                other => Err(HfProblem::BadField {
                    field: "layer_types",
                    problem: format!(
                        "`{other}` is not supported (full_attention, sliding_attention)"
                    ),
                }),
            })
            .collect();
    }
    let sliding = |is: bool| if is { LayerType::Sliding } else { LayerType::Full };
    let windowed = raw.sliding_window.is_some();
    Ok((0..layers)
        .map(|l| match family {
            Family::Llama => LayerType::Full,
            Family::Mistral => sliding(windowed),
            Family::Qwen2 => sliding(
                windowed
                    && raw.use_sliding_window.unwrap_or(false)
                    && l >= raw.max_window_layers.unwrap_or(layers),
            ),
            Family::Gemma2 => sliding(windowed && l % 2 == 0),
            Family::Gemma3 => {
                let pattern = raw.sliding_window_pattern.unwrap_or(6).max(1);
                sliding(windowed && (l + 1) % pattern != 0)
            }
        })
        .collect())
}

/// The RoPE of full layers and, where it differs in kind, of sliding layers.
fn rope(raw: &Raw, family: Family) -> Result<(RopeOf, Option<RopeOf>), HfProblem> {
    let default_base = raw.rope_theta.unwrap_or(10_000.0);
    if let Some(Value::Object(params)) = &raw.rope_parameters {
        let per_type = params.values().all(Value::is_object) && !params.is_empty();
        if per_type {
            let of = |name: &str| -> Result<Option<RopeOf>, HfProblem> {
                params.get(name).map(|p| rope_of(p, default_base)).transpose()
            };
            let full = of("full_attention")?;
            let sliding = of("sliding_attention")?;
            let global = full.or(sliding).unwrap_or(RopeOf { base: default_base, scaling: None });
            return Ok((global, sliding));
        }
        return Ok((
            rope_of(&raw.rope_parameters.clone().unwrap_or_default(), default_base)?,
            None,
        ));
    }
    let scaling = match &raw.rope_scaling {
        Some(value @ Value::Object(_)) => rope_of(value, default_base)?.scaling,
        _ => None,
    };
    let global = RopeOf { base: default_base, scaling };
    let local = match family {
        Family::Gemma3 => {
            Some(RopeOf { base: raw.rope_local_base_freq.unwrap_or(10_000.0), scaling: None })
        }
        _ => None,
    };
    Ok((global, local))
}

/// One RoPE dictionary: `{"rope_type": …, "rope_theta": …, "factor": …, …}` (`type` in older
/// configs).
fn rope_of(value: &Value, default_base: f64) -> Result<RopeOf, HfProblem> {
    let fields: BTreeMap<String, Value> = match value {
        Value::Object(map) => map.clone().into_iter().collect(),
        _ => BTreeMap::new(),
    };
    let number = |name: &'static str| -> Result<f64, HfProblem> {
        fields.get(name).and_then(Value::as_f64).ok_or_else(|| HfProblem::BadField {
            field: "rope_scaling",
            problem: format!("missing the number `{name}`"),
        })
    };
    let kind = fields.get("rope_type").or_else(|| fields.get("type")).and_then(Value::as_str);
    let base = fields.get("rope_theta").and_then(Value::as_f64).unwrap_or(default_base);
    let scaling = match kind.unwrap_or("default") {
        "default" => None,
        "linear" => Some(RopeScaling::Linear { factor: number("factor")? }),
        "llama3" => Some(RopeScaling::Llama3 {
            factor: number("factor")?,
            low_freq_factor: number("low_freq_factor")?,
            high_freq_factor: number("high_freq_factor")?,
            original_max_position: number("original_max_position_embeddings")? as usize,
        }),
        other => {
            return Err(HfProblem::BadField {
                field: "rope_scaling",
                problem: format!("RoPE type `{other}` is not supported (default, linear, llama3)"),
            });
        }
    };
    Ok(RopeOf { base, scaling })
}
