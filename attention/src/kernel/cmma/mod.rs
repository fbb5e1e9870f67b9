//! The kernels on tensor cores through CubeCL's cooperative matrices: the forward
//! ([`forward`]), dQ ([`backward_queries`]) and dK/dV ([`backward_keys`]), which the launches
//! pick where the device has a tile for the inputs' type, and here what they share: the cooperative
//! tile of a launch, its choice on the host, the copy of a block of rows into shared memory, and
//! the two products every one of them makes, `A·Bᵀ` (scores) and `C += A·B` (accumulation), on
//! CubeCL's `cmma` with f32 accumulation.
//!
//! A cube is one plane that owns `m` rows (queries, or keys in dK/dV) and walks tiles of `n`
//! rows of the other side. The `n` rows of a tile are the `k` of the accumulating product, so
//! the tile shape must be square (`n = k`: all of lavapipe's and NVIDIA's are) and `d` a
//! multiple of `n`.
//!
//! Unchecked: the launches run these kernels with `launch_unchecked` (no bounds check on each
//! access), since every global read and write is guarded by the call's lengths (rows at or past
//! `N_q`, keys at or past the valid keys: [`load_rows`] zero-fills them, the outputs skip them),
//! the windows and slopes hold a word for every head of the grid, and `windowed_runs` checked
//! the shapes before any launch.

pub(crate) mod backward_keys;
pub(crate) mod backward_queries;
pub(crate) mod forward;

use burn::tensor::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::ir::{DeviceProperties, ElemType, FloatKind};
use cubecl::prelude::*;
use cubecl::tensor_vector_size_parallel;

use crate::kernel::config::SHARED_BUDGET;

/// The cooperative tile of a launch: `m` rows per cube, `n` rows per tile of the other side
/// (and `k = n`), `plane` lanes per cube.
#[derive(CubeType, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Mma {
    /// Rows per cube.
    pub m: usize,
    /// Rows per tile of the other side, and the width of each product step (`k = n`).
    pub n: usize,
    /// Lanes of the plane.
    pub plane: usize,
}

/// The cooperative tile the core's kernels run on for inputs of `dtype` and head dim `dim`, or
/// `None` (the portable kernels): a square f16 or bf16 tile with f32 accumulation that the
/// device lists, whose side divides `dim`, whose rows fit the plane (a lane per row), whose
/// tile fits the `u32` mask the forward keeps of the keys a row sees (`n ≤ 32`), and with which
/// the hungriest kernel's shared buffers ([`shared_bytes`]) fit the device. One tile for all
/// three kernels of a call. Where the FlashAttention-2 kernels run (CUDA sm_80+, f16/bf16,
/// d = 64 and 128, no relative scores: `kernel::flash::flash_path`,
/// `kernel::flash::flash_backward_path`, which name each fall-back's reason) the launches take
/// them instead; this tile serves the rest.
pub(crate) fn tensor_core_tile<R: CubeRuntime>(
    client: &ComputeClient<R>,
    dtype: DType,
    dim: usize,
) -> Option<Mma> {
    tile_for(client.properties(), dtype, dim)
}

/// [`tensor_core_tile`] for a device described by its `properties` (the offline CUDA check
/// describes a device it does not have).
pub(crate) fn tile_for(properties: &DeviceProperties, dtype: DType, dim: usize) -> Option<Mma> {
    let input = match dtype {
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        _ => return None,
    };
    let plane = properties.hardware.plane_size_max as usize;
    let shared = SHARED_BUDGET.min(properties.hardware.max_shared_memory_size);
    let accumulator: StorageType = ElemType::Float(FloatKind::F32).into();
    properties
        .features
        .matmul
        .cmma
        .iter()
        .filter(|t| t.a_type == input.into() && t.b_type == input.into())
        .filter(|t| t.cd_type == accumulator && t.n == t.k)
        .map(|t| Mma { m: t.m as usize, n: t.n as usize, plane })
        .find(|t| {
            dim.is_multiple_of(t.n) && t.m <= plane && t.n <= 32 && shared_bytes(*t, dim) <= shared
        })
}

/// Shared memory of the dK/dV kernel, the hungriest of the three (2-byte inputs): its keys and
/// values (`m × d`), a tile's queries and `dO` (`n × d`), the weights and score gradients
/// (`m × n`) in the input type; the scores and `dPᵀ` (`m × n`), both accumulators (`m × d`) and
/// a tile's row terms (`2n`) in f32.
fn shared_bytes(tile: Mma, dim: usize) -> usize {
    let Mma { m, n, .. } = tile;
    (2 * m * dim + 2 * n * dim + 2 * m * n) * 2 + (2 * m * n + 2 * m * dim + 2 * n) * 4
}

/// The tensor-core tile `device`'s windowed core uses for inputs of `dtype` at head dim `dim`,
/// forward and backward, as `[m, n, k]`, or `None` when it runs the portable kernels (what the
/// tests print and check).
pub fn tensor_core_tile_of<R: CubeRuntime>(
    device: &R::Device,
    dtype: DType,
    dim: usize,
) -> Option<[usize; 3]> {
    tensor_core_tile(&R::client(device), dtype, dim).map(|t| [t.m, t.n, t.n])
}

/// Copies rows `first … first + rows − 1` of `t` (`[batch, heads, len, d]` read as vectors of
/// `N` elements along `d`, which the launch chose so that `d`'s stride is 1 and every other
/// stride a multiple of `N`: [`load_vector`]; `base` addresses the batch and head) into `out`
/// (`rows × d`, row-major), zeros for rows at or past `valid`. The plane's lanes share the copy,
/// one vector each in turn (16 bytes for 8 halves on CUDA), unrolled: call `sync_cube` before
/// reading `out`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_rows<F: Float, N: Size>(
    t: &Tensor<Vector<F, N>>,
    base: usize,
    first: usize,
    valid: usize,
    out: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] dim: usize,
    #[comptime] plane: usize,
) {
    let width = t.vector_size();
    let row_stride = t.stride(2);
    // Unrolled, so that a lane's loads are all in flight before its first store.
    let steps = comptime![(rows * dim).div_ceil(plane * width)];
    #[unroll]
    for step in 0..steps {
        let e = (step * plane + UNIT_POS_X as usize) * width;
        if e < rows * dim {
            let row = first + e / dim;
            let mut value = Vector::<F, N>::empty().fill(F::cast_from(0.0f32));
            if row < valid {
                value = t[(base + row * row_stride + e % dim) / width];
            }
            #[unroll]
            for i in 0..width {
                out[e + i] = value[i];
            }
        }
    }
}

/// The widest vector the tile copies ([`load_rows`]) can read `tensors` with: the device's
/// widest load for their element size where `d` is contiguous and the other strides allow it,
/// else 1 (element loads).
pub(crate) fn load_vector<R: CubeRuntime>(tensors: &[&CubeTensor<R>]) -> VectorSize {
    tensors
        .iter()
        .map(|t| {
            let sizes = t.client.io_optimized_vector_sizes(t.dtype.size());
            tensor_vector_size_parallel(sizes, t.meta.shape(), t.meta.strides(), 3)
        })
        .min()
        .unwrap_or(1)
}

/// Sets the first `len` values of `out` to 0, shared among the plane's lanes.
#[cube]
pub(crate) fn zero(out: &mut SharedMemory<f32>, #[comptime] len: usize, #[comptime] plane: usize) {
    let mut e = UNIT_POS_X as usize;
    while e < len {
        out[e] = 0.0;
        e += plane;
    }
}

/// `out = a · bᵀ` for `a: m × d`, `b: n × d` (row-major) into `out: m × n` (row-major, f32):
/// `d / n` cooperative products accumulated in f32. The scores of a block (`Q·Kᵀ`, `K·Qᵀ`) and
/// the gradients of the weights (`dO·Vᵀ`, `V·dOᵀ`).
#[cube]
pub(crate) fn product_transposed<F: Float>(
    a: &SharedMemory<F>,
    b: &SharedMemory<F>,
    out: &mut SharedMemory<f32>,
    #[comptime] m: usize,
    #[comptime] n: usize,
    #[comptime] dim: usize,
) {
    let sum = cmma::Matrix::<f32>::from_value(
        cmma::MatrixIdent::Accumulator,
        m,
        n,
        n,
        cmma::MatrixLayout::Undefined,
        0.0,
    );
    for c in 0..dim / n {
        let lhs = cmma::Matrix::<F>::from_slice(
            cmma::MatrixIdent::A,
            m,
            n,
            n,
            cmma::MatrixLayout::RowMajor,
            &a.slice(c * n, m * dim),
            dim as u32,
        );
        let rhs = cmma::Matrix::<F>::from_slice(
            cmma::MatrixIdent::B,
            m,
            n,
            n,
            cmma::MatrixLayout::ColMajor,
            &b.slice(c * n, n * dim),
            dim as u32,
        );
        cmma::execute::<F, F, f32, f32>(&lhs, &rhs, &sum, &sum);
    }
    cmma::store(&mut out.to_slice_mut(), &sum, n as u32, cmma::MatrixLayout::RowMajor);
}

/// `acc += a · b` for `a: m × n`, `b: n × d`, `acc: m × d` (row-major; `acc` f32): `d / n`
/// cooperative products, each block of `acc` loaded as the accumulator and stored back.
/// `O += P·V`, `dQ += dS·K`, `dV += Pᵀ·dO`, `dK += dSᵀ·Q`.
#[cube]
pub(crate) fn accumulate_product<F: Float>(
    a: &SharedMemory<F>,
    b: &SharedMemory<F>,
    acc: &mut SharedMemory<f32>,
    #[comptime] m: usize,
    #[comptime] n: usize,
    #[comptime] dim: usize,
) {
    let lhs = cmma::Matrix::<F>::from_slice(
        cmma::MatrixIdent::A,
        m,
        n,
        n,
        cmma::MatrixLayout::RowMajor,
        &a.to_slice(),
        n as u32,
    );
    for c in 0..dim / n {
        let sum = cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            m,
            n,
            n,
            cmma::MatrixLayout::Undefined,
            0.0,
        );
        cmma::load_with_layout(
            &sum,
            &acc.slice(c * n, m * dim),
            dim as u32,
            cmma::MatrixLayout::RowMajor,
        );
        let rhs = cmma::Matrix::<F>::from_slice(
            cmma::MatrixIdent::B,
            m,
            n,
            n,
            cmma::MatrixLayout::RowMajor,
            &b.slice(c * n, n * dim),
            dim as u32,
        );
        cmma::execute::<F, F, f32, f32>(&lhs, &rhs, &sum, &sum);
        cmma::store(
            &mut acc.slice_mut(c * n, m * dim),
            &sum,
            dim as u32,
            cmma::MatrixLayout::RowMajor,
        );
    }
}
