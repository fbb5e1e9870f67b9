//! The two products of the FlashAttention-2 kernels (`kernel::flash::forward`,
//! `kernel::flash::backward_keys`), on the fragment seam: each warp's groups of 16 rows against
//! the rows of a shared tile (all 64, or a part of them), `A·Bᵀ` (scores, and the score
//! gradients' `dPᵀ = V·dOᵀ`), and `C += P·B` with `P` the accumulators of the first product
//! (`O += P·V`, `dV += Pᵀ·dO`, `dK += dSᵀ·Q`). Tiles are row-major with rows `d + PAD` apart.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use crate::kernel::flash::{PAD, ROWS, STAGED_DIM, products};
use crate::kernel::fragment::{
    FragmentPath, K, LANES, M, N, Pair, accumulators_as_a, half, load, load_b_pair, mma_each, zeros,
};

/// `A·Bᵀ` of the warp's `groups` groups of 16 rows of `A` and `blocks × 8` rows of `b_rows`
/// from row `first`: `blocks` accumulators of 8 columns per group (8 for a whole tile; group
/// `g`'s from index `g · blocks`), in groups of at most [`products`] blocks, each B fragment
/// loaded once for every group. `A` is the warp's fragments `a` (`d / 16` A fragments per
/// group, group `g`'s from index `g · d / 16`, at d = 64), or at d = 128 ([`STAGED_DIM`])
/// read from its rows of `a_tile` (group `g`'s `g · ROWS` rows on) at each step.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn row_products<F: Float>(
    a: &Sequence<Array<Pair<F>>>,
    a_tile: &SharedMemory<F>,
    b_rows: &SharedMemory<F>,
    first: usize,
    exchange: &mut SharedMemory<f32>,
    #[comptime] blocks: usize,
    #[comptime] groups: usize,
    #[comptime] dim: usize,
    #[comptime] path: FragmentPath,
) -> Sequence<Array<Pair<f32>>> {
    let stride = comptime![dim + PAD];
    let mut s = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..groups * blocks {
        s.push(zeros());
    }
    let group = comptime![products(path).min(blocks)];
    #[unroll]
    for c in 0..dim / K {
        #[unroll]
        for start in 0..blocks / group {
            let mut b = Sequence::<Array<Pair<F>>>::new();
            #[unroll]
            for i in 0..group / 2 {
                let at = (first + (start * group + 2 * i) * N) * stride + c * K;
                let pair = load_b_pair(b_rows, at, stride, true, path);
                b.push(half(&pair, false));
                b.push(half(&pair, true));
            }
            #[unroll]
            for g in 0..groups {
                let into = comptime![g * blocks + start * group];
                if comptime![dim <= STAGED_DIM] {
                    mma_each(a.index(g * (dim / K) + c), &b, &mut s, into, exchange, path);
                } else {
                    let rows = (UNIT_POS_X as usize / LANES * M + g * ROWS) * stride;
                    let a = load(a_tile, rows + c * K, stride, MatrixIdent::A, false, path);
                    mma_each(&a, &b, &mut s, into, exchange, path);
                }
            }
        }
    }
    s
}

/// The weights `p` of the warp's `groups` groups of rows (`blocks` accumulators of 8 columns
/// per group, group `g`'s from `g · blocks`) as the A fragments of `P·B`, rounded to `F`, two
/// accumulators to a fragment (group `g`'s from `g · blocks / 2`): all at once, so that the f32
/// weights leave the registers before the products start.
#[cube]
pub(crate) fn weights_as_a<F: Float>(
    p: &Sequence<Array<Pair<f32>>>,
    #[comptime] blocks: usize,
    #[comptime] groups: usize,
) -> Sequence<Array<Pair<F>>> {
    let mut a = Sequence::<Array<Pair<F>>>::new();
    #[unroll]
    for g in 0..groups {
        #[unroll]
        for step in 0..blocks * N / K {
            let at = comptime![g * blocks + 2 * step];
            a.push(accumulators_as_a::<F>(p.index(at), p.index(at + 1)));
        }
    }
    a
}

/// `out += P·B` for the weights of the warp's `groups` groups of rows as [`weights_as_a`]
/// gives them (`blocks × 8` columns per group) and `blocks × 8` rows of `b_rows` from row
/// `first`, into `d / 8` accumulators per group (group `g`'s from `g · d / 8`), in groups of
/// [`products`] column blocks, or `blocks` where fewer (a part of a tile holds fewer registers
/// in flight; `d / 8` is a multiple of either at the kernels' head dims), each B fragment
/// loaded once for every group.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn accumulate<F: Float>(
    a: &Sequence<Array<Pair<F>>>,
    b_rows: &SharedMemory<F>,
    first: usize,
    out: &mut Sequence<Array<Pair<f32>>>,
    exchange: &mut SharedMemory<f32>,
    #[comptime] blocks: usize,
    #[comptime] groups: usize,
    #[comptime] dim: usize,
    #[comptime] path: FragmentPath,
) {
    let stride = comptime![dim + PAD];
    let group = comptime![products(path).min(blocks)];
    let steps = comptime![blocks * N / K];
    #[unroll]
    for step in 0..steps {
        #[unroll]
        for start in 0..dim / N / group {
            let mut b = Sequence::<Array<Pair<F>>>::new();
            #[unroll]
            for i in 0..group / 2 {
                let at = (first + step * K) * stride + (start * group + 2 * i) * N;
                let pair = load_b_pair(b_rows, at, stride, false, path);
                b.push(half(&pair, false));
                b.push(half(&pair, true));
            }
            #[unroll]
            for g in 0..groups {
                let into = comptime![g * (dim / N) + start * group];
                mma_each(a.index(g * steps + step), &b, out, into, exchange, path);
            }
        }
    }
}

/// Multiplies each of the `blocks` accumulators of `acc` by `factor`: the backward kernels'
/// score gradients leave the scale out, as FlashAttention-2 does, and their `dQ` and `dK` take
/// it once at the end.
#[cube]
pub(crate) fn scale_accumulators(
    acc: &mut Sequence<Array<Pair<f32>>>,
    factor: f32,
    #[comptime] blocks: usize,
) {
    #[unroll]
    for block in 0..blocks {
        let fragment = acc.index_mut(block);
        #[unroll]
        for p in 0..2usize {
            let mut pair = fragment[p];
            pair[0] *= factor;
            pair[1] *= factor;
            fragment[p] = pair;
        }
    }
}
