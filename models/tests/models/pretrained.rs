//! The options of pretrained architectures (docs/semantics.md §9) that no checkpoint fixture
//! pins alone: learned sink logits against a dense reference with gradients, prefill against
//! stepping for every kind, attention maps, and decoding with every Gemma-style option on. The
//! checkpoints themselves are compared with transformers in `swa-models`' unit tests.

use burn::backend::NdArray;
use burn::tensor::{Bool, Int, Tensor, TensorData, activation::softmax};
use swa_attention::{ModelBackend, RopeScaling, ScoreOptions, WindowSpec, windowed_attention};
use swa_models::layers::{AttentionKind, CachePositions, with_sink_logits};
use swa_models::{Architecture, DecoderConfig, MlpActivation};

use crate::decode::decode;
use crate::decoding::{DECODE_TOLERANCE, windowed_kinds};
use crate::decoding::{config, token_ids};
use crate::{Reference, max_abs, tensor, to_vec, values};

type B = NdArray;

/// f32 on ndarray, the windowed core against a dense softmax over one more column.
/// Tolerances of the learned-sink test, output and gradients: the core's f32 tolerances
/// (docs/testing.md, "Tolerances": `o` 2e-5, gradients 1e-4 for inputs in [−1, 1)), relative to
/// the reference's largest magnitude where that exceeds 1. The two sides are two f32
/// formulations of one function (one softmax with an extra column, against `o·σ(lse − s)`),
/// whose rounding differs with the order of their sums and with the CPU's kernels: dq differed
/// by 4.4e-5 on a Zen 3 (AVX2) machine and by less than 1e-5 on a Zen 5 (AVX-512).
const SINK_OUT_TOLERANCE: f32 = 2e-5;
const SINK_GRAD_TOLERANCE: f32 = 1e-4;

/// Learned sinks as gpt-oss computes them: the scores of the visible keys and one more column
/// of score `s_h` in one softmax, that column then dropped.
fn sinks_reference(
    q: Tensor<Reference, 4>,
    k: Tensor<Reference, 4>,
    v: Tensor<Reference, 4>,
    sinks: Tensor<Reference, 1>,
    spec: &WindowSpec,
) -> Tensor<Reference, 4> {
    let [batch, heads, n, d] = q.dims();
    let device = q.device();
    let mask = spec.mask(0..heads, 0..n, 0..n, n);
    let hidden =
        Tensor::<Reference, 4, Bool>::from_data(TensorData::new(mask, [1, heads, n, n]), &device)
            .bool_not()
            .expand([batch, heads, n, n]);
    let scores = q
        .matmul(k.swap_dims(2, 3))
        .div_scalar((d as f32).sqrt())
        .mask_fill(hidden, f32::NEG_INFINITY);
    let sink = sinks.reshape([1, heads, 1, 1]).expand([batch, heads, n, 1]);
    let weights = softmax(Tensor::cat(vec![scores, sink], 3), 3).narrow(3, 0, n);
    weights.matmul(v)
}

#[test]
fn learned_sink_logits_match_a_softmax_with_one_more_column_and_its_gradients() {
    let (batch, heads, n, d) = (2, 4, 13, 8);
    let spec = WindowSpec::sliding(heads, heads, 4).unwrap();
    let leaf = |seed| tensor::<Reference>(seed, [batch, heads, n, d]).require_grad();
    let sinks = || {
        let s = values(9, heads).iter().map(|x| 2.0 * x).collect::<Vec<_>>();
        Tensor::<Reference, 1>::from_data(TensorData::new(s, [heads]), &Default::default())
            .require_grad()
    };
    let weights = Tensor::<Reference, 4>::from_data(
        TensorData::new(values(10, batch * heads * n * d), [batch, heads, n, d]),
        &Default::default(),
    );
    let run = |reference: bool| {
        let (q, k, v, s) = (leaf(1), leaf(2), leaf(3), sinks());
        let o = match reference {
            true => sinks_reference(q.clone(), k.clone(), v.clone(), s.clone(), &spec),
            false => {
                let (o, lse) = windowed_attention(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &spec,
                    &ScoreOptions::softmax(),
                )
                .unwrap();
                with_sink_logits(o, lse, s.clone())
            }
        };
        let grads = (o.clone() * weights.clone()).sum().backward();
        let grad = |t: &Tensor<Reference, 4>| to_vec(t.grad(&grads).unwrap());
        (to_vec(o), grad(&q), grad(&k), grad(&v), to_vec(s.grad(&grads).unwrap()))
    };
    let (got, want) = (run(false), run(true));
    for (name, g, w, tolerance) in [
        ("o", &got.0, &want.0, SINK_OUT_TOLERANCE),
        ("dq", &got.1, &want.1, SINK_GRAD_TOLERANCE),
        ("dk", &got.2, &want.2, SINK_GRAD_TOLERANCE),
        ("dv", &got.3, &want.3, SINK_GRAD_TOLERANCE),
        ("ds", &got.4, &want.4, SINK_GRAD_TOLERANCE),
    ] {
        let magnitude = w.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        let error = max_abs(g, w);
        assert!(
            error <= tolerance * magnitude,
            "{name} differs by {error} (magnitude {magnitude})"
        );
    }
}

/// One forward pass over the prompt leaves the cache that stepping through it leaves: its
/// logits are the forward pass's, the steps after it continue the forward pass, and it holds
/// as many bytes.
fn check_prefill<D: ModelBackend>(backend: &str) {
    let device = Default::default();
    for (name, attention, reach) in windowed_kinds() {
        let (n, prompt) = (3 * reach + 4, 2 * reach + 1);
        let model = config(attention).init::<D>(&device).unwrap();
        let ids = token_ids(n);
        let tokens = |ids: &[i64]| {
            Tensor::<D, 2, Int>::from_data(TensorData::new(ids.to_vec(), [1, ids.len()]), &device)
        };
        let forward = to_vec(model.forward(tokens(&ids)).unwrap());
        let (logits, mut cache) = model.prefill(tokens(&ids[..prompt])).unwrap();
        let mut got = to_vec(logits);
        let (_, stepped_bytes) = decode(&model, prompt, CachePositions::Absolute);
        assert_eq!(cache.bytes(), *stepped_bytes.last().unwrap(), "{name} on {backend}: bytes");
        for &id in &ids[prompt..] {
            let token = Tensor::<D, 1, Int>::from_data(TensorData::new(vec![id], [1]), &device);
            got.extend(to_vec(model.step(token, &mut cache)));
        }
        // The prefill gives the prompt's last position, the steps every one after it.
        let vocab = forward.len() / n;
        let error = max_abs(&forward[(prompt - 1) * vocab..], &got);
        assert!(
            error <= DECODE_TOLERANCE,
            "{name} on {backend}: prefill + steps differ by {error}"
        );
    }
}

#[test]
fn prefill_leaves_the_cache_that_stepping_leaves() {
    check_prefill::<B>("ndarray");
}

#[cfg(feature = "flex")]
#[test]
fn prefill_on_the_fused_cpu_kernel_leaves_the_cache_that_stepping_leaves() {
    check_prefill::<burn::backend::Flex>("flex");
}

/// Every option of docs/semantics.md §9 at once, on sliding and full layers with a head width
/// of its own: decoding (after a prefill too) reproduces the forward pass.
#[test]
fn a_model_with_every_pretrained_option_decodes_as_it_runs_forward() {
    let device = Default::default();
    let kinds = vec![AttentionKind::Sliding { window: 3 }, AttentionKind::Full];
    let architecture = Architecture {
        head_dim: Some(6),
        mlp_hidden: Some(24),
        mlp_activation: MlpActivation::GeluTanh,
        norm_epsilon: 1e-5,
        norm_unit_offset: true,
        post_norms: true,
        scale_embeddings: true,
        qkv_bias: true,
        attention_scale: Some(0.3),
        attention_softcap: Some(2.0),
        final_softcap: Some(3.0),
        qk_norm: true,
        sink_logits: true,
        rope_scaling: Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8,
        }),
        local_rope_base: Some(100.0),
        global_layers: vec![1, 3],
        relative_positions: false,
    };
    let config = DecoderConfig::new(kinds)
        .with_vocab_size(32)
        .with_d_model(16)
        .with_kv_heads(Some(2))
        .with_rope_base(1e6)
        .with_architecture(Some(architecture));
    let model = config.init::<B>(&device).unwrap();
    let n = 11;
    let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(token_ids(n), [1, n]), &device);
    let forward = to_vec(model.forward(tokens.clone()).unwrap());
    let (stepped, _) = decode(&model, n, CachePositions::Absolute);
    assert!(max_abs(&forward, &stepped) <= DECODE_TOLERANCE, "steps");
    let (prefilled, _) = model.prefill(tokens).unwrap();
    let last = &forward[forward.len() / n * (n - 1)..];
    assert!(max_abs(last, &to_vec(prefilled)) <= DECODE_TOLERANCE, "prefill");
    assert!(forward.iter().all(|z| z.abs() < 3.0), "the final softcap bounds the logits");
}

/// A map's row is the query's weights over the keys: zero outside its window, summing to 1
/// (softmax), or to less with learned sinks.
#[test]
fn attention_maps_are_the_weights_of_each_query_inside_its_window() {
    let device = Default::default();
    let n = 9;
    let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(token_ids(n), [1, n]), &device);
    for sinks in [false, true] {
        let kinds = vec![AttentionKind::Sliding { window: 3 }, AttentionKind::Full];
        let sinks_on = Architecture { sink_logits: sinks, ..Architecture::default() };
        let model = config(kinds).with_architecture(Some(sinks_on)).init::<B>(&device).unwrap();
        let maps = model.attention_maps(tokens.clone(), &[1, 0]).unwrap();
        for (map, window) in maps.into_iter().zip([n, 3]) {
            let values = to_vec(map);
            for (row, weights) in values.chunks(n).enumerate() {
                let i = row % n;
                let outside = weights.iter().enumerate().filter(|&(j, _)| j > i || i - j >= window);
                assert!(outside.map(|(_, w)| w.abs()).fold(0.0, f32::max) == 0.0, "row {row}");
                let total: f32 = weights.iter().sum();
                match sinks {
                    false => assert!((total - 1.0).abs() < 1e-5, "row {row} sums to {total}"),
                    true => assert!(total > 0.0 && total < 1.0, "row {row} sums to {total}"),
                }
            }
        }
    }
    let model = config(vec![AttentionKind::Full]).init::<B>(&device).unwrap();
    assert!(model.attention_maps(tokens, &[5]).is_err(), "a layer past the last is named");
}
