//! The kernels of FlashAttention-2's design on the fragment seam, which CUDA's launches pick
//! (sm_80 and later, d = 64 and 128): the forward ([`forward`]), dQ ([`backward_queries`]) and
//! dK/dV ([`backward_keys`]), with their products ([`products`]); and here what they share: their
//! block shape, where the launches pick them, the order they run the heads in, the order a cube
//! visits its tiles in (whole tiles first: [`whole_first`]), and the copy of a tile into shared
//! memory ([`copy_rows`]: `cp.async` on CUDA, completed by [`land`]).
//!
//! A cube is [`WARPS`] warps of 32 lanes; each warp owns 16 rows of each group of [`ROWS`]
//! (query rows, or key rows in dK/dV; one group per cube, two in the forward at d = 64:
//! [`forward_groups`]) and keeps its fragments in registers through the fragment seam
//! (`kernel::fragment`), natively on CUDA's MMA instructions, emulated on every other device
//! (what the tests run on lavapipe).
//! Tiles of the other side are [`KEYS`] rows, in shared memory rows of `d + PAD` elements so
//! that the 8 rows a fragment load touches at once start in different banks.

pub(crate) mod backward_keys;
pub(crate) mod backward_queries;
pub(crate) mod forward;
pub(crate) mod products;

use burn::tensor::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::barrier::{Barrier, copy_async_checked};
use cubecl::prelude::*;

use crate::WindowSpec;
use crate::kernel::config::{Call, LaunchArgs, Variant, plain_windows};
use crate::kernel::fragment::{FragmentPath, LANES, M, N, lane};
use crate::kernel::prologue::offset;
use crate::kernel::reach::{Tiles, nth_tile};
use crate::kernel::visibility::{Window, sees_whole_block};

/// Warps per cube.
pub(crate) const WARPS: usize = 4;
/// Rows per group of a cube: 16 per warp.
pub(crate) const ROWS: usize = WARPS * M;
/// Rows per tile of the other side (keys, or queries in dK/dV).
pub(crate) const KEYS: usize = 64;
/// Units per cube.
pub(crate) const UNITS: usize = WARPS * LANES;
/// B fragments per product call (`kernel::fragment::mma_each`) on `path`: a tile's 8 key
/// blocks, or 8 column blocks of `V`, at once natively; 4 when emulated, whose exchange buffer
/// holds them all in shared memory (lavapipe offers 32 KB).
pub(crate) fn products(path: FragmentPath) -> usize {
    match path {
        FragmentPath::Native => KEYS / N,
        FragmentPath::Emulated => KEYS / N / 2,
    }
}

/// Shared memory of a cube at head dim `dim` on `path`: the `K` and `V` tiles (2-byte
/// elements, padded rows), `Q`'s at d = 128 (`kernel::flash::forward`), and the exchange buffer
/// of the fragment seam.
pub(crate) fn shared_bytes(dim: usize, path: FragmentPath) -> usize {
    let tiles = if dim > STAGED_DIM { 3 } else { 2 };
    tiles * KEYS * (dim + PAD) * 2 + path.exchange_len(WARPS, products(path)) * 4
}
/// Padding of each shared row, in elements: 16 bytes of 2-byte elements.
pub(crate) const PAD: usize = 8;
/// Alignment of the shared tiles, in bytes: `ldmatrix` reads 16-byte rows (with `PAD`, every
/// row of 8 elements the fragment seam reads starts on 16 bytes).
pub(crate) const ROW_ALIGN: usize = 16;

/// The widest head dim whose warps keep their own rows' operands in registers (`Q` in the
/// forward and the next `K` tile in flight during `P·V`; `Q` and `dO` in dQ; `K` and `V` in
/// dK/dV): at d = 128 the accumulators and scores leave no room for them without spilling (the
/// offline check), so they stay in shared memory, their fragments loaded per step as
/// FlashAttention-2 does by default, and the forward loads `K` after the products.
pub(crate) const STAGED_DIM: usize = 64;

/// The head dims the kernels are compiled for: a warp's `Q`, scores and `O` fit its
/// registers at these widths; others run `kernel::cmma::forward` or the portable kernels.
pub(crate) const HEAD_DIMS: [usize; 2] = [64, 128];

/// The fragment path of the FlashAttention-2 kernels for a call of `dtype` at head dim `dim` on
/// `client`'s device, or `None` where they do not run: only natively (CUDA, sm_80 and later:
/// the emulated path is for the tests, far slower than the cooperative-matrix kernels), in f16
/// or bf16, at the [`HEAD_DIMS`], and without relative scores (which these kernels do not read).
pub(crate) fn flash_path<R: CubeRuntime>(
    client: &ComputeClient<R>,
    dtype: DType,
    dim: usize,
    relative: bool,
) -> Option<FragmentPath> {
    let native = FragmentPath::of(client, dtype) == FragmentPath::Native;
    let fits = |dim| shared_bytes(dim, FragmentPath::Native) <= max_shared(client);
    (native && HEAD_DIMS.contains(&dim) && fits(dim) && !relative).then_some(FragmentPath::Native)
}

/// The fragment path of the FlashAttention-2 backward kernels (`kernel::flash::backward_queries`,
/// `kernel::flash::backward_keys`), or `None` where the launches run the cooperative-matrix
/// ones: where the forward runs ([`flash_path`]) and the cube's tiles fit the device's shared
/// memory.
pub(crate) fn flash_backward_path<R: CubeRuntime>(
    client: &ComputeClient<R>,
    dtype: DType,
    dim: usize,
    relative: bool,
) -> Option<FragmentPath> {
    let fits = backward_shared_bytes(dim, FragmentPath::Native) <= max_shared(client);
    flash_path(client, dtype, dim, relative).filter(|_| fits)
}

/// Shared memory of the hungrier backward kernel on `path` at head dim `dim` (dK/dV; dQ has
/// no row-terms tiles): the two tiles of the other side, at d = 128 ([`STAGED_DIM`]) the two
/// of the cube's own rows, which stay there, the tile's row terms and the exchange buffer.
pub(crate) fn backward_shared_bytes(dim: usize, path: FragmentPath) -> usize {
    let tiles = if dim > STAGED_DIM { 4 } else { 2 };
    tiles * ROWS * (dim + PAD) * 2 + 2 * ROWS * 4 + path.exchange_len(WARPS, products(path)) * 4
}

/// Whether `device`'s windowed core runs its forward on the FlashAttention-2 kernel for inputs
/// of `dtype` at head dim `dim` (what the CUDA tests check before comparing).
pub fn flash_kernel_runs<R: CubeRuntime>(device: &R::Device, dtype: DType, dim: usize) -> bool {
    flash_path(&R::client(device), dtype, dim, false).is_some()
}

/// The shared memory a cube may use on `client`'s device.
pub(crate) fn max_shared<R: CubeRuntime>(client: &ComputeClient<R>) -> usize {
    client.properties().hardware.max_shared_memory_size
}

/// The variant the FlashAttention-2 kernels compile for a call of `spec` laid out as
/// `layout` on `path`: [`Variant::scaled_dots`] where the score is the scaled product alone
/// and the scale in `(0, 2]` (so that the masked score times the exponent's factor stays
/// finite), on either path; natively, [`Variant::plain`] where every window is plain. Emulated
/// (lavapipe, the tests) `plain` stays false, so that a test's plain and other windows share
/// one compiled kernel (lavapipe compiles each for minutes); the spans themselves are checked
/// against `WindowSpec::visible` by the visibility probe, and natively by the GPU session's
/// tests.
pub(crate) fn flash_variant<R: CubeRuntime>(
    layout: &LaunchArgs<R>,
    spec: &WindowSpec,
    path: FragmentPath,
) -> Variant {
    let variant = layout.variant;
    let plain = path == FragmentPath::Native && plain_windows(spec);
    let scale = layout.scale();
    let scaled_dots = !variant.sigmoid && !variant.softcap && !variant.alibi;
    let scaled_dots = scaled_dots && scale > 0.0 && scale <= 2.0;
    Variant { plain, scaled_dots, ..variant }
}

/// The heads in the order the grid runs them: the farthest-reaching window first, so that
/// under per-head windows (MSWA) the longest cubes start first and the short ones fill the
/// tail. Ties keep head order.
pub(crate) fn head_order(spec: &WindowSpec) -> Vec<u32> {
    let reach = |h: usize| {
        let w = &spec.heads()[h];
        let span = w.left.saturating_add(w.right).saturating_mul(w.dilation);
        w.segment.map_or(span, |segment| span.min(segment))
    };
    let mut order: Vec<usize> = (0..spec.num_heads()).collect();
    order.sort_by_key(|&h| std::cmp::Reverse(reach(h)));
    order.into_iter().map(|h| h as u32).collect()
}

/// Row groups per warp in the forward at head dim `dim` on `path`: natively at d = 64
/// ([`STAGED_DIM`]) a warp owns two groups of 16 rows, the cube `2 · ROWS`, so that each `K`
/// and `V` fragment a warp loads, and each tile's copies and per-tile work, serve twice the
/// products; at d = 128 one (the registers hold one group's `O` and scores). Emulated, one:
/// lavapipe compiles the two-group kernel in over ten minutes of one core, beyond CI's budget
/// (it passed the emulated forward's cases once, 2026-11-29). Group `g` is the cube's rows
/// `g · ROWS … g · ROWS + ROWS − 1`, a warp's rows in it as [`block_row`] says.
pub(crate) fn forward_groups(dim: usize, path: FragmentPath) -> usize {
    if dim <= STAGED_DIM && path == FragmentPath::Native { 2 } else { 1 }
}

/// This lane's cube-relative row `p` of a fragment's accumulator (0: `g`, 1: `g + 8`, in the
/// 16 rows of its warp): a query row in the forward and dQ, a key row in dK/dV.
#[cube]
pub(crate) fn block_row(#[comptime] p: usize, #[comptime] path: FragmentPath) -> usize {
    UNIT_POS_X as usize / LANES * M + lane(path) as usize / 4 + 8 * p
}

/// Does every query of the rows `i0 .. min(i0 + rows, N_q)` see every key of the tile
/// `j0 .. j0 + KEYS`? [`sees_whole_block`] on the call's positions: implied by the per-pair
/// rule, and never for a tile reaching past the valid keys (padding keys are masked, since
/// their weights could overflow under ALiBi).
#[cube]
pub(crate) fn sees_whole_tile(
    window: &Window,
    i0: usize,
    q_len: usize,
    j0: usize,
    call: &Call,
    #[comptime] rows: usize,
    #[comptime] causal: bool,
) -> bool {
    let first_query = call.query_offset + i0 as u32;
    let last_query = call.query_offset + (min(i0 + rows, q_len) - 1) as u32;
    let (first_key, last_key) = (j0 as u32, (j0 + KEYS - 1) as u32);
    sees_whole_block(window, first_query, last_query, first_key, last_key, call, causal)
}

/// The order a cube visits its tiles in: the first run of tiles seen whole first, then the
/// others in list order, so that the whole tiles run in a loop of their own without the
/// per-pair rule. The run's tiles are consecutive (a run does not cross from the sink tiles to
/// a band that does not follow them), so that its loop steps one tile at a time. Tiles seen
/// whole past that run (sink tiles) go with the others: the rule holds on them too.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct TileOrder {
    /// Index in the tile list of the run's first tile.
    pub first: u32,
    /// Tiles in the run: steps `0 … whole − 1` visit them.
    pub whole: u32,
}

/// The [`TileOrder`] of the cube whose own rows start at `own`: `rows` query rows whose key
/// tiles are `tiles` (`kernel::flash::forward`, `kernel::flash::backward_queries`), or with
/// `key_rows` key rows whose query tiles of `rows` are `tiles` (`kernel::flash::backward_keys`;
/// a query tile reaching past `N_q` is never whole: its padding rows are masked). A tile is whole
/// when [`sees_whole_tile`] says so. One uniform pass over the list, which ends past the run.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn whole_first(
    tiles: &Tiles,
    window: &Window,
    own: usize,
    q_len: usize,
    call: &Call,
    #[comptime] rows: usize,
    #[comptime] causal: bool,
    #[comptime] key_rows: bool,
) -> TileOrder {
    let mut order = TileOrder { first: 0, whole: 0 };
    for t in 0..tiles.before + tiles.count {
        let tile = nth_tile(tiles, t);
        let follows = order.whole == 0 || tile == nth_tile(tiles, t - min(t, 1)) + 1;
        let seen = if comptime![key_rows] {
            let i0 = tile as usize * rows;
            i0 + rows <= q_len && sees_whole_tile(window, i0, q_len, own, call, rows, causal)
        } else {
            sees_whole_tile(window, own, q_len, tile as usize * KEYS, call, rows, causal)
        };
        if follows && seen {
            if order.whole == 0 {
                order.first = t;
            }
            order.whole += 1;
        } else if order.whole > 0 {
            break;
        }
    }
    order
}

/// The step a cube's loop of cut tiles starts at: past the run of whole tiles, which natively
/// have a loop of their own; 0 emulated, where every tile takes the cut tiles' body (the
/// per-pair rule holds on whole tiles too), so that lavapipe compiles one copy of a step.
#[cube]
pub(crate) fn cut_from(visit: &TileOrder, #[comptime] path: FragmentPath) -> u32 {
    let mut from = 0u32;
    if comptime![path == FragmentPath::Native] {
        from = visit.whole;
    }
    from
}

/// The tile a cube visits at step `u` of its [`TileOrder`] (`u < tiles.before + tiles.count`).
#[cube]
pub(crate) fn tile_at(tiles: &Tiles, order: &TileOrder, u: u32) -> u32 {
    let rest = u - min(u, order.whole);
    let t = if u < order.whole {
        order.first + u
    } else if rest < order.first {
        rest
    } else {
        rest + order.whole
    };
    nth_tile(tiles, t)
}

/// Where the steps of a cube of query rows find their key tiles: the list, the order it
/// visits it in ([`TileOrder`]), its length, and where the head's `K` and `V` rows lie.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct KeySteps {
    pub tiles: Tiles,
    pub visit: TileOrder,
    pub count: u32,
    pub k_rows: HeadRows,
    pub v_rows: HeadRows,
}

/// The first key of step `step` of `steps`' visit.
#[cube]
pub(crate) fn step_keys(steps: &KeySteps, step: u32) -> usize {
    tile_at(&steps.tiles, &steps.visit, step) as usize * KEYS
}

/// [`step_keys`] for a step of the cut tiles' loop, natively past the run of whole tiles
/// ([`cut_from`]): the visit's order without the run's own case. Emulated, where that loop
/// takes every step, [`step_keys`] itself.
#[cube]
pub(crate) fn cut_step_keys(steps: &KeySteps, step: u32, #[comptime] path: FragmentPath) -> usize {
    if comptime![path == FragmentPath::Native] {
        let (run, rest) = (steps.visit, step - steps.visit.whole);
        let t = select(rest < run.first, rest, rest + run.whole);
        nth_tile(&steps.tiles, t) as usize * KEYS
    } else {
        step_keys(steps, step)
    }
}

/// Where a cube's tile copies ([`copy_rows`]) land: natively an mbarrier that each unit's
/// `cp.async` copies arrive on; emulated none (the copies are plain stores, which `sync_cube`
/// publishes).
pub(crate) type Landing = ComptimeOption<Shared<Barrier>>;

/// The cube's [`Landing`] on `path` (natively initialised by unit 0 for all units).
#[cube]
pub(crate) fn landing(#[comptime] path: FragmentPath) -> Landing {
    if comptime![path == FragmentPath::Native] {
        Landing::new_Some(Barrier::shared(CUBE_DIM, UNIT_POS_X == 0))
    } else {
        Landing::new_None()
    }
}

/// Waits until every unit's copies issued since the last landing are in shared memory and
/// every unit has reached this point (a `sync_cube` too): after it, the new tiles may be read
/// and the buffers read before it may be copied into.
#[cube]
pub(crate) fn land(landing: &Landing) {
    #[comptime]
    match landing {
        ComptimeOption::Some(barrier) => {
            barrier.commit_copy_async();
            barrier.arrive_and_wait();
        }
        ComptimeOption::None => sync_cube(),
    }
}

/// Where one head's rows lie in a tensor `[batch, heads, len, d]` read as vectors of `N`
/// along `d`: its row 0 and the distance between rows, both counted in vectors (rows are a
/// whole number of vectors apart). Read once per cube ([`head_rows`]), so that a tile copy in
/// the loop costs a multiply-add per row, not the tensor's metadata again.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct HeadRows {
    pub base: usize,
    pub stride: usize,
}

/// The [`HeadRows`] of `head` of batch `batch` in `t`, whose rows lie `stride` vectors apart
/// (one of the [`TileStrides`] for a tensor the loop copies, so that the loop reads it from the
/// launch's constants; else `t.stride(2)` in vectors).
#[cube]
pub(crate) fn head_rows<F: Float, N: Size>(
    t: &Tensor<Vector<F, N>>,
    batch: usize,
    head: usize,
    stride: u32,
) -> HeadRows {
    HeadRows { base: offset(t, batch, head, 0) / t.vector_size(), stride: stride as usize }
}

/// The distance between `t`'s rows in vectors, from its metadata: for the tensors copied
/// before the loop.
#[cube]
pub(crate) fn row_stride<F: Float, N: Size>(t: &Tensor<Vector<F, N>>) -> u32 {
    (t.stride(2) / t.vector_size()) as u32
}

/// The row strides, in vectors, of the two tensors whose tiles a kernel's loop copies
/// ([`copy_rows`]): `K` then `V` in the forward and dQ, `Q` then `dO` in dK/dV. Launch
/// scalars: a tensor's own strides lie in global memory, which the loop would read again after
/// every asynchronous copy (its memory clobber invalidates what the compiler had loaded), and
/// would otherwise hold in registers the products need.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct TileStrides {
    pub first: u32,
    pub second: u32,
}

/// The [`TileStrides`] of `first` and `second` read as vectors of `vector` elements.
pub(crate) fn tile_strides<R: CubeRuntime>(
    first: &CubeTensor<R>,
    second: &CubeTensor<R>,
    vector: usize,
) -> TileStridesLaunch<R> {
    let rows = |t: &CubeTensor<R>| (t.meta.strides()[2] / vector) as u32;
    TileStridesLaunch::new(rows(first), rows(second))
}

/// Copies rows `first … first + rows − 1` of the head `at` of `t` (`[batch, heads, len, d]`
/// read as vectors of `N` along `d`) into `out` (rows `stride` apart), zeros for rows at or
/// past `valid`: each unit its share of 16-byte vectors, in turn. Natively by `cp.async`
/// (zero-filled past `valid`), in flight until [`land`]; emulated, its twin: the same vectors
/// loaded and stored by the same units at the same addresses, at once. Natively the vectors
/// must be 16 bytes (`N` elements of 2 bytes) and the rows 16-byte aligned.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_rows<F: Float, N: Size>(
    t: &Tensor<Vector<F, N>>,
    at: &HeadRows,
    first: usize,
    valid: usize,
    out: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] dim: usize,
    #[comptime] stride: usize,
    #[comptime] path: FragmentPath,
) {
    let width = N::value().comptime();
    if comptime![path == FragmentPath::Native] {
        // This unit's first vector and its place in `out`; the next step's lie whole rows on.
        let rows_per_step = comptime![UNITS * width / dim];
        let unit = UNIT_POS_X as usize * width;
        let (row, column) = (first + unit / dim, unit % dim);
        let from = at.base + row * at.stride + column / width;
        let to = unit / dim * stride + column;
        #[unroll]
        for step in 0..comptime![rows / rows_per_step] {
            let start = from + step * rows_per_step * at.stride;
            let source = t.slice(start, start + select(row + step * rows_per_step < valid, 1, 0));
            // The source is a slice of 16-byte vectors and the destination of elements: the
            // copy takes both as addresses, each offset in its own units, so the source's
            // type only needs to match for the signature.
            let source = unsafe { source.downcast_unchecked::<F>() };
            let place = to + step * rows_per_step * stride;
            copy_async_checked(&source, &mut out.slice_mut(place, place + width), width as u32);
        }
    } else {
        let staged = fetch(t, at, first, valid, rows, dim);
        stash(&staged, out, rows, dim, stride);
    }
}

/// Issues the global loads of this unit's share of rows `first … first + rows − 1` of the
/// head `at` of `t` (as [`copy_rows`] reads them), zeros for rows at or past `valid`, and
/// returns them in registers for [`stash`]: the loads stay in flight while the unit computes.
#[cube]
pub(crate) fn fetch<F: Float, N: Size>(
    t: &Tensor<Vector<F, N>>,
    at: &HeadRows,
    first: usize,
    valid: usize,
    #[comptime] rows: usize,
    #[comptime] dim: usize,
) -> Array<Vector<F, N>> {
    let width = t.vector_size();
    let steps = comptime![(rows * dim).div_ceil(UNITS * width)];
    let mut staged = Array::<Vector<F, N>>::new(steps);
    #[unroll]
    for step in 0..steps {
        let e = (step * UNITS + UNIT_POS_X as usize) * width;
        let row = first + e / dim;
        let mut value = Vector::<F, N>::empty().fill(F::cast_from(0.0f32));
        if e < rows * dim && row < valid {
            value = t[at.base + row * at.stride + e % dim / width];
        }
        staged[step] = value;
    }
    staged
}

/// Stores what [`fetch`] returned into `out` (`rows × d`, rows `stride` apart); call
/// `sync_cube` before reading it.
#[cube]
pub(crate) fn stash<F: Float, N: Size>(
    staged: &Array<Vector<F, N>>,
    out: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] dim: usize,
    #[comptime] stride: usize,
) {
    let width = N::value().comptime();
    let steps = comptime![(rows * dim).div_ceil(UNITS * width)];
    #[unroll]
    for step in 0..steps {
        let e = (step * UNITS + UNIT_POS_X as usize) * width;
        if e < rows * dim {
            let value = staged[step];
            let at = e / dim * stride + e % dim;
            #[unroll]
            for i in 0..width {
                out[at + i] = value[i];
            }
        }
    }
}

/// Writes rows `0 … rows − 1` of `tile` (`rows × d`, rows `stride` apart) to rows `first …` of
/// `t` (as [`fetch`] reads them), skipping rows at or past `valid`: one vector per unit in
/// turn, 16 bytes on CUDA. Call `sync_cube` after writing `tile`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_rows<F: Float, N: Size>(
    tile: &SharedMemory<F>,
    t: &mut Tensor<Vector<F, N>>,
    base: usize,
    first: usize,
    valid: usize,
    #[comptime] rows: usize,
    #[comptime] dim: usize,
    #[comptime] stride: usize,
) {
    let width = t.vector_size();
    let row_stride = t.stride(2);
    let steps = comptime![(rows * dim).div_ceil(UNITS * width)];
    #[unroll]
    for step in 0..steps {
        let e = (step * UNITS + UNIT_POS_X as usize) * width;
        let row = first + e / dim;
        if e < rows * dim && row < valid {
            let at = e / dim * stride + e % dim;
            let mut value = Vector::<F, N>::empty();
            #[unroll]
            for i in 0..width {
                value[i] = tile[at + i];
            }
            t[(base + row * row_stride + e % dim) / width] = value;
        }
    }
}
