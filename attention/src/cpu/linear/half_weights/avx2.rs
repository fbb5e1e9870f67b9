//! The half-weight one-row product on AVX2 (with FMA and F16C): the AVX-512 kernel's scheme
//! ([`super::avx512`]) at half the width. Each step reads 32 weights of a row as two vectors of
//! 16 and widens each in registers: a bf16 vector read as 8 pairs widens by a shift (the even
//! elements) and a mask (the odd ones), so `x` is reordered once per product to match (8 even,
//! then 8 odd elements per 16: [`Operand`]); f16 widens by the hardware's conversion, in
//! order. Two rows at a time, one from each half of the thread's rows, each prefetched 3 KB
//! ahead: two sequential streams, as on AVX-512.

use super::{Widen, in_widened_order};
use crate::cpu::linear::isa::Isa;

/// `x` as the kernel reads it, for one product: its whole blocks of 32 in [`x86::widen16`]'s
/// order (reordered for bf16); the elements past the last block are read from `x` itself.
pub struct Operand<'a> {
    x: &'a [f32],
    ordered: Vec<f32>,
}

impl<'a> Operand<'a> {
    /// `x` ready for weights of type `W`, or `None` where the CPU has no AVX2, FMA or F16C.
    pub fn new<W: Widen>(x: &'a [f32]) -> Option<Self> {
        if !Isa::Avx2.available() {
            return None;
        }
        let body = x.len() - x.len() % 32;
        let mut ordered = vec![0.0; body];
        in_widened_order::<W>(x, &mut ordered, 16);
        Some(Operand { x, ordered })
    }

    /// `y[j] = x · w_t[j]` for the rows `w_t[j]` (`x.len()` elements each) of `w_t`, as
    /// [`super::HalfDots`] computes them.
    pub fn dots<W: Widen>(&self, w_t: &[W], y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `new` found AVX2, FMA and F16C on this CPU.
        unsafe {
            x86::dots(self.x, &self.ordered, w_t, y)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (w_t, y);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::{Widen, dot};
    use crate::cpu::linear::by_halves;

    /// Weights read ahead of the line in use: 3 KB of two-byte elements.
    const AHEAD: usize = 1536;

    /// The 16 weights at `p` widened to f32 as two vectors, as [`Widen::widen`] widens each:
    /// for bf16 the even elements, then the odd ones; for f16 the first 8, then the next.
    ///
    /// # Safety
    /// 16 elements are readable at `p`, and the CPU has AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen16<W: Widen>(p: *const W) -> [__m256; 2] {
        // SAFETY: 16 elements of two bytes at `p`, by the contract.
        unsafe {
            match W::BF16 {
                true => {
                    let line = _mm256_loadu_si256(p.cast());
                    let odd = _mm256_and_si256(line, _mm256_set1_epi32(-65536));
                    [_mm256_slli_epi32::<16>(line), odd].map(|v| _mm256_castsi256_ps(v))
                }
                false => [0, 8].map(|at| _mm256_cvtph_ps(_mm_loadu_si128(p.add(at).cast()))),
            }
        }
    }

    /// `y[j] = x · w[j]` for the rows `w[j]` (`x.len()` elements each) of `w_t`: row `j` of
    /// the first half beside row `j` of the second, two streams, the odd row last alone.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dots<W: Widen>(x: &[f32], ordered: &[f32], w_t: &[W], y: &mut [f32]) {
        let k = x.len();
        assert!(ordered.len() >= k - k % 32 && w_t.len() >= y.len() * k);
        // SAFETY: rows of `k` elements; the target features, as this function's.
        let pair = |rows: [&[W]; 2]| unsafe { row_dots(x, ordered, rows) };
        // SAFETY: as above.
        let one = |row: &[W]| unsafe { row_dots(x, ordered, [row]) }[0];
        by_halves(w_t, k, y, pair, one);
    }

    /// `x · row` for each of `R` rows, 32 elements of each per step into four chains.
    ///
    /// # Safety
    /// `ordered` holds `x`'s whole blocks of 32, each row `x.len()` elements; the CPU has
    /// AVX2, FMA and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_dots<W: Widen, const R: usize>(
        x: &[f32],
        ordered: &[f32],
        rows: [&[W]; R],
    ) -> [f32; R] {
        let k = x.len();
        let body = k - k % 32;
        let mut sums = [[_mm256_setzero_ps(); 4]; R];
        for i in (0..body).step_by(32) {
            for (row, sums) in rows.iter().zip(&mut sums) {
                for (half, sums) in [0, 16].into_iter().zip(sums.chunks_exact_mut(2)) {
                    // SAFETY: `i + 32 <= body <= k`, the rows' and `ordered`'s length.
                    let w = unsafe { widen16(row.as_ptr().add(i + half)) };
                    for ((sum, w), at) in sums.iter_mut().zip(w).zip([0, 8]) {
                        // SAFETY: as above.
                        let x = unsafe { _mm256_loadu_ps(ordered.as_ptr().add(i + half + at)) };
                        *sum = _mm256_fmadd_ps(x, w, *sum);
                    }
                }
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(i + AHEAD).cast());
            }
        }
        std::array::from_fn(|r| {
            let [a, b, c, d] = sums[r];
            let sum = _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d));
            let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
            let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
            let total = _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
            total + dot(&x[body..], &rows[r][body..])
        })
    }
}
