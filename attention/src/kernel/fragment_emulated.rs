//! The emulated path of the fragment seam (`super::fragment`): a warp is 32 units of the cube,
//! each holding its own fragment registers in local arrays, laid out as PTX's `m16n8k16` lays
//! them (see `super::fragment`). What a warp does across lanes (the product, shuffles) goes
//! through the warp's slice of an exchange buffer in shared memory, [`EXCHANGE_WORDS`] f32 words
//! per warp, between two `sync_cube`s: every call must be reached by all units of the cube.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::fragment::{K, LANES, M, N, Pair, pairs};

/// f32 words of the exchange buffer per warp: a whole A (16 × 16) and B (16 × 8). Shuffles use
/// the first 32.
pub(crate) const EXCHANGE_WORDS: usize = M * K + K * N;

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

/// Index of the first exchange word of this unit's warp.
#[cube]
fn warp_base() -> usize {
    UNIT_POS as usize / LANES * EXCHANGE_WORDS
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
    let lane = UNIT_POS as usize % LANES;
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

/// `c += a · b` for the warp: each lane spills its A and B elements to the warp's exchange
/// words, then sums the 16 products of each of its C elements in f32 (the products of f16 or
/// bf16 inputs are exact in f32; the order of the sum is not the tensor cores').
#[cube]
pub(crate) fn mma<F: Float>(
    a: &Array<Pair<F>>,
    b: &Array<Pair<F>>,
    c: &mut Array<Pair<f32>>,
    exchange: &mut SharedMemory<f32>,
) {
    let lane = UNIT_POS as usize % LANES;
    let a_base = warp_base();
    let b_base = a_base + M * K;
    spill(a, exchange, a_base, K, MatrixIdent::A);
    spill(b, exchange, b_base, N, MatrixIdent::B);
    sync_cube();
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
    sync_cube();
}

/// `value` of the lane `lane ^ mask` of this unit's warp, through the warp's exchange words.
#[cube]
pub(crate) fn shuffle_xor(value: f32, mask: u32, exchange: &mut SharedMemory<f32>) -> f32 {
    let lane = UNIT_POS % LANES as u32;
    let base = warp_base();
    exchange[base + lane as usize] = value;
    sync_cube();
    let other = exchange[base + (lane ^ mask) as usize];
    sync_cube();
    other
}
