//! LoRA adapters (`swa_models::lora`): a fresh adapter changes nothing, a trained one changes
//! exactly its projection's columns by `(α/r)·A·B`, the gradient reaches the adapters, the norms
//! and the embedding table and no frozen weight, and a rank too large is one line naming it.

use std::collections::BTreeMap;

use burn::backend::{Autodiff, NdArray};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::store::ModuleSnapshot;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use swa_models::layers::AttentionKind;
use swa_models::lora::{LoraConfig, LoraTarget};
use swa_models::{Decoder, DecoderConfig, ModelError};

use crate::{max_abs, to_vec, values};

type B = NdArray;

/// Two blocks, 4 query heads of 4 on 2 kv heads: q is 16 columns, k and v 8 each.
fn config() -> DecoderConfig {
    DecoderConfig::new(vec![AttentionKind::Sliding { window: 4 }])
        .with_vocab_size(32)
        .with_d_model(16)
        .with_layers(2)
        .with_heads(4)
        .with_kv_heads(Some(2))
}

fn tokens<D: Backend>(device: &D::Device) -> Tensor<D, 2, Int> {
    let ids: Vec<i64> = (0..12).map(|i| (i * 7 % 32) as i64).collect();
    Tensor::from_data(TensorData::new(ids, [1, 12]), device)
}

/// Every float parameter's values by module path, as burn-store collects them.
fn values_of<D: Backend, M: ModuleSnapshot<D>>(module: &M) -> BTreeMap<String, Vec<f32>> {
    let snapshots = module.collect(None, None, false).into_iter();
    let values = |s: &burn::store::TensorSnapshot| s.to_data().unwrap().convert::<f32>().to_vec();
    snapshots.map(|s| (s.full_path(), values(&s).unwrap())).collect()
}

/// Fills every adapter's B with values, as training would.
struct FillB(u64);

impl<D: Backend> ModuleMapper<D> for FillB {
    fn map_float<const N: usize>(&mut self, param: Param<Tensor<D, N>>) -> Param<Tensor<D, N>> {
        self.0 += 1;
        let seed = self.0;
        param.map(|t| {
            let (shape, device, tracked) = (t.shape(), t.device(), t.is_require_grad());
            let n = shape.num_elements();
            Tensor::from_data(TensorData::new(values(seed, n), shape), &device)
                .set_require_grad(tracked)
        })
    }
}

#[test]
fn a_fresh_adapter_changes_nothing_and_a_trained_one_only_its_columns() {
    let device = Default::default();
    let model = config().init::<B>(&device).unwrap();
    let lora = LoraConfig::new().with_targets(vec![LoraTarget::QProj, LoraTarget::VProj]);
    let adapters = lora.init(&model, &config(), &device).unwrap();
    assert_eq!(adapters.len(), 4, "q and v in two blocks");
    let plain = to_vec(model.forward(tokens(&device)).unwrap());
    let fresh = to_vec(adapters.apply(model.clone()).forward(tokens(&device)).unwrap());
    assert_eq!(plain, fresh, "B = 0 leaves the model as it was");

    let trained = adapters.clone().map(&mut FillB(0));
    let merged = values_of(&trained.apply(model.clone()));
    let before = values_of(&model);
    for (path, was) in &before {
        let now = &merged[path];
        if !path.ends_with("qkv.weight") {
            assert_eq!(was, now, "{path} is not adapted");
            continue;
        }
        // Rows of 32 columns: q 0..16 and v 24..32 moved, k 16..24 did not.
        for (row, (was, now)) in was.chunks(32).zip(now.chunks(32)).enumerate() {
            assert_eq!(was[16..24], now[16..24], "{path} row {row}: k is not adapted");
            assert!(max_abs(&was[..16], &now[..16]) > 0.0, "{path} row {row}: q is");
            assert!(max_abs(&was[24..], &now[24..]) > 0.0, "{path} row {row}: v is");
        }
    }
    // The update is (α/r)·A·B: block 0's q columns, row 0, by hand.
    let adapter = &trained.adapters[0];
    let (a, b) = (to_vec(adapter.a.val()), to_vec(adapter.b.val()));
    let path = "blocks.0.attention.mixer.Windowed.local.qkv.weight";
    let scale = 16.0 / 8.0;
    for c in 0..16 {
        let update: f32 = (0..8).map(|k| a[k] * b[k * 16 + c]).sum::<f32>() * scale;
        let got = merged[path][c] - before[path][c];
        assert!((got - update).abs() < 1e-5, "column {c}: {got} against {update}");
    }
}

#[test]
fn the_gradient_reaches_the_adapters_norms_and_embeddings_only() {
    type A = Autodiff<B>;
    let device = Default::default();
    let lora = LoraConfig::new();
    let model: Decoder<A> = lora.freeze(config().init::<A>(&device).unwrap());
    let adapters = lora.init(&model, &config(), &device).unwrap().map(&mut FillB(0));
    let logits = adapters.apply(model.clone()).forward(tokens(&device)).unwrap();
    let grads = logits.powi_scalar(2).mean().backward();
    let mut with_grads = Vec::new();
    let mut visitor = Grads { path: Vec::new(), grads: &grads, found: &mut with_grads };
    model.visit(&mut visitor);
    adapters.visit(&mut visitor);
    let trains = |p: &String| p.ends_with(".gamma") || p == "embedding.weight";
    let (base, adapter): (Vec<_>, Vec<_>) =
        with_grads.iter().partition(|p| !p.starts_with("adapters."));
    assert!(base.iter().all(|p| trains(p)), "frozen weights got gradients: {base:?}");
    assert!(base.contains(&&"embedding.weight".to_string()), "{base:?}");
    assert!(base.iter().any(|p| p.ends_with("attention_norm.gamma")), "{base:?}");
    assert_eq!(adapter.len(), 2 * 4 * 2, "A and B of q, k, v, o in two blocks");
}

/// Collects the paths of the parameters that have a gradient.
struct Grads<'a> {
    path: Vec<String>,
    grads: &'a <Autodiff<B> as burn::tensor::backend::AutodiffBackend>::Gradients,
    found: &'a mut Vec<String>,
}

impl ModuleVisitor<Autodiff<B>> for Grads<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.into());
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }
    fn visit_float<const N: usize>(&mut self, param: &Param<Tensor<Autodiff<B>, N>>) {
        if param.val().grad(self.grads).is_some() {
            self.found.push(self.path.join("."));
        }
    }
}

#[test]
fn a_rank_larger_than_a_projection_is_one_line_naming_it() {
    let device = Default::default();
    let model = config().init::<B>(&device).unwrap();
    let message = |lora: LoraConfig| match lora.init(&model, &config(), &device) {
        Err(e @ ModelError::Config { .. }) => e.to_string(),
        other => panic!("expected a config error, got {:?}", other.map(|l| l.len())),
    };
    let too_large = message(LoraConfig::new().with_rank(9));
    assert_eq!(
        too_large,
        "LoraConfig.rank: rank 9 is larger than k_proj of block 0 (16 × 8), which allows at most 8"
    );
    assert!(message(LoraConfig::new().with_rank(0)).starts_with("LoraConfig.rank: must be"));
    assert!(message(LoraConfig::new().with_targets(vec![])).starts_with("LoraConfig.targets"));
    assert_eq!("q".parse::<LoraTarget>(), Ok(LoraTarget::QProj));
    assert_eq!("down_proj".parse::<LoraTarget>(), Ok(LoraTarget::DownProj));
    assert!("w_proj".parse::<LoraTarget>().unwrap_err().contains("one of q_proj"));
}
