//! The dQ kernel of FlashAttention-2's design on the fragment seam (docs/semantics.md §1;
//! reference: `crate::reference::dense_attention`, differentiated; its cooperative-matrix twin
//! is `kernel::cmma::backward_queries`, whose math it shares).
//!
//! A cube owns 64 query rows of one head, 16 per warp, laid out as the forward
//! (`kernel::flash::forward`) and visiting the same key tiles ([`block_key_tiles`]); each warp
//! holds its rows of `Q` and `dO` as A fragments (at d = 64), their row terms and `dQ` in
//! registers. For each tile:
//! - `S = Q·Kᵀ` and `dP = dO·Vᵀ` in registers;
//! - `dS = ∂L/∂s · chain` from the weights recomputed from `lse` (the scale applies to `dQ`
//!   once at the end, as FlashAttention-2 does)
//!   (`kernel::score::weight`, the row coefficients of `kernel::portable::backward_rows`), in place
//!   of the products, 0 where a row does not see a key; tiles whose every pair is visible run
//!   first, in a loop of their own without the rule ([`whole_first`]), the others ask it (one span
//!   per row where the windows are plain, [`plain_span`]);
//! - `dQ += dS·K`, `dS` rounded to the input type.
//!
//! Tiles come by [`copy_rows`] (`cp.async` on CUDA): the next tile's `V` lands during `S`,
//! `dS` and `dS·K`, its `K` during the next tile's `dP`. Each cube writes its own rows: no
//! atomics. At d = 64 `Q` and `dO` reach the registers
//! through the tile buffers; at d = 128 ([`STAGED_DIM`]) they stay in shared memory, which
//! leaves the registers to `dQ` and the products. The launch runs it where the dK/dV kernel
//! runs (`kernel::flash::flash_backward_path`).

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use crate::kernel::config::{Call, Variant};
use crate::kernel::flash::products::{accumulate, row_products, scale_accumulators, weights_as_a};
use crate::kernel::flash::{
    KEYS, KeySteps, Landing, PAD, ROW_ALIGN, ROWS, STAGED_DIM, TileStrides, WARPS, block_row,
    copy_rows, cut_from, head_rows, land, landing, products, row_stride, step_keys, whole_first,
    write_rows,
};
use crate::kernel::fragment::{FragmentPath, K, LANES, M, N, Pair, lane, load, store, zeros};
use crate::kernel::prologue::{QueryBlock, block_key_tiles, offset, query_block_of_head};
use crate::kernel::score::{base2_shift, exponent_factor, score, weight};
use crate::kernel::visibility::{plain_span, visible_by_span};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]` (f16 or
/// bf16, read as vectors of `NV`; `strides`: `K`'s and `V`'s), `terms: [batch, H, N_q, 2]`
/// (f32) → `dq: [batch, H, N_q, d]`. Grid: (query blocks of 64, H, batch), head `order[y]` at grid
/// row `y`; `kernel::flash::UNITS` units per cube.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn query_grads_flash_kernel<F: Float, NV: Size>(
    q: &Tensor<Vector<F, NV>>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    d_o: &Tensor<Vector<F, NV>>,
    terms: &Tensor<f32>,
    dq: &mut Tensor<Vector<F, NV>>,
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
    let head = order[CUBE_POS_Y as usize] as usize;
    let at = query_block_of_head(q, k, windows, slopes, &call, head, ROWS);
    let warp_rows = UNIT_POS_X as usize / LANES * M * stride;
    let kv_len = call.kv_len as usize;
    let mut k_s = SharedMemory::<F>::new_aligned(KEYS * stride, ROW_ALIGN);
    let mut v_s = SharedMemory::<F>::new_aligned(KEYS * stride, ROW_ALIGN);
    let mut exchange =
        SharedMemory::<f32>::new(comptime![path.exchange_len(WARPS, products(path))]);

    // At d = 64 `Q` and `dO` pass through the tile buffers into registers; at d = 128
    // ([`STAGED_DIM`]) they stay in buffers of their own, their fragments loaded per step.
    let own = comptime![if dim > STAGED_DIM { ROWS * stride } else { 1 }];
    let mut q_s = SharedMemory::<F>::new_aligned(own, ROW_ALIGN);
    let mut g_s = SharedMemory::<F>::new_aligned(own, ROW_ALIGN);
    let landing = landing(path);
    let q_rows = head_rows(q, at.batch, at.head, row_stride(q));
    let g_rows = head_rows(d_o, at.batch, at.head, row_stride(d_o));
    if comptime![dim > STAGED_DIM] {
        copy_rows(q, &q_rows, at.block, at.q_len, &mut q_s, ROWS, dim, stride, path);
        copy_rows(d_o, &g_rows, at.block, at.q_len, &mut g_s, ROWS, dim, stride, path);
    } else {
        copy_rows(q, &q_rows, at.block, at.q_len, &mut k_s, ROWS, dim, stride, path);
        copy_rows(d_o, &g_rows, at.block, at.q_len, &mut v_s, ROWS, dim, stride, path);
    }
    land(&landing);
    let mut q_fragments = Sequence::<Array<Pair<F>>>::new();
    let mut g_fragments = Sequence::<Array<Pair<F>>>::new();
    if comptime![dim <= STAGED_DIM] {
        #[unroll]
        for c in 0..dim / K {
            let at = warp_rows + c * K;
            q_fragments.push(load(&k_s, at, stride, MatrixIdent::A, false, path));
            g_fragments.push(load(&v_s, at, stride, MatrixIdent::A, false, path));
        }
    }
    let row_terms = lane_row_terms(terms, &at, path);

    let mut dq_acc = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..dim / N {
        dq_acc.push(zeros());
    }
    let tiles = block_key_tiles(&at, &call, ROWS, KEYS, variant.causal);
    let count = tiles.before + tiles.count;
    let visit =
        whole_first(&tiles, &at.window, at.block, at.q_len, &call, ROWS, variant.causal, false);
    let k_rows = head_rows(k, at.batch, at.kv_head, strides.first);
    let v_rows = head_rows(v, at.batch, at.kv_head, strides.second);
    let steps = KeySteps { tiles, visit, count, k_rows, v_rows };
    // The first tile, once every warp holds its rows' fragments: its `V` landed, its `K` in
    // flight, as each step expects.
    sync_cube();
    let (j0, valid) = (step_keys(&steps, 0), select(count > 0, kv_len, 0));
    copy_rows(v, &v_rows, j0, valid, &mut v_s, KEYS, dim, stride, path);
    land(&landing);
    copy_rows(k, &k_rows, j0, valid, &mut k_s, KEYS, dim, stride, path);
    run_tiles(
        &q_fragments,
        &g_fragments,
        &q_s,
        &g_s,
        &mut k_s,
        &mut v_s,
        k,
        v,
        &steps,
        &landing,
        GradTile { step: 0, j0, terms: row_terms },
        &mut dq_acc,
        &at,
        &call,
        variant,
        &mut exchange,
        path,
    );

    // Out through `K`'s buffer, in 16-byte stores (the last step landed its copies), with the
    // scale the score gradients left out.
    scale_accumulators(&mut dq_acc, call.scale, dim / N);
    land(&landing);
    #[unroll]
    for c in 0..dim / N {
        store(dq_acc.index(c), &mut k_s, warp_rows + c * N, stride, path);
    }
    sync_cube();
    write_rows(&k_s, dq, offset(dq, at.batch, at.head, 0), at.block, at.q_len, ROWS, dim, stride);
}

/// Every step of the visit from `first` (step 0, its tile's `V` landed and its `K` in flight):
/// the tiles seen whole, then the cut ones, two small loops, the first without the per-pair
/// rule (emulated, one: [`cut_from`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn run_tiles<F: Float, NV: Size>(
    q_fragments: &Sequence<Array<Pair<F>>>,
    g_fragments: &Sequence<Array<Pair<F>>>,
    q_s: &SharedMemory<F>,
    g_s: &SharedMemory<F>,
    k_s: &mut SharedMemory<F>,
    v_s: &mut SharedMemory<F>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    steps: &KeySteps,
    landing: &Landing,
    first: GradTile,
    dq_acc: &mut Sequence<Array<Pair<f32>>>,
    at: &QueryBlock,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    let mut j0 = first.j0;
    if comptime![path == FragmentPath::Native] {
        for u in 0..steps.visit.whole {
            let tile = GradTile { step: u, j0, terms: first.terms };
            j0 = tile_step(
                q_fragments,
                g_fragments,
                q_s,
                g_s,
                k_s,
                v_s,
                k,
                v,
                steps,
                landing,
                tile,
                true,
                dq_acc,
                at,
                call,
                variant,
                exchange,
                path,
            );
        }
    }
    for u in cut_from(&steps.visit, path)..steps.count {
        let tile = GradTile { step: u, j0, terms: first.terms };
        j0 = tile_step(
            q_fragments,
            g_fragments,
            q_s,
            g_s,
            k_s,
            v_s,
            k,
            v,
            steps,
            landing,
            tile,
            false,
            dq_acc,
            at,
            call,
            variant,
            exchange,
            path,
        );
    }
}

/// A step of the visit, its tile and the lane's row terms, for [`tile_step`].
#[derive(CubeType, Clone, Copy)]
struct GradTile {
    step: u32,
    /// The tile's first key.
    j0: usize,
    terms: RowTerms,
}

/// Step `tile.step` of the visit, on a tile seen `whole` or cut (returns the next step's
/// first key): `dP = dO·Vᵀ`, `S = Q·Kᵀ`,
/// `dS` (the per-pair rule only on a cut tile), `dQ += dS·K`. On entry `V` of the tile has
/// landed and its `K` is in flight; the next tile's `V` is copied in during `S`, `dS` and
/// `dS·K` ([`copy_rows`]: `cp.async` natively), its `K` during the next step's `dP`: two
/// landings.
#[cube]
#[allow(clippy::too_many_arguments)]
fn tile_step<F: Float, NV: Size>(
    q_fragments: &Sequence<Array<Pair<F>>>,
    g_fragments: &Sequence<Array<Pair<F>>>,
    q_s: &SharedMemory<F>,
    g_s: &SharedMemory<F>,
    k_s: &mut SharedMemory<F>,
    v_s: &mut SharedMemory<F>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    steps: &KeySteps,
    landing: &Landing,
    tile: GradTile,
    #[comptime] whole: bool,
    dq_acc: &mut Sequence<Array<Pair<f32>>>,
    at: &QueryBlock,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) -> usize {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let kv_len = call.kv_len as usize;
    let j0 = tile.j0;
    let next = step_keys(steps, tile.step + 1);
    let next_valid = select(tile.step + 1 < steps.count, kv_len, 0);
    let dp = row_products(g_fragments, g_s, v_s, 0, exchange, KEYS / N, 1usize, dim, path);
    land(landing);
    copy_rows(v, &steps.v_rows, next, next_valid, v_s, KEYS, dim, stride, path);
    let mut ds = row_products(q_fragments, q_s, k_s, 0, exchange, KEYS / N, 1usize, dim, path);
    score_gradients(&mut ds, &dp, at, j0, tile.terms, call, variant, !whole, path);
    let ds = weights_as_a::<F>(&ds, KEYS / N, 1usize);
    accumulate(&ds, k_s, 0, dq_acc, exchange, KEYS / N, 1usize, dim, path);
    land(landing);
    copy_rows(k, &steps.k_rows, next, next_valid, k_s, KEYS, dim, stride, path);
    next
}

/// A lane's two rows' terms (`kernel::portable::backward_rows`): `lse` in base 2 (`shift`,
/// [`base2_shift`]) in component 0 for row `g` and 1 for row `g + 8`, likewise the
/// coefficients; zeros for rows past `N_q`.
#[derive(CubeType, Clone, Copy)]
struct RowTerms {
    shift: Pair<f32>,
    coefficient: Pair<f32>,
}

/// The row terms of this lane's two rows.
#[cube]
fn lane_row_terms(
    terms: &Tensor<f32>,
    at: &QueryBlock,
    #[comptime] path: FragmentPath,
) -> RowTerms {
    let mut out = RowTerms { shift: Pair::<f32>::new(0.0), coefficient: Pair::<f32>::new(0.0) };
    #[unroll]
    for p in 0..2usize {
        let row = at.block + block_row(p, path);
        if row < at.q_len {
            let base = offset(terms, at.batch, at.head, row);
            out.shift[p] = base2_shift(terms[base]);
            out.coefficient[p] = terms[base + terms.stride(3)];
        }
    }
    out
}

/// Turns the products `ds` (`S`) and `dp` (`dP`) of the warp's rows and the tile's keys into
/// the score gradients `dS / scale` in place (the scale comes at the end), and, `per_pair`, zeros
/// where [`visible`] refuses a pair (or the row is past `N_q`).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
#[allow(clippy::too_many_arguments)]
fn score_gradients(
    ds: &mut Sequence<Array<Pair<f32>>>,
    dp: &Sequence<Array<Pair<f32>>>,
    at: &QueryBlock,
    j0: usize,
    terms: RowTerms,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] per_pair: bool,
    #[comptime] path: FragmentPath,
) {
    let column = 2 * (lane(path) as usize % 4);
    let factor = exponent_factor(call, variant);
    #[unroll]
    for p in 0..2usize {
        let row = at.block + block_row(p, path);
        let i = call.query_offset + row as u32;
        let live = row < at.q_len;
        let span = plain_span(&at.window, i, call, variant.causal, variant.plain);
        #[unroll]
        for block in 0..KEYS / N {
            let products = ds.index_mut(block);
            let (mut s_pair, dp_pair) = (products[p], dp.index(block)[p]);
            #[unroll]
            for e in 0..2usize {
                let j = (j0 + block * N + column + e) as u32;
                let s = score(s_pair[e], i, j, at.slope, call, variant);
                let w = weight(s.value, factor, terms.shift[p], call, variant);
                let d_raw = w.gate * (dp_pair[e] + terms.coefficient[p]) * s.chain;
                s_pair[e] = d_raw;
                if comptime![per_pair] {
                    let (causal, plain) = (variant.causal, variant.plain);
                    let seen = visible_by_span(&span, &at.window, i, j, call, causal, plain, false);
                    s_pair[e] = select(live && seen, d_raw, 0.0);
                }
            }
            products[p] = s_pair;
        }
    }
}
