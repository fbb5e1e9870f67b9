//! The cooperative copy every kernel of the core makes before it scores a tile: rows of two
//! tensors of one head moved from global into shared memory, as f32.

use cubecl::prelude::*;

use crate::kernel::config::ROWS;

/// Copies rows `first … first + tile − 1` of `a` and `b` (`[batch, heads, rows, d]`, read as
/// vectors of `N` elements along `d`: `kernel::cmma::load_vector`; `a_base`/`b_base` address the
/// batch and head) into `a_tile` and `b_tile` (`tile × d`, row-major), with zeros for rows at
/// or past `valid`. The cube's [`ROWS`] threads share the copy, a vector each in turn: call
/// `sync_cube` before reading the tiles.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_tiles<F: Float, N: Size>(
    a: &Tensor<Vector<F, N>>,
    a_base: usize,
    b: &Tensor<Vector<F, N>>,
    b_base: usize,
    first: usize,
    valid: usize,
    a_tile: &mut SharedMemory<f32>,
    b_tile: &mut SharedMemory<f32>,
    #[comptime] tile: usize,
    #[comptime] dim: usize,
) {
    let width = a.vector_size();
    let (a_rows, b_rows) = (a.stride(2), b.stride(2));
    let mut e = UNIT_POS_X as usize * width;
    while e < tile * dim {
        let row = first + e / dim;
        let c = e % dim;
        let mut a_value = Vector::<F, N>::empty().fill(F::cast_from(0.0f32));
        let mut b_value = Vector::<F, N>::empty().fill(F::cast_from(0.0f32));
        if row < valid {
            a_value = a[(a_base + row * a_rows + c) / width];
            b_value = b[(b_base + row * b_rows + c) / width];
        }
        #[unroll]
        for i in 0..width {
            a_tile[e + i] = f32::cast_from(a_value[i]);
            b_tile[e + i] = f32::cast_from(b_value[i]);
        }
        e += ROWS * width;
    }
}
