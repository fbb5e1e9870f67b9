//! The forward kernel of FlashAttention-2's design on the fragment seam (docs/semantics.md
//! §1–§2; reference: `crate::reference::dense_attention`; the block shape, launch choice, visit
//! order and tile copies are `super::flash`'s).
//!
//! A cube owns 64 query rows of one head, 16 per warp. Each warp keeps its rows of `Q` as A
//! fragments (at d = 64; in shared memory at d = 128: [`STAGED_DIM`]), and its running maxima,
//! sums and `O` as accumulators, in registers for the whole block, and visits the key tiles of
//! 64 that [`block_key_tiles`] gives (the window's reach and sinks; tiles outside it are never
//! read), those it sees whole first ([`whole_first`]):
//! - `S = Q·Kᵀ` in registers (`d / 16 × 8` products per warp);
//! - a tile seen whole (every pair visible) skips the per-pair rule: it runs in a loop of its
//!   own; a cut tile asks [`visible`] per pair (one span per row, [`plain_span`], where the
//!   windows are plain) and masks what it refuses;
//! - the online softmax in registers: each lane holds two rows' columns, the row maxima and
//!   sums are combined across a quad ([`reduce_quad`]), and `O` is rescaled only when a row's
//!   maximum moved (plain sums of `σ(s + β)` under sigmoid);
//! - the weights, rounded to the input type, become A fragments where they lie
//!   ([`accumulators_as_a`]) and `O += P·V` accumulates in registers.
//!
//! Tiles come by [`copy_rows`] (`cp.async` on CUDA): `V` of a tile lands during `S = Q·Kᵀ` and
//! the softmax, the next tile's `K` during `P·V` (one buffer per operand, two landings per
//! tile). `O` leaves through shared memory in 16-byte stores; `lse` is f32. Rows that see no
//! key write `o = 0` and `lse = −∞`.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::config::{Call, Variant};
use super::flash::{
    KEYS, KeySteps, Landing, PAD, ROW_ALIGN, ROWS, STAGED_DIM, WARPS, block_row, copy_rows,
    cut_from, land, landing, products, step_keys, whole_first, write_rows,
};
use super::flash_products::{accumulate, row_products};
use super::fragment::{
    FragmentPath, K, LANES, M, N, Pair, RowReduction, lane, load, reduce_quad, store, zeros,
};
use super::prologue::{QueryBlock, block_key_tiles, offset, query_block_of_head};
use super::score::{row_end, score, sigmoid};
use super::visibility::{plain_span, visible_by_span};

/// The score a masked pair holds: the lowest f32, below every real score, and what marks it as
/// masked (a finite value: WGSL has no infinite literals, and `exp` of it minus any score is 0).
#[cube]
fn masked() -> f32 {
    f32::min_value()
}

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` (f16 or bf16, read as vectors of `N`)
/// → `o: [batch, H, N_q, d]`, `lse: [batch, H, N_q]` (f32). Grid: (query blocks of 64, H,
/// batch), head `order[y]` at grid row `y`; `super::flash::UNITS` units per cube.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_flash_kernel<F: Float, NV: Size>(
    q: &Tensor<Vector<F, NV>>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    o: &mut Tensor<Vector<F, NV>>,
    lse: &mut Tensor<f32>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    order: &Array<u32>,
    call: Call,
    #[comptime] variant: Variant,
    #[comptime] path: FragmentPath,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let head = order[CUBE_POS_Y as usize] as usize;
    let at = query_block_of_head(q, k, windows, slopes, &call, head, ROWS);
    let warp = UNIT_POS as usize / LANES;
    let kv_len = call.kv_len as usize;
    let mut k_s = SharedMemory::<F>::new_aligned(KEYS * stride, ROW_ALIGN);
    let mut v_s = SharedMemory::<F>::new_aligned(KEYS * stride, ROW_ALIGN);
    let mut exchange =
        SharedMemory::<f32>::new(comptime![path.exchange_len(WARPS, products(path))]);

    let tiles = block_key_tiles(&at, &call, ROWS, KEYS, variant.causal);
    let count = tiles.before + tiles.count;
    let visit = whole_first(&tiles, &at.window, at.block, at.q_len, &call, variant.causal, false);
    let (k_base, v_base) = (offset(k, at.batch, at.kv_head, 0), offset(v, at.batch, at.kv_head, 0));

    // At d = 64 `Q` passes through `V`'s buffer (ROWS = KEYS) into registers; at d = 128 it
    // stays in a buffer of its own. The first tile's `K` goes to its buffer.
    let mut q_s = SharedMemory::<F>::new_aligned(
        comptime![if dim > STAGED_DIM { ROWS * stride } else { 1 }],
        ROW_ALIGN,
    );
    let landing = landing(path);
    let q_base = offset(q, at.batch, at.head, 0);
    if comptime![dim > STAGED_DIM] {
        copy_rows(q, q_base, at.block, at.q_len, &mut q_s, ROWS, dim, stride, path);
    } else {
        copy_rows(q, q_base, at.block, at.q_len, &mut v_s, ROWS, dim, stride, path);
    }
    let steps = KeySteps { tiles, visit, count, k_base, v_base };
    let first = step_keys(&steps, 0);
    let valid = select(count > 0, kv_len, 0);
    copy_rows(k, k_base, first, valid, &mut k_s, KEYS, dim, stride, path);
    land(&landing);
    let mut q_fragments = Sequence::<Array<Pair<F>>>::new();
    if comptime![dim <= STAGED_DIM] {
        #[unroll]
        for c in 0..dim / K {
            let at = warp * M * stride + c * K;
            q_fragments.push(load(&v_s, at, stride, MatrixIdent::A, false, path));
        }
    }
    sync_cube();

    let mut out = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..dim / N {
        out.push(zeros());
    }
    let mut state = RowState { max: Pair::<f32>::new(masked()), total: Pair::<f32>::new(0.0) };
    run_tiles(
        &q_fragments,
        &q_s,
        &mut k_s,
        &mut v_s,
        k,
        v,
        &steps,
        &landing,
        &mut out,
        &mut state,
        &at,
        &call,
        variant,
        &mut exchange,
        path,
    );

    finish(&mut out, &state, &mut k_s, lse, &at, &call, variant, &mut exchange, path);
    sync_cube();
    write_rows(&k_s, o, offset(o, at.batch, at.head, 0), at.block, at.q_len, ROWS, dim, stride);
}

/// Every step of the visit (step 0's `K` landed): the tiles seen whole, then the cut ones, two
/// small loops, the first without the per-pair rule (emulated, one: [`cut_from`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn run_tiles<F: Float, NV: Size>(
    q_fragments: &Sequence<Array<Pair<F>>>,
    q_s: &SharedMemory<F>,
    k_s: &mut SharedMemory<F>,
    v_s: &mut SharedMemory<F>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    steps: &KeySteps,
    landing: &Landing,
    out: &mut Sequence<Array<Pair<f32>>>,
    state: &mut RowState,
    at: &QueryBlock,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    let mut j0 = step_keys(steps, 0);
    if comptime![path == FragmentPath::Native] {
        for u in 0..steps.visit.whole {
            j0 = tile_step(
                q_fragments,
                q_s,
                k_s,
                v_s,
                k,
                v,
                steps,
                landing,
                u,
                j0,
                true,
                out,
                state,
                at,
                call,
                variant,
                exchange,
                path,
            );
        }
    }
    for u in cut_from(&steps.visit, path)..steps.count {
        j0 = tile_step(
            q_fragments,
            q_s,
            k_s,
            v_s,
            k,
            v,
            steps,
            landing,
            u,
            j0,
            false,
            out,
            state,
            at,
            call,
            variant,
            exchange,
            path,
        );
    }
}

/// Step `step` of the visit, on the tile of keys from `j0` seen `whole` or cut (returns the
/// next step's first key): `S = Q·Kᵀ`, its scores (the
/// per-pair rule only on a cut tile), the online
/// softmax, `O += P·V`. `V` of the tile is copied in during `S = Q·Kᵀ` and the softmax, the
/// next step's `K` during `P·V` ([`copy_rows`]: `cp.async` natively), so that global latency
/// hides behind the products; two landings.
#[cube]
#[allow(clippy::too_many_arguments)]
fn tile_step<F: Float, NV: Size>(
    q_fragments: &Sequence<Array<Pair<F>>>,
    q_s: &SharedMemory<F>,
    k_s: &mut SharedMemory<F>,
    v_s: &mut SharedMemory<F>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    steps: &KeySteps,
    landing: &Landing,
    step: u32,
    j0: usize,
    #[comptime] whole: bool,
    out: &mut Sequence<Array<Pair<f32>>>,
    state: &mut RowState,
    at: &QueryBlock,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> usize {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let kv_len = call.kv_len as usize;
    copy_rows(v, steps.v_base, j0, kv_len, v_s, KEYS, dim, stride, path);
    let mut s = row_products(q_fragments, q_s, k_s, 0, exchange, KEYS / N, dim, path);
    score_tile(&mut s, at, j0, call, variant, !whole, path);
    let rescale = fold_tile(&mut s, state, call, variant, !whole, exchange, path);
    if comptime![!variant.sigmoid] {
        rescale_rows(out, rescale, dim);
    }
    land(landing);

    let next = step_keys(steps, step + 1);
    let next_valid = select(step + 1 < steps.count, kv_len, 0);
    copy_rows(k, steps.k_base, next, next_valid, k_s, KEYS, dim, stride, path);
    accumulate(&s, v_s, 0, out, exchange, KEYS / N, dim, path);
    land(landing);
    next
}

/// A lane's two rows (`g` in component 0, `g + 8` in component 1): running maxima (unused under
/// sigmoid) and sums of the lane's own columns.
#[derive(CubeType, Clone, Copy)]
struct RowState {
    max: Pair<f32>,
    total: Pair<f32>,
}

/// Turns the products in `s` into scores ([`score`]: scale, softcap, ALiBi) and, `per_pair`,
/// sets the pairs [`visible`] refuses (and rows past `N_q`) to [`masked`].
#[cube]
fn score_tile(
    s: &mut Sequence<Array<Pair<f32>>>,
    at: &QueryBlock,
    j0: usize,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] per_pair: bool,
    #[comptime] path: FragmentPath,
) {
    let column = 2 * (lane(path) as usize % 4);
    #[unroll]
    for p in 0..2usize {
        let row = at.block + block_row(p, path);
        let i = call.query_offset + row as u32;
        let live = row < at.q_len;
        let span = plain_span(&at.window, i, call, variant.causal, variant.plain);
        #[unroll]
        for block in 0..KEYS / N {
            let fragment = s.index_mut(block);
            let mut pair = fragment[p];
            #[unroll]
            for e in 0..2usize {
                let j = (j0 + block * N + column + e) as u32;
                let value = score(pair[e], i, j, at.slope, call, variant).value;
                pair[e] = value;
                if comptime![per_pair] {
                    let (causal, plain) = (variant.causal, variant.plain);
                    let seen = visible_by_span(&span, &at.window, i, j, call, causal, plain, false);
                    pair[e] = select(live && seen, value, masked());
                }
            }
            fragment[p] = pair;
        }
    }
}

/// One tile of the online softmax: each row's maximum over the tile (across its quad), the
/// weights `exp(s − m)` (or `σ(s + β)`) in place of the scores, 0 where masked (on a tile with
/// `masked_pairs`), and the sums moved on. `exp` is fast (`__expf` on CUDA): masked scores are
/// finite ([`masked`]), so no infinity reaches it. Returns each row's rescale factor `exp(m_old − m_new)` (1 under sigmoid).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
fn fold_tile(
    s: &mut Sequence<Array<Pair<f32>>>,
    state: &mut RowState,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] masked_pairs: bool,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> Pair<f32> {
    let mut rescale = Pair::<f32>::new(1.0);
    let mut shift = Pair::<f32>::new(0.0);
    if comptime![!variant.sigmoid] {
        let mut tile_max = Pair::<f32>::new(masked());
        #[unroll]
        for block in 0..KEYS / N {
            let fragment = s.index(block);
            #[unroll]
            for p in 0..2usize {
                let pair = fragment[p];
                tile_max[p] = max(tile_max[p], max(pair[0], pair[1]));
            }
        }
        tile_max = reduce_quad(tile_max, RowReduction::Max, exchange, path);
        #[unroll]
        for p in 0..2usize {
            let old = state.max[p];
            let new = max(old, tile_max[p]);
            rescale[p] = (old - new).exp();
            shift[p] = new;
        }
        state.max = shift;
    }
    #[unroll]
    for p in 0..2usize {
        let mut sum = 0.0f32;
        #[unroll]
        for block in 0..KEYS / N {
            let fragment = s.index_mut(block);
            let mut pair = fragment[p];
            #[unroll]
            for e in 0..2usize {
                let x = pair[e];
                let w = if comptime![variant.sigmoid] {
                    sigmoid(x + call.beta)
                } else {
                    (x - shift[p]).exp()
                };
                if comptime![masked_pairs] {
                    pair[e] = select(x == masked(), 0.0, w);
                } else {
                    pair[e] = w;
                }
                sum += pair[e];
            }
            fragment[p] = pair;
        }
        state.total[p] = state.total[p] * rescale[p] + sum;
    }
    rescale
}

/// Multiplies each row `p` of the accumulators `out` by `rescale[p]`, skipping a row whose
/// maximum did not move (factor 1).
#[cube]
fn rescale_rows(out: &mut Sequence<Array<Pair<f32>>>, rescale: Pair<f32>, #[comptime] dim: usize) {
    #[unroll]
    for p in 0..2usize {
        let factor = rescale[p];
        if factor != 1.0 {
            #[unroll]
            for block in 0..dim / N {
                let fragment = out.index_mut(block);
                let mut pair = fragment[p];
                pair[0] *= factor;
                pair[1] *= factor;
                fragment[p] = pair;
            }
        }
    }
}

/// The end of the block: each row's sum across its quad, `lse` written by the quad's first
/// lane, and `O` divided by its norm ([`row_end`]) into `tile` (the block's rows, `d + PAD`
/// apart) as `F`, for the cube to write out after a `sync_cube`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn finish<F: Float>(
    out: &mut Sequence<Array<Pair<f32>>>,
    state: &RowState,
    tile: &mut SharedMemory<F>,
    lse: &mut Tensor<f32>,
    at: &QueryBlock,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let total = reduce_quad(state.total, RowReduction::Sum, exchange, path);
    let mut inverse = Pair::<f32>::new(0.0);
    #[unroll]
    for p in 0..2usize {
        let end = row_end(total[p], state.max[p], call, variant);
        inverse[p] = select(end.norm > 0.0, 1.0 / end.norm, 0.0);
        let row = at.block + block_row(p, path);
        if lane(path) & 3 == 0 && row < at.q_len {
            lse[offset(lse, at.batch, at.head, row)] = end.lse;
        }
    }
    rescale_rows(out, inverse, dim);
    let warp_rows = UNIT_POS as usize / LANES * M * stride;
    #[unroll]
    for block in 0..dim / N {
        store(out.index(block), tile, warp_rows + block * N, stride, path);
    }
}
