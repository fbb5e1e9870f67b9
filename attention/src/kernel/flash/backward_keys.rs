//! The dK/dV kernel of FlashAttention-2's design on the fragment seam (docs/semantics.md §1;
//! reference: `crate::reference::dense_attention`, differentiated; its cooperative-matrix twin
//! is `kernel::cmma::backward_keys`, whose math it shares).
//!
//! A cube owns 64 key rows of one kv head, 16 per warp; each warp holds its keys' rows of `K`
//! and `V` as A fragments (at d = 64; in shared memory at d = 128, [`STAGED_DIM`], which leaves
//! the registers to the accumulators and products) and its `dK`, `dV` as accumulators in
//! registers. For every query head
//! of the kv head's GQA group it visits the query tiles of 64 that [`query_tiles`] gives, and
//! for each (at d = 128 in two halves of 32 queries, so that the products fit the registers
//! beside `dK` and `dV`):
//! - `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` in registers;
//! - the weights `Pᵀ` recomputed from the queries' `lse` and `dSᵀ = ∂L/∂s · chain` (the
//!   scale applies to `dK` once at the end, as FlashAttention-2 does)
//!   (`kernel::score::weight`, the row coefficients of `kernel::portable::backward_rows`), in place
//!   of the products, 0 where a query does not see the key; tiles whose every pair is visible run
//!   first, in a loop of their own without the rule ([`whole_first`]), the others ask it (one
//!   span per key where the windows are plain, [`key_span`]);
//! - `dV += Pᵀ·dO` and `dK += dSᵀ·Q`, the weights rounded to the input type as FlashAttention
//!   rounds them, each becoming an A fragment where it lies.
//!
//! Each query tile comes by [`copy_rows`] (`cp.async` on CUDA) and lands before its products.
//! Each cube writes its own keys' gradients: no atomics. Keys past `kv_len` get zeros. At
//! d = 64 `K` and `V` reach the registers through the tile buffers, which then hold each query
//! tile's `Q` and `dO`: the kernel fits lavapipe's 32 KB. The launch runs it where
//! `kernel::flash::flash_backward_path` says so.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use crate::kernel::config::{Call, Variant};
use crate::kernel::flash::products::{accumulate, row_products, scale_accumulators, weights_as_a};
use crate::kernel::flash::{
    HeadRows, KEYS, Landing, PAD, ROW_ALIGN, ROWS, STAGED_DIM, TileOrder, TileStrides, UNITS,
    WARPS, block_row, copy_rows, cut_from, head_rows, land, landing, products, row_stride, tile_at,
    whole_first, write_rows,
};
use crate::kernel::fragment::{FragmentPath, K, LANES, M, N, Pair, lane, load, store, zeros};
use crate::kernel::portable::backward_keys::{RowRange, load_row_terms};
use crate::kernel::prologue::offset;
use crate::kernel::reach::{Tiles, query_tiles};
use crate::kernel::score::{exponent_factor, score, weight};
use crate::kernel::visibility::{Span, Window, key_span, load_window, visible_by_span};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]` (f16 or
/// bf16, read as vectors of `NV`; `strides`: `Q`'s and `dO`'s), `terms: [batch, H, N_q, 2]`
/// (f32) → `dk, dv: [batch, H_kv, N_k, d]`. Grid: (key blocks of 64, H_kv, batch);
/// `kernel::flash::UNITS` units per cube.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn key_grads_flash_kernel<F: Float, NV: Size>(
    q: &Tensor<Vector<F, NV>>,
    k: &Tensor<Vector<F, NV>>,
    v: &Tensor<Vector<F, NV>>,
    d_o: &Tensor<Vector<F, NV>>,
    terms: &Tensor<f32>,
    dk: &mut Tensor<Vector<F, NV>>,
    dv: &mut Tensor<Vector<F, NV>>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: Call,
    strides: TileStrides,
    #[comptime] variant: Variant,
    #[comptime] path: FragmentPath,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let (kv_head, batch) = (CUBE_POS_Y as usize, CUBE_POS_Z as usize);
    let keys = k.shape(2);
    let kv_len = call.kv_len as usize;
    let block = CUBE_POS_X as usize * KEYS;
    let group = q.shape(1) / k.shape(1);
    let warp_rows = UNIT_POS_X as usize / LANES * M * stride;
    let mut q_s = SharedMemory::<F>::new_aligned(ROWS * stride, ROW_ALIGN);
    let mut g_s = SharedMemory::<F>::new_aligned(ROWS * stride, ROW_ALIGN);
    let mut lse_s = SharedMemory::<f32>::new(ROWS);
    let mut coefficient_s = SharedMemory::<f32>::new(ROWS);
    let mut exchange =
        SharedMemory::<f32>::new(comptime![path.exchange_len(WARPS, products(path))]);

    // At d = 64 `K` and `V` pass through the tile buffers into registers; at d = 128
    // ([`STAGED_DIM`]) they stay in buffers of their own, their fragments loaded per step.
    let own = comptime![if dim > STAGED_DIM { KEYS * stride } else { 1 }];
    let mut k_s = SharedMemory::<F>::new_aligned(own, ROW_ALIGN);
    let mut v_s = SharedMemory::<F>::new_aligned(own, ROW_ALIGN);
    let landing = landing(path);
    let k_rows = head_rows(k, batch, kv_head, row_stride(k));
    let v_rows = head_rows(v, batch, kv_head, row_stride(v));
    if comptime![dim > STAGED_DIM] {
        copy_rows(k, &k_rows, block, kv_len, &mut k_s, KEYS, dim, stride, path);
        copy_rows(v, &v_rows, block, kv_len, &mut v_s, KEYS, dim, stride, path);
    } else {
        copy_rows(k, &k_rows, block, kv_len, &mut q_s, KEYS, dim, stride, path);
        copy_rows(v, &v_rows, block, kv_len, &mut g_s, KEYS, dim, stride, path);
    }
    land(&landing);
    let mut k_fragments = Sequence::<Array<Pair<F>>>::new();
    let mut v_fragments = Sequence::<Array<Pair<F>>>::new();
    if comptime![dim <= STAGED_DIM] {
        #[unroll]
        for c in 0..dim / K {
            let at = warp_rows + c * K;
            k_fragments.push(load(&q_s, at, stride, MatrixIdent::A, false, path));
            v_fragments.push(load(&g_s, at, stride, MatrixIdent::A, false, path));
        }
    }
    sync_cube();

    let mut dk_acc = Sequence::<Array<Pair<f32>>>::new();
    let mut dv_acc = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..dim / N {
        dk_acc.push(zeros());
        dv_acc.push(zeros());
    }
    for member in 0..select(block < kv_len, group, 0) {
        run_head(
            &k_fragments,
            &v_fragments,
            &k_s,
            &v_s,
            &mut q_s,
            &mut g_s,
            &mut lse_s,
            &mut coefficient_s,
            q,
            d_o,
            terms,
            windows,
            slopes,
            &landing,
            &strides,
            HeadBlock { head: kv_head * group + member, batch, block },
            &mut dk_acc,
            &mut dv_acc,
            &call,
            variant,
            &mut exchange,
            path,
        );
    }

    // Out through the tile buffers, in 16-byte stores, `dK` with the scale its score gradients
    // left out.
    scale_accumulators(&mut dk_acc, call.scale, dim / N);
    #[unroll]
    for c in 0..dim / N {
        store(dk_acc.index(c), &mut q_s, warp_rows + c * N, stride, path);
        store(dv_acc.index(c), &mut g_s, warp_rows + c * N, stride, path);
    }
    sync_cube();
    write_rows(&q_s, dk, offset(dk, batch, kv_head, 0), block, keys, KEYS, dim, stride);
    write_rows(&g_s, dv, offset(dv, batch, kv_head, 0), block, keys, KEYS, dim, stride);
}

/// Which query head a cube walks for its keys: the head, the batch, the cube's first key.
#[derive(CubeType, Clone, Copy)]
struct HeadBlock {
    head: usize,
    batch: usize,
    block: usize,
}

/// The cube's walk over one query head of its kv head's group: the query tiles that see its
/// keys ([`query_tiles`]), those seen whole first ([`whole_first`]), each a [`query_step`]:
/// two small loops, the first without the per-pair rule (emulated, one: [`cut_from`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn run_head<F: Float, NV: Size>(
    k_fragments: &Sequence<Array<Pair<F>>>,
    v_fragments: &Sequence<Array<Pair<F>>>,
    k_s: &SharedMemory<F>,
    v_s: &SharedMemory<F>,
    q_s: &mut SharedMemory<F>,
    g_s: &mut SharedMemory<F>,
    lse_s: &mut SharedMemory<f32>,
    coefficient_s: &mut SharedMemory<f32>,
    q: &Tensor<Vector<F, NV>>,
    d_o: &Tensor<Vector<F, NV>>,
    terms: &Tensor<f32>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    landing: &Landing,
    strides: &TileStrides,
    at: HeadBlock,
    dk_acc: &mut Sequence<Array<Pair<f32>>>,
    dv_acc: &mut Sequence<Array<Pair<f32>>>,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    let (q_len, kv_len) = (q.shape(2), call.kv_len as usize);
    let (first_key, last_key) = (at.block as u32, (min(at.block + KEYS, kv_len) - 1) as u32);
    let window = load_window(windows, at.head);
    let tiles = query_tiles(&window, first_key, last_key, q_len as u32, call, ROWS, variant.causal);
    let visit = whole_first(&tiles, &window, at.block, q_len, call, ROWS, variant.causal, true);
    let steps = QuerySteps {
        tiles,
        visit,
        q_rows: head_rows(q, at.batch, at.head, strides.first),
        g_rows: head_rows(d_o, at.batch, at.head, strides.second),
        t_base: offset(terms, at.batch, at.head, 0),
        block: at.block,
        q_len,
        slope: slopes[at.head],
        window,
    };
    if comptime![path == FragmentPath::Native] {
        for u in 0..visit.whole {
            query_step(
                k_fragments,
                v_fragments,
                k_s,
                v_s,
                q_s,
                g_s,
                lse_s,
                coefficient_s,
                q,
                d_o,
                terms,
                &steps,
                landing,
                u,
                true,
                dk_acc,
                dv_acc,
                call,
                variant,
                exchange,
                path,
            );
        }
    }
    for u in cut_from(&visit, path)..tiles.before + tiles.count {
        query_step(
            k_fragments,
            v_fragments,
            k_s,
            v_s,
            q_s,
            g_s,
            lse_s,
            coefficient_s,
            q,
            d_o,
            terms,
            &steps,
            landing,
            u,
            false,
            dk_acc,
            dv_acc,
            call,
            variant,
            exchange,
            path,
        );
    }
}

/// A cube's walk over the query tiles of one query head of its kv head's group: the list, the
/// order it visits it in ([`TileOrder`]), where the head's `Q`, `dO` and row terms start, and
/// what the per-pair rule needs (the cube's first key, `N_q`, the head's slope and window).
#[derive(CubeType, Clone, Copy)]
struct QuerySteps {
    tiles: Tiles,
    visit: TileOrder,
    q_rows: HeadRows,
    g_rows: HeadRows,
    t_base: usize,
    /// The cube's first key.
    block: usize,
    /// Query rows `N_q`.
    q_len: usize,
    /// The query head's ALiBi slope.
    slope: f32,
    window: Window,
}

/// Step `step` of the visit, on a query tile seen `whole` (every query of it sees every key of
/// the cube, [`whole_first`]) or cut: its `Q`, `dO` and row terms copied in and landed, then in
/// `parts` (two of 32 queries at d = 128, so that a warp's products fit its registers beside
/// `dK` and `dV`) `Sᵀ = K·Qᵀ`, `dPᵀ = V·dOᵀ`, the weights (the per-pair rule only on a cut
/// tile), `dV += Pᵀ·dO` and `dK += dSᵀ·Q`; a landing at the end frees the buffers.
#[cube]
#[allow(clippy::too_many_arguments)]
fn query_step<F: Float, NV: Size>(
    k_fragments: &Sequence<Array<Pair<F>>>,
    v_fragments: &Sequence<Array<Pair<F>>>,
    k_s: &SharedMemory<F>,
    v_s: &SharedMemory<F>,
    q_s: &mut SharedMemory<F>,
    g_s: &mut SharedMemory<F>,
    lse_s: &mut SharedMemory<f32>,
    coefficient_s: &mut SharedMemory<f32>,
    q: &Tensor<Vector<F, NV>>,
    d_o: &Tensor<Vector<F, NV>>,
    terms: &Tensor<f32>,
    steps: &QuerySteps,
    landing: &Landing,
    step: u32,
    #[comptime] whole: bool,
    dk_acc: &mut Sequence<Array<Pair<f32>>>,
    dv_acc: &mut Sequence<Array<Pair<f32>>>,
    call: &Call,
    #[comptime] variant: Variant,
    exchange: &mut SharedMemory<f32>,
    #[comptime] path: FragmentPath,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let q_len = steps.q_len;
    let i0 = tile_at(&steps.tiles, &steps.visit, step) as usize * ROWS;
    copy_rows(q, &steps.q_rows, i0, q_len, q_s, ROWS, dim, stride, path);
    copy_rows(d_o, &steps.g_rows, i0, q_len, g_s, ROWS, dim, stride, path);
    let rows = RowRange { start: UNIT_POS_X as usize, step: UNITS };
    load_row_terms(terms, steps.t_base, i0, q_len, rows, lse_s, coefficient_s, ROWS);
    land(landing);

    let parts = comptime![if dim > STAGED_DIM { 2 } else { 1 }];
    let blocks = comptime![ROWS / N / parts];
    for part in 0..parts {
        let first = part * blocks * N;
        let mut p = row_products(k_fragments, k_s, q_s, first, exchange, blocks, 1usize, dim, path);
        let mut ds =
            row_products(v_fragments, v_s, g_s, first, exchange, blocks, 1usize, dim, path);
        let part = QueryPart { i0, first };
        key_weights(
            &mut p,
            &mut ds,
            lse_s,
            coefficient_s,
            steps,
            part,
            call,
            variant,
            blocks,
            !whole,
            path,
        );
        let p = weights_as_a::<F>(&p, blocks, 1usize);
        accumulate(&p, g_s, first, dv_acc, exchange, blocks, 1usize, dim, path);
        let ds = weights_as_a::<F>(&ds, blocks, 1usize);
        accumulate(&ds, q_s, first, dk_acc, exchange, blocks, 1usize, dim, path);
    }
    land(landing);
}

/// Which queries a part of a step holds: the tile's first row and the part's first row in it.
#[derive(CubeType, Clone, Copy)]
struct QueryPart {
    i0: usize,
    first: usize,
}

/// Turns the products `p` (`Sᵀ`) and `ds` (`dPᵀ`) of the warp's keys and `blocks × 8` of the
/// tile's queries from its row `first` into the weights `Pᵀ` and score gradients `dSᵀ / scale`
/// of the pairs, and, `per_pair`, zeros where [`visible`] refuses a pair (or the query is past
/// `N_q`).
#[cube(fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
#[allow(clippy::too_many_arguments)]
fn key_weights(
    p: &mut Sequence<Array<Pair<f32>>>,
    ds: &mut Sequence<Array<Pair<f32>>>,
    lse_s: &SharedMemory<f32>,
    coefficient_s: &SharedMemory<f32>,
    steps: &QuerySteps,
    part: QueryPart,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] blocks: usize,
    #[comptime] per_pair: bool,
    #[comptime] path: FragmentPath,
) {
    let lane = lane(path) as usize;
    let column = 2 * (lane % 4);
    let factor = exponent_factor(call, variant);
    // The lane's two keys, and the queries that see each where the windows are plain.
    let mut keys = Vector::<u32, Const<2>>::empty();
    let mut span_lo = Vector::<u32, Const<2>>::empty();
    let mut span_width = Vector::<u32, Const<2>>::empty();
    #[unroll]
    for r in 0..2usize {
        keys[r] = (steps.block + block_row(r, path)) as u32;
        let span = key_span(&steps.window, keys[r], call, variant.causal, variant.plain);
        span_lo[r] = span.lo;
        span_width[r] = span.width;
    }
    #[unroll]
    for block in 0..blocks {
        let weights = p.index_mut(block);
        let grads = ds.index_mut(block);
        #[unroll]
        for e in 0..2usize {
            // The column's query and its row terms, shared by the lane's two keys.
            let query = part.first + block * N + column + e;
            let i = call.query_offset + (part.i0 + query) as u32;
            let (lse, coefficient) = (lse_s[query], coefficient_s[query]);
            let live = part.i0 + query < steps.q_len;
            #[unroll]
            for r in 0..2usize {
                let (mut w, mut g) = (weights[r], grads[r]);
                let s = score(w[e], i, keys[r], steps.slope, call, variant);
                let pair = weight(s.value, factor, lse, call, variant);
                let d_raw = pair.gate * (g[e] + coefficient) * s.chain;
                w[e] = pair.value;
                g[e] = d_raw;
                if comptime![per_pair] {
                    let span = Span { lo: span_lo[r], width: span_width[r], sinks: 0 };
                    let (window, causal, plain) = (&steps.window, variant.causal, variant.plain);
                    let seen =
                        visible_by_span(&span, window, i, keys[r], call, causal, plain, true);
                    w[e] = select(live && seen, pair.value, 0.0);
                    g[e] = select(live && seen, d_raw, 0.0);
                }
                weights[r] = w;
                grads[r] = g;
            }
        }
    }
}
