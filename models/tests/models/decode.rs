//! Decoding with the bounded cache (docs/semantics.md §7): token-by-token logits against the forward
//! pass, constant cache memory, StreamingLLM's position shift, and generation.

use burn::backend::NdArray;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;
use swa_models::layers::{AttentionKind, CachePositions, LayerError, SelfAttentionConfig};
use swa_models::sampling::Sampler;
use swa_models::{DecoderConfig, GenerateConfig, ModelError};

use crate::decoding::{
    DECODE_TOLERANCE, check_decoding, config, decode_on, forked_caches_decode_independently,
    token_ids, windowed_kinds,
};
use crate::layer_forward::swat_ablation;
use crate::{max_abs, to_vec, values};

type B = NdArray;

/// Token-by-token logits of the first `n` tokens, and the cache bytes after each step.
pub(crate) fn decode<D: ModelBackend>(
    model: &swa_models::Decoder<D>,
    n: usize,
    positions: CachePositions,
) -> (Vec<f32>, Vec<usize>) {
    decode_on(model, n, positions, &Default::default())
}

/// ndarray: the cache's tensor ops.
#[test]
fn decoding_reproduces_the_forward_pass_with_constant_memory() {
    check_decoding::<B>(windowed_kinds(), "ndarray", &Default::default());
}

/// flex: the fused decode step (`swa_attention::cpu`) against the fused forward kernel.
#[cfg(feature = "flex")]
#[test]
fn the_fused_decode_step_reproduces_the_forward_pass() {
    check_decoding::<burn::backend::Flex>(windowed_kinds(), "flex", &Default::default());
}

/// ndarray: the buffers are written with tensor ops.
#[test]
fn a_forked_cache_decodes_independently() {
    forked_caches_decode_independently::<B>(&Default::default());
}

/// flex: the fused append writes a buffer in place only when no fork shares it.
#[cfg(feature = "flex")]
#[test]
fn a_forked_cache_decodes_independently_under_the_fused_append() {
    forked_caches_decode_independently::<burn::backend::Flex>(&Default::default());
}

#[test]
fn full_attention_decodes_exactly_and_its_cache_grows() {
    let model = config(vec![AttentionKind::Full]).init::<B>(&Default::default()).unwrap();
    let n = 12;
    let tokens =
        Tensor::<B, 2, Int>::from_data(TensorData::new(token_ids(n), [1, n]), &Default::default());
    let forward = to_vec(model.forward(tokens).unwrap());
    let (stepped, bytes) = decode(&model, n, CachePositions::Absolute);
    assert!(max_abs(&forward, &stepped) <= DECODE_TOLERANCE);
    assert!(bytes.windows(2).all(|w| w[1] > w[0]), "full attention keeps every key: {bytes:?}");
}

/// MSWA keeps a buffer per head of its own size (§7): 4 heads of windows 1, 2, 4, 8 over 4 kv
/// heads hold 15 keys and values per layer, where SWA of window 8 holds 32.
#[test]
fn multi_scale_heads_keep_their_own_buffer_sizes() {
    let device = Default::default();
    let bytes = |attention| {
        let model = DecoderConfig::new(attention)
            .with_vocab_size(32)
            .with_d_model(16)
            .with_layers(1)
            .init::<B>(&device)
            .unwrap();
        *decode(&model, 20, CachePositions::Absolute).1.last().unwrap()
    };
    let mswa = bytes(vec![AttentionKind::MultiScale { windows: vec![1, 2, 4, 8] }]);
    let swa = bytes(vec![AttentionKind::Sliding { window: 8 }]);
    let per_key = 2 * 4 * 4; // k and v, head_dim 4, f32
    assert_eq!((mswa / per_key, swa / per_key), (15, 32));
}

/// StreamingLLM (§4, §7): once the cache is full, the query at step t sees the sinks and the
/// recent keys at their slot positions, which is the layer's forward pass over the cached tokens
/// alone, `x_0 … x_{S−1}, x_{t−W+1} … x_t`, at positions `0 … S+W−1`.
/// ndarray: the cache's tensor ops, which turn the sinks with tensor ops.
#[test]
fn sinks_shift_positions_to_cache_slots() {
    check_sink_positions::<B>(&Default::default());
}

/// flex: the fused append turns the sinks, the fused decode step scores them.
#[cfg(feature = "flex")]
#[test]
fn sinks_shift_positions_to_cache_slots_on_the_fused_cpu_kernels() {
    check_sink_positions::<burn::backend::Flex>(&Default::default());
}

fn check_sink_positions<D: ModelBackend>(device: &D::Device) {
    let (sinks, window, d, n) = (2, 3, 16, 14);
    let kind = AttentionKind::Sinks { sinks, window };
    let layer = SelfAttentionConfig::new(d, 4, 2, kind).init::<D>(device).unwrap();
    let x = Tensor::<D, 3>::from_data(TensorData::new(values(7, n * d), [1, n, d]), device);
    let mut cache = layer.cache(1, CachePositions::Streaming, device).unwrap();
    for t in 0..n {
        let got = to_vec(layer.step(x.clone().narrow(1, t, 1), &mut cache));
        let cached = match t < sinks + window {
            true => x.clone().narrow(1, 0, t + 1),
            false => Tensor::cat(
                vec![x.clone().narrow(1, 0, sinks), x.clone().narrow(1, t + 1 - window, window)],
                1,
            ),
        };
        let rows = cached.dims()[1];
        let want = to_vec(layer.forward(cached).unwrap().narrow(1, rows - 1, 1));
        assert!(max_abs(&got, &want) <= DECODE_TOLERANCE, "step {t}");
    }
}

/// SWAT's Table 3 ablation (§4, §7): with every score function and positional encoding, the
/// layer decodes like its forward pass with absolute positions, and under StreamingLLM's shift
/// like its forward pass over the cached tokens alone, `x_{t−W+1} … x_t` at `0 … W−1`. GQA.
#[test]
fn swat_ablation_decodes_like_the_forward_pass() {
    check_swat_ablation::<B>(&Default::default());
}

/// flex: ALiBi under StreamingLLM's shift takes the tensor path, the rest the fused kernels.
#[cfg(feature = "flex")]
#[test]
fn swat_ablation_decodes_like_the_forward_pass_on_the_fused_cpu_kernels() {
    check_swat_ablation::<burn::backend::Flex>(&Default::default());
}

fn check_swat_ablation<D: ModelBackend>(device: &D::Device) {
    let (window, d, n) = (4, 16, 11);
    let x = Tensor::<D, 3>::from_data(TensorData::new(values(7, n * d), [1, n, d]), device);
    for kind in swat_ablation(window) {
        let layer = SelfAttentionConfig::new(d, 4, 2, kind.clone()).init::<D>(device).unwrap();
        let forward = to_vec(layer.forward(x.clone()).unwrap());
        let mut absolute = layer.cache(1, CachePositions::Absolute, device).unwrap();
        let mut streaming = layer.cache(1, CachePositions::Streaming, device).unwrap();
        for t in 0..n {
            let token = x.clone().narrow(1, t, 1);
            let got = to_vec(layer.step(token.clone(), &mut absolute));
            let error = max_abs(&got, &forward[t * d..(t + 1) * d]);
            assert!(error <= DECODE_TOLERANCE, "{kind:?}, absolute, step {t}: {error}");
            let got = to_vec(layer.step(token, &mut streaming));
            let start = (t + 1).saturating_sub(window);
            let cached = x.clone().narrow(1, start, t + 1 - start);
            let want = to_vec(layer.forward(cached).unwrap().narrow(1, t - start, 1));
            let error = max_abs(&got, &want);
            assert!(error <= DECODE_TOLERANCE, "{kind:?}, streaming, step {t}: {error}");
        }
    }
}

#[test]
fn an_encoder_cannot_decode() {
    let kind = AttentionKind::Longformer {
        window: 2,
        dilations: vec![1; 4],
        globals: vec![0],
        causal: false,
    };
    let model = config(vec![kind]).init::<B>(&Default::default()).unwrap();
    match model.cache(1, CachePositions::Absolute, &Default::default()) {
        Err(ModelError::Layer { layer: 0, source: LayerError::NotCausal { .. } }) => {}
        other => panic!("expected NotCausal in layer 0, got {:?}", other.err()),
    }
}

#[test]
fn generation_is_seeded_and_greedy_follows_the_forward_pass() {
    let device = Default::default();
    let model = config(vec![AttentionKind::Sliding { window: 3 }]).init::<B>(&device).unwrap();
    let prompts = vec![vec![1, 2, 3], vec![4, 5, 6]];
    let sampled = |seed| {
        let config = GenerateConfig::new()
            .with_max_new_tokens(12)
            .with_top_k(8)
            .with_top_p(0.9)
            .with_seed(seed);
        model.generate(&prompts, &config, &device).unwrap()
    };
    assert_eq!(sampled(7), sampled(7), "the same seed gives the same tokens");
    assert_ne!(sampled(7), sampled(8), "another seed gives other tokens");
    let greedy = model
        .generate(
            &prompts[..1],
            &GenerateConfig::new().with_max_new_tokens(6).with_temperature(0.0),
            &device,
        )
        .unwrap();
    let mut tokens: Vec<i64> = prompts[0].iter().map(|&t| t as i64).collect();
    for &next in &greedy[0] {
        let n = tokens.len();
        let input =
            Tensor::<B, 2, Int>::from_data(TensorData::new(tokens.clone(), [1, n]), &device);
        let logits = to_vec(model.forward(input).unwrap().narrow(1, n - 1, 1));
        let best = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
            .unwrap();
        assert_eq!(next, best);
        tokens.push(next as i64);
    }
}

#[test]
fn sampling_keeps_to_top_k_and_top_p() {
    let logits = [0.0, 3.0, 2.9, -1.0, 2.8];
    let mut top_two = Sampler::new(1.0, 2, 1.0, 1);
    assert!((0..200).map(|_| top_two.sample(&logits)).all(|t| t == 1 || t == 2));
    let mut nucleus = Sampler::new(1.0, 0, 0.3, 1);
    assert!(
        (0..200).map(|_| nucleus.sample(&logits)).all(|t| t == 1),
        "p = 0.3 keeps the best token only"
    );
    let mut any = Sampler::new(1.0, 0, 1.0, 1);
    let seen: std::collections::BTreeSet<_> = (0..500).map(|_| any.sample(&logits)).collect();
    assert_eq!(seen.len(), 5);
    assert_eq!(
        Sampler::new(0.0, 0, 1.0, 1).sample(&[f32::NAN, 1.0, 1.0]),
        1,
        "greedy, ties to the lower id"
    );
}

#[test]
fn bad_generation_settings_name_the_field() {
    let device = Default::default();
    let model = config(vec![AttentionKind::Sliding { window: 3 }]).init::<B>(&device).unwrap();
    let field = |config: GenerateConfig, prompts: Vec<Vec<usize>>| match model
        .generate(&prompts, &config, &device)
    {
        Err(ModelError::Config { field, .. }) => field,
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(
        field(GenerateConfig::new().with_temperature(-1.0), vec![vec![1]]),
        "GenerateConfig.temperature"
    );
    assert_eq!(field(GenerateConfig::new().with_top_p(0.0), vec![vec![1]]), "GenerateConfig.top_p");
    assert_eq!(field(GenerateConfig::new(), vec![vec![]]), "generate.prompts");
    assert_eq!(field(GenerateConfig::new(), vec![vec![1], vec![1, 2]]), "generate.prompts");
    assert_eq!(field(GenerateConfig::new(), vec![vec![99]]), "generate.prompts");
}
