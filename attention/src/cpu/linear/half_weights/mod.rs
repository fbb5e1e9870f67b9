//! A linear layer's product on Flex with its weights kept in bf16 or f16 and everything else
//! in f32 (a checkpoint loaded with `--weights bf16`): the weights are the only values rounded,
//! and they are widened to f32 as they are read, never as a whole tensor. Flex's own matmul
//! picks its kernel from the left operand's dtype (an f32 × bf16 product would read the bf16
//! bytes as f32) and widens whole tensors, and gemm has no bf16: hence these kernels.
//!
//! The weights are a checkpoint's `[out, in]` storage viewed as `[in, out]`, so each output's
//! weights are contiguous. One row (a decoding step) is a dot product per output, over the
//! output split of [`super::one_row`], widened in registers: half the bytes per
//! decoded token of f32 weights. More rows (a prompt's prefill) go by register tiles of
//! outputs × rows, the outputs split over the threads. Both on AVX-512 ([`avx512`]); without
//! it, one row on AVX2 ([`avx2`]) or by portable lanes ([`HalfDots`]), and more rows panel by
//! panel: a block of outputs' weights widened into a buffer of its own thread, then multiplied
//! by gemm, so no more than a panel per thread is ever in f32. The instruction set is the
//! CPU's best unless `SWA_CPU_ISA` caps it ([`super::isa`]).

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, TensorMetadata, bf16, f16};
use pulp::{Simd, WithSimd};

use super::isa::{Isa, isa};
use super::{PART, by_panels, one_row};
use crate::cpu::layout;
use crate::cpu::matmul::{Mat, matmul};

mod avx2;
mod avx512;

/// Outputs per panel at least, so that each gemm call has rows to tile.
const PANEL: usize = 64;

/// Parts per thread of a product of several rows on AVX-512, for balance.
const PARTS: usize = 4;

/// `x·w (+ b)` for `x: [rows, in]` (f32), `w: [in, out]` in bf16 or f16 with strides
/// `[1, in]` (a checkpoint's `[out, in]` transposed) and `b: [out]` (f32) → `[rows, out]` in
/// f32. The caller ([`super::product`]) has checked the dtypes, layout and sizes.
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
    let operand = match isa() {
        Isa::Avx512 => avx512::Operand::new::<W>(&xs, rows, k),
        _ => None,
    };
    if rows == 1 {
        let narrow = match isa() {
            Isa::Avx2 => avx2::Operand::new::<W>(&xs),
            _ => None,
        };
        return one_row(n, k, bias.as_deref(), |outputs, y| {
            let w_t = &w_t[outputs.start * k..outputs.end * k];
            match (&operand, &narrow) {
                (Some(operand), _) => operand.dots(w_t, y),
                (None, Some(operand)) => operand.dots(w_t, y),
                (None, None) => pulp::Arch::new().dispatch(HalfDots { x: &xs, w_t, y }),
            }
        });
    }
    let x_t = Mat::new(&xs, rows, k).t();
    let panel = match operand {
        Some(_) => n.div_ceil(PARTS * rayon::current_num_threads()).next_multiple_of(4),
        None => (PART / k).max(PANEL),
    };
    by_panels((n, rows), panel, bias.as_deref(), |outputs, dst| {
        let w_t = &w_t[outputs.start * k..outputs.end * k];
        match &operand {
            Some(operand) => operand.tiles(w_t, dst),
            None => {
                let wide: Vec<f32> = w_t.iter().map(|w| w.widen()).collect();
                let wide = Mat::new(&wide, outputs.len(), k);
                matmul(dst, wide, x_t, 1.0, bias.is_some());
            }
        }
    })
}

/// A weight element widened to f32 in registers.
trait Widen: Copy + Sync {
    /// Whether the type is bf16 (else f16).
    const BF16: bool;

    fn widen(self) -> f32;
}

impl Widen for bf16 {
    const BF16: bool = true;

    /// bf16 is the high half of an f32.
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
}

impl Widen for f16 {
    const BF16: bool = false;

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

/// `from`'s whole vectors of `vector` elements into `to` in the order a kernel widens a vector
/// of weights of type `W`: for bf16, read as pairs, the even elements then the odd ones; for
/// f16 as they are.
fn in_widened_order<W: Widen>(from: &[f32], to: &mut [f32], vector: usize) {
    for (to, from) in to.chunks_exact_mut(vector).zip(from.chunks_exact(vector)) {
        match W::BF16 {
            true => {
                let evens = from.iter().step_by(2);
                let order = evens.chain(from.iter().skip(1).step_by(2));
                to.iter_mut().zip(order).for_each(|(to, from)| *to = *from);
            }
            false => to.copy_from_slice(from),
        }
    }
}

/// `x · w` with `w` widened, summed in order: the elements past the kernels' last whole vector.
fn dot<W: Widen>(x: &[f32], w: &[W]) -> f32 {
    x.iter().zip(w).map(|(a, w)| a * w.widen()).sum()
}

/// `y[j] = x · w_t[j]` for the rows `w_t[j]` of `Wᵀ` in bf16 or f16, each `x.len()` elements,
/// contiguous, sums in f32: where the CPU has no AVX-512. Written as plain lanes, which the
/// compiler vectorises under the instruction set that `pulp` dispatches to (more lanes, or
/// several rows at a time, it keeps its sums on the stack instead of in registers).
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
            let tail = dot(xs.remainder(), ws.remainder());
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
    use super::{HalfDots, Widen, avx2, avx512, layout, weights};
    use burn::backend::flex::FlexTensor;
    use burn::tensor::{TensorData, bf16, f16};

    /// Values in [−1, 1) that no two neighbours share.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// `y[j] = x · w[j]` from each kernel against the sums of the widened weights in f64.
    fn check<W: Widen>(from_f32: fn(f32) -> W) {
        for k in [1, 15, 16, 17, 31, 32, 33, 64, 100, 130] {
            for rows in [1, 3, 4, 5, 9] {
                let x = values(k, 1);
                let w: Vec<W> = values(rows * k, 2).into_iter().map(from_f32).collect();
                let want: Vec<f64> = w
                    .chunks_exact(k)
                    .map(|row| row.iter().zip(&x).map(|(w, &a)| w.widen() as f64 * a as f64).sum())
                    .collect();
                let mut portable = vec![0.0; rows];
                pulp::Arch::new().dispatch(HalfDots { x: &x, w_t: &w, y: &mut portable });
                let (mut wide, mut narrow) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
                let operand = avx512::Operand::new::<W>(&x, 1, k);
                if let Some(operand) = &operand {
                    operand.dots(&w, &mut wide);
                }
                let avx2 = avx2::Operand::new::<W>(&x);
                if let Some(operand) = &avx2 {
                    operand.dots(&w, &mut narrow);
                }
                let (avx512, avx2) = (operand.is_some(), avx2.is_some());
                for (j, &want) in want.iter().enumerate() {
                    let close = |got: f32| (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs());
                    assert!(close(portable[j]), "k {k}, row {j}: {} vs {want}", portable[j]);
                    assert!(!avx512 || close(wide[j]), "k {k}, row {j}: {} vs {want}", wide[j]);
                    assert!(
                        !avx2 || close(narrow[j]),
                        "k {k}, row {j}: AVX2 {} vs {want}",
                        narrow[j]
                    );
                }
            }
        }
    }

    /// Every one-row kernel (AVX-512 and AVX2 where the CPU has them, and the portable lanes)
    /// gives the dot products of the widened weights, two rows at a time and the odd one, with the elements
    /// past the last whole vector or line.
    #[test]
    fn one_row_kernels_give_the_dot_products_of_the_widened_weights() {
        check(bf16::from_f32);
        check(f16::from_f32);
    }

    /// The product of several rows, `x·w + b`, against the sums of the widened weights in f64,
    /// on whichever path the CPU takes (AVX-512's register tiles, else widened panels through
    /// gemm): rows and outputs past whole tiles, elements past whole lines and across cache
    /// blocks of `x` (rows and elements).
    fn check_rows<W: Widen>(from_f32: fn(f32) -> W) {
        for (rows, k, outputs) in [(2, 33, 9), (5, 32, 4), (7, 100, 3), (12, 1, 5), (103, 1100, 6)]
        {
            let (x, bias) = (values(rows * k, 3), values(outputs, 5));
            let w: Vec<W> = values(outputs * k, 4).into_iter().map(from_f32).collect();
            let tensor = |values: &[f32], shape: Vec<usize>| {
                FlexTensor::from_data(TensorData::new(values.to_vec(), shape))
            };
            let y = weights(&tensor(&x, vec![rows, k]), &w, Some(&tensor(&bias, vec![outputs])));
            let y = layout::read(&y);
            for (r, x) in x.chunks_exact(k).enumerate() {
                for (j, w) in w.chunks_exact(k).enumerate() {
                    let dot: f64 = w.iter().zip(x).map(|(w, &a)| w.widen() as f64 * a as f64).sum();
                    let (got, want) = (y[r * outputs + j] as f64, bias[j] as f64 + dot);
                    let close = (got - want).abs() <= 1e-5 * (1.0 + want.abs());
                    assert!(close, "rows {rows}, k {k}: row {r}, output {j}: {got} vs {want}");
                }
            }
        }
    }

    /// A product of several rows (a prefill) gives the widened weights' products plus the bias.
    #[test]
    fn several_rows_give_the_products_of_the_widened_weights() {
        check_rows(bf16::from_f32);
        check_rows(f16::from_f32);
    }

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
