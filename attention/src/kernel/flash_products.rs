//! The two products of the FlashAttention-2 kernels (`super::forward_flash`,
//! `super::backward_keys_flash`), on the fragment seam: each warp's 16 rows against the 64 rows
//! of a shared tile, `A·Bᵀ` (scores, and the score gradients' `dPᵀ = V·dOᵀ`), and
//! `C += P·B` with `P` the accumulators of the first product (`O += P·V`, `dV += Pᵀ·dO`,
//! `dK += dSᵀ·Q`). Tiles are row-major with rows `d + PAD` apart.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::flash::{KEYS, PAD, STAGED_DIM, products};
use super::fragment::{
    FragmentPath, K, LANES, M, N, Pair, accumulators_as_a, load, mma_each, zeros,
};

/// `A·Bᵀ` of the warp's 16 rows of `A` and the 64 rows of `b_rows`: 8 accumulators of 8
/// columns, in groups of [`products`] blocks. `A` is the warp's fragments `a` (its `d / 16`
/// A fragments, at d = 64), or at d = 128 ([`STAGED_DIM`]) read from its rows of `a_tile` at
/// each step.
#[cube]
pub(crate) fn row_products<F: Float>(
    a: &Sequence<Array<Pair<F>>>,
    a_tile: &SharedMemory<F>,
    b_rows: &SharedMemory<F>,
    exchange: &mut SharedMemory<f32>,
    #[comptime] dim: usize,
    #[comptime] path: FragmentPath,
) -> Sequence<Array<Pair<f32>>> {
    let stride = comptime![dim + PAD];
    let mut s = Sequence::<Array<Pair<f32>>>::new();
    #[unroll]
    for _ in 0..KEYS / N {
        s.push(zeros());
    }
    let group = comptime![products(path)];
    #[unroll]
    for c in 0..dim / K {
        #[unroll]
        for first in 0..KEYS / N / group {
            let mut b = Sequence::<Array<Pair<F>>>::new();
            #[unroll]
            for i in 0..group {
                let at = (first * group + i) * N * stride + c * K;
                b.push(load(b_rows, at, stride, MatrixIdent::B, true, path));
            }
            if comptime![dim <= STAGED_DIM] {
                mma_each(a.index(c), &b, &mut s, first * group, exchange, path);
            } else {
                let warp_rows = UNIT_POS as usize / LANES * M * stride;
                let a = load(a_tile, warp_rows + c * K, stride, MatrixIdent::A, false, path);
                mma_each(&a, &b, &mut s, first * group, exchange, path);
            }
        }
    }
    s
}

/// `out += P·B` for the weights `p` of the warp's rows (8 accumulators of 8 columns, two to an
/// A fragment) and the 64 rows of `b_rows`, in groups of [`products`] column blocks (`d / 8`
/// is a multiple of it at the kernels' head dims).
#[cube]
pub(crate) fn accumulate<F: Float>(
    p: &Sequence<Array<Pair<f32>>>,
    b_rows: &SharedMemory<F>,
    out: &mut Sequence<Array<Pair<f32>>>,
    exchange: &mut SharedMemory<f32>,
    #[comptime] dim: usize,
    #[comptime] path: FragmentPath,
) {
    let stride = comptime![dim + PAD];
    let group = comptime![products(path)];
    #[unroll]
    for step in 0..KEYS / K {
        let a = accumulators_as_a::<F>(p.index(2 * step), p.index(2 * step + 1));
        #[unroll]
        for first in 0..dim / N / group {
            let mut b = Sequence::<Array<Pair<F>>>::new();
            #[unroll]
            for i in 0..group {
                let at = step * K * stride + (first * group + i) * N;
                b.push(load(b_rows, at, stride, MatrixIdent::B, false, path));
            }
            mma_each(&a, &b, out, first * group, exchange, path);
        }
    }
}
