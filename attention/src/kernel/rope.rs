//! RoPE as one CubeCL launch (docs/semantics.md §4; reference: the tensor ops,
//! [`crate::rope::rotate_tensor_ops`]). As tensor ops a rotation is two narrows, a
//! concatenation (two slice-assigns) and a fused product: five launches for q and five for k in
//! every layer of every decoding step and training pass; here it is one each. Each row is read
//! where it lies (any strides, e.g. the `[batch, N, H, d]` memory of a projection viewed as
//! `[batch, H, N, d]`) and written, turned, to the same place of a new buffer stored in the
//! input's physical order, so that the heads merge back without a copy. Half precision is
//! turned in f32 and rounded once. Rows are read and written in vectors (the widest load the
//! layout allows that divides `d/2`).

use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::kernel::cmma::load_vector;
use crate::kernel::config::{empty_like, upload};
use crate::kernel::prologue::offset;
use crate::rope::RopeAngles;

/// Threads per cube along a row's dimension pairs (a row of more pairs loops).
pub(crate) const PAIRS: usize = 32;

/// Rows per cube.
pub(crate) const ROWS: usize = 8;

/// `x: [batch, H, N, d]` → `out` of the same shape: pair `k` of row `n` (dimensions `k` and
/// `k + d/2`) turned by `angles`, `[2, N, d/2]` f32 (every `cos θ`, then every `sin θ`). Each
/// thread turns a vector of `N` consecutive pairs, read and written as two vectors (16-byte
/// loads of bf16 at `N` = 8). Grid: (row blocks of [`ROWS`], H, batch).
#[cube(launch)]
pub(crate) fn rope_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    angles: &Array<f32>,
    #[define(F)] _dtype: StorageType,
) {
    let rows = x.shape(2);
    let row = CUBE_POS_X as usize * ROWS + UNIT_POS_Y as usize;
    if row < rows {
        let width = x.vector_size();
        let half = angles.len() / (2 * rows);
        let (batch, head) = (CUBE_POS_Z as usize, CUBE_POS_Y as usize);
        let from = offset(x, batch, head, row);
        let to = offset(out, batch, head, row);
        let (cosines, sines) = (row * half, (rows + row) * half);
        // Unit strides wherever the vectors are wider than one element.
        let (step_x, step_out) = (x.stride(3), out.stride(3));
        let vectors = half / width;
        for round in 0..vectors.div_ceil(PAIRS) {
            let k = (UNIT_POS_X as usize + round * PAIRS) * width;
            if k < half {
                let first = x[(from + k * step_x) / width];
                let second = x[(from + (k + half) * step_x) / width];
                let mut turned_first = Vector::<F, N>::empty();
                let mut turned_second = Vector::<F, N>::empty();
                #[unroll]
                for i in 0..width {
                    let (cos, sin) = (angles[cosines + k + i], angles[sines + k + i]);
                    let (a, b) = (f32::cast_from(first[i]), f32::cast_from(second[i]));
                    turned_first[i] = F::cast_from(a * cos - b * sin);
                    turned_second[i] = F::cast_from(b * cos + a * sin);
                }
                out[(to + k * step_out) / width] = turned_first;
                out[(to + (k + half) * step_out) / width] = turned_second;
            }
        }
    }
}

/// The fused rotation on a CubeCL backend ([`crate::rope::RotateKernel`]): `x: [batch, H, N,
/// d]`, row `n` turned by `angles` row `n` → the same shape and dtype, stored in `x`'s physical
/// order.
pub(crate) fn rotate<R: CubeRuntime>(x: CubeTensor<R>, angles: &RopeAngles) -> CubeTensor<R> {
    let [batch, heads, rows, dim] = x.shape().dims();
    assert_eq!(dim, 2 * angles.half, "RoPE built for head_dim {} got {dim}", 2 * angles.half);
    assert_eq!(rows, angles.rows, "RoPE got {} positions for {rows} rows", angles.rows);
    let (client, device, dtype) = (x.client.clone(), x.device.clone(), x.dtype);
    let out = empty_like(&x);
    let table: Vec<f32> = angles.cos.iter().chain(&angles.sin).copied().collect();
    // The widest load both tensors allow that also divides a half row.
    let mut width = load_vector(&[&x, &out]);
    while !angles.half.is_multiple_of(width) {
        width /= 2;
    }
    rope_kernel::launch::<R>(
        &client,
        CubeCount::Static(rows.div_ceil(ROWS) as u32, heads as u32, batch as u32),
        CubeDim::new_2d(PAIRS as u32, ROWS as u32),
        width,
        x.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        upload(&client, &device, f32::as_bytes(&table), DType::F32).into_array_arg(),
        dtype.into(),
    );
    out
}
