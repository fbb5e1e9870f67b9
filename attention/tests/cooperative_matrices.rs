//! CubeCL's cooperative matrices (tensor cores, `cmma`) on the Vulkan device: the device lists
//! its tile shapes, one tile product of every f16·f16→f32 shape it lists matches the CPU
//! exactly, and the windowed core's forward and backward run on them (`kernel::forward_cmma`,
//! `kernel::backward_queries_cmma`, `kernel::backward_keys_cmma`) and match the dense reference,
//! outputs and gradients, on every kind of window.
//!
//! Built with `--features vulkan` (Burn's SPIR-V compiler; the WGSL compiler has no `cmma`),
//! for this crate alone: `cargo test -p swa-attention --features vulkan --test
//! cooperative_matrices`. `.ci/run` runs it inside the Debian 13 root of `.ci/vulkan-root`,
//! whose lavapipe (Mesa 26) lists 8×8×8 tiles on a plane of 8, with `SWA_REQUIRE_CMMA=1`: a
//! device without cooperative matrices then fails the test instead of skipping it.
#![cfg(feature = "vulkan")]

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::{Autodiff, Vulkan};
use burn::tensor::{DType, Tensor, TensorData, f16};
use cubecl::ir::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;
use swa_attention::kernel::tensor_core_tile_of;
use swa_attention::{HeadWindow, ScoreOptions, WindowSpec, dense_attention, windowed_attention};

/// Output tolerance of f16 inputs (the weights `P` are rounded to f16 before `P·V`, and `o` is
/// f16), as the portable kernel's f16 tests use.
const F16_OUT: f32 = 2e-3;

/// Tolerance of `lse`, computed in f32 from the same f16 inputs as the reference.
const LSE: f32 = 2e-4;

/// Gradient tolerance of f16 inputs (the backward reads the forward's f16 `o`, and rounds the
/// weights and score gradients to f16 before its products), as the portable kernel's f16 tests
/// use.
const F16_GRAD: f32 = 2e-3;

/// `out = lhs · rhs` for one `m × k` by `k × n` tile, both row-major, on one plane.
#[cube(launch)]
fn tile_product(
    lhs: &Array<f16>,
    rhs: &Array<f16>,
    out: &mut Array<f32>,
    #[comptime] m: usize,
    #[comptime] n: usize,
    #[comptime] k: usize,
    #[comptime] k_stride: u32,
    #[comptime] n_stride: u32,
) {
    let a = cmma::Matrix::<f16>::from_slice(
        cmma::MatrixIdent::A,
        m,
        n,
        k,
        cmma::MatrixLayout::RowMajor,
        &lhs.to_slice(),
        k_stride,
    );
    let b = cmma::Matrix::<f16>::from_slice(
        cmma::MatrixIdent::B,
        m,
        n,
        k,
        cmma::MatrixLayout::RowMajor,
        &rhs.to_slice(),
        n_stride,
    );
    let c = cmma::Matrix::<f32>::from_value(
        cmma::MatrixIdent::Accumulator,
        m,
        n,
        k,
        cmma::MatrixLayout::Undefined,
        0.0,
    );
    cmma::execute::<f16, f16, f32, f32>(&a, &b, &c, &c);
    cmma::store(&mut out.to_slice_mut(), &c, n_stride, cmma::MatrixLayout::RowMajor);
}

/// The device's f16·f16→f32 tile shapes, or `None` (after saying why) when it has none and
/// `SWA_REQUIRE_CMMA` is unset.
fn f16_shapes(client: &ComputeClient<WgpuRuntime>) -> Option<Vec<MmaConfig>> {
    let (f16_type, f32_type) =
        (ElemType::Float(FloatKind::F16).into(), ElemType::Float(FloatKind::F32).into());
    let all = &client.properties().features.matmul.cmma;
    let shapes: Vec<MmaConfig> = all
        .iter()
        .filter(|c| c.a_type == f16_type && c.b_type == f16_type && c.cd_type == f32_type)
        .copied()
        .collect();
    eprintln!(
        "cooperative matrices: {} shapes, f16·f16→f32 {:?}; plane {}–{}",
        all.len(),
        shapes.iter().map(|c| [c.m, c.n, c.k]).collect::<Vec<_>>(),
        client.properties().hardware.plane_size_min,
        client.properties().hardware.plane_size_max,
    );
    if shapes.is_empty() {
        assert!(
            std::env::var_os("SWA_REQUIRE_CMMA").is_none(),
            "SWA_REQUIRE_CMMA is set but the Vulkan device lists no f16·f16→f32 cooperative \
             matrix (run inside .ci/vulkan-root, whose lavapipe has them)"
        );
        eprintln!("skipped: the Vulkan device has no f16·f16→f32 cooperative matrices");
        return None;
    }
    Some(shapes)
}

#[test]
fn every_f16_tile_shape_multiplies_exactly() {
    let client = WgpuRuntime::client(&WgpuDevice::DefaultDevice);
    let Some(shapes) = f16_shapes(&client) else {
        return;
    };
    for shape in shapes {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        // Small integers: every product and sum is exact in f16 inputs and f32 sums.
        let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
        let rhs: Vec<f32> = (0..k * n).map(|i| ((i * 5 + 1) % 9) as f32 - 4.0).collect();
        let want: Vec<f32> = (0..m * n)
            .map(|at| (0..k).map(|p| lhs[at / n * k + p] * rhs[p * n + at % n]).sum())
            .collect();
        let halves = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let lhs_buffer = client.create_from_slice(f16::as_bytes(&halves(&lhs)));
        let rhs_buffer = client.create_from_slice(f16::as_bytes(&halves(&rhs)));
        let out = client.empty(std::mem::size_of::<f32>() * m * n);
        let plane = client.properties().hardware.plane_size_max;
        // SAFETY: each buffer holds exactly the elements its array argument declares.
        unsafe {
            tile_product::launch::<WgpuRuntime>(
                &client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(plane),
                ArrayArg::from_raw_parts(lhs_buffer, m * k),
                ArrayArg::from_raw_parts(rhs_buffer, k * n),
                ArrayArg::from_raw_parts(out.clone(), m * n),
                m,
                n,
                k,
                k as u32,
                n as u32,
            );
        }
        let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
        assert_eq!(got, want, "the {m}×{n}×{k} tile product");
    }
}

/// A tensor's values as f32.
fn read(t: TensorData) -> Vec<f32> {
    t.convert::<f32>().to_vec::<f32>().unwrap()
}

/// The largest `|a − b|`, equal values (infinities too) counting as no error and a NaN as an
/// infinite one (`f32::max` would drop it).
fn max_error(got: Vec<f32>, want: Vec<f32>) -> f32 {
    got.iter().zip(&want).fold(0f32, |m, (a, b)| match a == b {
        true => m,
        false if (a - b).is_nan() => f32::INFINITY,
        false => m.max((a - b).abs()),
    })
}

/// `n` values in [−1, 1) from `seed`, rounded to f16 (so that the reference sees the kernel's
/// inputs exactly).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            f16::from_f32(2.0 * unit - 1.0).to_f32()
        })
        .collect()
}

/// One call on f16 tensors through `windowed_attention` (the tensor-core forward) against the
/// dense reference in f32 on the same values: `o` and `lse`, max-abs.
fn forward_case(what: &str, spec: &WindowSpec, opts: &ScoreOptions, shape: [usize; 6], seed: u64) {
    let [batch, heads, kv_heads, q_len, keys, dim] = shape;
    let device = WgpuDevice::DefaultDevice;
    let tensor = |seed: u64, dims: [usize; 4]| {
        let data = TensorData::new(values(seed, dims.iter().product()), dims);
        Tensor::<Vulkan, 4>::from_data(data, &device)
    };
    let q = tensor(seed, [batch, heads, q_len, dim]);
    let k = tensor(seed + 1, [batch, kv_heads, keys, dim]);
    let v = tensor(seed + 2, [batch, kv_heads, keys, dim]);
    let half = |t: &Tensor<Vulkan, 4>| t.clone().cast(DType::F16);
    let (o, lse) = windowed_attention(half(&q), half(&k), half(&v), spec, opts).unwrap();
    let (want_o, want_lse) = dense_attention(q, k, v, spec, opts).unwrap();
    let o_error = max_error(read(o.cast(DType::F32).into_data()), read(want_o.into_data()));
    let lse_error = max_error(read(lse.into_data()), read(want_lse.into_data()));
    eprintln!("{what}: o {o_error:.1e}, lse {lse_error:.1e}");
    assert!(o_error <= F16_OUT, "{what}: o max error {o_error} > {F16_OUT}");
    assert!(lse_error <= LSE, "{what}: lse max error {lse_error} > {LSE}");
}

#[test]
fn the_tensor_core_forward_matches_the_dense_reference() {
    let client = WgpuRuntime::client(&WgpuDevice::DefaultDevice);
    if f16_shapes(&client).is_none() {
        return;
    }
    for dim in [8, 16, 64] {
        let tile = tensor_core_tile_of::<WgpuRuntime>(&WgpuDevice::DefaultDevice, DType::F16, dim);
        eprintln!("head dim {dim}: tensor-core tile {tile:?}");
        assert!(
            tile.is_some(),
            "the core at d = {dim} should run on tensor cores, forward and backward"
        );
    }
    let softmax = ScoreOptions::softmax();
    let sliding = WindowSpec::sliding(2, 2, 5).unwrap();
    forward_case("sliding W=5", &sliding, &softmax, [1, 2, 2, 19, 19, 8], 1);
    let per_head = WindowSpec::per_head(&[3, 9, 17, 40], 2).unwrap();
    forward_case("MSWA windows, GQA", &per_head, &softmax, [2, 4, 2, 37, 37, 16], 2);
    let dilated = WindowSpec::dilated(&[4, 4], &[1, 3], 2).unwrap();
    forward_case("dilated", &dilated, &softmax, [1, 2, 2, 33, 33, 8], 3);
    let heads = vec![HeadWindow::longnet(8, 2, 1); 2];
    let longnet = WindowSpec::new(heads, 2).unwrap();
    forward_case("LongNet segment 8, dilation 2", &longnet, &softmax, [1, 2, 2, 30, 30, 8], 4);
    let bidirectional = WindowSpec::sliding(2, 1, 6).unwrap().with_causal(false);
    forward_case("bidirectional W=6", &bidirectional, &softmax, [1, 2, 1, 21, 21, 16], 5);
    let sinks = WindowSpec::sliding(2, 2, 4).unwrap().with_sinks(3);
    forward_case("sinks 3, W=4", &sinks, &softmax, [1, 2, 2, 40, 40, 8], 6);
    let scored = softmax.clone().with_softcap(5.0).with_alibi(vec![0.25, 0.5]);
    forward_case("softcap and ALiBi", &sliding, &scored, [1, 2, 2, 24, 24, 64], 7);
    forward_case("sigmoid", &sliding, &ScoreOptions::sigmoid(-1.0), [1, 2, 2, 17, 17, 8], 8);
    let offset = WindowSpec::sliding(2, 2, 7).unwrap().with_query_offset(20);
    forward_case("5 queries after 20", &offset, &softmax, [1, 2, 2, 5, 25, 8], 9);
}

/// The gradients of `Σ o·g` through the tensor-core forward and backward on f16 inputs, against
/// the dense reference's in f32.
fn gradient_case(what: &str, spec: &WindowSpec, opts: &ScoreOptions, shape: [usize; 6]) {
    type A = Autodiff<Vulkan>;
    let [batch, heads, kv_heads, q_len, keys, dim] = shape;
    let device = WgpuDevice::DefaultDevice;
    let data =
        |seed: u64, dims: [usize; 4]| TensorData::new(values(seed, dims.iter().product()), dims);
    let inputs = [
        data(11, [batch, heads, q_len, dim]),
        data(12, [batch, kv_heads, keys, dim]),
        data(13, [batch, kv_heads, keys, dim]),
    ];
    let g = data(14, [batch, heads, q_len, dim]);
    let run = |kernel: bool| {
        let dtype = if kernel { DType::F16 } else { DType::F32 };
        let [q, k, v] = inputs
            .clone()
            .map(|d| Tensor::<A, 4>::from_data(d, &device).cast(dtype).require_grad());
        let (o, _) = match kernel {
            true => windowed_attention(q.clone(), k.clone(), v.clone(), spec, opts).unwrap(),
            false => dense_attention(q.clone(), k.clone(), v.clone(), spec, opts).unwrap(),
        };
        let weights = Tensor::<A, 4>::from_data(g.clone(), &device);
        let grads = (o.cast(DType::F32) * weights).sum().backward();
        [q, k, v].map(|t| read(t.grad(&grads).unwrap().cast(DType::F32).into_data()))
    };
    let (got, want) = (run(true), run(false));
    for (name, (got, want)) in ["∂q", "∂k", "∂v"].iter().zip(got.into_iter().zip(want)) {
        let error = max_error(got, want);
        eprintln!("{what}: {name} {error:.1e}");
        assert!(error <= F16_GRAD, "{what}: {name} max error {error} > {F16_GRAD}");
    }
}

#[test]
fn the_tensor_core_backward_matches_the_dense_reference() {
    let client = WgpuRuntime::client(&WgpuDevice::DefaultDevice);
    if f16_shapes(&client).is_none() {
        return;
    }
    let softmax = ScoreOptions::softmax();
    let per_head = WindowSpec::per_head(&[3, 9, 17, 40], 2).unwrap();
    gradient_case("MSWA windows, GQA", &per_head, &softmax, [1, 4, 2, 29, 29, 16]);
    let sinks = WindowSpec::sliding(2, 2, 4).unwrap().with_sinks(2);
    let capped = softmax.clone().with_softcap(4.0);
    gradient_case("sinks and softcap", &sinks, &capped, [1, 2, 2, 21, 21, 8]);
    let sliding = WindowSpec::sliding(2, 2, 6).unwrap();
    gradient_case("sigmoid", &sliding, &ScoreOptions::sigmoid(-0.5), [1, 2, 2, 18, 18, 8]);
    let dilated = WindowSpec::dilated(&[4, 4], &[1, 3], 2).unwrap();
    gradient_case("dilated", &dilated, &softmax, [2, 2, 2, 27, 27, 8]);
    let heads = vec![HeadWindow::longnet(8, 2, 1); 2];
    let longnet = WindowSpec::new(heads, 2).unwrap();
    gradient_case("LongNet segment 8, dilation 2", &longnet, &softmax, [1, 2, 2, 26, 26, 8]);
    let bidirectional = WindowSpec::sliding(2, 1, 6).unwrap().with_causal(false);
    gradient_case("bidirectional W=6", &bidirectional, &softmax, [1, 2, 1, 19, 19, 16]);
    let scored = softmax.clone().with_alibi(vec![0.25, 0.5]);
    gradient_case("ALiBi, d = 64", &sliding, &scored, [1, 2, 2, 13, 13, 64]);
    let offset = WindowSpec::sliding(2, 2, 7).unwrap().with_query_offset(20);
    gradient_case("5 queries after 20", &offset, &softmax, [1, 2, 2, 5, 25, 8]);
}
