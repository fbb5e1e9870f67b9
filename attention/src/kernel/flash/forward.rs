//! The forward kernel of FlashAttention-2's design on the fragment seam (docs/semantics.md
//! §1–§2; reference: `crate::reference::dense_attention`; the block shape, launch choice, visit
//! order and tile copies are `kernel::flash`'s).
//!
//! A cube owns the query rows of one head in [`forward_groups`] groups of 64, 16 per warp in
//! each (natively 128 rows, 32 per warp, at d = 64; 64 rows at d = 128 and when emulated). Each
//! warp keeps its rows of `Q` as A fragments (at d = 64; in shared memory at d = 128:
//! [`STAGED_DIM`]), and its running maxima, sums and `O` as accumulators, in registers for the
//! whole block, and visits the key tiles of 64 that [`block_key_tiles`] gives (the window's reach
//! and sinks; tiles outside it are never read), those it sees whole first ([`whole_first`]):
//! - `S = Q·Kᵀ` in registers (`d / 16 × 8` products per warp and group, each `K` fragment
//!   loaded once for both groups);
//! - a tile seen whole (every pair visible) skips the per-pair rule: it runs in a loop of its
//!   own; a cut tile asks [`visible`] per pair (one span per row, [`plain_span`], where the
//!   windows are plain) and masks what it refuses;
//! - the online softmax in registers: each lane holds two rows' columns, the row maxima and
//!   sums are combined across a quad ([`reduce_quad`]), and `O` is rescaled only when one of a
//!   lane's two rows' maxima moved (plain sums of `σ(s + β)` under sigmoid);
//! - the weights, rounded to the input type, become A fragments where they lie
//!   ([`accumulators_as_a`]) and `O += P·V` accumulates in registers.
//!
//! Tiles come by [`copy_rows`] (`cp.async` on CUDA): `V` of a tile lands during `S = Q·Kᵀ` and
//! the softmax, the next tile's `K` during `P·V` (one buffer per operand, two landings per
//! tile). `O` leaves through shared memory (a group per tile buffer) in 16-byte stores; `lse`
//! is f32. Rows that see no
//! key write `o = 0` and `lse = −∞`.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use crate::kernel::config::{Call, Variant};
use crate::kernel::flash::products::{accumulate, row_products, weights_as_a};
use crate::kernel::flash::{
    KEYS, KeySteps, Landing, PAD, ROW_ALIGN, ROWS, STAGED_DIM, TileStrides, WARPS, block_row,
    copy_rows, cut_from, cut_step_keys, forward_groups, head_rows, land, landing, products,
    row_stride, step_keys, whole_first, write_rows,
};
use crate::kernel::fragment::{
    FragmentPath, K, LANES, M, N, Pair, RowReduction, lane, load, reduce_quad, store, zeros,
};
use crate::kernel::prologue::{QueryBlock, block_key_tiles, offset, query_block_of_head};
use crate::kernel::score::{exp2_scaled, exponent_factor, row_end, score, sigmoid};
use crate::kernel::visibility::{plain_span, visible_by_span};

/// The value a masked pair holds: a quarter of the lowest f32, below every real score or
/// product, and what marks it as masked (a finite value: WGSL has no infinite literals; its
/// product with the exponent's factor, at most 4, stays finite, so that the softmax never
/// meets `−∞ + ∞`, and its weight is 0).
#[cube]
fn masked() -> f32 {
    f32::min_value() * 0.25
}

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` (f16 or bf16, read as vectors of `N`;
/// `strides`: `K`'s and `V`'s) → `o: [batch, H, N_q, d]`, `lse: [batch, H, N_q]` (f32). Grid:
/// (query blocks of `forward_groups(d, path) · 64`, H, batch), head `order[y]` at grid row `y`;
/// `kernel::flash::UNITS` units per cube.
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
    strides: TileStrides,
    #[comptime] variant: Variant,
    #[comptime] path: FragmentPath,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let groups = comptime![forward_groups(dim, path)];
    let rows = comptime![groups * ROWS];
    let head = order[CUBE_POS_Y as usize] as usize;
    let at = query_block_of_head(q, k, windows, slopes, &call, head, rows);
    let warp = UNIT_POS_X as usize / LANES;
    let kv_len = call.kv_len as usize;
    let mut k_s = SharedMemory::<F>::new_aligned(KEYS * stride, ROW_ALIGN);
    let mut v_s = SharedMemory::<F>::new_aligned(KEYS * stride, ROW_ALIGN);
    let mut exchange =
        SharedMemory::<f32>::new(comptime![path.exchange_len(WARPS, products(path))]);

    let tiles = block_key_tiles(&at, &call, rows, KEYS, variant.causal);
    let count = tiles.before + tiles.count;
    let causal = variant.causal;
    let visit = whole_first(&tiles, &at.window, at.block, at.q_len, &call, rows, causal, false);
    let k_rows = head_rows(k, at.batch, at.kv_head, strides.first);
    let v_rows = head_rows(v, at.batch, at.kv_head, strides.second);

    // At d = 64 `Q`'s groups pass through `V`'s and `K`'s buffers (ROWS = KEYS) into
    // registers, before the first tile's `K`; at d = 128 it stays in a buffer of its own.
    let mut q_s = SharedMemory::<F>::new_aligned(
        comptime![if dim > STAGED_DIM { ROWS * stride } else { 1 }],
        ROW_ALIGN,
    );
    let landing = landing(path);
    let q_rows = head_rows(q, at.batch, at.head, row_stride(q));
    let mut q_fragments = Sequence::<Array<Pair<F>>>::new();
    if comptime![dim > STAGED_DIM] {
        copy_rows(q, &q_rows, at.block, at.q_len, &mut q_s, ROWS, dim, stride, path);
    } else {
        copy_rows(q, &q_rows, at.block, at.q_len, &mut v_s, ROWS, dim, stride, path);
        if comptime![groups > 1] {
            copy_rows(q, &q_rows, at.block + ROWS, at.q_len, &mut k_s, ROWS, dim, stride, path);
        }
        land(&landing);
        #[unroll]
        for g in 0..groups {
            #[unroll]
            for c in 0..dim / K {
                let at = warp * M * stride + c * K;
                if comptime![g == 0] {
                    q_fragments.push(load(&v_s, at, stride, MatrixIdent::A, false, path));
                } else {
                    q_fragments.push(load(&k_s, at, stride, MatrixIdent::A, false, path));
                }
            }
        }
        sync_cube();
    }
    let steps = KeySteps { tiles, visit, count, k_rows, v_rows };
    let valid = select(count > 0, kv_len, 0);
    copy_rows(k, &k_rows, step_keys(&steps, 0), valid, &mut k_s, KEYS, dim, stride, path);
    land(&landing);

    let mut out = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..groups * dim / N {
        out.push(zeros());
    }
    let mut state =
        RowState { max: Array::<Pair<f32>>::new(groups), total: Array::<Pair<f32>>::new(groups) };
    #[unroll]
    for g in 0..groups {
        state.max[g] = Pair::<f32>::new(masked());
        state.total[g] = Pair::<f32>::new(0.0);
    }
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

    // The block read again (the grid's order and the tensors' metadata): values kept across
    // the loops would hold registers their products need.
    let at = query_block_of_head(
        q,
        k,
        windows,
        slopes,
        &call,
        order[CUBE_POS_Y as usize] as usize,
        rows,
    );
    finish(&mut out, &state, &mut k_s, &mut v_s, lse, &at, &call, variant, &mut exchange, path);
    sync_cube();
    let o_base = offset(o, at.batch, at.head, 0);
    write_rows(&k_s, o, o_base, at.block, at.q_len, ROWS, dim, stride);
    if comptime![groups > 1] {
        write_rows(&v_s, o, o_base, at.block + ROWS, at.q_len, ROWS, dim, stride);
    }
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
        // The run's tiles are consecutive: each step's next is the following tile, the last
        // one's the first cut tile.
        let first_cut = step_keys(steps, steps.visit.whole);
        for u in 0..steps.visit.whole {
            let next = select(u + 1 < steps.visit.whole, j0 + KEYS, first_cut);
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
                next,
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
        let next = cut_step_keys(steps, u + 1, path);
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
            next,
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

/// Step `step` of the visit, on the tile of keys from `j0` seen `whole` or cut, the next
/// step's from `next` (which it returns): `S = Q·Kᵀ`, its scores (the
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
    next: usize,
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
    copy_rows(v, &steps.v_rows, j0, kv_len, v_s, KEYS, dim, stride, path);
    let groups = comptime![forward_groups(dim, path)];
    let mut s = row_products(q_fragments, q_s, k_s, 0, exchange, KEYS / N, groups, dim, path);
    #[unroll]
    for g in 0..groups {
        score_tile(&mut s, at, j0, g, call, variant, !whole, path);
        let rescale = fold_tile(&mut s, state, g, call, variant, !whole, exchange, path);
        if comptime![!variant.sigmoid] {
            rescale_rows(out, rescale, g * dim / N, dim);
        }
    }
    land(landing);

    let next_valid = select(step + 1 < steps.count, kv_len, 0);
    copy_rows(k, &steps.k_rows, next, next_valid, k_s, KEYS, dim, stride, path);
    let weights = weights_as_a::<F>(&s, KEYS / N, groups);
    accumulate(&weights, v_s, 0, out, exchange, KEYS / N, groups, dim, path);
    land(landing);
    next
}

/// A lane's two rows in each group (element `g` of each array for group `g`; row `g` in
/// component 0, `g + 8` in component 1): running maxima of the [`score`]s (unused
/// under sigmoid) and sums of the lane's own columns.
#[derive(CubeType)]
struct RowState {
    max: Array<Pair<f32>>,
    total: Array<Pair<f32>>,
}

/// Turns group `g`'s products in `s` into what the softmax takes ([`score`]: the
/// products themselves, or scores with their scale, softcap, ALiBi) and, `per_pair`, sets the
/// pairs [`visible`] refuses to [`masked`]. Rows past `N_q` are left as they are: their
/// queries are zeros, so their scores are finite, and they are never written.
#[cube]
#[allow(clippy::too_many_arguments)]
fn score_tile(
    s: &mut Sequence<Array<Pair<f32>>>,
    at: &QueryBlock,
    j0: usize,
    #[comptime] g: usize,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] per_pair: bool,
    #[comptime] path: FragmentPath,
) {
    let column = 2 * (lane(path) as usize % 4);
    #[unroll]
    for p in 0..2usize {
        let row = at.block + g * ROWS + block_row(p, path);
        let i = call.query_offset + row as u32;
        let span = plain_span(&at.window, i, call, variant.causal, variant.plain);
        #[unroll]
        for block in 0..KEYS / N {
            let fragment = s.index_mut(g * (KEYS / N) + block);
            let mut pair = fragment[p];
            #[unroll]
            for e in 0..2usize {
                let j = (j0 + block * N + column + e) as u32;
                let value = score(pair[e], i, j, at.slope, call, variant).value;
                pair[e] = value;
                if comptime![per_pair] {
                    let (causal, plain) = (variant.causal, variant.plain);
                    let seen = visible_by_span(&span, &at.window, i, j, call, causal, plain, false);
                    pair[e] = select(seen, value, masked());
                }
            }
            fragment[p] = pair;
        }
    }
}

/// One tile of the online softmax on group `g`'s [`score`]s `x` in `s`: each row's
/// maximum `m` over the tile (across its quad), the weights `2^(x·f − m·f)` with `f` the
/// [`exponent_factor`] (`exp(s − m)` in the scores; `σ(s + β)` under sigmoid) in their place,
/// and the sums moved on; fast ([`exp2_scaled`]). A masked input weighs 0 with no select of its
/// own: a row that has seen no key keeps the masked maximum and a shift of 0, so that masked
/// inputs weigh `2^(masked·f)`, which is 0, as does every rescale from it (under sigmoid, on a
/// tile with `masked_pairs`, they are selected to 0). Returns each row's rescale factor
/// `2^((m_old − m_new)·f)` (1 under sigmoid).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
#[allow(clippy::too_many_arguments)]
fn fold_tile(
    s: &mut Sequence<Array<Pair<f32>>>,
    state: &mut RowState,
    #[comptime] g: usize,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] masked_pairs: bool,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> Pair<f32> {
    let first = comptime![g * (KEYS / N)];
    let mut rescale = Pair::<f32>::new(1.0);
    let mut shift = Pair::<f32>::new(0.0);
    let factor = exponent_factor(call, variant);
    if comptime![!variant.sigmoid] {
        let mut tile_max = Pair::<f32>::new(masked());
        #[unroll]
        for block in 0..KEYS / N {
            let fragment = s.index(first + block);
            #[unroll]
            for p in 0..2usize {
                let pair = fragment[p];
                tile_max[p] = max(tile_max[p], max(pair[0], pair[1]));
            }
        }
        tile_max = reduce_quad(tile_max, RowReduction::Max, exchange, path);
        let old = state.max[g];
        let mut new = Pair::<f32>::empty();
        #[unroll]
        for p in 0..2usize {
            new[p] = max(old[p], tile_max[p]);
            shift[p] = select(new[p] == masked(), 0.0, new[p] * factor);
            rescale[p] = exp2_scaled(old[p], factor, shift[p]);
        }
        state.max[g] = new;
    }
    let mut total = state.total[g];
    #[unroll]
    for p in 0..2usize {
        let mut sum = 0.0f32;
        #[unroll]
        for block in 0..KEYS / N {
            let fragment = s.index_mut(first + block);
            let mut pair = fragment[p];
            #[unroll]
            for e in 0..2usize {
                let x = pair[e];
                let w = if comptime![variant.sigmoid] {
                    sigmoid(x + call.beta)
                } else {
                    exp2_scaled(x, factor, shift[p])
                };
                if comptime![masked_pairs && variant.sigmoid] {
                    pair[e] = select(x == masked(), 0.0, w);
                } else {
                    pair[e] = w;
                }
                sum += pair[e];
            }
            fragment[p] = pair;
        }
        total[p] = total[p] * rescale[p] + sum;
    }
    state.total[g] = total;
    rescale
}

/// Multiplies each row `p` of the `d / 8` accumulators of `out` from `first` (a group's) by
/// `rescale[p]`, skipping both rows when neither maximum moved (factors 1): one branch for the
/// lane's two rows.
#[cube]
fn rescale_rows(
    out: &mut Sequence<Array<Pair<f32>>>,
    rescale: Pair<f32>,
    #[comptime] first: usize,
    #[comptime] dim: usize,
) {
    if rescale[0] != 1.0 || rescale[1] != 1.0 {
        #[unroll]
        for block in 0..dim / N {
            let fragment = out.index_mut(first + block);
            #[unroll]
            for p in 0..2usize {
                let mut pair = fragment[p];
                pair[0] *= rescale[p];
                pair[1] *= rescale[p];
                fragment[p] = pair;
            }
        }
    }
}

/// The end of the block: each row's sum across its quad, `lse` written by the quad's first
/// lane, and `O` divided by its norm ([`row_end`]) as `F` into `tiles` (group 0's rows in the
/// first, group 1's in the second, rows `d + PAD` apart), for the cube to write out after a
/// `sync_cube`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn finish<F: Float>(
    out: &mut Sequence<Array<Pair<f32>>>,
    state: &RowState,
    first_tile: &mut SharedMemory<F>,
    second_tile: &mut SharedMemory<F>,
    lse: &mut Tensor<f32>,
    at: &QueryBlock,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let warp_rows = UNIT_POS_X as usize / LANES * M * stride;
    #[unroll]
    for g in 0..comptime![forward_groups(dim, path)] {
        let total = reduce_quad(state.total[g], RowReduction::Sum, exchange, path);
        let mut inverse = Pair::<f32>::new(0.0);
        #[unroll]
        for p in 0..2usize {
            // The running maximum as a score: the products' times the scale where it was
            // folded.
            let mut running_max = state.max[g][p];
            if comptime![variant.scaled_dots] {
                running_max *= call.scale;
            }
            let end = row_end(total[p], running_max, call, variant);
            inverse[p] = select(end.norm > 0.0, 1.0 / end.norm, 0.0);
            let row = at.block + g * ROWS + block_row(p, path);
            if lane(path) & 3 == 0 && row < at.q_len {
                lse[offset(lse, at.batch, at.head, row)] = end.lse;
            }
        }
        let first = comptime![g * dim / N];
        rescale_rows(out, inverse, first, dim);
        #[unroll]
        for block in 0..dim / N {
            let at = warp_rows + block * N;
            if comptime![g == 0] {
                store(out.index(first + block), first_tile, at, stride, path);
            } else {
                store(out.index(first + block), second_tile, at, stride, path);
            }
        }
    }
}
