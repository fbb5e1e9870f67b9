//! Checkpoints loaded with their weights in bf16 or f16 ([`WeightPrecision`]): on flex the
//! linear layers' weights and the embedding table take two bytes each, and the logits of the
//! forward pass (products of many rows, whose weights are widened panel by panel) and of
//! decoding steps (one-row products, widened in registers) equal the f32 path's on the same
//! rounded weights, on every family of the fixtures. ndarray, which has no half-precision
//! tensors, refuses them.

use std::path::{Path, PathBuf};

use burn::backend::NdArray;
use swa_models::ModelError;
use swa_models::hf::{WeightPrecision, load_weights, read_config};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf").join(family)
}

/// ndarray has no bf16 or f16 tensors: asking for such weights is an error naming the type.
#[test]
fn half_weights_on_ndarray_are_an_error_naming_the_type() {
    let dir = fixture("mistral");
    let (family, config) = read_config(&dir).unwrap();
    for weights in [WeightPrecision::Bf16, WeightPrecision::F16] {
        let device = Default::default();
        let error = load_weights::<NdArray>(&dir, family, &config, weights, &device).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ModelError::WeightType { .. }), "{message}");
        assert!(message.contains("cannot hold tensors of that type"), "{message}");
    }
}

#[cfg(feature = "flex")]
mod on_flex {
    use burn::backend::Flex;
    use burn::module::{Module, ModuleMapper, Param};
    use burn::tensor::backend::Backend;
    use burn::tensor::{DType, Int, Tensor, TensorData};
    use swa_models::Decoder;
    use swa_models::hf::{WeightPrecision, load_weights, read_config};
    use swa_models::layers::CachePositions;

    use super::fixture;
    use crate::decode::decode;
    use crate::{max_abs, to_vec};

    /// The two sides compute in f32 on the same weights; only the order of their sums differs
    /// (widened in registers or panels against a widened copy), as in the fused kernels' f32
    /// comparisons with the tensor ops.
    const LOGIT_TOLERANCE: f32 = 1e-4;

    const FAMILIES: [&str; 5] = ["mistral", "qwen2", "gemma2", "gemma3", "llama"];

    /// Every float parameter widened to f32: the f32 path on the weights a narrow load rounded.
    struct Widen;

    impl<B: Backend> ModuleMapper<B> for Widen {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|t| t.cast(DType::F32))
        }
    }

    #[test]
    fn half_weights_give_the_logits_of_f32_on_the_rounded_weights() {
        let device = Default::default();
        for family in FAMILIES {
            let dir = fixture(family);
            let (family, config) = read_config(&dir).unwrap();
            for weights in [WeightPrecision::Bf16, WeightPrecision::F16] {
                let narrow = load_weights::<Flex>(&dir, family, &config, weights, &device).unwrap();
                let wide = narrow.clone().map(&mut Widen);
                // Only norms (and biases) stay f32: the half weights are most of the model.
                let (bytes, f32_bytes) = (narrow.weight_bytes(), wide.weight_bytes());
                let what = format!("{family:?} with {weights:?} weights");
                assert!(bytes < f32_bytes * 11 / 20, "{what}: {bytes} of {f32_bytes} B");

                let n = 24;
                let ids: Vec<i64> = (0..n as i64).map(|i| (7 * i + 3) % 50).collect();
                let tokens =
                    Tensor::<Flex, 2, Int>::from_data(TensorData::new(ids, [1, n]), &device);
                let forward =
                    |model: &Decoder<Flex>| to_vec(model.forward(tokens.clone()).unwrap());
                let error = max_abs(&forward(&narrow), &forward(&wide));
                assert!(error < LOGIT_TOLERANCE, "{what}, forward: {error}");

                let (stepped, _) = decode(&narrow, 12, CachePositions::Absolute);
                let (stepped_wide, _) = decode(&wide, 12, CachePositions::Absolute);
                let error = max_abs(&stepped, &stepped_wide);
                assert!(error < LOGIT_TOLERANCE, "{what}, steps: {error}");
            }
        }
    }
}
