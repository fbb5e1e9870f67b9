//! A linear layer's product for a few rows on Flex, `y = x·W + b` for `x: [rows, in]`: a
//! decoding step's projections. gemm computes a one-row product (its matrix-vector path) on the
//! calling thread alone, and such a step does little but read weights, so half of a 2-core
//! machine's memory bandwidth went unused (docs/benchmarks.md, "Decoding"). Here the output's
//! columns are split over the thread pool, each part one gemm call on its own thread.
//!
//! The parts are computed transposed, `yᵀ = Wᵀ·xᵀ`, so that each is a contiguous block of
//! output rows; for one row `yᵀ` is `y`. Each output is then a dot product of `x` with a column
//! of `W`, contiguous when `W` is a checkpoint's `[out, in]` storage viewed as `[in, out]`. For
//! that case, one row against such columns, [`Dots`] computes them itself: four columns at a
//! time, as chains of SIMD multiply-adds, it reads the weights at about 54 GB/s on two threads
//! of the 2-core machine of docs/benchmarks.md where gemm's matrix-vector path reads 48.
//! [`HalfDots`] does the same for weights kept in bf16 or f16, widened in registers (half the
//! bytes per decoded token).

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, TensorData, TensorMetadata, bf16, f16};
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::layout;
use super::math::dot;
use super::matmul::{Mat, matmul};

/// Rows of `x` up to which the product runs here; gemm's own threads take larger products.
pub const MAX_ROWS: usize = 16;

/// Weight elements a thread reads at least.
const PART: usize = 1 << 15;

/// `x·w (+ b)` for `x: [rows, in]`, `w: [in, out]` (f32, any non-negative strides) and
/// `b: [out]` → `[rows, out]`; also for one row against bf16 or f16 weights stored as a
/// checkpoint's `[out, in]` (viewed as `[in, out]`) with an f32 bias or none, widened in
/// registers ([`HalfDots`]). `None` for no rows or more than [`MAX_ROWS`], an empty weight, or
/// other dtypes and layouts.
pub fn few_rows(x: &FlexTensor, w: &FlexTensor, b: Option<&FlexTensor>) -> Option<FlexTensor> {
    let ([rows, k], [_, n]) = (x.shape().dims::<2>(), w.shape().dims::<2>());
    let strides = w.layout().strides();
    let columns = rows == 1 && strides == [1, k as isize];
    let half = matches!(w.dtype(), DType::BF16 | DType::F16)
        && columns
        && b.is_none_or(|b| b.dtype() == DType::F32);
    let fits = (1..=MAX_ROWS).contains(&rows)
        && n > 0
        && k > 0
        && x.dtype() == DType::F32
        && (w.dtype() == DType::F32 || half)
        && strides.iter().all(|&s| s >= 0);
    if !fits {
        return None;
    }
    let start = w.layout().start_offset();
    let (xs, bias) = (layout::read(x), b.map(layout::read));
    let parts = (k * n / PART).clamp(1, rayon::current_num_threads());
    let width = n.div_ceil(parts).next_multiple_of(4);
    let mut y_t = vec![0.0f32; n * rows];
    if columns {
        y_t.par_chunks_mut(width).enumerate().for_each(|(part, y)| {
            let range = part * width * k..(part * width + y.len()) * k;
            let arch = pulp::Arch::new();
            match w.dtype() {
                DType::BF16 => {
                    let w_t = &w.storage::<bf16>()[start..][range.clone()];
                    arch.dispatch(HalfDots { x: &xs, w_t, y: &mut *y });
                }
                DType::F16 => {
                    let w_t = &w.storage::<f16>()[start..][range.clone()];
                    arch.dispatch(HalfDots { x: &xs, w_t, y: &mut *y });
                }
                _ => {
                    let w_t = &w.storage::<f32>()[start..][range.clone()];
                    arch.dispatch(Dots { x: &xs, w_t, y: &mut *y });
                }
            }
            if let Some(bias) = &bias {
                y.iter_mut().zip(&bias[part * width..]).for_each(|(y, b)| *y += b);
            }
        });
        return Some(FlexTensor::from_data(TensorData::new(y_t, [1, n])));
    }
    let storage = &w.storage::<f32>()[start..];
    let strides = [strides[0] as usize, strides[1] as usize];
    let w_t = Mat::strided(storage, [k, n], strides).t();
    let x_t = Mat::new(&xs, rows, k).t();
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
    Some(match rows {
        1 => FlexTensor::from_data(TensorData::new(y_t, [1, n])),
        _ => FlexTensor::from_data(TensorData::new(y_t, [n, rows])).transpose(0, 1),
    })
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
        let Dots { x, w_t, y } = self;
        let k = x.len();
        let (x_head, x_tail) = S::as_simd_f32s(x);
        let mut columns = w_t.chunks_exact(4 * k);
        let mut outputs = y.chunks_exact_mut(4);
        for (four, y) in (&mut columns).zip(&mut outputs) {
            let rows: [_; 4] = std::array::from_fn(|r| S::as_simd_f32s(&four[r * k..(r + 1) * k]));
            let mut sums = [simd.splat_f32s(0.0); 4];
            for (i, &xv) in x_head.iter().enumerate() {
                for (sum, (head, _)) in sums.iter_mut().zip(&rows) {
                    *sum = simd.mul_add_e_f32s(xv, head[i], *sum);
                }
            }
            for ((y, sum), (_, tail)) in y.iter_mut().zip(sums).zip(&rows) {
                *y = simd.reduce_sum_f32s(sum) + dot(x_tail, tail);
            }
        }
        for (column, y) in columns.remainder().chunks_exact(k).zip(outputs.into_remainder()) {
            *y = dot(x, column);
        }
    }
}

/// A weight element that [`HalfDots`] widens to f32 in registers.
trait Widen: Copy {
    fn widen(self) -> f32;
}

impl Widen for bf16 {
    /// bf16 is the high half of an f32.
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
}

impl Widen for f16 {
    /// Exponent and mantissa moved into f32's places and rescaled by 2¹¹² (exact for normal and
    /// subnormal values), infinities and NaNs rebuilt, the sign put back: branch-free, so that
    /// the compiler vectorises it.
    #[inline(always)]
    fn widen(self) -> f32 {
        let h = u32::from(self.to_bits());
        let magnitude = h & 0x7fff;
        let finite = f32::from_bits(magnitude << 13) * f32::from_bits(0x7780_0000);
        let special = f32::from_bits(0x7f80_0000 | (magnitude & 0x3ff) << 13);
        let value = if magnitude >= 0x7c00 { special } else { finite };
        f32::from_bits(value.to_bits() | (h & 0x8000) << 16)
    }
}

/// `y[j] = x · w_t[j]` for the rows `w_t[j]` of `Wᵀ` in bf16 or f16, each `x.len()` elements,
/// contiguous: the weights are read at half the bytes of f32 and widened in registers, sums in
/// f32. Written as plain lanes, which the compiler vectorises under the instruction set that
/// `pulp` dispatches to.
struct HalfDots<'a, W> {
    x: &'a [f32],
    w_t: &'a [W],
    y: &'a mut [f32],
}

impl<W: Widen> WithSimd for HalfDots<'_, W> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        const LANES: usize = 16;
        let HalfDots { x, w_t, y } = self;
        for (column, y) in w_t.chunks_exact(x.len()).zip(y) {
            let mut lanes = [0.0f32; LANES];
            let (xs, ws) = (x.chunks_exact(LANES), column.chunks_exact(LANES));
            let tail: f32 =
                xs.remainder().iter().zip(ws.remainder()).map(|(a, w)| a * w.widen()).sum();
            for (x, w) in xs.zip(ws) {
                for ((lane, a), w) in lanes.iter_mut().zip(x).zip(w) {
                    *lane += a * w.widen();
                }
            }
            *y = lanes.iter().sum::<f32>() + tail;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Widen;
    use burn::tensor::{bf16, f16};

    /// Every bf16 and f16 value widens to the f32 the `half` crate gives (NaNs to NaNs).
    #[test]
    fn widening_is_exact_for_every_half_value() {
        for bits in 0..=u16::MAX {
            for (got, want) in [
                (bf16::from_bits(bits).widen(), bf16::from_bits(bits).to_f32()),
                (f16::from_bits(bits).widen(), f16::from_bits(bits).to_f32()),
            ] {
                let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
                assert!(same, "bits {bits:#06x}: widened {got:e}, want {want:e}");
            }
        }
    }
}
