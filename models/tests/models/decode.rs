//! Decoding with the bounded cache (docs/semantics.md §7): token-by-token logits against the forward
//! pass, constant cache memory, StreamingLLM's position shift, and generation.

use burn::backend::NdArray;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::alibi::SlopeMagnitudes;
use swa_attention::{ModelBackend, ScoreFn};
use swa_models::layers::{
    AttentionKind, CachePositions, LayerError, SelfAttentionConfig, SwatPositions,
};
use swa_models::sampling::Sampler;
use swa_models::{DecoderConfig, GenerateConfig, ModelError};

use crate::decoding::{config, token_ids};
use crate::layer_forward::swat_ablation;
use crate::{max_abs, to_vec, values};

type B = NdArray;

/// f32 on ndarray: the step and the forward pass sum the same terms in different orders.
pub(crate) const DECODE_TOLERANCE: f32 = 2e-5;

/// Every windowed kind and the hybrid, with the largest reach of any head (span, segment, or
/// last global), over 4 heads and 2 kv heads (GQA).
pub(crate) fn windowed_kinds() -> Vec<(&'static str, Vec<AttentionKind>, usize)> {
    let swat = AttentionKind::Swat {
        window: 5,
        distance_heads: Some(1),
        magnitudes: SlopeMagnitudes::Code,
        score_fn: ScoreFn::Sigmoid { beta: 0.0 },
        positions: SwatPositions::AliRope,
    };
    vec![
        ("sliding", vec![AttentionKind::Sliding { window: 4 }], 4),
        ("mswa", vec![AttentionKind::MultiScale { windows: vec![1, 2, 4, 7] }], 7),
        ("swat", vec![swat], 5),
        ("sinks", vec![AttentionKind::Sinks { sinks: 2, window: 3 }], 5),
        (
            "longnet",
            vec![AttentionKind::LongNet { segments: vec![3, 8], dilations: vec![1, 3] }],
            8,
        ),
        (
            "longformer",
            vec![AttentionKind::Longformer {
                window: 2,
                dilations: vec![1, 2, 1, 3],
                globals: vec![0, 6],
                causal: true,
            }],
            7,
        ),
        (
            "hybrid",
            vec![
                AttentionKind::Linear { feature_dim: 4 },
                AttentionKind::Sliding { window: 3 },
                AttentionKind::MultiScale { windows: vec![2, 2, 6, 6] },
            ],
            6,
        ),
    ]
}

/// Token-by-token logits of the first `n` tokens, and the cache bytes after each step.
pub(crate) fn decode<D: ModelBackend>(
    model: &swa_models::Decoder<D>,
    n: usize,
    positions: CachePositions,
) -> (Vec<f32>, Vec<usize>) {
    decode_on(model, n, positions, &Default::default())
}

/// [`decode`] on `device`.
fn decode_on<D: ModelBackend>(
    model: &swa_models::Decoder<D>,
    n: usize,
    positions: CachePositions,
    device: &D::Device,
) -> (Vec<f32>, Vec<usize>) {
    let mut cache = model.cache(1, positions, device).unwrap();
    let (mut logits, mut bytes) = (Vec::new(), Vec::new());
    for token in token_ids(n) {
        let token = Tensor::<D, 1, Int>::from_data(TensorData::new(vec![token], [1]), device);
        logits.extend(to_vec(model.step(token, &mut cache)));
        bytes.push(cache.bytes());
    }
    (logits, bytes)
}

/// The windowed kinds whose decoding costs lavapipe (CI's Vulkan driver) minutes of shader
/// compiles that no other kind needs: Longformer's global tokens (about 3 minutes of one core)
/// and the hybrid's linear layers. CI decodes the others on wgpu; an ignored test these, and
/// every kind decodes on ndarray and flex.
#[cfg(feature = "wgpu")]
const SLOW_ON_LAVAPIPE: [&str; 2] = ["longformer", "hybrid"];

/// [`windowed_kinds`] that are (`slow`) or are not in [`SLOW_ON_LAVAPIPE`].
#[cfg(feature = "wgpu")]
fn kinds_on_lavapipe(slow: bool) -> Vec<(&'static str, Vec<AttentionKind>, usize)> {
    let mut kinds = windowed_kinds();
    kinds.retain(|(name, _, _)| SLOW_ON_LAVAPIPE.contains(name) == slow);
    kinds
}

/// Each of `kinds` decodes on `D` as its forward pass computes, with memory that stops growing
/// once the windows are full.
fn check_decoding<D: ModelBackend>(
    kinds: Vec<(&'static str, Vec<AttentionKind>, usize)>,
    backend: &str,
    device: &D::Device,
) {
    for (name, attention, reach) in kinds {
        let n = 3 * reach + 4;
        let model = config(attention).init::<D>(device).unwrap();
        let tokens = Tensor::<D, 2, Int>::from_data(TensorData::new(token_ids(n), [1, n]), device);
        let forward = to_vec(model.forward(tokens).unwrap());
        let (stepped, bytes) = decode_on(&model, n, CachePositions::Absolute, device);
        let error = max_abs(&forward, &stepped);
        assert!(error <= DECODE_TOLERANCE, "{name} on {backend}: decoding differs by {error}");
        let full = &bytes[reach + 1..];
        assert!(
            full.iter().all(|b| *b == full[0]),
            "{name} on {backend}: cache grew after the window filled: {bytes:?}"
        );
    }
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

/// wgpu: the CubeCL decode kernel and append (`swa_attention::kernel`) inside fusion, against
/// the forward pass through the windowed kernels, on the kinds not [`SLOW_ON_LAVAPIPE`].
#[cfg(feature = "wgpu")]
#[test]
fn the_decode_kernel_reproduces_the_forward_pass_on_wgpu() {
    let Some(device) = crate::wgpu_devices::lease() else {
        return;
    };
    check_decoding::<burn::backend::Wgpu>(kinds_on_lavapipe(false), "wgpu", &device);
}

/// The same on the kinds [`SLOW_ON_LAVAPIPE`].
#[cfg(feature = "wgpu")]
#[test]
#[ignore = "about 4 minutes of lavapipe's shader compiles: `-- --ignored slow_kinds_decode`"]
fn the_slow_kinds_decode_as_their_forward_pass_on_wgpu() {
    let Some(device) = crate::wgpu_devices::lease() else {
        return;
    };
    check_decoding::<burn::backend::Wgpu>(kinds_on_lavapipe(true), "wgpu", &device);
}

/// wgpu: the CubeCL append writes a buffer in place only when no fork shares it.
#[cfg(feature = "wgpu")]
#[test]
fn a_forked_cache_decodes_independently_under_the_kernels_on_wgpu() {
    let Some(device) = crate::wgpu_devices::lease() else {
        return;
    };
    forked_caches_decode_independently::<burn::backend::Wgpu>(&device);
}

/// A cloned cache decodes on its own: stepping the fork leaves the original as it was, and
/// both give the same logits for the same tokens (the flatness benchmark forks caches so).
fn forked_caches_decode_independently<D: ModelBackend>(device: &D::Device) {
    for (name, attention, reach) in windowed_kinds() {
        let model = config(attention).init::<D>(device).unwrap();
        let ids = token_ids(2 * reach + 6);
        let (prefix, rest) = ids.split_at(reach + 3);
        let token =
            |id: i64| Tensor::<D, 1, Int>::from_data(TensorData::new(vec![id], [1]), device);
        let mut original = model.cache(1, CachePositions::Absolute, device).unwrap();
        for &id in prefix {
            model.step(token(id), &mut original);
        }
        let mut fork = original.clone();
        let forked: Vec<f32> =
            rest.iter().flat_map(|&id| to_vec(model.step(token(id), &mut fork))).collect();
        assert_eq!(original.len(), prefix.len(), "{name}: stepping the fork moved the original");
        let resumed: Vec<f32> =
            rest.iter().flat_map(|&id| to_vec(model.step(token(id), &mut original))).collect();
        assert_eq!(forked, resumed, "{name}: the fork and the original decode differently");
    }
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
#[test]
fn sinks_shift_positions_to_cache_slots() {
    let device = Default::default();
    let (sinks, window, d, n) = (2, 3, 16, 14);
    let kind = AttentionKind::Sinks { sinks, window };
    let layer = SelfAttentionConfig::new(d, 4, 2, kind).init::<B>(&device).unwrap();
    let x = Tensor::<B, 3>::from_data(TensorData::new(values(7, n * d), [1, n, d]), &device);
    let mut cache = layer.cache(1, CachePositions::Streaming, &device).unwrap();
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
    let device = Default::default();
    let (window, d, n) = (4, 16, 11);
    let x = Tensor::<B, 3>::from_data(TensorData::new(values(7, n * d), [1, n, d]), &device);
    for kind in swat_ablation(window) {
        let layer = SelfAttentionConfig::new(d, 4, 2, kind.clone()).init::<B>(&device).unwrap();
        let forward = to_vec(layer.forward(x.clone()).unwrap());
        let mut absolute = layer.cache(1, CachePositions::Absolute, &device).unwrap();
        let mut streaming = layer.cache(1, CachePositions::Streaming, &device).unwrap();
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
