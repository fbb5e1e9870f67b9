//! The dK/dV kernel on cooperative matrices (tensor cores; docs/semantics.md §1; reference:
//! `crate::reference::dense_attention`, differentiated; the portable kernel is
//! `kernel::portable::backward_keys`).
//!
//! A cube is one plane that owns `m` key rows of one kv head. For every query head of the kv
//! head's GQA group it visits the query tiles of `n` rows that [`query_tiles`] gives, and for
//! each:
//! - `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` for its `m × n` block, two cooperative products;
//! - one lane per key recomputes the weights `Pᵀ` of the queries that see it from `Sᵀ` and their
//!   `lse`, and `dSᵀ = ∂L/∂s · chain · scale`, both in the input type (0 where unseen);
//! - `dV += Pᵀ·dO` and `dK += dSᵀ·Q`, kept in shared memory as f32.
//!
//! Each cube writes its own keys' gradients: no atomics. Keys past `kv_len` get zeros. The tile
//! and the products are `kernel::cmma`'s.

use cubecl::prelude::*;

use crate::kernel::cmma::{Mma, accumulate_product, load_rows, product_transposed, zero};
use crate::kernel::config::{Call, Variant};
use crate::kernel::portable::backward_keys::{RowRange, load_row_terms};
use crate::kernel::prologue::offset;
use crate::kernel::reach::{nth_tile, query_tiles};
use crate::kernel::score::{exponent_factor, score, weight};
use crate::kernel::visibility::{Window, load_window, visible};

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]` (f16 or
/// bf16), `terms: [batch, H, N_q, 2]` (f32, `kernel::portable::backward_rows`) → `dk, dv: [batch,
/// H_kv, N_k, d]`. Grid: (key blocks of `m`, H_kv, batch); one plane per cube.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn key_grads_cmma_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_o: &Tensor<Vector<F, N>>,
    terms: &Tensor<f32>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: Call,
    #[comptime] variant: Variant,
    #[comptime] mma: Mma,
    #[define(F)] _dtype: StorageType,
) {
    let dim = variant.head_dim;
    let (m, n, plane) = (mma.m, mma.n, mma.plane);
    let lane = UNIT_POS_X as usize;
    let kv_head = CUBE_POS_Y as usize;
    let batch = CUBE_POS_Z as usize;
    let q_len = q.shape(2);
    let kv_len = call.kv_len as usize;
    let block = CUBE_POS_X as usize * m;
    let key = block + lane;
    let group = q.shape(1) / k.shape(1);

    let mut k_s = SharedMemory::<F>::new(m * dim);
    let mut v_s = SharedMemory::<F>::new(m * dim);
    let mut q_s = SharedMemory::<F>::new(n * dim);
    let mut g_s = SharedMemory::<F>::new(n * dim);
    let mut s_s = SharedMemory::<f32>::new(m * n);
    let mut dp_s = SharedMemory::<f32>::new(m * n);
    let mut p_s = SharedMemory::<F>::new(m * n);
    let mut ds_s = SharedMemory::<F>::new(m * n);
    let mut dk_s = SharedMemory::<f32>::new(m * dim);
    let mut dv_s = SharedMemory::<f32>::new(m * dim);
    let mut lse_s = SharedMemory::<f32>::new(n);
    let mut coefficient_s = SharedMemory::<f32>::new(n);
    let k_base = offset(k, batch, kv_head, 0);
    let v_base = offset(v, batch, kv_head, 0);
    load_rows(k, k_base, block, kv_len, &mut k_s, m, dim, plane);
    load_rows(v, v_base, block, kv_len, &mut v_s, m, dim, plane);
    zero(&mut dk_s, m * dim, plane);
    zero(&mut dv_s, m * dim, plane);

    if block < kv_len {
        let first = block as u32;
        let last = (min(block + m, kv_len) - 1) as u32;
        for member in 0..group {
            let head = kv_head * group + member;
            let window = load_window(windows, head);
            let tiles = query_tiles(&window, first, last, q_len as u32, &call, n, variant.causal);
            let q_base = offset(q, batch, head, 0);
            let g_base = offset(d_o, batch, head, 0);
            let t_base = offset(terms, batch, head, 0);
            for t in 0..tiles.count {
                let i0 = nth_tile(&tiles, t) as usize * n;
                load_rows(q, q_base, i0, q_len, &mut q_s, n, dim, plane);
                load_rows(d_o, g_base, i0, q_len, &mut g_s, n, dim, plane);
                let rows = RowRange { start: lane, step: plane };
                load_row_terms(terms, t_base, i0, q_len, rows, &mut lse_s, &mut coefficient_s, n);
                sync_cube();

                product_transposed(&k_s, &q_s, &mut s_s, m, n, dim);
                product_transposed(&v_s, &g_s, &mut dp_s, m, n, dim);
                sync_cube();

                if lane < m {
                    let at = KeyAt { key: key as u32, i0, lane, slope: slopes[head] };
                    key_row(
                        &s_s,
                        &dp_s,
                        &lse_s,
                        &coefficient_s,
                        &mut p_s,
                        &mut ds_s,
                        &window,
                        at,
                        q_len,
                        &call,
                        variant,
                        n,
                    );
                }
                sync_cube();

                accumulate_product(&p_s, &g_s, &mut dv_s, m, n, dim);
                accumulate_product(&ds_s, &q_s, &mut dk_s, m, n, dim);
                sync_cube();
            }
        }
    }

    if key < k.shape(2) && lane < m {
        let dk_base = offset(dk, batch, kv_head, key);
        let dv_base = offset(dv, batch, kv_head, key);
        let (dk_columns, dv_columns) = (dk.stride(3), dv.stride(3));
        for c in 0..dim {
            dk[dk_base + c * dk_columns] = F::cast_from(dk_s[lane * dim + c]);
            dv[dv_base + c * dv_columns] = F::cast_from(dv_s[lane * dim + c]);
        }
    }
}

/// Where a lane's key stands in a query tile.
#[derive(CubeType, Clone, Copy)]
struct KeyAt {
    /// The key's position.
    key: u32,
    /// The tile's first query row.
    i0: usize,
    /// The lane, and the key's row in the cube's block.
    lane: usize,
    /// The query head's ALiBi slope.
    slope: f32,
}

/// One key's share of a query tile: from its raw products `s_s[lane, ·]` and `dp_s[lane, ·]`,
/// the weights `p_s[lane, r]` and score gradients `ds_s[lane, r]` of the tile's queries (0 for
/// those that do not see it).
#[cube]
#[allow(clippy::too_many_arguments)]
fn key_row<F: Float>(
    s_s: &SharedMemory<f32>,
    dp_s: &SharedMemory<f32>,
    lse_s: &SharedMemory<f32>,
    coefficient_s: &SharedMemory<f32>,
    p_s: &mut SharedMemory<F>,
    ds_s: &mut SharedMemory<F>,
    window: &Window,
    at: KeyAt,
    q_len: usize,
    call: &Call,
    #[comptime] variant: Variant,
    #[comptime] n: usize,
) {
    for r in 0..n {
        let i = at.i0 + r;
        let position = call.query_offset + i as u32;
        let cell = at.lane * n + r;
        let mut w = 0.0f32;
        let mut d_raw = 0.0f32;
        if i < q_len && visible(window, position, at.key, call, variant.causal, variant.plain) {
            let s = score(s_s[cell], position, at.key, at.slope, call, variant);
            let pair = weight(s.value, exponent_factor(call, variant), lse_s[r], call, variant);
            w = pair.value;
            d_raw = pair.gate * (dp_s[cell] + coefficient_s[r]) * s.chain * call.scale;
        }
        p_s[cell] = F::cast_from(w);
        ds_s[cell] = F::cast_from(d_raw);
    }
}
