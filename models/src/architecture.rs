//! How a decoder departs from Transformer++ (docs/semantics.md §8) to express a pretrained
//! architecture (docs/semantics.md §9): Llama, Mistral, Qwen2, Gemma 2 and 3, and gpt-oss's
//! attention. Kept apart from [`crate::DecoderConfig`]'s own fields so that a configuration
//! written before these options existed (a run's `train.json`) still reads: a missing
//! `architecture` is the default, which departs in nothing.

use serde::{Deserialize, Serialize};
use swa_attention::RopeScaling;

use crate::mlp::MlpActivation;

/// The options of a decoder; every field defaults to Transformer++'s choice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Architecture {
    /// Width `d_h` of each head, even; `None` is `d_model / heads` (Gemma sets its own).
    pub head_dim: Option<usize>,
    /// Hidden width of the MLP; `None` is `⌈8d/3⌉` rounded up to a multiple of 64.
    pub mlp_hidden: Option<usize>,
    /// Activation of the MLP's gate: SiLU (SwiGLU) or the tanh GELU (Gemma).
    pub mlp_activation: MlpActivation,
    /// ε of every RMSNorm.
    pub norm_epsilon: f64,
    /// RMSNorms scale by `1 + w` (Gemma).
    pub norm_unit_offset: bool,
    /// A second RMSNorm on each branch's output before its residual (Gemma 2/3).
    pub post_norms: bool,
    /// Embeddings multiplied by `√d_model` (Gemma).
    pub scale_embeddings: bool,
    /// Biases on the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
    /// Multiplier of `q·k`; `None` is `1/√d_h` (Gemma: `query_pre_attn_scalar^(−½)`).
    pub attention_scale: Option<f32>,
    /// Softcap of the attention scores (Gemma 2); `None` disables it.
    pub attention_softcap: Option<f32>,
    /// Softcap of the final logits, `c·tanh(z/c)` (Gemma 2); `None` disables it.
    pub final_softcap: Option<f32>,
    /// RMSNorm over each head of q and k before RoPE (Gemma 3).
    pub qk_norm: bool,
    /// A learned sink logit per head in every layer (gpt-oss).
    pub sink_logits: bool,
    /// Transformer-XL's relative positions in every layer, in place of RoPE (Dai et al., 2019,
    /// §3.3; docs/semantics.md §4).
    pub relative_positions: bool,
    /// A stretch of RoPE's frequencies where `rope_base` applies (Llama 3, Gemma 3's global
    /// layers); `None` keeps them.
    pub rope_scaling: Option<RopeScaling>,
    /// RoPE base of every layer not in `global_layers`, which then rotate without scaling
    /// (Gemma 3's local layers, 10⁴ against 10⁶); `None`: every layer uses `rope_base`.
    pub local_rope_base: Option<f64>,
    /// With `local_rope_base`, the layers that rotate with `rope_base` and `rope_scaling`
    /// (Gemma 3's global layers). Kept by index, not by attention kind, so that evaluating
    /// under another window (every layer sliding) keeps each layer's RoPE.
    pub global_layers: Vec<usize>,
}

impl Default for Architecture {
    /// Transformer++: nothing departs from docs/semantics.md §8.
    fn default() -> Self {
        Self {
            head_dim: None,
            mlp_hidden: None,
            mlp_activation: MlpActivation::Silu,
            norm_epsilon: 1e-6,
            norm_unit_offset: false,
            post_norms: false,
            scale_embeddings: false,
            qkv_bias: false,
            attention_scale: None,
            attention_softcap: None,
            final_softcap: None,
            qk_norm: false,
            sink_logits: false,
            relative_positions: false,
            rope_scaling: None,
            local_rope_base: None,
            global_layers: Vec::new(),
        }
    }
}
