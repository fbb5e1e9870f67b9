//! The prologue the kernels share: where a cube's rows sit in the grid, the head's window and
//! ALiBi slope, and loading a row of a tensor into registers.
//!
//! The forward and dQ kernels (portable and tensor-core) run on a grid of (query blocks, H,
//! batch): [`query_block`] decodes a cube's block, its head's window and ALiBi slope, and
//! [`block_key_tiles`] the key tiles its rows see. Every kernel, the dK/dV and decode kernels
//! too, addresses its `[batch, heads, rows, d]` tensors through [`offset`], and the portable
//! ones keep their rows in registers, read with [`load_row`] and started with [`zero_row`].

use cubecl::prelude::*;

use crate::kernel::config::Call;
use crate::kernel::reach::{Tiles, key_tiles};
use crate::kernel::visibility::{Window, load_window};

/// A cube of a query-block kernel: its rows `block … block + rows − 1` of head `head` of batch
/// element `batch`, and the row of this unit.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct QueryBlock {
    pub batch: usize,
    /// The query head, and the kv head its GQA group shares.
    pub head: usize,
    pub kv_head: usize,
    /// Query rows `N_q`.
    pub q_len: usize,
    /// The block's first row.
    pub block: usize,
    /// This unit's row, `block + unit`.
    pub row: usize,
    /// This unit owns a row (`unit < rows`) that is a query row (not padding past `N_q`).
    pub live: bool,
    /// The row's absolute position.
    pub position: u32,
    /// The head's window.
    pub window: Window,
    /// The head's ALiBi slope (0 without ALiBi).
    pub slope: f32,
}

/// The block of the cube at grid position (block, head, batch) of `q: [batch, H, N_q, d]`,
/// `k: [batch, H_kv, N_k, d]`, with `rows` rows per block.
#[cube]
pub(crate) fn query_block<T: CubePrimitive>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: &Call,
    #[comptime] rows: usize,
) -> QueryBlock {
    query_block_of_head(q, k, windows, slopes, call, CUBE_POS_Y as usize, rows)
}

/// [`query_block`] for a grid whose second axis is not the head itself: the cube works on
/// `head` (a launch that orders its heads, longest window first).
#[cube]
pub(crate) fn query_block_of_head<T: CubePrimitive>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    windows: &Array<u32>,
    slopes: &Array<f32>,
    call: &Call,
    head: usize,
    #[comptime] rows: usize,
) -> QueryBlock {
    let unit = UNIT_POS_X as usize;
    let q_len = q.shape(2);
    let block = CUBE_POS_X as usize * rows;
    let row = block + unit;
    QueryBlock {
        batch: CUBE_POS_Z as usize,
        head,
        kv_head: head / (q.shape(1) / k.shape(1)),
        q_len,
        block,
        row,
        live: unit < rows && row < q_len,
        position: call.query_offset + row as u32,
        window: load_window(windows, head),
        slope: slopes[head],
    }
}

/// The key tiles of `tile` keys that the `rows` rows of `block` can see.
#[cube]
pub(crate) fn block_key_tiles(
    block: &QueryBlock,
    call: &Call,
    #[comptime] rows: usize,
    #[comptime] tile: usize,
    #[comptime] causal: bool,
) -> Tiles {
    let first = call.query_offset + block.block as u32;
    let last = call.query_offset + (min(block.block + rows, block.q_len) - 1) as u32;
    key_tiles(&block.window, first, last, call, tile, causal)
}

/// The index of element 0 of row `row` of head `head` of batch element `batch` of a
/// `[batch, heads, rows, …]` tensor.
#[cube]
pub(crate) fn offset<T: CubePrimitive>(
    tensor: &Tensor<T>,
    batch: usize,
    head: usize,
    row: usize,
) -> usize {
    batch * tensor.stride(0) + head * tensor.stride(1) + row * tensor.stride(2)
}

/// Row `dim` values of `tensor` from `base` (along its last axis, read as vectors of `N`
/// elements: `kernel::cmma::load_vector`) into `into` as f32; zeros where the row is not `live`.
#[cube]
pub(crate) fn load_row<F: Float, N: Size>(
    tensor: &Tensor<Vector<F, N>>,
    base: usize,
    live: bool,
    into: &mut Array<f32>,
    #[comptime] dim: usize,
) {
    let width = tensor.vector_size();
    for step in 0..comptime![dim / width] {
        let mut value = Vector::<F, N>::empty().fill(F::cast_from(0.0f32));
        if live {
            value = tensor[base / width + step];
        }
        #[unroll]
        for i in 0..width {
            into[step * width + i] = f32::cast_from(value[i]);
        }
    }
}

/// `dim` zeros into `into`: an accumulator's start.
#[cube]
pub(crate) fn zero_row(into: &mut Array<f32>, #[comptime] dim: usize) {
    for c in 0..dim {
        into[c] = 0.0;
    }
}
