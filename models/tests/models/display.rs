//! How a model prints (Burn's `ModuleDisplay`): each attention layer names its kind, heads and
//! head width on one line, so that `println!("{model}")` says what the model is.

use burn::backend::NdArray;
use burn::module::Module;
use swa_models::Preset;

#[test]
fn a_printed_model_names_each_layers_attention() {
    let preset = Preset::by_name("longformer-decoder-tiny", 256).expect("a preset");
    let model = preset.config.init::<NdArray>(&Default::default()).expect("a model");
    let text = model.to_string();
    println!("{text}");
    let layer = "SelfAttention {kind: Longformer { window: 8, dilations: [1, 1, 2, 2], globals: [0], \
                 causal: true }, heads: 4, kv_heads: 4, head_dim: 16, score: Softmax, \
                 qk_norm: false, params: 28672}";
    assert_eq!(text.matches(layer).count(), 2, "{text}");
    assert!(text.contains("RmsNorm {d: 64, epsilon: 0.000001, unit_offset: false"), "{text}");
    assert!(text.contains("GatedMlp {d_model: 64, hidden: 192, activation: Silu"), "{text}");
    assert!(!text.contains("inv_freq"), "RoPE's frequencies are not printed: {text}");
    assert!(text.contains(&format!("params: {}", model.num_params())), "{text}");
}
