//! The fragment seam (`kernel::fragment`) run on a device through every one of its operations,
//! for the tests that compare it with a product on the host
//! (`attention/tests/attention/fragments.rs`): `C = A·B` for `A: 16w × 32` and `B: 32 × 8` in two
//! `k` steps, by `w` warps of 16 rows each, the maximum and sum of each row of `C`, and where each
//! lane's fragments hold what (the layout, which a product alone cannot show: a consistent
//! permutation gives the same `C`).

use burn::tensor::{DType, Shape, bf16, f16};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cmma::MatrixIdent;
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;

use crate::kernel::config::upload;
use crate::kernel::flash::ROW_ALIGN;
use crate::kernel::fragment::{
    FragmentPath, K, LANES, M, N, RowReduction, copy_tile, lane, load, mma, position, reduce_rows,
    store, zeros,
};

/// The `k` steps of the probe: `A` has `STEPS · K` columns.
const STEPS: usize = 2;

/// Words of the probe's layout output: `(row, column)` of the 8 + 4 + 4 elements of A, B and C
/// of each lane.
const LAYOUT_WORDS: usize = LANES * (8 + 4 + 4) * 2;

/// `a: [16·warps, 32]`, `b: [32, 8]` → `c = a·b: [16·warps, 8]`, `stats: [16·warps, 2]` (each
/// row's maximum and sum), all row-major, and `layout` ([`write_layout`]). One cube of `warps`
/// warps; each step copies a 16-column slice of `a` and a 16-row slice of `b` to shared memory
/// and multiplies their fragments into the accumulator.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn fragment_probe_kernel<F: Float>(
    a: &Tensor<F>,
    b: &Tensor<F>,
    c: &mut Tensor<f32>,
    stats: &mut Tensor<f32>,
    layout: &mut Tensor<u32>,
    #[comptime] path: FragmentPath,
    #[comptime] warps: usize,
    #[define(F)] _dtype: StorageType,
) {
    let rows = comptime![warps * M];
    // 16-byte aligned: the native path reads fragments by `ldmatrix`.
    let mut a_s = SharedMemory::<F>::new_aligned(rows * K, ROW_ALIGN);
    let mut b_s = SharedMemory::<F>::new_aligned(K * N, ROW_ALIGN);
    let mut c_s = SharedMemory::<f32>::new(rows * N);
    let mut exchange = SharedMemory::<f32>::new(comptime![path.exchange_len(warps, 1)]);
    let warp = UNIT_POS_X as usize / LANES;

    let mut acc = zeros();
    for step in 0..STEPS {
        copy_tile(a, step * K, STEPS * K, &mut a_s, 0, K, rows, K);
        copy_tile(b, step * K * N, N, &mut b_s, 0, N, K, N);
        sync_cube();
        let a_fragment = load(&a_s, warp * M * K, K, MatrixIdent::A, false, path);
        let b_fragment = load(&b_s, 0, N, MatrixIdent::B, false, path);
        mma(&a_fragment, &b_fragment, &mut acc, &mut exchange, path);
        sync_cube();
    }
    let row_max = reduce_rows(&acc, RowReduction::Max, &mut exchange, path);
    let row_sum = reduce_rows(&acc, RowReduction::Sum, &mut exchange, path);
    store(&acc, &mut c_s, warp * M * N, N, path);
    sync_cube();

    let mut e = UNIT_POS_X as usize;
    while e < rows * N {
        c[e] = c_s[e];
        e += CUBE_DIM as usize;
    }
    let lane = lane(path) as usize;
    let thread_in_group = lane % 4;
    if thread_in_group == 0 {
        let top = warp * M + lane / 4;
        stats[top * 2] = row_max[0];
        stats[top * 2 + 1] = row_sum[0];
        stats[(top + 8) * 2] = row_max[1];
        stats[(top + 8) * 2 + 1] = row_sum[1];
    }
    if warp == 0 {
        write_layout::<F>(layout, lane as u32, path);
    }
}

/// Writes `(row, column)` of each element of this lane's fragments into `layout`: A's 8, then
/// B's 4, then C's 4 for each lane, lane after lane.
#[cube]
fn write_layout<F: Float>(layout: &mut Tensor<u32>, lane: u32, #[comptime] path: FragmentPath) {
    let base = lane as usize * 32;
    #[unroll]
    for nth in 0..8usize {
        let (row, col) = position::<F>(lane, nth, MatrixIdent::A, path);
        layout[base + 2 * nth] = row as u32;
        layout[base + 2 * nth + 1] = col as u32;
    }
    #[unroll]
    for nth in 0..4usize {
        let (row, col) = position::<F>(lane, nth, MatrixIdent::B, path);
        layout[base + 16 + 2 * nth] = row as u32;
        layout[base + 16 + 2 * nth + 1] = col as u32;
        let (row, col) = position::<F>(lane, nth, MatrixIdent::Accumulator, path);
        layout[base + 24 + 2 * nth] = row as u32;
        layout[base + 24 + 2 * nth + 1] = col as u32;
    }
}

/// Launches the probe on `a` and `b` (1-D, contiguous, f16 or bf16, of `16·warps·32` and `32·8`
/// elements) with `path` → (`c`, `stats`) in f32 and `layout` in u32.
pub(crate) fn launch_fragment_probe<R: CubeRuntime>(
    a: CubeTensor<R>,
    b: CubeTensor<R>,
    path: FragmentPath,
) -> [CubeTensor<R>; 3] {
    let client = a.client.clone();
    let rows = a.meta.shape().num_elements() / (STEPS * K);
    let warps = rows / M;
    let empty = |shape: [usize; 2], dtype| {
        let shape = Shape::new(shape);
        empty_device_contiguous_dtype(client.clone(), a.device.clone(), shape, dtype)
    };
    let (c, stats) = (empty([rows, N], DType::F32), empty([rows, 2], DType::F32));
    let layout = empty([LAYOUT_WORDS, 1], DType::U32);
    let dtype = a.dtype;
    fragment_probe_kernel::launch::<R>(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d((warps * LANES) as u32),
        a.into_tensor_arg(),
        b.into_tensor_arg(),
        c.clone().into_tensor_arg(),
        stats.clone().into_tensor_arg(),
        layout.clone().into_tensor_arg(),
        path,
        warps,
        dtype.into(),
    );
    [c, stats, layout]
}

/// What [`probe_fragments`] computed, and on which path.
#[derive(Clone, Debug)]
pub struct FragmentProbe {
    /// The path the probe ran.
    pub path: FragmentPath,
    /// `A·B`, row-major `[16·warps, 8]`.
    pub c: Vec<f32>,
    /// The maximum of each row of `c`.
    pub row_max: Vec<f32>,
    /// The sum of each row of `c`.
    pub row_sum: Vec<f32>,
    /// `[row, column]` of each element of each lane's fragments on the path: A's 8 elements
    /// (`a0 … a7`), then B's 4, then C's 4 of lane 0, then of lane 1, … (32 × 16 entries).
    pub layout: Vec<[u32; 2]>,
}

/// Runs every operation of the fragment seam on `device`: `a` (row-major `[16·warps, 32]`,
/// `warps ≥ 1`) and `b` (row-major `[32, 8]`) are rounded to `dtype` (f16 or bf16) and
/// multiplied in f32 by the path the device runs (its MMA instructions on CUDA), or by the
/// emulation when `emulate` is set. Errors on other shapes or types, or a type the device lacks.
pub fn probe_fragments<R: CubeRuntime>(
    device: &R::Device,
    a: &[f32],
    b: &[f32],
    dtype: DType,
    emulate: bool,
) -> Result<FragmentProbe, String> {
    let width = STEPS * K;
    if a.is_empty() || !a.len().is_multiple_of(M * width) || b.len() != width * N {
        return Err(format!(
            "a: [16·w, {width}], b: [{width}, {N}]; got {} and {}",
            a.len(),
            b.len()
        ));
    }
    let kind = match dtype {
        DType::F16 => FloatKind::F16,
        DType::BF16 => FloatKind::BF16,
        _ => return Err(format!("the fragments take f16 or bf16, not {dtype:?}")),
    };
    let client = R::client(device);
    if !client.properties().supports_type(ElemType::Float(kind)) {
        return Err(format!("{dtype:?} is not supported on this device"));
    }
    let a = upload(&client, device, &rounded_bytes(a, dtype), dtype);
    let b = upload(&client, device, &rounded_bytes(b, dtype), dtype);
    let path = if emulate { FragmentPath::Emulated } else { FragmentPath::of(&client, dtype) };
    let [c, stats, layout] = launch_fragment_probe(a, b, path);
    let read = |t: CubeTensor<R>| client.read_one(t.handle).map_err(|e| e.to_string());
    let c = f32::from_bytes(&read(c)?).to_vec();
    let stats = f32::from_bytes(&read(stats)?).to_vec();
    let layout = u32::from_bytes(&read(layout)?).chunks(2).map(|p| [p[0], p[1]]).collect();
    let row_max = stats.iter().step_by(2).copied().collect();
    let row_sum = stats.iter().skip(1).step_by(2).copied().collect();
    Ok(FragmentProbe { path, c, row_max, row_sum, layout })
}

/// `values` rounded to `dtype` (f16, or else bf16), as the device reads them.
fn rounded_bytes(values: &[f32], dtype: DType) -> Vec<u8> {
    if dtype == DType::F16 {
        f16::as_bytes(&values.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()).to_vec()
    } else {
        bf16::as_bytes(&values.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>()).to_vec()
    }
}
