//! How an attention layer departs from Transformer++'s (docs/semantics.md §8) to express a
//! pretrained architecture (docs/semantics.md §9). Kept apart from the layer's configuration so
//! that a configuration written before these options existed still reads: a missing `options`
//! is the default, which departs in nothing.

use serde::{Deserialize, Serialize};

use crate::layers::norm::RmsNormConfig;
use swa_attention::RopeScaling;

/// The options of one attention layer; every field defaults to Transformer++'s choice.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LayerOptions {
    /// A stretch of RoPE's frequencies; `None` keeps them.
    pub rope_scaling: Option<RopeScaling>,
    /// Width `d_h` of each head, even (RoPE); `None` is `d_model / heads`.
    pub head_dim: Option<usize>,
    /// Biases on the q, k and v projections (Qwen2); the output projection has none.
    pub qkv_bias: bool,
    /// Multiplier of `q·k`; `None` is the kind's, `1/√d_h` (Gemma sets
    /// `query_pre_attn_scalar^(−½)`).
    pub scale: Option<f32>,
    /// Softcap `c` of the scores, `c·tanh(s/c)` (Gemma 2); `None` disables it.
    pub softcap: Option<f32>,
    /// RMSNorm over each head of q and k before RoPE (Gemma 3); its `d_model` must be `d_h`.
    pub qk_norm: Option<RmsNormConfig>,
    /// A learned sink logit per head joining each softmax denominator with no value (gpt-oss).
    pub sink_logits: bool,
    /// Transformer-XL's relative positions in place of RoPE (Dai et al., 2019, §3.3;
    /// docs/semantics.md §4): learned `W_R`, `u`, `v` and the core's relative scores.
    pub relative_positions: bool,
}
