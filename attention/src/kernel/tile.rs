//! The cooperative copy every kernel of the core makes before it scores a tile: rows of two
//! tensors of one head moved from global into shared memory, as f32.

use cubecl::prelude::*;

use super::config::ROWS;

/// Copies rows `first … first + tile − 1` of `a` and `b` (`[batch, heads, rows, d]`, any
/// strides; `a_base`/`b_base` address the batch and head) into `a_tile` and `b_tile`
/// (`tile × d`, row-major), with zeros for rows at or past `valid`. The cube's [`ROWS`] threads
/// share the copy: call `sync_cube` before reading the tiles.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_tiles<F: Float>(
    a: &Tensor<F>,
    a_base: usize,
    b: &Tensor<F>,
    b_base: usize,
    first: usize,
    valid: usize,
    a_tile: &mut SharedMemory<f32>,
    b_tile: &mut SharedMemory<f32>,
    #[comptime] tile: usize,
    #[comptime] dim: usize,
) {
    let (a_rows, a_columns) = (a.stride(2), a.stride(3));
    let (b_rows, b_columns) = (b.stride(2), b.stride(3));
    let mut e = UNIT_POS_X as usize;
    while e < tile * dim {
        let row = first + e / dim;
        let c = e % dim;
        a_tile[e] = 0.0;
        b_tile[e] = 0.0;
        if row < valid {
            a_tile[e] = f32::cast_from(a[a_base + row * a_rows + c * a_columns]);
            b_tile[e] = f32::cast_from(b[b_base + row * b_rows + c * b_columns]);
        }
        e += ROWS;
    }
}
