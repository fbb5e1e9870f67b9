//! The forward kernel on cooperative matrices (tensor cores, CubeCL's `cmma`), for f16 and bf16
//! inputs on devices that list a tile shape for them (docs/semantics.md §1–§2; reference:
//! `crate::reference::dense_attention`; the portable kernel is `kernel::portable::forward`).
//!
//! A cube is one plane and owns `m` consecutive query rows of one head. It visits the key tiles
//! of `n` keys that [`block_key_tiles`] gives, as the portable kernel does, and for each:
//! - `S = Q·Kᵀ` for its `m × n` block, in `d / k` cooperative products with f32 accumulation,
//!   stored to shared memory;
//! - one lane per row decides which keys its row sees ([`visible`]), scores them ([`score`]),
//!   updates the row's running maximum and sum (online softmax; plain sums of `σ(s + β)` under
//!   sigmoid), writes the row's weights `P` in the input type and rescales its row of `O`;
//! - `O += P·V` in `d / n` cooperative products, `O` kept in shared memory as f32.
//!
//! The tile and the products are `kernel::cmma`'s. Rows that see no key write `o = 0` and
//! `lse = −∞`.

use cubecl::prelude::*;

use crate::kernel::cmma::{Mma, accumulate_product, load_rows, product_transposed, zero};
use crate::kernel::config::{Call, Variant};
use crate::kernel::prologue::{block_key_tiles, offset, query_block};
use crate::kernel::reach::nth_tile;
use crate::kernel::score::{row_end, score, sigmoid};
use crate::kernel::visibility::{Window, visible};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` (f16 or bf16) → `o: [batch, H, N_q,
/// d]`, `lse: [batch, H, N_q]` (f32). Grid: (query blocks of `m`, H, batch); one plane per cube.
#[cube(launch_unchecked)]
pub(crate) fn forward_cmma_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    o: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: Call,
    #[comptime] variant: Variant,
    #[comptime] mma: Mma,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let m = mma.m;
    let n = mma.n;
    let lane = UNIT_POS_X as usize;
    let at = query_block(q, k, windows, slopes, &call, m);
    let kv_len = call.kv_len as usize;

    let mut q_s = SharedMemory::<F>::new(m * dim);
    let mut k_s = SharedMemory::<F>::new(n * dim);
    let mut v_s = SharedMemory::<F>::new(n * dim);
    let mut s_s = SharedMemory::<f32>::new(m * n);
    let mut p_s = SharedMemory::<F>::new(m * n);
    let mut o_s = SharedMemory::<f32>::new(m * dim);

    let q_base = offset(q, at.batch, at.head, 0);
    load_rows(q, q_base, at.block, at.q_len, &mut q_s, m, dim, mma.plane);
    zero(&mut o_s, m * dim, mma.plane);

    let owner = lane < m;
    let mut running_max = f32::min_value();
    let mut total = 0.0f32;
    let tiles = block_key_tiles(&at, &call, m, n, variant.causal);
    let k_base = offset(k, at.batch, at.kv_head, 0);
    let v_base = offset(v, at.batch, at.kv_head, 0);

    for t in 0..tiles.before + tiles.count {
        let j0 = nth_tile(&tiles, t) as usize * n;
        load_rows(k, k_base, j0, kv_len, &mut k_s, n, dim, mma.plane);
        load_rows(v, v_base, j0, kv_len, &mut v_s, n, dim, mma.plane);
        sync_cube();

        product_transposed(&q_s, &k_s, &mut s_s, m, n, dim);
        sync_cube();

        if owner {
            let row = RowAt { live: at.live, position: at.position, j0, lane, slope: at.slope };
            let state = RowState { running_max, total };
            let next =
                fold_row(&mut s_s, &mut p_s, &mut o_s, state, &at.window, row, &call, variant, n);
            running_max = next.running_max;
            total = next.total;
        }
        sync_cube();

        accumulate_product(&p_s, &v_s, &mut o_s, m, n, dim);
        sync_cube();
    }

    if at.live {
        let out_base = offset(o, at.batch, at.head, at.row);
        let end = row_end(total, running_max, &call, variant);
        let column_stride = o.stride(3);
        for c in 0..dim {
            let mut value = 0.0f32;
            if end.norm > 0.0 {
                value = o_s[lane * dim + c] / end.norm;
            }
            o[out_base + c * column_stride] = F::cast_from(value);
        }
        lse[offset(lse, at.batch, at.head, at.row)] = end.lse;
    }
}

/// A row's online-softmax state: the running maximum (unused under sigmoid) and sum.
#[derive(CubeType, Clone, Copy)]
struct RowState {
    running_max: f32,
    total: f32,
}

/// Where a lane's row stands in a key tile.
#[derive(CubeType, Clone, Copy)]
struct RowAt {
    /// The row is a query row (not padding past `N_q`).
    live: bool,
    /// Its absolute position.
    position: u32,
    /// The tile's first key.
    j0: usize,
    /// The lane, and the row's index in the cube's block.
    lane: usize,
    /// The head's ALiBi slope.
    slope: f32,
}

/// One row's share of a key tile: the raw products `s_s[lane, ·]` become the row's weights
/// `p_s[lane, ·]` (0 for keys it does not see), its state moves on, and its row of `o_s` is
/// rescaled to the new maximum (left alone when the maximum did not move).
#[cube]
#[allow(clippy::too_many_arguments)]
fn fold_row<F: Float>(
    s_s: &mut SharedMemory<f32>,
    p_s: &mut SharedMemory<F>,
    o_s: &mut SharedMemory<f32>,
    state: RowState,
    window: &Window,
    at: RowAt,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] n: usize,
) -> RowState {
    let dim = variant.head_dim;
    let lane = at.lane;
    let mut running_max = state.running_max;
    let mut total = state.total;
    let mut seen = 0u32;
    let mut tile_max = f32::min_value();
    for r in 0..n {
        let key = (at.j0 + r) as u32;
        if at.live && visible(window, at.position, key, call, variant.causal, variant.plain) {
            let s = score(s_s[lane * n + r], at.position, key, at.slope, call, variant).value;
            s_s[lane * n + r] = s;
            tile_max = max(tile_max, s);
            seen |= 1u32 << r as u32;
        }
    }
    let mut shift = 0.0f32;
    let mut rescale = 1.0f32;
    if comptime![!variant.sigmoid] {
        if seen != 0 {
            let new_max = max(running_max, tile_max);
            rescale = (running_max - new_max).exp();
            running_max = new_max;
        }
        shift = running_max;
    }
    total *= rescale;
    for r in 0..n {
        let mut w = 0.0f32;
        if (seen >> r as u32) & 1 == 1 {
            w = if comptime![variant.sigmoid] {
                sigmoid(s_s[lane * n + r] + call.beta)
            } else {
                (s_s[lane * n + r] - shift).exp()
            };
        }
        total += w;
        p_s[lane * n + r] = F::cast_from(w);
    }
    // The row's output moves only when its maximum did (never under sigmoid).
    if rescale != 1.0 {
        for c in 0..dim {
            o_s[lane * dim + c] *= rescale;
        }
    }
    RowState { running_max, total }
}
