//! The small decoder that the decoding tests run (swa-models' on the CPU backends, the facade's
//! on wgpu) and the launch counts, the tokens they feed it, every windowed kind, and the checks
//! that decoding reproduces the forward pass.

use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::alibi::SlopeMagnitudes;
use swa_attention::{ModelBackend, ScoreFn};
use swa_models::DecoderConfig;
use swa_models::layers::{AttentionKind, CachePositions, SwatPositions};

use crate::tensors::{max_abs, to_vec};

/// A decoder of `attention` (at least 2 layers): a vocabulary of 32, `d_model` 16, 2 kv heads.
pub fn config(attention: Vec<AttentionKind>) -> DecoderConfig {
    let layers = attention.len().max(2);
    DecoderConfig::new(attention)
        .with_vocab_size(32)
        .with_d_model(16)
        .with_layers(layers)
        .with_kv_heads(Some(2))
}

/// `n` fixed tokens of [`config`]'s vocabulary.
pub fn token_ids(n: usize) -> Vec<i64> {
    (0..n).map(|i| ((i * 7919 + 13) % 32) as i64).collect()
}

/// f32 on ndarray: the step and the forward pass sum the same terms in different orders.
pub const DECODE_TOLERANCE: f32 = 2e-5;

/// Every windowed kind and the hybrid, with the largest reach of any head (span, segment, or
/// last global), over 4 heads and 2 kv heads (GQA).
pub fn windowed_kinds() -> Vec<(&'static str, Vec<AttentionKind>, usize)> {
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

/// Token-by-token logits of the first `n` tokens on `device`, and the cache bytes after each step.
pub fn decode_on<D: ModelBackend>(
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

/// Each of `kinds` decodes on `D` as its forward pass computes, with memory that stops growing
/// once the windows are full.
pub fn check_decoding<D: ModelBackend>(
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

/// A cloned cache decodes on its own: stepping the fork leaves the original as it was, and
/// both give the same logits for the same tokens (the flatness benchmark forks caches so).
pub fn forked_caches_decode_independently<D: ModelBackend>(device: &D::Device) {
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
