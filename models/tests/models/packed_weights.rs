//! Checkpoints loaded with their weights packed in ggml's blocks ([`WeightPrecision::Packed`]
//! and [`WeightPrecision::File`]): on flex the linear layers' weights and the embedding table
//! take their blocks' bytes, the logits of the forward pass (products of many rows, on weights
//! unpacked panel by panel) equal the f32 path's on the unpacked weights, and those of decoding
//! steps (one-row products on activations quantized to 8 bits) stay within the activations'
//! rounding of them, on every family of the fixtures and on a GGUF file's own blocks. ndarray,
//! which keeps no packed weights, refuses them.

use std::path::{Path, PathBuf};

use burn::backend::NdArray;
use swa_attention::packed::Packing;
use swa_models::ModelError;
use swa_models::hf::{WeightPrecision, load_weights, read_config};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(family)
}

/// ndarray keeps no packed weights: asking for them is an error naming the format.
#[test]
fn packed_weights_on_ndarray_are_an_error_naming_the_format() {
    let dir = fixture("hf/mistral");
    let (family, config) = read_config(&dir).unwrap();
    let weights = WeightPrecision::Packed(Packing::Q4_1);
    let error = load_weights::<NdArray>(&dir, family, &config, weights, &Default::default());
    let error = error.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, ModelError::PackedWeights { .. }), "{message}");
    assert!(message.contains("packed in Q4_1: this backend keeps no packed weights"), "{message}");
}

#[cfg(feature = "flex")]
mod on_flex {
    use burn::backend::Flex;
    use burn::module::{Module, ModuleMapper, Param};
    use burn::tensor::{DType, Int, Tensor, TensorData};
    use swa_attention::layer_ops::unpack;
    use swa_attention::packed::Packing;
    use swa_models::Decoder;
    use swa_models::hf::{WeightPrecision, load_weights, read_config};
    use swa_models::layers::CachePositions;

    use super::fixture;
    use crate::decode::decode;
    use crate::{max_abs, to_vec};

    /// The forward pass computes in f32 on the same weights as the unpacked model; only the
    /// order of its sums differs.
    const LOGIT_TOLERANCE: f32 = 1e-4;

    /// Decoding steps quantize each product's activations to 8 bits per block of 32 (half a
    /// step of `max|x|/127` each): relative to the logits' largest magnitude.
    const STEP_TOLERANCE: f32 = 0.05;

    const FAMILIES: [&str; 5] = ["mistral", "qwen2", "gemma2", "gemma3", "llama"];

    /// Every float parameter unpacked (or widened) to f32: the reference path on the weights
    /// the packed load holds.
    struct Unpack;

    impl ModuleMapper<Flex> for Unpack {
        fn map_float<const D: usize>(
            &mut self,
            param: Param<Tensor<Flex, D>>,
        ) -> Param<Tensor<Flex, D>> {
            param.map(|t| unpack(t, None).cast(DType::F32))
        }
    }

    /// `packed` against its unpacked self: bytes below `at_most` of f32's, forward logits
    /// within [`LOGIT_TOLERANCE`], decoding steps within [`STEP_TOLERANCE`].
    fn check(packed: Decoder<Flex>, at_most: f64, what: &str) {
        let device = Default::default();
        let unpacked = packed.clone().map(&mut Unpack);
        let (bytes, f32_bytes) = (packed.weight_bytes(), unpacked.weight_bytes());
        assert!((bytes as f64) < f32_bytes as f64 * at_most, "{what}: {bytes} of {f32_bytes} B");

        let n = 24;
        let ids: Vec<i64> = (0..n as i64).map(|i| (7 * i + 3) % 50).collect();
        let tokens = Tensor::<Flex, 2, Int>::from_data(TensorData::new(ids, [1, n]), &device);
        let forward = |model: &Decoder<Flex>| to_vec(model.forward(tokens.clone()).unwrap());
        let error = max_abs(&forward(&packed), &forward(&unpacked));
        assert!(error < LOGIT_TOLERANCE, "{what}, forward: {error}");

        let (stepped, _) = decode(&packed, 12, CachePositions::Absolute);
        let (reference, _) = decode(&unpacked, 12, CachePositions::Absolute);
        let largest = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let error = max_abs(&stepped, &reference);
        eprintln!("{what}: steps off by {error} of {largest}");
        assert!(error < STEP_TOLERANCE * largest, "{what}, steps: {error} of {largest}");
    }

    /// Every family's float checkpoint packed on load in each format.
    #[test]
    fn packed_on_load_gives_the_logits_of_the_unpacked_weights() {
        for family in FAMILIES {
            let dir = fixture(&format!("hf/{family}"));
            let (family, config) = read_config(&dir).unwrap();
            for packing in Packing::ALL {
                let weights = WeightPrecision::Packed(packing);
                let model =
                    load_weights::<Flex>(&dir, family, &config, weights, &Default::default());
                let what = format!("{family:?} in {}", packing.name());
                check(model.unwrap(), 0.4, &what);
            }
        }
    }

    /// The GGUF fixture as it stores each tensor: its Q8_0 embedding table and Q8_0 output
    /// projection kept packed, the rest unpacked (joined parts of other types) or in bf16.
    #[test]
    fn a_gguf_files_own_blocks_give_the_logits_of_the_unpacked_weights() {
        let path = fixture("gguf/tiny/model.gguf");
        let (family, config) = read_config(&path).unwrap();
        let model = load_weights::<Flex>(
            &path,
            family,
            &config,
            WeightPrecision::File,
            &Default::default(),
        )
        .unwrap();
        let table = model.embedding_bytes();
        assert_eq!(table, Packing::Q8_0.row_bytes(config.vocab_size * config.d_model));
        check(model, 0.9, "the GGUF fixture as stored");
    }
}
