//! CubeCL's cooperative matrices (tensor cores, `cmma`) on a device that has them: the device
//! lists its tile shapes, one tile product of every f16·f16→f32 shape it lists matches the CPU
//! exactly, and the windowed core's forward and backward run on them (`kernel::forward_cmma`,
//! `kernel::backward_queries_cmma`, `kernel::backward_keys_cmma`) and match the dense reference,
//! outputs and gradients, on every kind of window, in f16 and (where the device has it) bf16.
//!
//! One suite, generic over the runtime, and a test binary per runtime, so that a build with
//! both features compiles only the binary it runs: `cooperative_matrices_vulkan` (`--features
//! vulkan`: Burn's SPIR-V compiler; the WGSL compiler has no `cmma`) and
//! `cooperative_matrices_cuda` (`--features cuda`), each for this crate alone, e.g. `cargo test
//! -p swa-attention --features vulkan --test cooperative_matrices_vulkan`. `.ci/run` runs the
//! Vulkan one inside the Debian 13 root of `.ci/vulkan-root`, whose lavapipe (Mesa 26) lists
//! 8×8×8 f16 tiles on a plane of 8, with `SWA_REQUIRE_CMMA=1`: a device without cooperative
//! matrices then fails the test instead of skipping it. On an NVIDIA GPU the tiles are 16×16×16
//! on a plane of 32, in f16 and bf16; a machine without one skips the CUDA tests.
use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::backend::Autodiff;
use burn::tensor::{DType, Tensor, TensorData, bf16, f16};
use cubecl::ir::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind, StorageType};
use cubecl::prelude::*;
use swa_attention::kernel::tensor_core_tile_of;
use swa_attention::{
    HeadWindow, ScoreOptions, WindowSpec, WindowedAttentionBackend, dense_attention,
    dense_attention_relative, windowed_attention, windowed_attention_relative,
};

/// The input types the tests cover, with their tolerances. `lse` is f32 whatever the inputs'
/// type, computed from the same rounded inputs as the reference: 2e-4 for both.
#[derive(Clone, Copy, Debug)]
struct Half {
    dtype: DType,
    /// Output tolerance: about two ulps of outputs up to 2 (the weights `P` are rounded to the
    /// input type before `P·V`, and `o` is stored in it); f16's is the portable kernel's.
    out: f32,
    /// Gradient tolerance: about two ulps of gradients up to 2 (the backward reads the
    /// forward's rounded `o`, and rounds `P` and `dS` before its products).
    grad: f32,
}

const F16: Half = Half { dtype: DType::F16, out: 2e-3, grad: 2e-3 };

/// bf16 (8 significant bits against f16's 11), not yet run on a device that has it.
const BF16: Half = Half { dtype: DType::BF16, out: 3e-2, grad: 3e-2 };

/// Tolerance of `lse`.
const LSE: f32 = 2e-4;

impl Half {
    /// `x` rounded to this type.
    fn round(self, x: f32) -> f32 {
        match self.dtype {
            DType::BF16 => bf16::from_f32(x).to_f32(),
            _ => f16::from_f32(x).to_f32(),
        }
    }

    fn storage(self) -> StorageType {
        match self.dtype {
            DType::BF16 => ElemType::Float(FloatKind::BF16).into(),
            _ => ElemType::Float(FloatKind::F16).into(),
        }
    }
}

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

/// The client of `device`, or `None` (after saying why) when no such device answers and
/// `SWA_REQUIRE_CMMA` is unset.
fn client_of<R: Runtime>(name: &str, device: &R::Device) -> Option<ComputeClient<R>> {
    let client = catch_unwind(AssertUnwindSafe(|| R::client(device))).ok();
    if client.is_none() {
        require(&format!("no {name} device answers"));
    }
    client
}

/// Says why a test skips; a failure instead when `SWA_REQUIRE_CMMA` is set (as `.ci/run` sets
/// it inside `.ci/vulkan-root`, whose lavapipe has cooperative matrices).
fn require(why: &str) {
    assert!(std::env::var_os("SWA_REQUIRE_CMMA").is_none(), "SWA_REQUIRE_CMMA is set, but {why}");
    eprintln!("skipped: {why}");
}

/// The device's tile shapes with inputs of `half` and f32 accumulation (after printing all of
/// its shapes and its plane), or `None` (after saying why) when it has none.
fn shapes<R: Runtime>(client: &ComputeClient<R>, half: Half) -> Option<Vec<MmaConfig>> {
    let f32_type: StorageType = ElemType::Float(FloatKind::F32).into();
    let all = &client.properties().features.matmul.cmma;
    let input = half.storage();
    let shapes: Vec<MmaConfig> = all
        .iter()
        .filter(|c| c.a_type == input && c.b_type == input && c.cd_type == f32_type)
        .copied()
        .collect();
    eprintln!(
        "cooperative matrices: {} shapes, {:?}·{:?}→f32 {:?}; plane {}–{}",
        all.len(),
        half.dtype,
        half.dtype,
        shapes.iter().map(|c| [c.m, c.n, c.k]).collect::<Vec<_>>(),
        client.properties().hardware.plane_size_min,
        client.properties().hardware.plane_size_max,
    );
    if shapes.is_empty() {
        eprintln!("no {:?} tiles with f32 accumulation on this device", half.dtype);
        return None;
    }
    Some(shapes)
}

/// The f16 tile shapes of `device`, or `None` after [`require`] when it has none.
fn f16_shapes<R: Runtime>(name: &str, device: &R::Device) -> Option<Vec<MmaConfig>> {
    let shapes = shapes(&client_of::<R>(name, device)?, F16);
    if shapes.is_none() {
        require(&format!("the {name} device lists no f16·f16→f32 cooperative matrix"));
    }
    shapes
}

/// One tile product of every f16 shape `device` lists, against the CPU: exactly.
pub fn tile_products<R: Runtime>(name: &str, device: &R::Device) {
    let Some(shapes) = f16_shapes::<R>(name, device) else {
        return;
    };
    let client = R::client(device);
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
            tile_product::launch::<R>(
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

/// `n` values in [−1, 1) from `seed`, rounded to `half` (so that the reference sees the
/// kernel's inputs exactly).
fn values(seed: u64, n: usize, half: Half) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            half.round(2.0 * unit - 1.0)
        })
        .collect()
}

/// A call's shape: `[batch, heads, kv_heads, q_len, keys, dim]`.
type Shape = [usize; 6];

/// One call on `half` tensors through `windowed_attention` (the tensor-core forward) against
/// the dense reference in f32 on the same values: `o` and `lse`, max-abs.
fn forward_case<B: WindowedAttentionBackend>(
    device: &B::Device,
    half: Half,
    what: &str,
    (spec, opts): (&WindowSpec, &ScoreOptions),
    shape: Shape,
    seed: u64,
) {
    let [batch, heads, kv_heads, q_len, keys, dim] = shape;
    let tensor = |seed: u64, dims: [usize; 4]| {
        let data = TensorData::new(values(seed, dims.iter().product(), half), dims);
        Tensor::<B, 4>::from_data(data, device)
    };
    let q = tensor(seed, [batch, heads, q_len, dim]);
    let k = tensor(seed + 1, [batch, kv_heads, keys, dim]);
    let v = tensor(seed + 2, [batch, kv_heads, keys, dim]);
    let cast = |t: &Tensor<B, 4>| t.clone().cast(half.dtype);
    let (o, lse) = windowed_attention(cast(&q), cast(&k), cast(&v), spec, opts).unwrap();
    let (want_o, want_lse) = dense_attention(q, k, v, spec, opts).unwrap();
    let o_error = max_error(read(o.cast(DType::F32).into_data()), read(want_o.into_data()));
    let lse_error = max_error(read(lse.into_data()), read(want_lse.into_data()));
    eprintln!("{:?} {what}: o {o_error:.1e}, lse {lse_error:.1e}", half.dtype);
    assert!(o_error <= half.out, "{what}: o max error {o_error} > {}", half.out);
    assert!(lse_error <= LSE, "{what}: lse max error {lse_error} > {LSE}");
}

/// The gradients of `Σ o·g` through the tensor-core forward and backward on `half` inputs,
/// against the dense reference's in f32.
fn gradient_case<B: WindowedAttentionBackend>(
    device: &B::Device,
    half: Half,
    what: &str,
    (spec, opts): (&WindowSpec, &ScoreOptions),
    shape: Shape,
) {
    type A<B> = Autodiff<B>;
    let [batch, heads, kv_heads, q_len, keys, dim] = shape;
    let data = |seed: u64, dims: [usize; 4]| {
        TensorData::new(values(seed, dims.iter().product(), half), dims)
    };
    let inputs = [
        data(11, [batch, heads, q_len, dim]),
        data(12, [batch, kv_heads, keys, dim]),
        data(13, [batch, kv_heads, keys, dim]),
    ];
    let g = data(14, [batch, heads, q_len, dim]);
    let run = |kernel: bool| {
        let dtype = if kernel { half.dtype } else { DType::F32 };
        let [q, k, v] = inputs
            .clone()
            .map(|d| Tensor::<A<B>, 4>::from_data(d, device).cast(dtype).require_grad());
        let (o, _) = match kernel {
            true => windowed_attention(q.clone(), k.clone(), v.clone(), spec, opts).unwrap(),
            false => dense_attention(q.clone(), k.clone(), v.clone(), spec, opts).unwrap(),
        };
        let weights = Tensor::<A<B>, 4>::from_data(g.clone(), device);
        let grads = (o.cast(DType::F32) * weights).sum().backward();
        [q, k, v].map(|t| read(t.grad(&grads).unwrap().cast(DType::F32).into_data()))
    };
    let (got, want) = (run(true), run(false));
    for (name, (got, want)) in ["∂q", "∂k", "∂v"].iter().zip(got.into_iter().zip(want)) {
        let error = max_error(got, want);
        eprintln!("{:?} {what}: {name} {error:.1e}", half.dtype);
        assert!(error <= half.grad, "{what}: {name} max error {error} > {}", half.grad);
    }
}

/// The input types `device` has tensor-core tiles for.
fn halves<R: Runtime>(client: &ComputeClient<R>) -> Vec<Half> {
    [F16, BF16].into_iter().filter(|&half| shapes(client, half).is_some()).collect()
}

/// A case of a suite: its name, its spec and options, its shape.
type Case<'a> = (&'a str, (&'a WindowSpec, &'a ScoreOptions), Shape);

/// Runs `run` on every case in every input type `device` has tensor-core tiles for, after
/// asserting that the core takes each case on tensor cores; prints the count per type.
fn each_type<R: burn_cubecl::CubeRuntime>(
    name: &str,
    device: &R::Device,
    client: &ComputeClient<R>,
    what: &str,
    cases: &[Case],
    run: impl Fn(Half, (usize, &Case)),
) {
    let types = halves(client);
    if types.is_empty() {
        require(&format!("the {name} device lists no f16 or bf16 cooperative matrix"));
    }
    for half in types {
        for case in cases.iter().enumerate() {
            let dim = case.1.2[5];
            let tile = tensor_core_tile_of::<R>(device, half.dtype, dim);
            assert!(tile.is_some(), "{:?} at d = {dim} should run on tensor cores", half.dtype);
            run(half, case);
        }
        eprintln!("{name}: {} {:?} {what} cases on tensor cores", cases.len(), half.dtype);
    }
}

/// The forward on every kind of window, in every input type `device` has tiles for.
pub fn forward_suite<R, B>(name: &str, device: &R::Device)
where
    R: burn_cubecl::CubeRuntime,
    B: WindowedAttentionBackend<Device = R::Device>,
{
    let Some(client) = client_of::<R>(name, device) else {
        return;
    };
    let softmax = ScoreOptions::softmax();
    let sliding = WindowSpec::sliding(2, 2, 5).unwrap();
    let per_head = WindowSpec::per_head(&[3, 9, 17, 40], 2).unwrap();
    let dilated = WindowSpec::dilated(&[4, 4], &[1, 3], 2).unwrap();
    let longnet = WindowSpec::new(vec![HeadWindow::longnet(8, 2, 1); 2], 2).unwrap();
    let bidirectional = WindowSpec::sliding(2, 1, 6).unwrap().with_causal(false);
    let sinks = WindowSpec::sliding(2, 2, 4).unwrap().with_sinks(3);
    let scored = softmax.clone().with_softcap(5.0).with_alibi(vec![0.25, 0.5]);
    let sigmoid = ScoreOptions::sigmoid(-1.0);
    let offset = WindowSpec::sliding(2, 2, 7).unwrap().with_query_offset(20);
    let cases: [Case; 9] = [
        ("sliding W=5", (&sliding, &softmax), [1, 2, 2, 19, 19, 16]),
        ("MSWA windows, GQA", (&per_head, &softmax), [2, 4, 2, 37, 37, 16]),
        ("dilated", (&dilated, &softmax), [1, 2, 2, 33, 33, 16]),
        ("LongNet segment 8, dilation 2", (&longnet, &softmax), [1, 2, 2, 30, 30, 16]),
        ("bidirectional W=6", (&bidirectional, &softmax), [1, 2, 1, 21, 21, 32]),
        ("sinks 3, W=4", (&sinks, &softmax), [1, 2, 2, 40, 40, 16]),
        ("softcap and ALiBi", (&sliding, &scored), [1, 2, 2, 24, 24, 64]),
        ("sigmoid", (&sliding, &sigmoid), [1, 2, 2, 17, 17, 16]),
        ("5 queries after 20", (&offset, &softmax), [1, 2, 2, 5, 25, 16]),
    ];
    each_type::<R>(
        name,
        device,
        &client,
        "forward",
        &cases,
        |half, (seed, (what, call, shape))| {
            forward_case::<B>(device, half, what, *call, *shape, seed as u64)
        },
    );
}

/// The gradients on every kind of window, in every input type `device` has tiles for.
pub fn backward_suite<R, B>(name: &str, device: &R::Device)
where
    R: burn_cubecl::CubeRuntime,
    B: WindowedAttentionBackend<Device = R::Device>,
{
    let Some(client) = client_of::<R>(name, device) else {
        return;
    };
    let softmax = ScoreOptions::softmax();
    let per_head = WindowSpec::per_head(&[3, 9, 17, 40], 2).unwrap();
    let sinks = WindowSpec::sliding(2, 2, 4).unwrap().with_sinks(2);
    let capped = softmax.clone().with_softcap(4.0);
    let sliding = WindowSpec::sliding(2, 2, 6).unwrap();
    let sigmoid = ScoreOptions::sigmoid(-0.5);
    let dilated = WindowSpec::dilated(&[4, 4], &[1, 3], 2).unwrap();
    let longnet = WindowSpec::new(vec![HeadWindow::longnet(8, 2, 1); 2], 2).unwrap();
    let bidirectional = WindowSpec::sliding(2, 1, 6).unwrap().with_causal(false);
    let alibi = softmax.clone().with_alibi(vec![0.25, 0.5]);
    let offset = WindowSpec::sliding(2, 2, 7).unwrap().with_query_offset(20);
    let cases: [Case; 8] = [
        ("MSWA windows, GQA", (&per_head, &softmax), [1, 4, 2, 29, 29, 16]),
        ("sinks and softcap", (&sinks, &capped), [1, 2, 2, 21, 21, 16]),
        ("sigmoid", (&sliding, &sigmoid), [1, 2, 2, 18, 18, 16]),
        ("dilated", (&dilated, &softmax), [2, 2, 2, 27, 27, 16]),
        ("LongNet segment 8, dilation 2", (&longnet, &softmax), [1, 2, 2, 26, 26, 16]),
        ("bidirectional W=6", (&bidirectional, &softmax), [1, 2, 1, 19, 19, 32]),
        ("ALiBi, d = 64", (&sliding, &alibi), [1, 2, 2, 13, 13, 64]),
        ("5 queries after 20", (&offset, &softmax), [1, 2, 2, 5, 25, 16]),
    ];
    each_type::<R>(name, device, &client, "gradient", &cases, |half, (_, (what, call, shape))| {
        gradient_case::<B>(device, half, what, *call, *shape)
    });
}

/// Relative scores (docs/semantics.md §4) on a device with tensor-core tiles: the tensor-core
/// kernels do not read them, so the launches run the portable kernels; outputs and the gradients
/// of q, k, v and the table on `half` inputs against the dense reference in f32.
pub fn relative_suite<R, B>(name: &str, device: &R::Device)
where
    R: burn_cubecl::CubeRuntime,
    B: WindowedAttentionBackend<Device = R::Device>,
{
    type A<B> = Autodiff<B>;
    let Some(client) = client_of::<R>(name, device) else {
        return;
    };
    let spec = WindowSpec::per_head(&[3, 9], 2).unwrap().with_query_offset(6);
    let opts = ScoreOptions::softmax();
    let ([batch, heads, q_len, keys, dim], len) = ([2, 2, 19, 25, 16], 9);
    for half in halves(&client) {
        let data = |seed: u64, dims: [usize; 4]| {
            TensorData::new(values(seed, dims.iter().product(), half), dims)
        };
        let inputs = [
            data(21, [batch, heads, q_len, dim]),
            data(22, [batch, heads, keys, dim]),
            data(23, [batch, heads, keys, dim]),
            data(24, [batch, heads, q_len, len]),
        ];
        let g = data(25, [batch, heads, q_len, dim]);
        let run = |kernel: bool| {
            let dtype = if kernel { half.dtype } else { DType::F32 };
            let [q, k, v, table] = inputs
                .clone()
                .map(|d| Tensor::<A<B>, 4>::from_data(d, device).cast(dtype).require_grad());
            let (q_, k_, v_, t_) = (q.clone(), k.clone(), v.clone(), Some(table.clone()));
            let (o, _) = match kernel {
                true => windowed_attention_relative(q_, k_, v_, t_, &spec, &opts).unwrap(),
                false => dense_attention_relative(q_, k_, v_, t_, &spec, &opts).unwrap(),
            };
            let weights = Tensor::<A<B>, 4>::from_data(g.clone(), device);
            let grads = (o.clone().cast(DType::F32) * weights).sum().backward();
            let grad =
                |t: Tensor<A<B>, 4>| read(t.grad(&grads).unwrap().cast(DType::F32).into_data());
            [read(o.cast(DType::F32).into_data()), grad(q), grad(k), grad(v), grad(table)]
        };
        let (got, want) = (run(true), run(false));
        let names = ["o", "∂q", "∂k", "∂v", "∂table"];
        for (name, (got, want)) in names.iter().zip(got.into_iter().zip(want)) {
            let error = max_error(got, want);
            let tolerance = if *name == "o" { half.out } else { half.grad };
            eprintln!("{:?} relative scores: {name} {error:.1e}", half.dtype);
            assert!(error <= tolerance, "relative scores: {name} max error {error} > {tolerance}");
        }
    }
}
