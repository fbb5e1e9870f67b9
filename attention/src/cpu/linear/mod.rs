//! A linear layer's product for a few rows on Flex, `y = x·W + b` for `x: [rows, in]`: a
//! decoding step's projections. gemm computes a one-row product (its matrix-vector path) on the
//! calling thread alone, and such a step does little but read weights, so one thread leaves half
//! of a 2-core machine's memory bandwidth unused (docs/benchmarks.md, "Decoding a
//! pretrained-format model"). Here the output's columns are split over the thread pool, each
//! part one gemm call on its own thread.
//!
//! The parts are computed transposed, `yᵀ = Wᵀ·xᵀ`, so that each is a contiguous block of
//! output rows; for one row `yᵀ` is `y`. Each output is then a dot product of `x` with a column
//! of `W`, contiguous when `W` is a checkpoint's `[out, in]` storage viewed as `[in, out]`. For
//! that case, one row against such columns, [`Dots`] computes them itself: four columns at a
//! time, as chains of SIMD multiply-adds, it reads the weights faster than gemm's
//! matrix-vector path.
//! Weights kept in bf16 or f16 are read by [`half_weights`], weights packed in ggml's blocks by
//! [`packed`], over the same split.

use burn::backend::flex::FlexTensor;
use std::ops::Range;

use burn::tensor::{DType, TensorData, TensorMetadata};
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::layout;
use super::math::dots;
use super::matmul::{Mat, matmul};
use crate::packed::{BLOCK, Packing};

mod half_weights;
pub mod isa;
mod packed;

pub use packed::{packed_tensor, unpacked_tensor};

/// Rows of `x` up to which the product runs here; gemm's own threads take larger products.
pub const MAX_ROWS: usize = 16;

/// Weight elements a thread reads at least.
const PART: usize = 1 << 15;

/// `x·w (+ b)` for `x: [rows, in]` (f32), `w: [in, out]` (any non-negative strides) and
/// `b: [out]` (f32) → `[rows, out]` in f32, where this is faster than Burn's matmul: f32
/// weights for up to [`MAX_ROWS`] rows; bf16 or f16 weights stored as a checkpoint's
/// `[out, in]` (viewed as `[in, out]`) for any rows, widened as they are read
/// ([`half_weights::product`]); weights packed in blocks ([`crate::packed`]) stored likewise,
/// for any rows ([`packed::product`]). `None` for other dtypes and layouts, an empty operand,
/// or more f32 rows.
pub fn product(x: &FlexTensor, w: &FlexTensor, b: Option<&FlexTensor>) -> Option<FlexTensor> {
    let ([rows, k], [_, n]) = (x.shape().dims::<2>(), w.shape().dims::<2>());
    let strides = w.layout().strides();
    let fits = rows > 0
        && n > 0
        && k > 0
        && x.dtype() == DType::F32
        && b.is_none_or(|b| b.dtype() == DType::F32)
        && strides.iter().all(|&s| s >= 0);
    let columns = strides == [1, k as isize];
    let from_start = w.layout().start_offset() == 0;
    match w.dtype() {
        DType::F32 if fits && rows <= MAX_ROWS => Some(few_rows(x, w, b)),
        DType::BF16 | DType::F16 if fits && columns => Some(half_weights::product(x, w, b)),
        dtype => match Packing::of(dtype) {
            Some(packing) if fits && columns && from_start && k % BLOCK == 0 => {
                Some(packed::product(x, w, b, packing))
            }
            _ => None,
        },
    }
}

/// [`product`] with f32 weights and at most [`MAX_ROWS`] rows.
fn few_rows(x: &FlexTensor, w: &FlexTensor, b: Option<&FlexTensor>) -> FlexTensor {
    let ([rows, k], [_, n]) = (x.shape().dims::<2>(), w.shape().dims::<2>());
    let strides = w.layout().strides();
    let storage = &w.storage::<f32>()[w.layout().start_offset()..];
    let (xs, bias) = (layout::read(x), b.map(layout::read));
    if rows == 1 && strides == [1, k as isize] {
        return one_row(n, k, bias.as_deref(), |outputs, y| {
            let w_t = &storage[outputs.start * k..outputs.end * k];
            pulp::Arch::new().dispatch(Dots { x: &xs, w_t, y });
        });
    }
    let strides = [strides[0] as usize, strides[1] as usize];
    let w_t = Mat::strided(storage, [k, n], strides).t();
    let x_t = Mat::new(&xs, rows, k).t();
    let parts = (k * n / PART).clamp(1, rayon::current_num_threads());
    let width = n.div_ceil(parts).next_multiple_of(4);
    let mut y_t = vec![0.0f32; n * rows];
    y_t.par_chunks_mut(width * rows).enumerate().for_each(|(part, dst)| {
        let first = part * width;
        let outputs = dst.len() / rows;
        if let Some(bias) = &bias {
            for (row, &b) in dst.chunks_exact_mut(rows).zip(&bias[first..first + outputs]) {
                row.fill(b);
            }
        }
        matmul(dst, w_t.row_range(first..first + outputs), x_t, 1.0, bias.is_some());
    });
    match rows {
        1 => FlexTensor::from_data(TensorData::new(y_t, [1, n])),
        _ => FlexTensor::from_data(TensorData::new(y_t, [n, rows])).transpose(0, 1),
    }
}

/// One row's `[1, n]` outputs `y = x·W (+ bias)`, split in parts over the thread pool: `dots`
/// computes the outputs of a range (a multiple of 4 long, but for the last) into its slice.
fn one_row(
    n: usize,
    k: usize,
    bias: Option<&[f32]>,
    dots: impl Fn(Range<usize>, &mut [f32]) + Sync,
) -> FlexTensor {
    let parts = (k * n / PART).clamp(1, rayon::current_num_threads());
    let width = n.div_ceil(parts).next_multiple_of(4);
    let mut y = vec![0.0f32; n];
    y.par_chunks_mut(width).enumerate().for_each(|(part, y)| {
        let outputs = part * width..part * width + y.len();
        dots(outputs.clone(), y);
        if let Some(bias) = bias {
            y.iter_mut().zip(&bias[outputs]).for_each(|(y, b)| *y += b);
        }
    });
    FlexTensor::from_data(TensorData::new(y, [1, n]))
}

/// Several rows' `[rows, out]` outputs `y = x·W (+ bias)`, computed transposed, `[out, rows]`,
/// by panels of `panel` outputs over the thread pool: `fill` adds the products of a panel's
/// outputs (a range) into its slice of `yᵀ`, which holds the bias where there is one. The
/// transposed `[rows, out]` view of `yᵀ`.
fn by_panels(
    (n, rows): (usize, usize),
    panel: usize,
    bias: Option<&[f32]>,
    fill: impl Fn(Range<usize>, &mut [f32]) + Sync,
) -> FlexTensor {
    let mut y_t = vec![0.0f32; n * rows];
    y_t.par_chunks_mut(panel * rows).enumerate().for_each(|(part, dst)| {
        let outputs = part * panel..part * panel + dst.len() / rows;
        if let Some(bias) = bias {
            for (row, &b) in dst.chunks_exact_mut(rows).zip(&bias[outputs.clone()]) {
                row.fill(b);
            }
        }
        fill(outputs, dst);
    });
    FlexTensor::from_data(TensorData::new(y_t, [n, rows])).transpose(0, 1)
}

/// `y[j] = dot(row j)` for the rows of `rows` (`len` elements each, `y.len()` of them), two at
/// a time: row `j` of the first half beside row `j` of the second, two sequential streams,
/// which keep more reads in flight than one stream or neighbouring rows
/// (docs/architecture/kernels.md, "What keeps decoding fast"); the odd row last, alone.
#[inline(always)]
fn by_halves<T>(
    rows: &[T],
    len: usize,
    y: &mut [f32],
    mut pair: impl FnMut([&[T]; 2]) -> [f32; 2],
    mut one: impl FnMut(&[T]) -> f32,
) {
    let half = y.len() / 2;
    let (first, second) = rows[..y.len() * len].split_at(half * len);
    let (y_first, y_second) = y.split_at_mut(half);
    let pairs = first.chunks_exact(len).zip(second.chunks_exact(len));
    for ((a, b), (y_a, y_b)) in pairs.zip(y_first.iter_mut().zip(y_second.iter_mut())) {
        [*y_a, *y_b] = pair([a, b]);
    }
    if let (Some(last), Some(y)) = (second.chunks_exact(len).nth(half), y_second.get_mut(half)) {
        *y = one(last);
    }
}

/// `y[j] = x · w_t[j]` for the rows `w_t[j]` of `Wᵀ`, each `x.len()` floats, contiguous.
struct Dots<'a> {
    x: &'a [f32],
    w_t: &'a [f32],
    y: &'a mut [f32],
}

impl WithSimd for Dots<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        dots(simd, self.x, self.w_t, self.y);
    }
}
