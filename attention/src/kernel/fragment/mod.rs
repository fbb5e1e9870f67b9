//! The fragment seam: warp-level `m16n8k16` products on register fragments, for kernels written
//! once (FlashAttention-2 style) that run on CUDA's tensor cores and, emulated, on any device
//! (lavapipe in CI). A kernel calls the functions below with a compile-time [`FragmentPath`]
//! the host picks ([`FragmentPath::of`]); each function compiles to CubeCL's manual MMA and
//! plane shuffles on [`FragmentPath::Native`], to plain arithmetic exchanging through shared
//! memory on [`FragmentPath::Emulated`] (`emulated`).
//!
//! Both paths hold the same elements in the same lanes: PTX's layout for
//! `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32` (PTX ISA, "Matrix Fragments
//! for mma.m16n8k16"), the one CubeCL's `MmaDefinition::position_of_nth` gives on CUDA. With
//! `g = lane >> 2` (groupID) and `t = lane % 4` (threadID_in_group), a lane holds
//! - of A (16 × 16, `row × k`): a0, a1 at `(g, 2t + {0, 1})`, a2, a3 at `(g + 8, 2t + {0, 1})`,
//!   a4, a5 at `(g, 2t + 8 + {0, 1})`, a6, a7 at `(g + 8, 2t + 8 + {0, 1})`;
//! - of B (16 × 8, `k × n`): b0, b1 at `(k = 2t + {0, 1}, n = g)`, b2, b3 at
//!   `(k = 2t + 8 + {0, 1}, n = g)`;
//! - of C (16 × 8, f32): c0, c1 at `(g, 2t + {0, 1})`, c2, c3 at `(g + 8, 2t + {0, 1})`.
//!
//! Fragments are arrays of [`Pair`]s, element `2p + e` in component `e` of pair `p` (a pair
//! of f16 or bf16 is one 32-bit register of PTX's operands): A has 4 pairs, B and C have 2. A
//! row of C lies in the 4 lanes of a quad (`4g … 4g + 3`), pair 0 in row `g` and pair 1 in row
//! `g + 8`: [`reduce_rows`] combines a row within its quad (shuffles by 1 and 2).
//!
//! A cube is 1-D, of `warps` warps of 32 units (warp `UNIT_POS_X / 32`: in a 1-D cube the
//! unit's index, one register that the compiler can read again, where `UNIT_POS` is computed
//! from three and kept live), each warp with its own fragments. On the emulated path a warp is 32
//! units that exchange through shared memory between `sync_cube`s, so every fragment function must
//! be reached by all units of the cube in uniform control flow (natively, by all lanes of the
//! warp).

use burn::tensor::DType;
use burn_cubecl::CubeRuntime;
use cubecl::cmma::MatrixIdent;
use cubecl::ir::features::{MmaConfig, Plane};
use cubecl::ir::{DeviceProperties, ElemType, FloatKind};
use cubecl::prelude::*;

mod emulated;
pub(crate) mod probe;

/// Lanes of a warp, on both paths.
pub(crate) const LANES: usize = 32;
/// Rows of A and C.
pub(crate) const M: usize = 16;
/// Columns of B and C.
pub(crate) const N: usize = 8;
/// Columns of A, rows of B.
pub(crate) const K: usize = 16;

/// Two neighbouring elements of a fragment: one 32-bit register of an f16/bf16 operand, two of
/// the f32 accumulator.
pub(crate) type Pair<E> = Vector<E, Const<2>>;

/// How a kernel's fragments compile: on the device's MMA instructions and plane shuffles, or
/// emulated with the same layout by the units of a cube.
#[derive(CubeType, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FragmentPath {
    /// CubeCL's manual MMA (`cmma::MmaDefinition`, `m16n8k16`) and `plane_shuffle_xor`: CUDA
    /// devices that list the shape for the input type (sm_80 and later).
    Native,
    /// Shared memory and `sync_cube` in place of the warp's registers: every device.
    Emulated,
}

impl FragmentPath {
    /// The path `client`'s device runs with inputs of `dtype` ([`Self::for_device`]).
    pub(crate) fn of<R: CubeRuntime>(client: &ComputeClient<R>, dtype: DType) -> Self {
        Self::for_device(R::name(client), client.properties(), dtype)
    }

    /// The path a device of CubeCL's `runtime` ("cuda", "wgpu", …) with `properties` runs with
    /// inputs of `dtype`: native on CUDA where the device lists `m16n8k16` for `dtype` with f32
    /// accumulation (sm_80 and later), has plane operations and 32-lane planes; emulated
    /// everywhere else (wgpu never lists manual MMA; HIP's fragments have another layout).
    pub(crate) fn for_device(runtime: &str, properties: &DeviceProperties, dtype: DType) -> Self {
        let input = match dtype {
            DType::F16 => ElemType::Float(FloatKind::F16),
            DType::BF16 => ElemType::Float(FloatKind::BF16),
            _ => return FragmentPath::Emulated,
        };
        let shape = MmaConfig {
            a_type: input.into(),
            b_type: input.into(),
            cd_type: ElemType::Float(FloatKind::F32).into(),
            m: M as u32,
            n: N as u32,
            k: K as u32,
        };
        let hardware = &properties.hardware;
        let native = runtime == "cuda"
            && properties.features.matmul.mma.contains(&shape)
            && properties.features.plane.contains(Plane::Ops)
            && hardware.plane_size_min as usize == LANES
            && hardware.plane_size_max as usize == LANES;
        if native { FragmentPath::Native } else { FragmentPath::Emulated }
    }

    /// f32 words of the exchange buffer a cube of `warps` warps allocates for its fragment calls
    /// (`SharedMemory::<f32>::new(comptime![path.exchange_len(warps, products)])`), whose
    /// [`mma_each`] calls take at most `products` B fragments: a 16 × 16 A and `products`
    /// 16 × 8 B per warp when emulated; one unused word natively.
    pub(crate) fn exchange_len(self, warps: usize, products: usize) -> usize {
        match self {
            FragmentPath::Native => 1,
            FragmentPath::Emulated => warps * emulated::exchange_words(products),
        }
    }
}

/// How [`reduce_rows`] combines a row.
#[derive(CubeType, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RowReduction {
    Max,
    Sum,
}

/// Pairs per lane of a fragment of `ident`: 4 for A, 2 for B and C.
pub(crate) fn pairs(ident: MatrixIdent) -> usize {
    match ident {
        MatrixIdent::A => M * K / LANES / 2,
        MatrixIdent::B => K * N / LANES / 2,
        MatrixIdent::Accumulator => M * N / LANES / 2,
    }
}

/// This unit's lane in its warp.
#[cube]
pub(crate) fn lane(#[comptime] path: FragmentPath) -> u32 {
    if comptime![path == FragmentPath::Native] { UNIT_POS_PLANE } else { UNIT_POS_X % LANES as u32 }
}

/// `(row, column)` of element `nth` of `lane`'s fragment of `ident`: CubeCL's mapping natively,
/// its twin (the layout above) when emulated.
#[cube]
pub(crate) fn position<F: Float>(
    lane: u32,
    nth: usize,
    #[comptime] ident: MatrixIdent,
    #[comptime] path: FragmentPath,
) -> (usize, usize) {
    if comptime![path == FragmentPath::Native] {
        let definition = cmma::MmaDefinition::<F, F, f32>::new(M, N, K);
        let (row, col) = definition.position_of_nth(lane, nth as u32, ident);
        (row as usize, col as usize)
    } else {
        emulated::position(lane as usize, nth, ident)
    }
}

/// Loads this lane's fragment of `ident` (`MatrixIdent::A`: 16 × 16, or `MatrixIdent::B`:
/// 16 × 8) of a tile of `tile`: element `(r, c)` at `offset + r * stride + c`, or at
/// `offset + c * stride + r` when `transposed` (a `B = Kᵀ` read from the rows of `K`).
/// Natively one `ldmatrix` (`.x4` for A, `.x2` for B; `.trans` where the fragment's pairs lie
/// down a column of the tile), emulated its twin ([`matrices`]); rows 16-byte aligned.
#[cube]
pub(crate) fn load<F: Float>(
    tile: &SharedMemory<F>,
    offset: usize,
    stride: usize,
    #[comptime] ident: MatrixIdent,
    #[comptime] transposed: bool,
    #[comptime] path: FragmentPath,
) -> Array<Pair<F>> {
    let a = comptime![ident == MatrixIdent::A];
    matrices(tile, offset, stride, comptime![pairs(ident)], transposed, a == transposed, path)
}

/// Loads the two B fragments (16 × 8 each) of the 16 × 16 block of `tile` at `offset` whose
/// column blocks are 8 apart, as one array: pairs 0 and 1 the first fragment, 2 and 3 the
/// second ([`half`] splits them); `transposed` as in [`load`] (then the fragments are 8 rows
/// of the tile apart). Natively one `ldmatrix.x4`.
#[cube]
pub(crate) fn load_b_pair<F: Float>(
    tile: &SharedMemory<F>,
    offset: usize,
    stride: usize,
    #[comptime] transposed: bool,
    #[comptime] path: FragmentPath,
) -> Array<Pair<F>> {
    matrices(tile, offset, stride, 4usize, transposed, !transposed, path)
}

/// The first (`second = false`) or second B fragment of a [`load_b_pair`].
#[cube]
pub(crate) fn half<F: Float>(pair: &Array<Pair<F>>, #[comptime] second: bool) -> Array<Pair<F>> {
    let first = comptime![if second { 2usize } else { 0 }];
    let mut fragment = Array::<Pair<F>>::new(2usize);
    fragment[0] = pair[first];
    fragment[1] = pair[first + 1];
    fragment
}

/// The address of the 8-element row lane `lane` gives an `ldmatrix` of `count` 8 × 8 matrices
/// of the 16 × 16 block at `offset` (rows `stride` apart): matrix `m = lane / 8 mod count`,
/// its row `lane mod 8`. The matrices are the block's quarters, in column order (top left,
/// bottom left, top right, bottom right) or, `rows_first`, in row order.
#[cube]
fn matrix_row(
    lane: usize,
    offset: usize,
    stride: usize,
    #[comptime] count: usize,
    #[comptime] rows_first: bool,
) -> usize {
    let m = lane / 8 % count;
    let (down, across) = if comptime![rows_first] { (m / 2, m % 2) } else { (m % 2, m / 2) };
    offset + (8 * down + lane % 8) * stride + 8 * across
}

/// `ldmatrix.x{count}` of the 16 × 16 block at `offset` (quarters ordered as [`matrix_row`]
/// says, `.trans` when `trans`): this lane's pair `p` is, of matrix `p`, row `lane / 4`,
/// columns `2 (lane mod 4) + {0, 1}`, or with `trans` column `lane / 4`, rows
/// `2 (lane mod 4) + {0, 1}`. Natively CubeCL's `load_matrix`; emulated, each element read
/// from the row address its lane would give, computed by the same [`matrix_row`].
#[cube]
fn matrices<F: Float>(
    tile: &SharedMemory<F>,
    offset: usize,
    stride: usize,
    #[comptime] count: usize,
    #[comptime] rows_first: bool,
    #[comptime] trans: bool,
    #[comptime] path: FragmentPath,
) -> Array<Pair<F>> {
    let lane = lane(path) as usize;
    if comptime![path == FragmentPath::Native] {
        let definition = cmma::MmaDefinition::<F, F, f32>::new(M, N, K);
        let at = matrix_row(lane, offset, stride, count, rows_first);
        definition.load_matrix::<F, Const<2>>(&tile.slice(at, at + 8), MatrixIdent::A, count, trans)
    } else {
        let mut fragment = Array::<Pair<F>>::new(count);
        #[unroll]
        for p in 0..count {
            let mut pair = Pair::<F>::empty();
            #[unroll]
            for e in 0..2usize {
                let (row_lane, column) = if comptime![trans] {
                    (8 * p + 2 * (lane % 4) + e, lane / 4)
                } else {
                    (8 * p + lane / 4, 2 * (lane % 4) + e)
                };
                pair[e] = tile[matrix_row(row_lane, offset, stride, count, rows_first) + column];
            }
            fragment[p] = pair;
        }
        fragment
    }
}

/// A 16 × 8 f32 accumulator of zeros.
#[cube]
pub(crate) fn zeros() -> Array<Pair<f32>> {
    let count = comptime![pairs(MatrixIdent::Accumulator)];
    let mut fragment = Array::<Pair<f32>>::new(count);
    #[unroll]
    for p in 0..count {
        fragment[p] = Pair::<f32>::new(0.0);
    }
    fragment
}

/// `c += a · b`: one `m16n8k16` product of the warp's fragments, accumulated in f32.
#[cube]
pub(crate) fn mma<F: Float>(
    a: &Array<Pair<F>>,
    b: &Array<Pair<F>>,
    c: &mut Array<Pair<f32>>,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    if comptime![path == FragmentPath::Native] {
        let definition = cmma::MmaDefinition::<F, F, f32>::new(M, N, K);
        definition.execute_inplace(a, b, c);
    } else {
        emulated::mma(a, b, c, exchange);
    }
}

/// `c[first + i] += a · b[i]` for every `i`: products sharing their A fragment (a warp's rows
/// of `Q` against the key blocks of a tile, its weights against the column blocks of `V`).
/// Natively one instruction each; emulated, one exchange of `a` and every `b` between two
/// `sync_cube`s, so the exchange buffer must hold `b.len()` B fragments
/// ([`FragmentPath::exchange_len`]).
#[cube]
pub(crate) fn mma_each<F: Float>(
    a: &Array<Pair<F>>,
    b: &Sequence<Array<Pair<F>>>,
    c: &mut Sequence<Array<Pair<f32>>>,
    #[comptime] first: usize,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    if comptime![path == FragmentPath::Native] {
        let definition = cmma::MmaDefinition::<F, F, f32>::new(M, N, K);
        #[unroll]
        for i in 0..b.len() {
            definition.execute_inplace(a, b.index(i), c.index_mut(first + i));
        }
    } else {
        emulated::mma_each(a, b, c, first, exchange);
    }
}

/// `value` of the lane `lane ^ mask` of this warp, both components.
#[cube]
fn shuffle_xor(
    value: Pair<f32>,
    mask: u32,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> Pair<f32> {
    if comptime![path == FragmentPath::Native] {
        let mut other = Pair::<f32>::empty();
        other[0] = plane_shuffle_xor(value[0], mask);
        other[1] = plane_shuffle_xor(value[1], mask);
        other
    } else {
        emulated::shuffle_xor(value, mask, exchange)
    }
}

/// The maximum or sum of each of this lane's two rows of `c` (element 0: row `g`, element 1:
/// row `g + 8`), the same in the 4 lanes of the quad that holds the rows.
#[cube]
pub(crate) fn reduce_rows(
    c: &Array<Pair<f32>>,
    #[comptime] reduction: RowReduction,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> Pair<f32> {
    let mut own = Pair::<f32>::empty();
    #[unroll]
    for p in 0..2usize {
        let pair = c[p];
        own[p] = combine(pair[0], pair[1], reduction);
    }
    reduce_quad(own, reduction, exchange, path)
}

/// Each component of `x` combined by `reduction` across the 4 lanes of this lane's quad
/// (shuffles by 1 and 2): a lane's two rows of the accumulators, once each lane has combined
/// its own columns of them.
#[cube]
pub(crate) fn reduce_quad(
    x: Pair<f32>,
    #[comptime] reduction: RowReduction,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> Pair<f32> {
    let mut x = x;
    #[unroll]
    for mask in 1..3u32 {
        let other = shuffle_xor(x, mask, exchange, path);
        #[unroll]
        for p in 0..2usize {
            x[p] = combine(x[p], other[p], reduction);
        }
    }
    x
}

/// The A fragment (16 × 16, in `F`) whose columns 0–7 are the accumulator `left` and 8–15 the
/// accumulator `right`: each lane already holds the elements (pairs 0, 1 of A are `left`'s,
/// pairs 2, 3 are `right`'s, by the layouts above), so FlashAttention-2's weights `P` become the
/// left operand of `P·V` without leaving the registers.
#[cube]
pub(crate) fn accumulators_as_a<F: Float>(
    left: &Array<Pair<f32>>,
    right: &Array<Pair<f32>>,
) -> Array<Pair<F>> {
    let mut a = Array::<Pair<F>>::new(comptime![pairs(MatrixIdent::A)]);
    #[unroll]
    for p in 0..2usize {
        a[p] = Pair::<F>::cast_from(left[p]);
        a[p + 2] = Pair::<F>::cast_from(right[p]);
    }
    a
}

/// `a` and `b` combined by `reduction`.
#[cube]
fn combine(a: f32, b: f32, #[comptime] reduction: RowReduction) -> f32 {
    if comptime![reduction == RowReduction::Max] { max(a, b) } else { a + b }
}

/// Stores this lane's elements of the 16 × 8 accumulator `c` into the row-major tile of `out`
/// whose element `(r, c)` is at `offset + r * stride + c`, as `E`.
#[cube]
pub(crate) fn store<E: Float>(
    c: &Array<Pair<f32>>,
    out: &mut SharedMemory<E>,
    offset: usize,
    stride: usize,
    #[comptime] path: FragmentPath,
) {
    let lane = lane(path);
    #[unroll]
    for p in 0..2usize {
        let pair = c[p];
        #[unroll]
        for e in 0..2usize {
            let (row, col) = position::<E>(lane, 2 * p + e, MatrixIdent::Accumulator, path);
            out[offset + row * stride + col] = E::cast_from(pair[e]);
        }
    }
}

/// Copies the `rows × cols` tile of `src` at `src_offset` (row stride `src_stride`) into `dst`
/// at `dst_offset` (row stride `dst_stride`), shared by all units of the cube; call `sync_cube`
/// before reading it. Plain loads on both paths (the probe's copies; the FlashAttention-2
/// kernels copy their tiles by `cp.async` through `kernel::flash::copy_rows`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_tile<F: Float>(
    src: &Tensor<F>,
    src_offset: usize,
    src_stride: usize,
    dst: &mut SharedMemory<F>,
    dst_offset: usize,
    dst_stride: usize,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
) {
    let mut e = UNIT_POS_X as usize;
    while e < rows * cols {
        let row = e / cols;
        let col = e % cols;
        dst[dst_offset + row * dst_stride + col] = src[src_offset + row * src_stride + col];
        e += CUBE_DIM as usize;
    }
}
