//! The dQ kernel on cooperative matrices (tensor cores; docs/semantics.md §1; reference:
//! `crate::reference::dense_attention`, differentiated; the portable kernel is
//! `kernel::portable::backward_queries`).
//!
//! A cube is one plane that owns `m` query rows of one head, laid out as the tensor-core
//! forward (`kernel::cmma::forward`), and visits the same key tiles ([`block_key_tiles`]). For
//! each:
//! - `S = Q·Kᵀ` and `dP = dO·Vᵀ` for its `m × n` block, two cooperative products;
//! - one lane per row recomputes its weights from `S` and its `lse` and writes
//!   `dS = ∂L/∂s · chain · scale` in the input type (0 for the keys it does not see);
//! - `dQ += dS·K`, kept in shared memory as f32.
//!
//! The tile and the products are `kernel::cmma`'s.

use cubecl::prelude::*;

use crate::kernel::cmma::{Mma, accumulate_product, load_rows, product_transposed, zero};
use crate::kernel::config::{Call, Variant};
use crate::kernel::prologue::{block_key_tiles, offset, query_block};
use crate::kernel::reach::nth_tile;
use crate::kernel::score::{base2_shift, exponent_factor, score, weight};
use crate::kernel::visibility::visible;

/// `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]`, `d_o: [batch, H, N_q, d]` (f16 or
/// bf16), `terms: [batch, H, N_q, 2]` (f32, `kernel::portable::backward_rows`) → `dq: [batch, H,
/// N_q, d]`. Grid: (query blocks of `m`, H, batch); one plane per cube.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn query_grads_cmma_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    d_o: &Tensor<Vector<F, N>>,
    terms: &Tensor<f32>,
    dq: &mut Tensor<F>,
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
    let at = query_block(q, k, windows, slopes, &call, m);
    let kv_len = call.kv_len as usize;

    let mut q_s = SharedMemory::<F>::new(m * dim);
    let mut g_s = SharedMemory::<F>::new(m * dim);
    let mut k_s = SharedMemory::<F>::new(n * dim);
    let mut v_s = SharedMemory::<F>::new(n * dim);
    let mut s_s = SharedMemory::<f32>::new(m * n);
    let mut dp_s = SharedMemory::<f32>::new(m * n);
    let mut ds_s = SharedMemory::<F>::new(m * n);
    let mut dq_s = SharedMemory::<f32>::new(m * dim);
    let q_base = offset(q, at.batch, at.head, 0);
    let g_base = offset(d_o, at.batch, at.head, 0);
    load_rows(q, q_base, at.block, at.q_len, &mut q_s, m, dim, plane);
    load_rows(d_o, g_base, at.block, at.q_len, &mut g_s, m, dim, plane);
    zero(&mut dq_s, m * dim, plane);

    let mut shift = 0.0f32;
    let mut coefficient = 0.0f32;
    if at.live {
        let t_base = offset(terms, at.batch, at.head, at.row);
        shift = base2_shift(terms[t_base]);
        coefficient = terms[t_base + terms.stride(3)];
    }

    let tiles = block_key_tiles(&at, &call, m, n, variant.causal);
    let k_base = offset(k, at.batch, at.kv_head, 0);
    let v_base = offset(v, at.batch, at.kv_head, 0);
    for t in 0..tiles.before + tiles.count {
        let j0 = nth_tile(&tiles, t) as usize * n;
        load_rows(k, k_base, j0, kv_len, &mut k_s, n, dim, plane);
        load_rows(v, v_base, j0, kv_len, &mut v_s, n, dim, plane);
        sync_cube();

        product_transposed(&q_s, &k_s, &mut s_s, m, n, dim);
        product_transposed(&g_s, &v_s, &mut dp_s, m, n, dim);
        sync_cube();

        if lane < m {
            for r in 0..n {
                let key = (j0 + r) as u32;
                let pair = lane * n + r;
                let mut d_raw = 0.0f32;
                if at.live
                    && visible(&at.window, at.position, key, &call, variant.causal, variant.plain)
                {
                    let s = score(s_s[pair], at.position, key, at.slope, &call, variant);
                    let w = weight(s.value, exponent_factor(&call, variant), shift, &call, variant);
                    d_raw = w.gate * (dp_s[pair] + coefficient) * s.chain * call.scale;
                }
                ds_s[pair] = F::cast_from(d_raw);
            }
        }
        sync_cube();

        accumulate_product(&ds_s, &k_s, &mut dq_s, m, n, dim);
        sync_cube();
    }

    if at.live {
        let out_base = offset(dq, at.batch, at.head, at.row);
        let dq_columns = dq.stride(3);
        for c in 0..dim {
            dq[out_base + c * dq_columns] = F::cast_from(dq_s[lane * dim + c]);
        }
    }
}
