//! RoPE on `Flex` as one pass: each row of `d` floats is read where it lies (any layout with a
//! unit-strided last dimension, e.g. the `[batch, N, H, d]` memory of a projection viewed as
//! `[batch, H, N, d]`) and written, turned, to the same place of a new buffer stored in the
//! input's physical order. The tensor-op form (`crate::rope::rotate_tensor_ops`) takes two
//! broadcast products, a concatenation and a sum, each a strided pass on Flex.

use std::borrow::Cow;

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, TensorMetadata};

use super::layout::{self, HEADS_OUTER, StridedRows};
use crate::rope::RopeAngles;

/// `x: [batch, H, N, d]` with row `n` turned by `angles` row `n` → the same shape and dtype,
/// stored in `x`'s physical order. Half precision is turned in f32.
pub fn rotate(x: FlexTensor, angles: &RopeAngles) -> FlexTensor {
    let shape = x.shape().dims::<4>();
    assert_eq!(shape[3], 2 * angles.half, "RoPE built for head_dim {}", 2 * angles.half);
    assert_eq!(shape[2], angles.rows, "RoPE got {} positions for {} rows", angles.rows, shape[2]);
    let dtype = x.dtype();
    let (source, order) = match StridedRows::of(&x) {
        Some(_) => (x.clone(), layout::order_of(&x)),
        None => (
            layout::stored(layout::read(&x).into_owned(), shape, HEADS_OUTER, DType::F32),
            HEADS_OUTER,
        ),
    };
    let rows = StridedRows::of(&source).expect("an f32 tensor with unit-strided rows by now");
    let [batch, heads, n, d] = shape;
    let [sb, sh, sn, _] = layout::strides_in(shape, order);
    let mut out = vec![0.0f32; batch * heads * n * d];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..n {
                let at = b * sb + h * sh + i * sn;
                turn(rows.row(b, h, i), &mut out[at..at + d], angles, i);
            }
        }
    }
    layout::stored(out, shape, order, dtype)
}

/// `rows` (contiguous, `d` floats each) each turned by `rope`'s one row of angles if given, else
/// as they are: a decode step's query or new key, all at its one position.
pub(super) fn turned<'a>(rows: Cow<'a, [f32]>, rope: Option<&RopeAngles>) -> Cow<'a, [f32]> {
    let Some(angles) = rope else {
        return rows;
    };
    debug_assert_eq!(angles.rows, 1, "one position's angles");
    let mut rows = rows.into_owned();
    let mut row = vec![0.0; 2 * angles.half];
    for y in rows.chunks_exact_mut(row.len()) {
        row.copy_from_slice(y);
        turn(&row, y, angles, 0);
    }
    Cow::Owned(rows)
}

/// `y` = `x` (one row of `d` floats) turned by `angles` row `i`: pair `k` is dimensions `k` and
/// `k + d/2`.
fn turn(x: &[f32], y: &mut [f32], angles: &RopeAngles, i: usize) {
    let half = angles.half;
    let (x1, x2) = x.split_at(half);
    let (y1, y2) = y.split_at_mut(half);
    let (cos, sin) = (&angles.cos[i * half..][..half], &angles.sin[i * half..][..half]);
    for k in 0..half {
        y1[k] = x1[k] * cos[k] - x2[k] * sin[k];
        y2[k] = x2[k] * cos[k] + x1[k] * sin[k];
    }
}
