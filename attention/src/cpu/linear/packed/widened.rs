//! Packed products with f32 activations on AVX2 (with FMA and F16C): each weight block is
//! unpacked in registers into four vectors of 8 f32, exactly the values [`crate::packed`]'s
//! reference unpacking gives (`(q − c)·d + m`, rounded as it rounds), and multiplied into the
//! rows of `x` as they are: the unpacked weights' product up to the order of the sums.
//!
//! [`tiles`] takes a few rows of `x` (a short prompt's prefill) against one weight row at a
//! time, each block unpacked once for up to [`ROWS`] rows of `x`, the weight row prefetched
//! ahead as the integer kernel reads its rows ([`super::avx2`]).

use crate::cpu::linear::isa::Isa;
use crate::packed::Packing;

/// Rows of `x` per pass over a weight row at most (then 4, 2, 1 for the rest): 8 accumulators
/// beside the 4 unpacked vectors.
const ROWS: usize = 8;

/// `y_t[j][r] += x[r] · w[j]` for the rows of `x: [y_t.len() / outputs, k]` and the packed
/// rows `w[j]` of `rows`; `y_t` is `[outputs, x's rows]`. `false` (nothing written) where the
/// CPU lacks AVX2, FMA or F16C.
pub fn tiles(packing: Packing, x: &[f32], k: usize, rows: &[u8], y_t: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.available() {
        // SAFETY: the CPU has AVX2, FMA and F16C.
        unsafe { x86::tiles(packing, x, k, rows, y_t) };
        return true;
    }
    let _ = (packing, x, k, rows, y_t);
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::ROWS;
    use crate::packed::{BLOCK, Packing};

    /// Bytes of a row read ahead of the block in use.
    const AHEAD: usize = 2048;

    /// The 32 values of the block at `block` in `packing`, in order, as four vectors.
    ///
    /// # Safety
    /// The block's bytes are readable at `block`; the CPU has AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(packing: Packing, block: *const u8) -> [__m256; 4] {
        // SAFETY: by the contract.
        unsafe {
            let halves = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(block.cast())));
            let d = _mm256_set1_ps(_mm_cvtss_f32(halves));
            let ints: [__m256i; 4] = match packing {
                Packing::Q8_0 => [0, 8, 16, 24]
                    .map(|at| _mm256_cvtepi8_epi32(_mm_loadl_epi64(block.add(2 + at).cast()))),
                _ => {
                    let bytes = _mm_loadu_si128(block.add(packing.block_bytes() - 16).cast());
                    let mask = _mm_set1_epi8(0xF);
                    let low = _mm_and_si128(bytes, mask);
                    let high = _mm_and_si128(_mm_srli_epi16::<4>(bytes), mask);
                    [low, _mm_srli_si128::<8>(low), high, _mm_srli_si128::<8>(high)]
                        .map(|v| _mm256_cvtepu8_epi32(v))
                }
            };
            let values = ints.map(|v| _mm256_cvtepi32_ps(v));
            match packing {
                Packing::Q8_0 => values.map(|q| _mm256_mul_ps(d, q)),
                Packing::Q4_0 => {
                    let eight = _mm256_set1_ps(8.0);
                    values.map(|q| _mm256_mul_ps(d, _mm256_sub_ps(q, eight)))
                }
                Packing::Q4_1 => {
                    let m = _mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(halves)));
                    values.map(|q| _mm256_add_ps(_mm256_mul_ps(d, q), m))
                }
            }
        }
    }

    /// The sum of a vector's lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn total(v: __m256) -> f32 {
        let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)))
    }

    /// [`super::tiles`]: each weight row against the rows of `x` [`ROWS`] at a time.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tiles(
        packing: Packing,
        x: &[f32],
        k: usize,
        rows: &[u8],
        y_t: &mut [f32],
    ) {
        let (row_bytes, x_rows) = (packing.row_bytes(k), x.len() / k);
        assert!(rows.len() >= y_t.len() / x_rows.max(1) * row_bytes);
        for (w, y) in rows.chunks_exact(row_bytes).zip(y_t.chunks_exact_mut(x_rows)) {
            let mut done = 0;
            while done < x_rows {
                let (xs, y) = (&x[done * k..], &mut y[done..]);
                // SAFETY: a row of `k` values; the rows of `x` taken exist; AVX2, FMA, F16C.
                done += unsafe {
                    match x_rows - done {
                        8.. => group::<ROWS>(packing, w, xs, k, y),
                        4.. => group::<4>(packing, w, xs, k, y),
                        2.. => group::<2>(packing, w, xs, k, y),
                        _ => group::<1>(packing, w, xs, k, y),
                    }
                };
            }
        }
    }

    /// `y[r] += x[r] · w` for the first `X` rows (of `k` values) of `x`; returns `X`.
    ///
    /// # Safety
    /// `x` holds `X` rows and `y` `X` values, `w` the blocks of a row; the CPU has AVX2, FMA
    /// and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const X: usize>(
        packing: Packing,
        w: &[u8],
        x: &[f32],
        k: usize,
        y: &mut [f32],
    ) -> usize {
        let xs: [&[f32]; X] = std::array::from_fn(|r| &x[r * k..(r + 1) * k]);
        // SAFETY: by the contract.
        let sums = unsafe { tile::<X>(packing, w, xs) };
        y.iter_mut().zip(sums).for_each(|(y, s)| *y += s);
        X
    }

    /// `x[r] · w` for a packed weight row `w` and `X` rows of `x`, block by block, each block
    /// unpacked once for every row of `x`; the weight row prefetched ahead.
    ///
    /// # Safety
    /// `w` holds the blocks of `x`'s rows' values; the CPU has AVX2, FMA and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const X: usize>(packing: Packing, w: &[u8], xs: [&[f32]; X]) -> [f32; X] {
        let bytes = packing.block_bytes();
        let mut sums = [_mm256_setzero_ps(); X];
        for b in 0..xs[0].len() / BLOCK {
            // SAFETY: block `b` of the row, by the contract.
            let block = unsafe { w.as_ptr().add(b * bytes) };
            _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(AHEAD).cast());
            // SAFETY: as above.
            let values = unsafe { unpack(packing, block) };
            for (x, sum) in xs.iter().zip(sums.iter_mut()) {
                for (i, value) in values.iter().enumerate() {
                    // SAFETY: values `b·32 + 8i …` of a row of `x`.
                    let x = unsafe { _mm256_loadu_ps(x.as_ptr().add(b * BLOCK + 8 * i)) };
                    *sum = _mm256_fmadd_ps(x, *value, *sum);
                }
            }
        }
        sums.map(|v| total(v))
    }
}
