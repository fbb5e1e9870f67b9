//! One table of tensor names, a checkpoint's against the model's stable ones ([`crate::stored`]):
//! `blocks.{l}.attention.mixer.Windowed.local.query.weight` is
//! `model.layers.{l}.self_attn.q_proj.weight`, for importing and exporting alike. Gemma's
//! blocks name their norms otherwise than Llama's. (Pretrained families have windowed layers
//! only: the attention's weights are under the `Windowed` variant of its mixer.)

use crate::hf::Family;

/// Tensors outside the blocks.
const MODEL: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "embedding.weight"),
    ("model.norm.weight", "norm.gamma"),
    ("lm_head.weight", "head.weight"),
];

/// Tensors of a block, after `model.layers.{l}.` and `blocks.{l}.`, in every family.
const BLOCK: [(&str, &str); 15] = [
    ("input_layernorm.weight", "attention_norm.gamma"),
    ("self_attn.q_proj.weight", "attention.mixer.Windowed.local.query.weight"),
    ("self_attn.q_proj.bias", "attention.mixer.Windowed.local.query.bias"),
    ("self_attn.k_proj.weight", "attention.mixer.Windowed.local.key.weight"),
    ("self_attn.k_proj.bias", "attention.mixer.Windowed.local.key.bias"),
    ("self_attn.v_proj.weight", "attention.mixer.Windowed.local.value.weight"),
    ("self_attn.v_proj.bias", "attention.mixer.Windowed.local.value.bias"),
    ("self_attn.o_proj.weight", "attention.mixer.Windowed.output.weight"),
    ("self_attn.q_norm.weight", "attention.query_norm.gamma"),
    ("self_attn.k_norm.weight", "attention.key_norm.gamma"),
    ("self_attn.sinks", "attention.sinks"),
    ("mlp.gate_proj.weight", "mlp.gate.weight"),
    ("mlp.up_proj.weight", "mlp.up.weight"),
    ("mlp.down_proj.weight", "mlp.down.weight"),
    // Llama, Mistral, Qwen2: the norm after the attention's residual is the MLP's pre-norm.
    ("post_attention_layernorm.weight", "mlp_norm.gamma"),
];

/// Gemma 2 and 3: a norm on each branch's output, and the MLP's own pre-norm.
const GEMMA_BLOCK: [(&str, &str); 3] = [
    ("post_attention_layernorm.weight", "post_attention_norm.gamma"),
    ("pre_feedforward_layernorm.weight", "mlp_norm.gamma"),
    ("post_feedforward_layernorm.weight", "post_mlp_norm.gamma"),
];

/// Buffers some checkpoints carry that are not weights.
pub fn is_ignored(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq")
}

/// The block table of `family`: `(checkpoint suffix, model suffix)`.
fn block(family: Family) -> Vec<(&'static str, &'static str)> {
    let gemma = matches!(family, Family::Gemma2 | Family::Gemma3);
    let common =
        BLOCK.iter().filter(|(hf, _)| !(gemma && *hf == "post_attention_layernorm.weight"));
    let norms = GEMMA_BLOCK.iter().filter(|_| gemma);
    common.chain(norms).copied().collect()
}

/// The checkpoint's name of the model's tensor `path` (a stable name: q, k, v and gate, up
/// apart, [`crate::stored`]), `None` if the family has no such tensor.
pub fn to_checkpoint(path: &str, family: Family) -> Option<String> {
    if let Some((hf, _)) = MODEL.iter().find(|(_, ours)| *ours == path) {
        return Some(hf.to_string());
    }
    let (layer, suffix) = path.strip_prefix("blocks.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (hf, _) = block(family).into_iter().find(|(_, ours)| *ours == suffix)?;
    Some(format!("model.layers.{layer}.{hf}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_one_to_one_and_gemma_names_its_norms() {
        for family in [Family::Llama, Family::Gemma2] {
            let table = block(family);
            let mut checkpoint: Vec<_> = table.iter().map(|(hf, _)| *hf).collect();
            checkpoint.sort();
            checkpoint.dedup();
            assert_eq!(checkpoint.len(), table.len(), "{family:?}: one model name each");
            for (hf, ours) in table {
                let name = to_checkpoint(&format!("blocks.3.{ours}"), family);
                assert_eq!(name, Some(format!("model.layers.3.{hf}")));
            }
        }
        let norm = "blocks.0.mlp_norm.gamma";
        let mistral = "model.layers.0.post_attention_layernorm.weight";
        assert_eq!(to_checkpoint(norm, Family::Mistral).as_deref(), Some(mistral));
        let gemma = "model.layers.0.pre_feedforward_layernorm.weight";
        assert_eq!(to_checkpoint(norm, Family::Gemma3).as_deref(), Some(gemma));
        assert_eq!(
            to_checkpoint("blocks.0.attention.mixer.Linear.query.weight", Family::Llama),
            None
        );
        assert!(is_ignored("model.layers.0.self_attn.rotary_emb.inv_freq"));
    }
}
