//! A linear layer's product on Flex with its weights kept in bf16 or f16 and everything else
//! in f32 (a checkpoint loaded with `--weights bf16`): the weights are the only values rounded,
//! and they are widened to f32 as they are read, never as a whole tensor. Flex's own matmul
//! picks its kernel from the left operand's dtype (an f32 × bf16 product would read the bf16
//! bytes as f32) and widens whole tensors, and gemm has no bf16: hence these kernels.
//!
//! The weights are a checkpoint's `[out, in]` storage viewed as `[in, out]`, so each output's
//! weights are contiguous. One row (a decoding step) is a dot product per output, over the
//! output split of [`super::linear::one_row`], widened in registers ([`HalfDots`]): half the
//! bytes per decoded token of f32 weights. More rows (a prompt's prefill) go panel by panel: a
//! block of outputs' weights is widened into a buffer of its own thread, then multiplied by
//! gemm, so no more than a panel per thread is ever in f32.

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, TensorData, TensorMetadata, bf16, f16};
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::layout;
use super::linear::{PART, one_row};
use super::matmul::{Mat, matmul};

/// Outputs per panel at least, so that each gemm call has rows to tile.
const PANEL: usize = 64;

/// `x·w (+ b)` for `x: [rows, in]` (f32), `w: [in, out]` in bf16 or f16 with strides
/// `[1, in]` (a checkpoint's `[out, in]` transposed) and `b: [out]` (f32) → `[rows, out]` in
/// f32. The caller ([`super::linear::product`]) has checked the dtypes, layout and sizes.
pub fn product(x: &FlexTensor, w: &FlexTensor, b: Option<&FlexTensor>) -> FlexTensor {
    let ([_, k], [_, n]) = (x.shape().dims::<2>(), w.shape().dims::<2>());
    let elements = w.layout().start_offset()..w.layout().start_offset() + n * k;
    match w.dtype() {
        DType::BF16 => weights(x, &w.storage::<bf16>()[elements], b),
        _ => weights(x, &w.storage::<f16>()[elements], b),
    }
}

/// [`product`] on the weights' elements `w_t`: `out` rows of `in` elements.
fn weights<W: Widen>(x: &FlexTensor, w_t: &[W], b: Option<&FlexTensor>) -> FlexTensor {
    let [rows, k] = x.shape().dims::<2>();
    let (xs, bias) = (layout::read(x), b.map(layout::read));
    let n = w_t.len() / k;
    if rows == 1 {
        return one_row(n, k, bias.as_deref(), |outputs, y| {
            let w_t = &w_t[outputs.start * k..outputs.end * k];
            pulp::Arch::new().dispatch(HalfDots { x: &xs, w_t, y });
        });
    }
    let x_t = Mat::new(&xs, rows, k).t();
    let panel = (PART / k).max(PANEL);
    let mut y_t = vec![0.0f32; n * rows];
    y_t.par_chunks_mut(panel * rows).enumerate().for_each(|(part, dst)| {
        let outputs = part * panel..part * panel + dst.len() / rows;
        let wide: Vec<f32> =
            w_t[outputs.start * k..outputs.end * k].iter().map(|w| w.widen()).collect();
        if let Some(bias) = &bias {
            for (row, &b) in dst.chunks_exact_mut(rows).zip(&bias[outputs.clone()]) {
                row.fill(b);
            }
        }
        matmul(dst, Mat::new(&wide, outputs.len(), k), x_t, 1.0, bias.is_some());
    });
    FlexTensor::from_data(TensorData::new(y_t, [n, rows])).transpose(0, 1)
}

/// A weight element widened to f32 in registers.
trait Widen: Copy + Sync {
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
/// contiguous, sums in f32. Written as plain lanes, which the compiler vectorises under the
/// instruction set that `pulp` dispatches to; four independent groups of 16 lanes, so that
/// consecutive multiply-adds do not wait on one another.
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
        const GROUPS: usize = 4;
        let HalfDots { x, w_t, y } = self;
        for (column, y) in w_t.chunks_exact(x.len()).zip(y) {
            let mut lanes = [[0.0f32; LANES]; GROUPS];
            let (xs, ws) = (x.chunks_exact(LANES * GROUPS), column.chunks_exact(LANES * GROUPS));
            let tail: f32 =
                xs.remainder().iter().zip(ws.remainder()).map(|(a, w)| a * w.widen()).sum();
            for (x, w) in xs.zip(ws) {
                for (g, lanes) in lanes.iter_mut().enumerate() {
                    let (x, w) = (&x[g * LANES..][..LANES], &w[g * LANES..][..LANES]);
                    for ((lane, a), w) in lanes.iter_mut().zip(x).zip(w) {
                        *lane += a * w.widen();
                    }
                }
            }
            *y = lanes.iter().flatten().sum::<f32>() + tail;
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
