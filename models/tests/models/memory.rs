//! Segment memory (Transformer-XL §3.2; docs/semantics.md §10): a stream read segment by segment
//! with memory gives the logits of one forward over the whole stream, for every kind that keeps
//! a memory; gradients stop at the kept states; kinds that cannot keep one are refused by name.

use burn::module::{ModuleVisitor, Param};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;
use swa_models::layers::{AttentionKind, LayerError, SelfAttention, SelfAttentionConfig};
use swa_models::{Architecture, DecoderConfig, ModelError};

use crate::decoding::{DECODE_TOLERANCE, windowed_kinds};
use crate::decoding::{config, token_ids};
use crate::{Reference, max_abs, to_vec, values};

type B = burn::backend::NdArray;

/// `[batch, n]` token ids on `device`, each row its own stream.
fn streams_on<D: Backend>(batch: usize, n: usize, device: &D::Device) -> Tensor<D, 2, Int> {
    let ids: Vec<i64> = (0..batch).flat_map(|b| token_ids(n + b).split_off(b)).collect();
    Tensor::from_data(TensorData::new(ids, [batch, n]), device)
}

/// [`streams_on`] the reference backend.
fn streams(batch: usize, n: usize) -> Tensor<B, 2, Int> {
    streams_on::<B>(batch, n, &Default::default())
}

/// The kinds that keep a memory: every windowed kind (Longformer's global tokens at 0 and 6, in
/// the first segment), LongNet with segments that tile 8, full attention, the hybrid, and
/// Transformer-XL's relative positions on sliding windows and MSWA.
fn kinds_with_memory() -> Vec<(&'static str, DecoderConfig)> {
    let mut kinds: Vec<(&str, DecoderConfig)> = windowed_kinds()
        .into_iter()
        .filter(|(name, _, _)| *name != "longnet")
        .map(|(name, kinds, _)| (name, config(kinds)))
        .collect();
    let longnet = AttentionKind::LongNet { segments: vec![4, 8], dilations: vec![1, 2] };
    kinds.push(("longnet, segments tiling 8", config(vec![longnet])));
    let longformer = AttentionKind::Longformer {
        window: 2,
        dilations: vec![1, 2, 1, 3],
        globals: vec![],
        causal: true,
    };
    kinds.push(("longformer decoder, no globals", config(vec![longformer])));
    kinds.push(("full", config(vec![AttentionKind::Full])));
    let relative = Some(Architecture { relative_positions: true, ..Architecture::default() });
    for (name, kind) in [
        ("relative sliding", AttentionKind::Sliding { window: 5 }),
        ("relative MSWA", AttentionKind::MultiScale { windows: vec![1, 3, 5, 9] }),
    ] {
        kinds.push((name, config(vec![kind]).with_architecture(relative.clone())));
    }
    kinds
}

/// With parameters frozen, segments of 8 (and of 3, shorter than some windows) with memory
/// give the logits of one forward over the 24 tokens, batch of 2, on `D` (on flex through its
/// fused kernels). Not on wgpu: there the stream's many small shapes compile 90 s of fused
/// kernels on lavapipe, and the kernels' part (relative scores, query offsets over kept rows)
/// is tested in `attention/tests/attention/kernel.rs`.
fn stream_matches_one_forward<D: ModelBackend>(device: &D::Device) {
    let streams = |batch, n| streams_on::<D>(batch, n, device);
    for (name, config) in kinds_with_memory() {
        let model = config.init::<D>(device).unwrap();
        let whole = to_vec(model.forward(streams(2, 24)).unwrap());
        // LongNet's segments tile 8; Longformer's global position 6 lies in a first segment of 8.
        let whole_first = name.starts_with("longnet") || name == "longformer";
        let segments: &[usize] = if whole_first { &[8] } else { &[8, 3] };
        for &segment in segments {
            let mut memory = model.memory(2, 24, device).unwrap();
            let mut logits = Vec::new();
            for start in (0..24).step_by(segment) {
                let tokens = streams(2, 24).narrow(1, start, segment.min(24 - start));
                logits.push(model.forward_in_stream(tokens, &mut memory).unwrap());
            }
            assert_eq!(memory.start(), 24);
            let streamed = to_vec(Tensor::cat(logits, 1));
            let error = max_abs(&streamed, &whole);
            eprintln!("{name}, segments of {segment}: max-abs {error:e}");
            assert!(error < DECODE_TOLERANCE, "{name}, segments of {segment}: {error:e}");
        }
    }
}

#[test]
fn a_stream_in_segments_with_memory_matches_one_forward() {
    stream_matches_one_forward::<B>(&Default::default());
}

#[cfg(feature = "flex")]
#[test]
fn a_stream_in_segments_with_memory_matches_one_forward_on_flex() {
    stream_matches_one_forward::<burn::backend::Flex>(&Default::default());
}

/// A windowed layer's memory stops growing at its widest reach (less one, the query's own
/// position) and its sinks; full attention keeps its memory length.
#[test]
fn memory_is_bounded_by_the_widest_window() {
    let device = Default::default();
    let bytes_per_row = 2 * 16 * 4;
    for (kinds, full_memory, rows) in [
        (vec![AttentionKind::MultiScale { windows: vec![1, 2, 4, 7] }], 0, 6),
        (vec![AttentionKind::Sinks { sinks: 2, window: 3 }], 0, 4),
        (vec![AttentionKind::Full], 10, 10),
    ] {
        let model = config(kinds.clone()).with_layers(1).init::<B>(&device).unwrap();
        let mut memory = model.memory(2, full_memory, &device).unwrap();
        for _ in 0..4 {
            model.forward_in_stream(streams(2, 5), &mut memory).unwrap();
        }
        assert_eq!(memory.layer_bytes(), [rows * bytes_per_row], "{kinds:?}");
    }
}

#[test]
fn kinds_without_a_bounded_memory_are_refused_by_name() {
    let device = Default::default();
    let encoder = AttentionKind::Longformer {
        window: 2,
        dilations: vec![1; 4],
        globals: vec![],
        causal: false,
    };
    let model = config(vec![encoder]).init::<B>(&device).unwrap();
    match model.memory(1, 8, &device) {
        Err(ModelError::Layer { layer: 0, source }) => {
            assert_eq!(source, LayerError::MemoryUnsupported { kind: "bidirectional Longformer" })
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    // A global query sees every earlier position: the global tokens (0 and 6) must lie in the
    // first segment.
    let globals = windowed_kinds().into_iter().find(|(name, _, _)| *name == "longformer").unwrap();
    let model = config(globals.1).init::<B>(&device).unwrap();
    let mut memory = model.memory(1, 8, &device).unwrap();
    let error = model.forward_in_stream(streams(1, 4), &mut memory).unwrap_err();
    assert!(error.to_string().contains("global position 6 is past"), "{error}");
    let longnet = AttentionKind::LongNet { segments: vec![3, 8], dilations: vec![1, 3] };
    let model = config(vec![longnet]).init::<B>(&device).unwrap();
    let mut memory = model.memory(1, 8, &device).unwrap();
    let error = model.forward_in_stream(streams(1, 8), &mut memory).unwrap_err();
    assert!(
        error.to_string().contains("attention segment 3 (a LongNet branch's) does not divide"),
        "{error}"
    );
    assert_eq!(memory.start(), 0, "a failed segment leaves the memory as it was");
}

/// Every parameter gradient of `module`, flattened, in visiting order.
fn parameter_grads<M: burn::module::Module<Reference>>(
    module: &M,
    grads: &<Reference as AutodiffBackend>::Gradients,
) -> Vec<f32> {
    struct Collect<'a> {
        grads: &'a <Reference as AutodiffBackend>::Gradients,
        all: Vec<f32>,
    }
    impl ModuleVisitor<Reference> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Reference, D>>) {
            let grad = param.val().grad(self.grads).expect("every parameter gets a gradient");
            self.all.extend(to_vec(grad));
        }
    }
    let mut visitor = Collect { grads, all: Vec::new() };
    module.visit(&mut visitor);
    visitor.all
}

/// A layer's second segment with memory against one forward over both segments whose first
/// segment's inputs are detached: the same outputs, and the same gradients of the second
/// segment's inputs and of every parameter (the stop-gradient of Transformer-XL §3.2; for
/// linear attention, whose memory is its sums, of the inputs).
#[test]
fn gradients_stop_at_the_kept_states() {
    let device = Default::default();
    let relative =
        swa_models::layers::LayerOptions { relative_positions: true, ..Default::default() };
    let layers: Vec<(&str, SelfAttentionConfig)> = vec![
        (
            "MSWA",
            SelfAttentionConfig::new(
                16,
                4,
                2,
                AttentionKind::MultiScale { windows: vec![1, 2, 4, 7] },
            ),
        ),
        ("sinks", SelfAttentionConfig::new(16, 4, 2, AttentionKind::Sinks { sinks: 2, window: 3 })),
        ("linear", SelfAttentionConfig::new(16, 4, 4, AttentionKind::Linear { feature_dim: 4 })),
        (
            "relative MSWA",
            SelfAttentionConfig::new(
                16,
                4,
                2,
                AttentionKind::MultiScale { windows: vec![1, 3, 5, 9] },
            )
            .with_options(relative),
        ),
    ];
    for (name, config) in layers {
        let layer: SelfAttention<Reference> = config.init(&device).unwrap();
        let input = |seed, n: usize| {
            let data = TensorData::new(values(seed, 2 * n * 16), [2, n, 16]);
            Tensor::<Reference, 3>::from_data(data, &device).require_grad()
        };
        let (first, second) = (input(1, 10), input(2, 6));
        let weights = Tensor::<Reference, 3>::from_data(
            TensorData::new(values(3, 2 * 6 * 16), [2, 6, 16]),
            &device,
        );
        let mut memory = layer.memory(2, 16, &device).unwrap();
        layer.forward_in_stream(first.clone(), &mut memory).unwrap();
        let streamed = layer.forward_in_stream(second.clone(), &mut memory).unwrap();
        let grads = (streamed.clone() * weights.clone()).sum().backward();
        let (streamed_x, streamed_params) =
            (to_vec(second.grad(&grads).unwrap()), parameter_grads(&layer, &grads));
        assert!(first.grad(&grads).is_none(), "{name}: the kept states are detached");

        let joined = Tensor::cat(vec![first.clone().detach(), second.clone()], 1);
        let reference = layer.forward(joined).unwrap().narrow(1, 10, 6);
        let grads = (reference.clone() * weights).sum().backward();
        let checks = [
            ("outputs", to_vec(streamed), to_vec(reference)),
            ("input gradients", streamed_x, to_vec(second.grad(&grads).unwrap())),
            ("parameter gradients", streamed_params, parameter_grads(&layer, &grads)),
        ];
        for (what, got, want) in checks {
            // Linear attention keeps its sums, not its inputs: the earlier segment's keys are
            // not recomputed with the current weights, so its weights get no gradient through
            // them (docs/semantics.md §10), unlike the reference's.
            if name == "linear" && what == "parameter gradients" {
                continue;
            }
            let error = max_abs(&got, &want);
            assert!(error < 1e-5, "{name}: {what} differ by {error:e}");
        }
    }
}
