//! The CubeCL decode step and append (`swa_attention::kernel`: each one launch per layer over
//! every ring buffer of its cache, visibility decided on the device unless the spec has global
//! tokens) against the cache's tensor ops on ndarray, step by step past the point where the
//! rings wrap (from there on the append is the kernel's): one buffer
//! and several (MSWA's window groups), GQA, sinks, LongNet's branches, globals (the host's
//! mask), ALiBi with a softcap, sigmoid, head dims below, at and above a multiple of the cube's
//! 32 threads, two batch rows; RoPE, which both kernels turn their row by, at every even head
//! dim, and none at the odd one.

use burn::backend::NdArray;
use burn::backend::wgpu::Wgpu;
use burn::tensor::{Tensor, TensorData};
use swa_attention::{RopeConfig, ScoreOptions, WindowSpec, alibi};
use swa_models::layers::{CachePositions, KvCache, branch_specs};

use crate::decoding::DECODE_TOLERANCE;
use crate::wgpu_devices::lease;
use crate::{max_abs, to_vec, values};

/// Appends `steps` random positions to a cache on each backend and compares every step's
/// attention output: max-abs within the decoding tolerance (f32, sums in another order). Keys and
/// queries are rotated by RoPE when `dim` is even (by the cache's tensor ops on the reference).
fn decode_case(what: &str, specs: Vec<WindowSpec>, opts: ScoreOptions, dim: usize, steps: usize) {
    let Some(device) = lease() else {
        return;
    };
    let (heads, kv_heads) = (specs[0].num_heads(), specs[0].kv_heads());
    let batch = 2;
    let absolute = CachePositions::Absolute;
    let mut reference = KvCache::<NdArray>::new(specs.clone(), opts.clone(), absolute).unwrap();
    let mut kernel = KvCache::<Wgpu>::new(specs, opts, absolute).unwrap();
    let seed = what.len() as u64 * 7919 + dim as u64;
    let mut worst = 0f32;
    let rope = dim.is_multiple_of(2).then(|| RopeConfig::new(dim).init().expect("even dim"));
    let rope = rope.as_ref();
    for step in 0..steps {
        let draw = |heads: usize, part: u64| {
            let shape = [batch, heads, 1, dim];
            TensorData::new(values(seed + 3 * step as u64 + part, batch * heads * dim), shape)
        };
        let (q, k, v) = (draw(heads, 0), draw(kv_heads, 1), draw(kv_heads, 2));
        let on_reference =
            |d: &TensorData| Tensor::<NdArray, 4>::from_data(d.clone(), &Default::default());
        let on_kernel = |d: &TensorData| Tensor::<Wgpu, 4>::from_data(d.clone(), &*device);
        reference.append(on_reference(&k), on_reference(&v), rope);
        kernel.append(on_kernel(&k), on_kernel(&v), rope);
        let want = to_vec(reference.attend(on_reference(&q), rope));
        let got = to_vec(kernel.attend(on_kernel(&q), rope));
        let error = max_abs(&got, &want);
        assert!(
            error <= DECODE_TOLERANCE,
            "{what}, d = {dim}, step {step}: max error {error} > {DECODE_TOLERANCE}"
        );
        worst = worst.max(error);
    }
    eprintln!("{what}, d = {dim}: {steps} steps, max error {worst:.1e}");
}

#[test]
fn the_decode_kernel_matches_the_caches_tensor_ops() {
    let softmax = ScoreOptions::softmax;
    let spec = |r: Result<WindowSpec, _>| vec![r.expect("valid spec")];
    decode_case("sliding W=5, GQA", spec(WindowSpec::sliding(4, 2, 5)), softmax(), 16, 12);
    let mswa = spec(WindowSpec::per_head(&[1, 3, 6, 9], 4));
    decode_case("MSWA, four buffers", mswa.clone(), softmax(), 40, 14);
    decode_case("MSWA, four buffers", mswa, softmax(), 64, 11);
    let sinks = spec(WindowSpec::sliding(4, 2, 3)).into_iter().map(|s| s.with_sinks(2)).collect();
    decode_case("sinks 2, W=3", sinks, softmax(), 8, 10);
    let longnet = branch_specs(&[3, 8], &[1, 3], 4, 2, 1000).unwrap();
    decode_case("LongNet branches", longnet, softmax(), 16, 20);
    let globals = spec(WindowSpec::longformer(2, &[1, 2, 1, 3], 2, true))
        .into_iter()
        .map(|s| s.with_globals([0, 6]));
    decode_case("Longformer + globals", globals.collect(), softmax(), 16, 14);
    let slopes = alibi::balanced(4, alibi::SlopeMagnitudes::Code).unwrap();
    let scored = softmax().with_softcap(3.0).with_alibi(slopes);
    decode_case(
        "ALiBi + softcap, MSWA",
        spec(WindowSpec::per_head(&[2, 2, 5, 5], 2)),
        scored,
        16,
        9,
    );
    decode_case(
        "sigmoid W=4",
        spec(WindowSpec::sliding(4, 4, 4)),
        ScoreOptions::sigmoid(-1.0),
        33,
        9,
    );
}
