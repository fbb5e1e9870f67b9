//! The packed one-row product on AVX2 (with FMA and F16C: every x86-64 CPU since Haswell and
//! Zen 1), as [`super::row_dot`] computes it: per block, the 32 weight integers (unpacked from
//! nibbles for the 4-bit formats) meet the 32 activation integers in one register each,
//! `maddubs` multiplying unsigned bytes by signed ones into pairs and `madd` summing the pairs
//! into 8 lanes of i32; the lanes go to f32 times both scales into one accumulator per row.
//! Q8_0's signed weights take the sign trick (`|w|` times `x` signed as `w`). The 4-bit
//! formats' minimum or centre adds its coefficient times the activations' block sum.
//! Two weight rows share each block of activations, one from each half of the thread's rows:
//! two sequential streams, each prefetched 2 KB ahead, as the half-weight kernels read theirs
//! (13% off SmolLM2's decoding step against four neighbouring rows without prefetching).

use super::Activations;
use crate::cpu::linear::isa::Isa;
use crate::packed::Packing;

/// Bytes of a row read ahead of the block in use.
const AHEAD: usize = 2048;

/// `y[j] = x · w[j]` for the packed rows of `rows` on AVX2, FMA and F16C; `false` (nothing
/// written) where the CPU lacks one of them.
pub fn dots(packing: Packing, x: &Activations, rows: &[u8], y: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.available() {
        // SAFETY: the CPU has AVX2, FMA and F16C.
        unsafe { x86::dots(packing, x, rows, y) };
        return true;
    }
    let _ = (packing, x, rows, y);
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{AHEAD, Activations};
    use crate::cpu::linear::by_halves;
    use crate::packed::{BLOCK, Packing};

    /// A block format's integer dot product and offset.
    trait Format {
        /// Bytes per block.
        const BYTES: usize;

        /// 8 lanes of i32 partial sums of `w_j · q_j` over the block at `block` against the
        /// activations' integers `q`.
        ///
        /// # Safety
        /// `BYTES` bytes are readable at `block`; the CPU has AVX2.
        unsafe fn ints(block: *const u8, q: __m256i) -> __m256i;

        /// The coefficient of the activations' block sum, from the block's scale `d` and
        /// second f16 (`m`, Q4_1's minimum).
        fn offset(d: f32, m: f32) -> f32;
    }

    /// Q8_0: signed bytes, by the sign trick.
    struct Q8;
    /// Q4_0: nibbles centred on 8.
    struct Q40;
    /// Q4_1: nibbles with a minimum.
    struct Q41;

    impl Format for Q8 {
        const BYTES: usize = 34;

        #[inline(always)]
        unsafe fn ints(block: *const u8, q: __m256i) -> __m256i {
            // SAFETY: 32 bytes at `block + 2`, by the contract; AVX2.
            unsafe {
                let w = _mm256_loadu_si256(block.add(2).cast());
                let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
                _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
            }
        }

        fn offset(_: f32, _: f32) -> f32 {
            0.0
        }
    }

    /// The 32 nibbles of the 16 bytes at `at` as bytes: the low nibbles (values 0–15) in the low
    /// half, the high ones in the high half.
    ///
    /// # Safety
    /// 16 bytes are readable at `at`; the CPU has AVX2.
    #[inline(always)]
    unsafe fn nibbles(at: *const u8) -> __m256i {
        // SAFETY: by the contract.
        unsafe {
            let bytes = _mm_loadu_si128(at.cast());
            let low = _mm_set1_epi8(0xF);
            let high = _mm_and_si128(_mm_srli_epi16::<4>(bytes), low);
            _mm256_set_m128i(high, _mm_and_si128(bytes, low))
        }
    }

    impl Format for Q40 {
        const BYTES: usize = 18;

        #[inline(always)]
        unsafe fn ints(block: *const u8, q: __m256i) -> __m256i {
            // SAFETY: 16 bytes at `block + 2`, by the contract; AVX2.
            unsafe {
                let pairs = _mm256_maddubs_epi16(nibbles(block.add(2)), q);
                _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
            }
        }

        fn offset(d: f32, _: f32) -> f32 {
            -8.0 * d
        }
    }

    impl Format for Q41 {
        const BYTES: usize = 20;

        #[inline(always)]
        unsafe fn ints(block: *const u8, q: __m256i) -> __m256i {
            // SAFETY: 16 bytes at `block + 4`, by the contract; AVX2.
            unsafe {
                let pairs = _mm256_maddubs_epi16(nibbles(block.add(4)), q);
                _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
            }
        }

        fn offset(_: f32, m: f32) -> f32 {
            m
        }
    }

    /// [`super::dots`] once the CPU is known to have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dots(packing: Packing, x: &Activations, rows: &[u8], y: &mut [f32]) {
        // SAFETY: AVX2, FMA and F16C, as this function.
        unsafe {
            match packing {
                Packing::Q8_0 => rows_of::<Q8>(x, rows, y),
                Packing::Q4_0 => rows_of::<Q40>(x, rows, y),
                Packing::Q4_1 => rows_of::<Q41>(x, rows, y),
            }
        }
    }

    /// [`dots`] in format `F`: row `j` of the first half beside row `j` of the second (two
    /// streams), the odd row last alone.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows_of<F: Format>(x: &Activations, rows: &[u8], y: &mut [f32]) {
        let row_bytes = x.scales.len() * F::BYTES;
        assert!(rows.len() >= y.len() * row_bytes && x.quants.len() >= x.scales.len() * BLOCK);
        // SAFETY: each row holds the blocks of `x`; AVX2, FMA, F16C, as this function.
        let pair = |rows: [&[u8]; 2]| unsafe { row_dots::<F, 2>(x, rows) };
        // SAFETY: as above.
        let one = |row: &[u8]| unsafe { row_dots::<F, 1>(x, [row]) }[0];
        by_halves(rows, row_bytes, y, pair, one);
    }

    /// `x · row` for `R` rows of format `F`, block by block.
    ///
    /// # Safety
    /// Each row holds `x.scales.len()` blocks, `x.quants` as many blocks of 32; the CPU has
    /// AVX2, FMA and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_dots<F: Format, const R: usize>(x: &Activations, rows: [&[u8]; R]) -> [f32; R] {
        let mut sums = [_mm256_setzero_ps(); R];
        let mut offsets = [0.0f32; R];
        for (b, (&dx, &sx)) in x.scales.iter().zip(&x.sums).enumerate() {
            // SAFETY: block `b` of the activations, by the contract.
            let q = unsafe { _mm256_loadu_si256(x.quants.as_ptr().add(b * BLOCK).cast()) };
            for r in 0..R {
                // SAFETY: block `b` of row `r`, by the contract.
                let block = unsafe { rows[r].as_ptr().add(b * F::BYTES) };
                // The block's f16 scale and second f16 (Q4_1's minimum; else the next bytes).
                // SAFETY: at least 4 bytes at `block`.
                let halves = unsafe { std::ptr::read_unaligned(block.cast::<i32>()) };
                let scales = _mm_cvtph_ps(_mm_cvtsi32_si128(halves));
                let d = _mm_cvtss_f32(scales);
                let m = _mm_cvtss_f32(_mm_movehdup_ps(scales));
                _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(AHEAD).cast());
                // SAFETY: by the contract.
                let ints = unsafe { F::ints(block, q) };
                sums[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(ints), sums[r]);
                offsets[r] += F::offset(d, m) * sx;
            }
        }
        std::array::from_fn(|r| {
            let half =
                _mm_add_ps(_mm256_castps256_ps128(sums[r]), _mm256_extractf128_ps::<1>(sums[r]));
            let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
            _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair))) + offsets[r]
        })
    }
}
