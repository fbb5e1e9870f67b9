//! The decoder: forward and backward on every tiny preset, JSON configs, and named errors.

use burn::tensor::{Int, Tensor, TensorData};
use swa_models::layers::AttentionKind;
use swa_models::{DecoderConfig, ModelError, Preset, PresetSize};

use crate::Reference;

fn tokens(batch: usize, n: usize, vocab: usize) -> Tensor<Reference, 2, Int> {
    let ids: Vec<i64> = (0..batch * n).map(|i| ((i * 7919 + 13) % vocab) as i64).collect();
    Tensor::from_data(TensorData::new(ids, [batch, n]), &Default::default())
}

#[test]
fn every_tiny_preset_runs_forward_and_backward() {
    let device = Default::default();
    for preset in Preset::all(PresetSize::Tiny, 256).unwrap() {
        let model = preset.config.init::<Reference>(&device).unwrap();
        let info = model.info(&preset.config, preset.train_len);
        assert!(
            info.parameters < 3_000_000,
            "{}: {} parameters is not tiny",
            preset.name,
            info.parameters
        );
        let n = 70;
        let logits =
            model.forward(tokens(2, n, 256)).unwrap_or_else(|e| panic!("{}: {e}", preset.name));
        assert_eq!(logits.dims(), [2, n, 256]);
        let grads = logits.powi_scalar(2).mean().backward();
        let (norm, with_grad, params) = grad_norm(&model, &grads);
        assert!(norm.is_finite() && norm > 0.0, "{}: gradient norm {norm}", preset.name);
        assert_eq!(with_grad, params, "{}: every parameter gets a gradient", preset.name);
    }
}

/// The squared norm of every parameter's gradient summed, how many parameter tensors had a
/// gradient, and how many there are.
fn grad_norm(
    model: &swa_models::Decoder<Reference>,
    grads: &<Reference as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> (f64, usize, usize) {
    use burn::module::{ModuleVisitor, Param};
    struct Norm<'a> {
        grads: &'a <Reference as burn::tensor::backend::AutodiffBackend>::Gradients,
        total: f64,
        visited: usize,
        params: usize,
    }
    impl ModuleVisitor<Reference> for Norm<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Reference, D>>) {
            self.params += 1;
            if let Some(g) = param.val().grad(self.grads) {
                self.visited += 1;
                self.total += g.powi_scalar(2).sum().into_scalar() as f64;
            }
        }
    }
    let mut visitor = Norm { grads, total: 0.0, visited: 0, params: 0 };
    burn::module::Module::visit(model, &mut visitor);
    (visitor.total, visitor.visited, visitor.params)
}

#[test]
fn config_round_trips_through_json() {
    let preset = Preset::longformer(true, PresetSize::Tiny, 256);
    let path = std::env::temp_dir().join(format!("swa-zoo-config-{}.json", std::process::id()));
    burn::config::Config::save(&preset.config, &path).unwrap();
    let loaded: DecoderConfig = burn::config::Config::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(format!("{loaded:?}"), format!("{:?}", preset.config));
}

#[test]
fn invalid_configs_name_the_field() {
    let base = || DecoderConfig::new(vec![AttentionKind::Full]).with_d_model(64);
    let field = |c: DecoderConfig| match c.validate() {
        Err(ModelError::Config { field, .. }) => field.to_string(),
        Err(e) => e.to_string(),
        Ok(()) => "valid".into(),
    };
    assert_eq!(field(DecoderConfig { vocab_size: 0, ..base() }), "DecoderConfig.vocab_size");
    assert_eq!(field(DecoderConfig { layers: 0, ..base() }), "DecoderConfig.layers");
    assert_eq!(field(DecoderConfig { attention: vec![], ..base() }), "DecoderConfig.attention");
    assert_eq!(field(DecoderConfig { d_model: 66, ..base() }), "DecoderConfig.d_model");
    assert_eq!(field(DecoderConfig { kv_heads: Some(3), ..base() }), "DecoderConfig.kv_heads");
    let bad_layer = DecoderConfig {
        attention: vec![AttentionKind::Full, AttentionKind::Sliding { window: 0 }],
        ..base()
    };
    assert!(field(bad_layer).starts_with("layer 1: head 0: window size 0"));
}

/// A fresh model's weights are drawn at `init`: a clone computes what the model computes (with
/// Burn's lazy parameters, a clone would draw weights of its own).
#[test]
fn a_clone_of_a_fresh_model_has_its_weights() {
    let device = Default::default();
    let model = DecoderConfig::new(vec![AttentionKind::Full])
        .with_vocab_size(64)
        .with_d_model(16)
        .with_layers(1)
        .with_heads(2)
        .init::<Reference>(&device)
        .unwrap();
    let copy = model.clone();
    let (a, b) =
        (model.forward(tokens(1, 5, 64)).unwrap(), copy.forward(tokens(1, 5, 64)).unwrap());
    assert!(crate::max_abs(&crate::to_vec(a), &crate::to_vec(b)) == 0.0);
}
