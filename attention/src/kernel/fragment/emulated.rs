//! The emulated path of the fragment seam (the parent module): a warp is 32 units of the cube,
//! each holding its own fragment registers in local arrays, laid out as PTX's `m16n8k16` lays
//! them (see the parent module). What a warp does across lanes (the products, shuffles) goes
//! through the warp's slice of an exchange buffer in shared memory ([`exchange_words`] f32 words
//! per warp, the buffer's length split evenly among the cube's warps), between two
//! `sync_cube`s: every call must be reached by all units of the cube.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::{K, LANES, M, N, Pair, pairs};

/// f32 words of the exchange buffer per warp for products of up to `products` B fragments
/// sharing one A: a whole A (16 × 16) and each B (16 × 8). Shuffles use the first 64.
pub(crate) fn exchange_words(products: usize) -> usize {
    M * K + products * K * N
}

/// `(row, column)` of element `nth` of `lane`'s fragment of `ident`, with `g = lane / 4` and
/// `t = lane % 4`: A `(g + 8·⌊nth/2⌋ mod 2, 2t + nth mod 2 + 8·⌊nth/4⌋)`, B `(2t + nth mod 2 +
/// 8·⌊nth/2⌋, g)`, C `(g + 8·⌊nth/2⌋, 2t + nth mod 2)`.
#[cube]
pub(crate) fn position(lane: usize, nth: usize, #[comptime] ident: MatrixIdent) -> (usize, usize) {
    let group = lane / 4;
    let thread = lane % 4;
    match ident {
        MatrixIdent::A => (group + 8 * (nth / 2 % 2), 2 * thread + nth % 2 + 8 * (nth / 4)),
        MatrixIdent::B => (2 * thread + nth % 2 + 8 * (nth / 2), group),
        MatrixIdent::Accumulator => (group + 8 * (nth / 2), 2 * thread + nth % 2),
    }
}

/// Index of the first exchange word of this unit's warp: the buffer split evenly among the
/// cube's warps.
#[cube]
fn warp_base(exchange: &SharedMemory<f32>) -> usize {
    let warps = CUBE_DIM as usize / LANES;
    UNIT_POS_X as usize / LANES * (exchange.len() / max(warps, 1))
}

/// Writes this lane's fragment of `ident` into the row-major `rows × cols` matrix at `base` of
/// `exchange`, as f32 (exact for f16 and bf16).
#[cube]
fn spill<F: Float>(
    fragment: &Array<Pair<F>>,
    exchange: &mut SharedMemory<f32>,
    base: usize,
    #[comptime] cols: usize,
    #[comptime] ident: MatrixIdent,
) {
    let lane = UNIT_POS_X as usize % LANES;
    let count = comptime![pairs(ident)];
    #[unroll]
    for p in 0..count {
        let pair = fragment[p];
        #[unroll]
        for e in 0..2usize {
            let (row, col) = position(lane, 2 * p + e, ident);
            exchange[base + row * cols + col] = f32::cast_from(pair[e]);
        }
    }
}

/// `c += a · b` for the warp: [`mma_each`] with one product.
#[cube]
pub(crate) fn mma<F: Float>(
    a: &Array<Pair<F>>,
    b: &Array<Pair<F>>,
    c: &mut Array<Pair<f32>>,
    exchange: &mut SharedMemory<f32>,
) {
    let a_base = warp_base(exchange);
    spill(a, exchange, a_base, K, MatrixIdent::A);
    spill(b, exchange, a_base + M * K, N, MatrixIdent::B);
    sync_cube();
    accumulate(c, exchange, a_base, a_base + M * K);
    sync_cube();
}

/// `c[first + i] += a · b[i]` for the warp: each lane spills its A and B elements to the warp's
/// exchange words, then sums the 16 products of each of its C elements in f32 (the products of
/// f16 or bf16 inputs are exact in f32; the order of the sum is not the tensor cores'). One
/// pair of `sync_cube`s for all the products.
#[cube]
pub(crate) fn mma_each<F: Float>(
    a: &Array<Pair<F>>,
    b: &Sequence<Array<Pair<F>>>,
    c: &mut Sequence<Array<Pair<f32>>>,
    #[comptime] first: usize,
    exchange: &mut SharedMemory<f32>,
) {
    let a_base = warp_base(exchange);
    spill(a, exchange, a_base, K, MatrixIdent::A);
    #[unroll]
    for i in 0..b.len() {
        spill(b.index(i), exchange, a_base + M * K + i * K * N, N, MatrixIdent::B);
    }
    sync_cube();
    #[unroll]
    for i in 0..b.len() {
        accumulate(c.index_mut(first + i), exchange, a_base, a_base + M * K + i * K * N);
    }
    sync_cube();
}

/// `c += A·B` for this lane's elements of `c`, A and B spilled row-major at `a_base` and
/// `b_base` of `exchange`.
#[cube]
fn accumulate(
    c: &mut Array<Pair<f32>>,
    exchange: &SharedMemory<f32>,
    a_base: usize,
    b_base: usize,
) {
    let lane = UNIT_POS_X as usize % LANES;
    let count = comptime![pairs(MatrixIdent::Accumulator)];
    #[unroll]
    for p in 0..count {
        let mut pair = c[p];
        #[unroll]
        for e in 0..2usize {
            let (row, col) = position(lane, 2 * p + e, MatrixIdent::Accumulator);
            let mut sum = pair[e];
            for k in 0..K {
                sum += exchange[a_base + row * K + k] * exchange[b_base + k * N + col];
            }
            pair[e] = sum;
        }
        c[p] = pair;
    }
}

/// `value` of the lane `lane ^ mask` of this unit's warp, both components, through the warp's
/// exchange words.
#[cube]
pub(crate) fn shuffle_xor(
    value: Pair<f32>,
    mask: u32,
    exchange: &mut SharedMemory<f32>,
) -> Pair<f32> {
    let lane = UNIT_POS_X % LANES as u32;
    let base = warp_base(exchange);
    exchange[base + 2 * lane as usize] = value[0];
    exchange[base + 2 * lane as usize + 1] = value[1];
    sync_cube();
    let other_lane = (lane ^ mask) as usize;
    let mut other = Pair::<f32>::empty();
    other[0] = exchange[base + 2 * other_lane];
    other[1] = exchange[base + 2 * other_lane + 1];
    sync_cube();
    other
}
