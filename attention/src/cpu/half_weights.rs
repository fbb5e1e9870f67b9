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
        let operand = avx512::Operand::new::<W>(&xs);
        return one_row(n, k, bias.as_deref(), |outputs, y| {
            let w_t = &w_t[outputs.start * k..outputs.end * k];
            match &operand {
                Some(operand) => operand.dots(w_t, y),
                None => pulp::Arch::new().dispatch(HalfDots { x: &xs, w_t, y }),
            }
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

/// `x · w` with `w` widened, summed in order: the elements past the kernels' last whole vector.
fn dot<W: Widen>(x: &[f32], w: &[W]) -> f32 {
    x.iter().zip(w).map(|(a, w)| a * w.widen()).sum()
}

/// `y[j] = x · w_t[j]` for the rows `w_t[j]` of `Wᵀ` in bf16 or f16, each `x.len()` elements,
/// contiguous, sums in f32: where the CPU has no AVX-512. Written as plain lanes, which the
/// compiler vectorises under the instruction set that `pulp` dispatches to (more lanes, or
/// several rows at a time, made it keep its sums on the stack: 3.5× slower).
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

/// The one-row dot products on AVX-512 (Zen 4 and 5, Intel since Skylake-SP): two rows at a
/// time, one from each half of the rows (two sequential streams), a cache line (32 weights) of
/// each per step widened in registers into two chains of fused multiply-adds, and the line
/// 3 KB ahead prefetched. A bf16 line
/// read as 16 pairs widens with a shift (the even elements) and a mask (the odd ones), so `x`
/// is reordered once to match (16 even, then 16 odd elements per 32); f16 widens by the
/// hardware's conversion, in order. The compiler does not keep such a kernel's accumulators in
/// registers when written as plain lanes, hence the intrinsics. On the 2-core Zen 5 of
/// docs/benchmarks.md, at 64 GB/s of read bandwidth, the 1.1B model decodes at 1.05–1.1× its
/// bandwidth bound so, where one stream a thread took 1.3–1.4× and four rows side by side with
/// 16 weights a step 1.4×.
mod avx512 {
    use std::borrow::Cow;

    use super::Widen;

    /// `x` as the kernel reads it, for one product: reordered for bf16 (see the module).
    pub struct Operand<'a> {
        x: &'a [f32],
        ordered: Cow<'a, [f32]>,
    }

    impl<'a> Operand<'a> {
        /// `x` ready for weights of type `W`, or `None` where the CPU has no AVX-512.
        pub fn new<W: Widen>(x: &'a [f32]) -> Option<Self> {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f") {
                let ordered = match W::BF16 {
                    true => Cow::Owned(pairs(x)),
                    false => Cow::Borrowed(x),
                };
                return Some(Operand { x, ordered });
            }
            let _ = x;
            None
        }

        /// `y[j] = x · w_t[j]` as [`super::HalfDots`] computes it, for the rows `w_t[j]`
        /// (`x.len()` elements each) of `w_t`.
        pub fn dots<W: Widen>(&self, w_t: &[W], y: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `new` found AVX-512F on this CPU.
            unsafe {
                x86::dots(self.x, &self.ordered, w_t, y)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (w_t, y);
        }
    }

    /// `x`'s whole blocks of 32 with each block's even elements first, then its odd ones: the
    /// order of a bf16 line widened as pairs.
    fn pairs(x: &[f32]) -> Vec<f32> {
        let blocks = x.chunks_exact(32);
        blocks
            .flat_map(|block| {
                let evens = block.iter().step_by(2);
                evens.chain(block.iter().skip(1).step_by(2)).copied()
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        use super::super::{Widen, dot};

        /// The 32 weights at `p` widened to f32 as two vectors, as [`Widen::widen`] widens
        /// each: for bf16 the even elements, then the odd ones (each shifted into an f32's high
        /// half, or masked there); for f16 the first 16, then the next (converted by the
        /// hardware, exact).
        ///
        /// # Safety
        /// 32 elements are readable at `p`, and the CPU has AVX-512F.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn widen32<W: Widen>(p: *const W) -> [__m512; 2] {
            // SAFETY: 32 elements of two bytes at `p`, by the contract.
            unsafe {
                match W::BF16 {
                    true => {
                        let line = _mm512_loadu_si512(p.cast());
                        let odd = _mm512_and_si512(line, _mm512_set1_epi32(-65536));
                        [_mm512_slli_epi32::<16>(line), odd].map(|v| _mm512_castsi512_ps(v))
                    }
                    false => {
                        [0, 16].map(|at| _mm512_cvtph_ps(_mm256_loadu_si256(p.add(at).cast())))
                    }
                }
            }
        }

        /// `y[j] = x · w[j]` for the rows `w[j]` (`x.len()` elements each) of `w_t`, with
        /// `ordered` holding the whole blocks of 32 of `x` in [`widen32`]'s order: row `j` of
        /// the first half beside row `j` of the second, two streams, the odd row last alone.
        #[target_feature(enable = "avx512f")]
        pub unsafe fn dots<W: Widen>(x: &[f32], ordered: &[f32], w_t: &[W], y: &mut [f32]) {
            let k = x.len();
            assert!(ordered.len() >= k - k % 32 && w_t.len() >= y.len() * k);
            let half = y.len() / 2;
            let (first, second) = w_t[..y.len() * k].split_at(half * k);
            let (y_first, y_second) = y.split_at_mut(half);
            let pairs = first.chunks_exact(k).zip(second.chunks_exact(k));
            for ((a, b), (y_a, y_b)) in pairs.zip(y_first.iter_mut().zip(y_second.iter_mut())) {
                // SAFETY: rows of `k` elements; AVX-512F, as this function.
                [*y_a, *y_b] = unsafe { row_dots(x, ordered, [a, b]) };
            }
            if let (Some(last), Some(y)) =
                (second.chunks_exact(k).nth(half), y_second.get_mut(half))
            {
                // SAFETY: as above.
                [*y] = unsafe { row_dots(x, ordered, [last]) };
            }
        }

        /// `x · row` for each of `R` rows (`x.len()` elements each), a line of each per step
        /// into two chains, each row's line 3 KB ahead prefetched: the hardware's prefetchers
        /// alone leave bandwidth unused.
        ///
        /// # Safety
        /// `ordered` holds `x`'s whole blocks of 32, and the CPU has AVX-512F.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn row_dots<W: Widen, const R: usize>(
            x: &[f32],
            ordered: &[f32],
            rows: [&[W]; R],
        ) -> [f32; R] {
            let k = x.len();
            let body = k - k % 32;
            let mut sums = [[_mm512_setzero_ps(); 2]; R];
            for i in (0..body).step_by(32) {
                for (row, sums) in rows.iter().zip(&mut sums) {
                    // SAFETY: `i + 32 <= body <= k`, the rows' and (whole blocks) `ordered`'s length.
                    unsafe { line(ordered, row, i, sums) };
                    _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(i + AHEAD).cast());
                }
            }
            std::array::from_fn(|r| {
                let sum = _mm512_reduce_add_ps(_mm512_add_ps(sums[r][0], sums[r][1]));
                sum + dot(&x[body..], &rows[r][body..])
            })
        }

        /// Weights read ahead of the line in use: 3 KB of two-byte elements.
        const AHEAD: usize = 1536;

        /// `sums += x · w` over the line of 32 weights at `at` of `row`: the two vectors of
        /// [`widen32`] against `ordered`'s two at `at`.
        ///
        /// # Safety
        /// `at + 32` is at most the lengths of `row` and `ordered`, and the CPU has AVX-512F.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn line<W: Widen>(ordered: &[f32], row: &[W], at: usize, sums: &mut [__m512; 2]) {
            // SAFETY: by the contract.
            let w = unsafe { widen32(row.as_ptr().add(at)) };
            for ((sum, half), w) in sums.iter_mut().zip([0, 16]).zip(w) {
                // SAFETY: by the contract.
                let x = unsafe { _mm512_loadu_ps(ordered.as_ptr().add(at + half)) };
                *sum = _mm512_fmadd_ps(x, w, *sum);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HalfDots, Widen, avx512};
    use burn::tensor::{bf16, f16};

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
                let mut wide = vec![f32::NAN; rows];
                let operand = avx512::Operand::new::<W>(&x);
                if let Some(operand) = &operand {
                    operand.dots(&w, &mut wide);
                }
                let avx512 = operand.is_some();
                for (j, &want) in want.iter().enumerate() {
                    let close = |got: f32| (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs());
                    assert!(close(portable[j]), "k {k}, row {j}: {} vs {want}", portable[j]);
                    assert!(!avx512 || close(wide[j]), "k {k}, row {j}: {} vs {want}", wide[j]);
                }
            }
        }
    }

    /// Both one-row kernels (AVX-512 where the CPU has it, and the portable lanes) give the dot
    /// products of the widened weights, four rows at a time and the rows left over, with the
    /// elements past the last whole vector or line.
    #[test]
    fn one_row_kernels_give_the_dot_products_of_the_widened_weights() {
        check(bf16::from_f32);
        check(f16::from_f32);
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
