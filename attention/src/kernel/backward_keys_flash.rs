//! The dK/dV kernel of FlashAttention-2's design on the fragment seam (docs/semantics.md §1;
//! reference: `crate::reference::dense_attention`, differentiated; its cooperative-matrix twin
//! is `super::backward_keys_cmma`, whose math it shares).
//!
//! A cube owns 64 key rows of one kv head, 16 per warp; each warp holds its keys' rows of `K`
//! and `V` as A fragments (at d = 64; in shared memory at d = 128, [`STAGED_DIM`], which leaves
//! the registers to the accumulators and products) and its `dK`, `dV` as accumulators in
//! registers. For every query head
//! of the kv head's GQA group it visits the query tiles of 64 that [`query_tiles`] gives, and
//! for each (at d = 128 in two halves of 32 queries, so that the products fit the registers
//! beside `dK` and `dV`):
//! - `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` in registers;
//! - the weights `Pᵀ` recomputed from the queries' `lse` and `dSᵀ = ∂L/∂s · chain · scale`
//!   (`super::score::weight`, the row coefficients of `super::backward_rows`), in place of the
//!   products, 0 where a query does not see the key; tiles whose every pair is visible
//!   ([`sees_whole_tile`]) skip the rule;
//! - `dV += Pᵀ·dO` and `dK += dSᵀ·Q`, the weights rounded to the input type as FlashAttention
//!   rounds them, each becoming an A fragment where it lies.
//!
//! Each cube writes its own keys' gradients: no atomics. Keys past `kv_len` get zeros. At
//! d = 64 `K` and `V` reach the registers through the tile buffers, which then hold each query
//! tile's `Q` and `dO`: the kernel fits lavapipe's 32 KB. The launch runs it where
//! `super::flash::flash_backward_path` says so.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::backward_keys::{RowRange, load_row_terms};
use super::config::{Call, Variant};
use super::flash::{
    KEYS, PAD, ROWS, STAGED_DIM, UNITS, WARPS, block_row, fetch, products, sees_whole_tile, stash,
    write_rows,
};
use super::flash_products::{accumulate, row_products};
use super::fragment::{FragmentPath, K, LANES, M, N, Pair, lane, load, store, zeros};
use super::prologue::offset;
use super::reach::{nth_tile, query_tiles};
use super::score::{score, weight};
use super::visibility::{Window, load_window, visible};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]` (f16 or
/// bf16, read as vectors of `NV`), `terms: [batch, H, N_q, 2]` (f32) → `dk, dv: [batch, H_kv,
/// N_k, d]`. Grid: (key blocks of 64, H_kv, batch); `super::flash::UNITS` units per cube.
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
    #[comptime] variant: Variant,
    #[comptime] path: FragmentPath,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let stride = comptime![dim + PAD];
    let (kv_head, batch) = (CUBE_POS_Y as usize, CUBE_POS_Z as usize);
    let (q_len, keys) = (q.shape(2), k.shape(2));
    let kv_len = call.kv_len as usize;
    let block = CUBE_POS_X as usize * KEYS;
    let group = q.shape(1) / k.shape(1);
    let warp_rows = UNIT_POS as usize / LANES * M * stride;
    let mut q_s = SharedMemory::<F>::new(ROWS * stride);
    let mut g_s = SharedMemory::<F>::new(ROWS * stride);
    let mut lse_s = SharedMemory::<f32>::new(ROWS);
    let mut coefficient_s = SharedMemory::<f32>::new(ROWS);
    let mut exchange =
        SharedMemory::<f32>::new(comptime![path.exchange_len(WARPS, products(path))]);

    // At d = 64 `K` and `V` pass through the tile buffers into registers; at d = 128
    // ([`STAGED_DIM`]) they stay in buffers of their own, their fragments loaded per step.
    let own = comptime![if dim > STAGED_DIM { KEYS * stride } else { 1 }];
    let mut k_s = SharedMemory::<F>::new(own);
    let mut v_s = SharedMemory::<F>::new(own);
    let k_rows = fetch(k, offset(k, batch, kv_head, 0), block, kv_len, KEYS, dim);
    let v_rows = fetch(v, offset(v, batch, kv_head, 0), block, kv_len, KEYS, dim);
    if comptime![dim > STAGED_DIM] {
        stash(&k_rows, &mut k_s, KEYS, dim, stride);
        stash(&v_rows, &mut v_s, KEYS, dim, stride);
    } else {
        stash(&k_rows, &mut q_s, KEYS, dim, stride);
        stash(&v_rows, &mut g_s, KEYS, dim, stride);
    }
    sync_cube();
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
    let parts = comptime![if dim > STAGED_DIM { 2 } else { 1 }];
    let blocks = comptime![ROWS / N / parts];
    let first_key = block as u32;
    let last_key = (min(block + KEYS, max(kv_len, 1)) - 1) as u32;
    let live = block < kv_len;
    for member in 0..select(live, group, 0) {
        let head = kv_head * group + member;
        let window = load_window(windows, head);
        let tiles =
            query_tiles(&window, first_key, last_key, q_len as u32, &call, ROWS, variant.causal);
        let (q_base, g_base) = (offset(q, batch, head, 0), offset(d_o, batch, head, 0));
        let t_base = offset(terms, batch, head, 0);
        for t in 0..tiles.count {
            let i0 = nth_tile(&tiles, t) as usize * ROWS;
            stash(&fetch(q, q_base, i0, q_len, ROWS, dim), &mut q_s, ROWS, dim, stride);
            stash(&fetch(d_o, g_base, i0, q_len, ROWS, dim), &mut g_s, ROWS, dim, stride);
            let rows = RowRange { start: UNIT_POS as usize, step: UNITS };
            load_row_terms(terms, t_base, i0, q_len, rows, &mut lse_s, &mut coefficient_s, ROWS);
            sync_cube();

            let at = KeyTile { block, i0, q_len, slope: slopes[head] };
            let tile = WholeTile { at, whole: whole_tile(&window, at, &call, variant) };
            let (lse, coefficients) = (&lse_s, &coefficient_s);
            // The tile's queries in `parts` of `blocks × 8` (two of 32 at d = 128, so that a
            // warp's products fit its registers beside `dK` and `dV`).
            for part in 0..parts {
                let first = part * blocks * N;
                let mut p =
                    row_products(&k_fragments, &k_s, &q_s, first, &mut exchange, blocks, dim, path);
                let mut ds =
                    row_products(&v_fragments, &v_s, &g_s, first, &mut exchange, blocks, dim, path);
                part_weights(
                    &mut p,
                    &mut ds,
                    lse,
                    coefficients,
                    &window,
                    tile,
                    first,
                    &call,
                    variant,
                    blocks,
                    path,
                );
                accumulate(&p, &g_s, first, &mut dv_acc, &mut exchange, blocks, dim, path);
                accumulate(&ds, &q_s, first, &mut dk_acc, &mut exchange, blocks, dim, path);
            }
            sync_cube();
        }
    }

    // Out through the tile buffers, in 16-byte stores.
    #[unroll]
    for c in 0..dim / N {
        store(dk_acc.index(c), &mut q_s, warp_rows + c * N, stride, path);
        store(dv_acc.index(c), &mut g_s, warp_rows + c * N, stride, path);
    }
    sync_cube();
    write_rows(&q_s, dk, offset(dk, batch, kv_head, 0), block, keys, KEYS, dim, stride);
    write_rows(&g_s, dv, offset(dv, batch, kv_head, 0), block, keys, KEYS, dim, stride);
}

/// Does every query of the tile see every key of the cube's block ([`sees_whole_tile`]), the
/// tile holding valid queries only? Padding queries (zero rows of `Q` and `dO`) are masked,
/// since their weights could overflow under ALiBi.
#[cube]
fn whole_tile(window: &Window, at: KeyTile, call: &Call, #[comptime] variant: Variant) -> bool {
    let whole = sees_whole_tile(window, at.i0, at.q_len, at.block, call, variant.causal);
    at.i0 + ROWS <= at.q_len && whole
}

/// Where a cube's keys stand in a query tile.
#[derive(CubeType, Clone, Copy)]
struct KeyTile {
    /// The cube's first key.
    block: usize,
    /// The tile's first query row.
    i0: usize,
    /// Query rows `N_q`.
    q_len: usize,
    /// The query head's ALiBi slope.
    slope: f32,
}

/// A tile's place ([`KeyTile`]) and whether its every pair is visible ([`whole_tile`]).
#[derive(CubeType, Clone, Copy)]
struct WholeTile {
    at: KeyTile,
    whole: bool,
}

/// [`key_weights`] on a part of the tile, asking the per-pair rule only where the tile is not
/// whole.
#[cube]
#[allow(clippy::too_many_arguments)]
fn part_weights(
    p: &mut Sequence<Array<Pair<f32>>>,
    ds: &mut Sequence<Array<Pair<f32>>>,
    lse_s: &SharedMemory<f32>,
    coefficient_s: &SharedMemory<f32>,
    window: &Window,
    tile: WholeTile,
    first: usize,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] blocks: usize,
    #[comptime] path: FragmentPath,
) {
    let (at, lse, coefficients) = (tile.at, lse_s, coefficient_s);
    if tile.whole {
        key_weights(
            p,
            ds,
            lse,
            coefficients,
            window,
            at,
            first,
            call,
            variant,
            blocks,
            false,
            path,
        );
    } else {
        key_weights(p, ds, lse, coefficients, window, at, first, call, variant, blocks, true, path);
    }
}

/// Turns the products `p` (`Sᵀ`) and `ds` (`dPᵀ`) of the warp's keys and `blocks × 8` of the
/// tile's queries from its row `first` into the weights `Pᵀ` and score gradients `dSᵀ` of the
/// pairs, and, `per_pair`, zeros where [`visible`] refuses a pair (or the query is past `N_q`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn key_weights(
    p: &mut Sequence<Array<Pair<f32>>>,
    ds: &mut Sequence<Array<Pair<f32>>>,
    lse_s: &SharedMemory<f32>,
    coefficient_s: &SharedMemory<f32>,
    window: &Window,
    at: KeyTile,
    first: usize,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] blocks: usize,
    #[comptime] per_pair: bool,
    #[comptime] path: FragmentPath,
) {
    let lane = lane(path) as usize;
    let column = 2 * (lane % 4);
    #[unroll]
    for block in 0..blocks {
        let weights = p.index_mut(block);
        let grads = ds.index_mut(block);
        #[unroll]
        for e in 0..2usize {
            // The column's query and its row terms, shared by the lane's two keys.
            let query = first + block * N + column + e;
            let i = call.query_offset + (at.i0 + query) as u32;
            let (lse, coefficient) = (lse_s[query], coefficient_s[query]);
            let live = at.i0 + query < at.q_len;
            #[unroll]
            for r in 0..2usize {
                let key = (at.block + block_row(r, path)) as u32;
                let (mut w, mut g) = (weights[r], grads[r]);
                let s = score(w[e], i, key, at.slope, call, variant);
                let pair = weight(s.value, lse, call, variant);
                let d_raw = pair.gate * (g[e] + coefficient) * s.chain * call.scale;
                w[e] = pair.value;
                g[e] = d_raw;
                if comptime![per_pair] {
                    let seen = live && visible(window, i, key, call, variant.causal);
                    w[e] = select(seen, pair.value, 0.0);
                    g[e] = select(seen, d_raw, 0.0);
                }
                weights[r] = w;
                grads[r] = g;
            }
        }
    }
}
