//! The two products of the FlashAttention-2 kernels (`super::forward_flash`,
//! `super::backward_keys_flash`), on the fragment seam: each warp's 16 rows against the rows
//! of a shared tile (all 64, or a part of them), `A·Bᵀ` (scores, and the score gradients' `dPᵀ = V·dOᵀ`), and
//! `C += P·B` with `P` the accumulators of the first product (`O += P·V`, `dV += Pᵀ·dO`,
//! `dK += dSᵀ·Q`). Tiles are row-major with rows `d + PAD` apart.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::flash::{PAD, STAGED_DIM, products};
use super::fragment::{
    FragmentPath, K, LANES, M, N, Pair, accumulators_as_a, half, load, load_b_pair, mma_each, zeros,
};

/// `A·Bᵀ` of the warp's 16 rows of `A` and `blocks × 8` rows of `b_rows` from row `first`:
/// `blocks` accumulators of 8 columns (8 for a whole tile), in groups of at most [`products`]
/// blocks. `A` is the warp's fragments `a` (its `d / 16` A fragments, at d = 64), or at
/// d = 128 ([`STAGED_DIM`]) read from its rows of `a_tile` at each step.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn row_products<F: Float>(
    a: &Sequence<Array<Pair<F>>>,
    a_tile: &SharedMemory<F>,
    b_rows: &SharedMemory<F>,
    first: usize,
    exchange: &mut SharedMemory<f32>,
    #[comptime] blocks: usize,
    #[comptime] dim: usize,
    #[comptime] path: FragmentPath,
) -> Sequence<Array<Pair<f32>>> {
    let stride = comptime![dim + PAD];
    let mut s = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..blocks {
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
            if comptime![dim <= STAGED_DIM] {
                mma_each(a.index(c), &b, &mut s, start * group, exchange, path);
            } else {
                let warp_rows = UNIT_POS as usize / LANES * M * stride;
                let a = load(a_tile, warp_rows + c * K, stride, MatrixIdent::A, false, path);
                mma_each(&a, &b, &mut s, start * group, exchange, path);
            }
        }
    }
    s
}

/// `out += P·B` for the weights `p` of the warp's rows (`blocks` accumulators of 8 columns, two
/// to an A fragment) and `blocks × 8` rows of `b_rows` from row `first`, in groups of
/// [`products`] column blocks, or `blocks` where fewer (a part of a tile holds fewer registers
/// in flight; `d / 8` is a multiple of either at the kernels' head dims).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn accumulate<F: Float>(
    p: &Sequence<Array<Pair<f32>>>,
    b_rows: &SharedMemory<F>,
    first: usize,
    out: &mut Sequence<Array<Pair<f32>>>,
    exchange: &mut SharedMemory<f32>,
    #[comptime] blocks: usize,
    #[comptime] dim: usize,
    #[comptime] path: FragmentPath,
) {
    let stride = comptime![dim + PAD];
    let group = comptime![products(path).min(blocks)];
    #[unroll]
    for step in 0..blocks * N / K {
        let a = accumulators_as_a::<F>(p.index(2 * step), p.index(2 * step + 1));
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
            mma_each(&a, &b, out, start * group, exchange, path);
        }
    }
}
