//! A mechanism of one's own, kept here in the tests: attention within fixed chunks (each query
//! sees the earlier keys of its own chunk of `size` positions). It is one `impl Mechanism`
//! that reuses a visibility rule of the core (LongNet's segments, one branch, no dilation),
//! and a layer built around it ([`SelfAttentionConfig::init_mechanism`]) runs as a window:
//! forward and gradients against full attention over each chunk alone, decoding against the
//! forward pass, a stream of segments against the forward pass, and the fused CPU kernels
//! (flex) against the tensor ops (ndarray).

use burn::module::Module;
use burn::tensor::{Tensor, TensorData};

use swa_attention::{AttentionError, ModelBackend, WindowSpec};
use swa_models::layers::{
    AttentionKind, CachePositions, Mechanism, SelfAttention, SelfAttentionConfig,
};

use crate::decoding::DECODE_TOLERANCE;
use crate::layer_reference::Seeded;
use crate::{Reference, max_abs, to_vec, values};

/// Attention within fixed chunks of `size` positions.
struct Chunks {
    size: usize,
}

impl Mechanism for Chunks {
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        WindowSpec::longnet_branch(heads, kv_heads, self.size, 1)
    }

    fn name(&self) -> &'static str {
        "chunks"
    }

    fn label(&self, _head: usize) -> String {
        format!("chunks of {}", self.size)
    }
}

/// f32 tolerance of one layer against another summing in another order.
const TOLERANCE: f32 = 1e-5;

/// Model width, heads, kv heads, chunk size, sequence length (a partial last chunk).
const D: usize = 16;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const SIZE: usize = 5;
const N: usize = 13;

/// The chunked layer and a full-attention layer, with the same seeded weights on every
/// backend, on `device`.
fn layers<B: ModelBackend>(device: &B::Device) -> (SelfAttention<B>, SelfAttention<B>) {
    let config = SelfAttentionConfig::new(D, HEADS, KV_HEADS, AttentionKind::Full);
    let chunked = config.init_mechanism(&Chunks { size: SIZE }, device).expect("a valid layer");
    let full = config.init::<B>(device).expect("a valid layer");
    (chunked.map(&mut Seeded(500)), full.map(&mut Seeded(500)))
}

/// A seeded `[2, N, D]` input on `device`.
fn input<B: ModelBackend>(device: &B::Device) -> Tensor<B, 3> {
    Tensor::from_data(TensorData::new(values(11, 2 * N * D), [2, N, D]), device)
}

/// Full attention over each chunk of `x` alone, the chunks' outputs side by side.
fn chunk_by_chunk<B: ModelBackend>(full: &SelfAttention<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let chunks = (0..N).step_by(SIZE).map(|start| {
        let rows = x.clone().narrow(1, start, SIZE.min(N - start));
        full.forward(rows).expect("full attention runs")
    });
    Tensor::cat(chunks.collect(), 1)
}

#[test]
fn a_mechanism_of_ones_own_runs_forward_and_backward() {
    let device = Default::default();
    let (chunked, full) = layers::<Reference>(&device);
    let x = input::<Reference>(&device).require_grad();
    let got = chunked.forward(x.clone()).unwrap();
    let want = chunk_by_chunk(&full, x.clone());
    assert!(max_abs(&to_vec(got.clone()), &to_vec(want.clone())) <= TOLERANCE);
    let grad = |y: Tensor<Reference, 3>| {
        let grads = (y * input::<Reference>(&device)).sum().backward();
        to_vec(x.grad(&grads).expect("x takes part"))
    };
    let error = max_abs(&grad(got), &grad(want));
    assert!(error <= TOLERANCE, "gradients differ by {error}");
}

#[test]
fn a_mechanism_of_ones_own_decodes_as_it_runs_forward() {
    let device = Default::default();
    let (chunked, _) = layers::<Reference>(&device);
    let x = input::<Reference>(&device);
    let forward = to_vec(chunked.forward(x.clone()).unwrap());
    let mut cache = chunked.cache(2, CachePositions::Absolute, &device).unwrap();
    let steps = (0..N).map(|i| chunked.step(x.clone().narrow(1, i, 1), &mut cache));
    let stepped = to_vec(Tensor::cat(steps.collect(), 1));
    let error = max_abs(&forward, &stepped);
    assert!(error <= DECODE_TOLERANCE, "decoding differs by {error}");
}

/// flex's fused forward and decode kernels against ndarray's tensor ops, same weights.
#[cfg(feature = "flex")]
#[test]
fn a_mechanism_of_ones_own_runs_on_the_fused_cpu_kernels() {
    use burn::backend::Flex;
    let (reference, _) = layers::<Reference>(&Default::default());
    let device = Default::default();
    let (flex, _) = layers::<Flex>(&device);
    let want = to_vec(reference.forward(input(&Default::default())).unwrap());
    let x = input::<Flex>(&device);
    let error = max_abs(&to_vec(flex.forward(x.clone()).unwrap()), &want);
    assert!(error <= TOLERANCE, "flex's forward differs by {error}");
    let mut cache = flex.cache(2, CachePositions::Absolute, &device).unwrap();
    let steps = (0..N).map(|i| flex.step(x.clone().narrow(1, i, 1), &mut cache));
    let error = max_abs(&to_vec(Tensor::cat(steps.collect(), 1)), &want);
    assert!(error <= DECODE_TOLERANCE, "flex's decoding differs by {error}");
}

/// Read as a stream of segments that its chunks tile, the layer keeps nothing and gives the rows
/// of one forward pass; a segment its chunks do not tile is refused, naming the chunk.
#[test]
fn a_mechanism_of_ones_own_reads_a_stream() {
    let device = Default::default();
    let (chunked, _) = layers::<Reference>(&device);
    let x = input::<Reference>(&device).narrow(1, 0, 2 * SIZE);
    let want = chunked.forward(x.clone()).unwrap();
    let mut memory = chunked.memory(2, 0, &device).unwrap();
    let segments = [0, SIZE].map(|start| {
        chunked.forward_in_stream(x.clone().narrow(1, start, SIZE), &mut memory).unwrap()
    });
    let got = Tensor::cat(segments.to_vec(), 1);
    assert!(max_abs(&to_vec(got), &to_vec(want)) <= TOLERANCE);
    let error = chunked.check_stream(SIZE + 2).unwrap_err();
    assert!(error.to_string().contains(&format!("segment {SIZE}")), "{error}");
}
