//! Moving tensors between `Flex`'s strided layouts and the kernels' contiguous row-major f32
//! buffers, a row of the last dimension at a time (reading any rank, writing 4-D).
//!
//! A layer's q, k, v come out of its projections as `[batch, N, H, d]` memory viewed as
//! `[batch, H, N, d]` (a `swap_dims`), and it merges the heads of `o` back from that same order.
//! Flex copies such views element by element through its strided iterator; here every row of
//! `d` floats is one `memcpy`. Reading accepts any layout whose last dimension is unit-strided;
//! writing puts the kernel's rows into the physical dimension order a caller asks for and
//! returns the logical `[batch, H, N, d]` view of it, so that a following `swap_dims` and
//! `reshape` copy nothing.

use std::borrow::Cow;

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, TensorData, TensorMetadata};

/// The order `[B, H, N, d]` is stored in: contiguous, what the kernels' buffers use.
pub const HEADS_OUTER: [usize; 4] = [0, 1, 2, 3];

/// The order `[B, N, H, d]` is stored in: the projections' output, read head by head.
pub const HEADS_INNER: [usize; 4] = [0, 2, 1, 3];

/// The tensor's elements in logical row-major order as f32: borrowed when it is a contiguous
/// f32 tensor, copied a row at a time when it is an f32 view of any rank with a unit-strided
/// last dimension and non-negative strides (e.g. one half of a joined gate|up product), else
/// converted through Burn's data path (half precision, flips).
pub fn read(t: &FlexTensor) -> Cow<'_, [f32]> {
    if let Some(slice) = t.as_slice::<f32>() {
        return Cow::Borrowed(slice);
    }
    let (shape, strides) = (t.shape(), t.layout().strides());
    let rows_fit = t.dtype() == DType::F32
        && strides.last().is_some_and(|&s| s == 1)
        && strides.iter().all(|&s| s >= 0);
    if !rows_fit {
        let data = t.clone().into_data().convert::<f32>();
        return Cow::Owned(data.into_vec::<f32>().expect("converted to f32"));
    }
    let (storage, d) = (t.storage::<f32>(), shape[shape.num_dims() - 1]);
    let leading: Vec<(usize, usize)> =
        (0..shape.num_dims() - 1).map(|axis| (shape[axis], strides[axis] as usize)).collect();
    let rows: usize = leading.iter().map(|&(extent, _)| extent).product();
    if rows * d == 0 {
        return Cow::Owned(Vec::new());
    }
    let mut out = Vec::with_capacity(rows * d);
    // The row's index along each leading axis, last axis fastest.
    let mut index = vec![0; leading.len()];
    for _ in 0..rows {
        let at = t.layout().start_offset()
            + index.iter().zip(&leading).map(|(&i, &(_, stride))| i * stride).sum::<usize>();
        out.extend_from_slice(&storage[at..at + d]);
        for (i, &(extent, _)) in index.iter_mut().zip(&leading).rev() {
            *i += 1;
            if *i < extent {
                break;
            }
            *i = 0;
        }
    }
    Cow::Owned(out)
}

/// The rows of a 4-D f32 tensor read in place: its storage and the strides of its first three
/// dimensions, for a layout whose last dimension is unit-strided and whose strides are all
/// non-negative.
pub struct StridedRows<'a> {
    storage: &'a [f32],
    start: usize,
    strides: [usize; 3],
    /// The logical shape `[batch, H, N, d]`.
    pub shape: [usize; 4],
}

impl<'a> StridedRows<'a> {
    /// `t`'s rows, or `None` when it is not such an f32 tensor.
    pub fn of(t: &'a FlexTensor) -> Option<Self> {
        let strides = t.layout().strides();
        let fits = t.dtype() == DType::F32
            && strides.len() == 4
            && strides[3] == 1
            && strides.iter().all(|&s| s >= 0);
        fits.then(|| StridedRows {
            storage: t.storage::<f32>(),
            start: t.layout().start_offset(),
            strides: [strides[0], strides[1], strides[2]].map(|s| s as usize),
            shape: t.shape().dims::<4>(),
        })
    }

    /// Row `(b, h, n)`: its `d` floats.
    pub fn row(&self, b: usize, h: usize, n: usize) -> &'a [f32] {
        let [sb, sh, sn] = self.strides;
        let at = self.start + b * sb + h * sh + n * sn;
        &self.storage[at..at + self.shape[3]]
    }
}

/// The physical order of `t`'s four dimensions, outermost first: [`HEADS_INNER`] for a
/// `swap_dims(1, 2)` view of `[B, N, H', d]` memory holding its H heads among H' ≥ H (the
/// projections' heads, or one part of the joined q|k|v product), [`HEADS_OUTER`] for anything
/// else (contiguous or not), so that outputs and gradients come back in the order their input
/// had.
pub fn order_of(t: &FlexTensor) -> [usize; 4] {
    let [b, h, n, d] = t.shape().dims::<4>();
    let &[sb, sh, sn, sd] = t.layout().strides() else { return HEADS_OUTER };
    let row = sn.max(0) as usize;
    let matches = (sd == 1 || d == 1)
        && sh == d as isize
        && row >= h * d
        && (b == 1 || sb.max(0) as usize >= n * row);
    match matches && h > 1 && n > 1 {
        true => HEADS_INNER,
        false => HEADS_OUTER,
    }
}

/// The logical `[batch, H, N, d]` tensor of `dtype` whose rows are `values` (row-major in that
/// logical order), stored in physical dimension order `order` (outermost first).
pub fn write(values: Vec<f32>, shape: [usize; 4], order: [usize; 4], dtype: DType) -> FlexTensor {
    let rows = match order {
        HEADS_OUTER => values,
        _ => permuted_rows(&values, shape, order),
    };
    stored(rows, shape, order, dtype)
}

/// The logical `[batch, H, N, d]` tensor of `dtype` over `rows`, which hold its elements in
/// physical order `order` (outermost first).
pub fn stored(rows: Vec<f32>, shape: [usize; 4], order: [usize; 4], dtype: DType) -> FlexTensor {
    let physical = order.map(|dim| shape[dim]);
    let tensor = FlexTensor::from_data(TensorData::new(rows, physical).convert_dtype(dtype));
    tensor.permute(&inverse(order))
}

/// The stride of each logical dimension of `shape` stored contiguously in physical order
/// `order`.
pub fn strides_in(shape: [usize; 4], order: [usize; 4]) -> [usize; 4] {
    let mut strides = [0; 4];
    let mut stride = 1;
    for &dim in order.iter().rev() {
        strides[dim] = stride;
        stride *= shape[dim];
    }
    strides
}

/// `values` (logical `[B, H, N, d]`, row-major) laid out in physical order `order`, a row of `d`
/// floats at a time; `order` keeps the last dimension last.
fn permuted_rows(values: &[f32], shape: [usize; 4], order: [usize; 4]) -> Vec<f32> {
    assert_eq!(order[3], 3, "the rows stay rows");
    let [_, h, n, d] = shape;
    let [sb, sh, sn, _] = strides_in(shape, order);
    let mut out = vec![0.0; values.len()];
    for (index, row) in values.chunks_exact(d).enumerate() {
        let (bi, hi, ni) = (index / (h * n), index / n % h, index % n);
        let at = bi * sb + hi * sh + ni * sn;
        out[at..at + d].copy_from_slice(row);
    }
    out
}

/// The permutation that undoes `order`.
fn inverse(order: [usize; 4]) -> [usize; 4] {
    let mut inverse = [0; 4];
    for (position, &dim) in order.iter().enumerate() {
        inverse[dim] = position;
    }
    inverse
}
