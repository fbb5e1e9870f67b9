//! The half-weight products on AVX-512 (Zen 4 and 5, Intel since Skylake-SP), a cache line of
//! 32 weights widened in registers per step. A bf16 line read as 16 pairs widens with a shift
//! (the even elements) and a mask (the odd ones), so `x` is reordered once per product to match
//! (16 even, then 16 odd elements per 32: [`Operand`]); f16 widens by the hardware's
//! conversion, in order. The compiler does not keep these kernels' accumulators in registers
//! when written as plain lanes, hence the intrinsics.
//!
//! One row (a decoding step, [`Operand::dots`]) reads two weight rows at a time, one from each
//! half of the thread's rows: two sequential streams, each prefetched 3 KB ahead, which keep
//! more reads in flight than one stream a thread or rows side by side
//! (docs/architecture/kernels.md, "What keeps decoding fast").
//!
//! Several rows (a prompt's prefill, [`Operand::tiles`]) go by register tiles of
//! [`TILE_OUTPUTS`] outputs × [`TILE_ROWS`] rows of `x`: each step's widened lines of the
//! tile's weight rows meet each of its rows of `x`, 40 multiply-adds for 4 lines read, in 20
//! accumulators. Blocks of [`BLOCK_ROWS`] rows × [`BLOCK_K`] elements of `x` stay in the L2
//! cache while a thread's outputs pass over them, the tile's weights in L1 while its rows do.

use super::{Widen, in_widened_order};
use crate::cpu::linear::isa::Isa;

/// Outputs (weight rows) of a register tile.
const TILE_OUTPUTS: usize = 4;

/// Rows of `x` of a register tile: with [`TILE_OUTPUTS`], 20 accumulators, 8 widened weight
/// vectors and 2 of `x` in AVX-512's 32 registers.
const TILE_ROWS: usize = 5;

/// Rows of `x` per cache block, a multiple of [`TILE_ROWS`].
const BLOCK_ROWS: usize = 100;

/// Elements of `x`'s rows per cache block, a multiple of 32: 100 rows take 400 KB.
const BLOCK_K: usize = 1024;

/// `x: [rows, k]` as the kernels read it, for one product: each row's whole blocks of 32 in
/// [`x86::widen32`]'s order (reordered for bf16), more than one row padded with zeros to a
/// multiple of [`TILE_ROWS`]; the elements past the last block are read from `x` itself.
pub struct Operand<'a> {
    x: &'a [f32],
    rows: usize,
    k: usize,
    ordered: Vec<f32>,
}

impl<'a> Operand<'a> {
    /// `x: [rows, k]` ready for weights of type `W`, or `None` where the CPU has no AVX-512.
    pub fn new<W: Widen>(x: &'a [f32], rows: usize, k: usize) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        if Isa::Avx512.available() {
            let body = k - k % 32;
            let padded = if rows == 1 { 1 } else { rows.next_multiple_of(TILE_ROWS) };
            let mut ordered = vec![0.0; padded * body];
            for (row, x) in ordered.chunks_exact_mut(body.max(1)).zip(x.chunks_exact(k)) {
                in_widened_order::<W>(x, row, 32);
            }
            return Some(Operand { x, rows, k, ordered });
        }
        let _ = (x, rows, k);
        None
    }

    /// `y[j] = x · w_t[j]` for the first row of `x` and the rows `w_t[j]` (`k` elements each)
    /// of `w_t`, as [`super::HalfDots`] computes them.
    pub fn dots<W: Widen>(&self, w_t: &[W], y: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `new` found AVX-512F on this CPU.
        unsafe {
            x86::dots(&self.x[..self.k], &self.ordered, w_t, y)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (w_t, y);
    }

    /// `y_t[j][r] += x[r] · w_t[j]` for every row `r` of `x` (more than one) and the rows
    /// `w_t[j]` (`k` elements each) of `w_t`: `y_t` is `[w_t's rows, x's rows]`.
    pub fn tiles<W: Widen>(&self, w_t: &[W], y_t: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `new` found AVX-512F on this CPU.
        unsafe {
            x86::tiles(self, w_t, y_t)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (w_t, y_t);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::{Widen, dot};
    use super::{BLOCK_K, BLOCK_ROWS, Operand, TILE_OUTPUTS, TILE_ROWS};
    use crate::cpu::linear::by_halves;

    /// Weights read ahead of the line in use in a decoding step: 3 KB of two-byte elements.
    const AHEAD: usize = 1536;

    /// The 32 weights at `p` widened to f32 as two vectors, as [`Widen::widen`] widens each:
    /// for bf16 the even elements, then the odd ones (each shifted into an f32's high half, or
    /// masked there); for f16 the first 16, then the next (converted by the hardware, exact).
    ///
    /// # Safety
    /// 32 elements are readable at `p`, and the CPU has AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn widen32<W: Widen>(p: *const W) -> [__m512; 2] {
        // SAFETY: 32 elements of two bytes at `p`, by the contract.
        unsafe {
            match W::BF16 {
                true => {
                    let line = _mm512_loadu_si512(p.cast());
                    let odd = _mm512_and_si512(line, _mm512_set1_epi32(-65536));
                    [_mm512_slli_epi32::<16>(line), odd].map(|v| _mm512_castsi512_ps(v))
                }
                false => [0, 16].map(|at| _mm512_cvtph_ps(_mm256_loadu_si256(p.add(at).cast()))),
            }
        }
    }

    /// `y[j] = x · w[j]` for the rows `w[j]` (`x.len()` elements each) of `w_t`, with
    /// `ordered` holding the whole blocks of 32 of `x` in [`widen32`]'s order: row `j` of the
    /// first half beside row `j` of the second, two streams, the odd row last alone.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dots<W: Widen>(x: &[f32], ordered: &[f32], w_t: &[W], y: &mut [f32]) {
        let k = x.len();
        assert!(ordered.len() >= k - k % 32 && w_t.len() >= y.len() * k);
        // SAFETY: rows of `k` elements; the target features, as this function's.
        let pair = |rows: [&[W]; 2]| unsafe { row_dots(x, ordered, rows) };
        // SAFETY: as above.
        let one = |row: &[W]| unsafe { row_dots(x, ordered, [row]) }[0];
        by_halves(w_t, k, y, pair, one);
    }

    /// `x · row` for each of `R` rows (`x.len()` elements each), a line of each per step into
    /// two chains, each row's line 3 KB ahead prefetched: the hardware's prefetchers alone
    /// leave bandwidth unused.
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

    /// [`Operand::tiles`]: cache blocks of `x`, the outputs by tiles of [`TILE_OUTPUTS`]
    /// (one at a time for the last few), each over the block's rows by [`TILE_ROWS`]; then the
    /// elements past the last whole block of 32.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tiles<W: Widen>(x: &Operand, w_t: &[W], y_t: &mut [f32]) {
        let Operand { rows, k, .. } = *x;
        let body = k - k % 32;
        let outputs = y_t.len() / rows;
        let padded = rows.next_multiple_of(TILE_ROWS);
        assert!(w_t.len() >= outputs * k && x.ordered.len() >= padded * body);
        for first_row in (0..padded).step_by(BLOCK_ROWS) {
            let block_rows = first_row..padded.min(first_row + BLOCK_ROWS);
            for start in (0..body).step_by(BLOCK_K) {
                let span = start..body.min(start + BLOCK_K);
                let tile = TILE_OUTPUTS * rows;
                let mut ys = y_t.chunks_exact_mut(tile);
                for (j, y) in (&mut ys).enumerate() {
                    let j = j * TILE_OUTPUTS;
                    let weights: [&[W]; TILE_OUTPUTS] =
                        std::array::from_fn(|o| &w_t[(j + o) * k..(j + o + 1) * k]);
                    // SAFETY: rows of `k` elements, `span` within `body`; AVX-512F.
                    unsafe { tile_rows(x, weights, block_rows.clone(), span.clone(), y) };
                }
                let last = outputs - outputs % TILE_OUTPUTS;
                for (o, y) in ys.into_remainder().chunks_exact_mut(rows).enumerate() {
                    let j = last + o;
                    // SAFETY: as above.
                    unsafe {
                        tile_rows(
                            x,
                            [&w_t[j * k..(j + 1) * k]],
                            block_rows.clone(),
                            span.clone(),
                            y,
                        )
                    };
                }
            }
        }
        if body < k {
            for (w, y) in w_t.chunks_exact(k).zip(y_t.chunks_exact_mut(rows)) {
                for (y, x) in y.iter_mut().zip(x.x.chunks_exact(k)) {
                    *y += dot(&x[body..], &w[body..]);
                }
            }
        }
    }

    /// `y[o * rows + r] += x[r] · w[o]` over the elements `span` for the rows `block` of `x`
    /// (those past `x`'s rows are padding, not written), [`TILE_ROWS`] at a time.
    ///
    /// # Safety
    /// Each of `weights` holds `span`, `block` is within `x`'s padded rows and `span` within
    /// its whole blocks of 32, and the CPU has AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile_rows<W: Widen, const O: usize>(
        x: &Operand,
        weights: [&[W]; O],
        block: std::ops::Range<usize>,
        span: std::ops::Range<usize>,
        y: &mut [f32],
    ) {
        let (rows, body) = (x.rows, x.k - x.k % 32);
        for first in block.step_by(TILE_ROWS) {
            let mut sums = [[_mm512_setzero_ps(); TILE_ROWS]; O];
            for i in span.clone().step_by(32) {
                // SAFETY: `i + 32` within each weight row, by the contract.
                let w: [[__m512; 2]; O] =
                    std::array::from_fn(|o| unsafe { widen32(weights[o].as_ptr().add(i)) });
                for r in 0..TILE_ROWS {
                    // SAFETY: row `first + r` is within the padded rows, `i + 32 <= body`.
                    let at = unsafe { x.ordered.as_ptr().add((first + r) * body + i) };
                    // SAFETY: as above.
                    let xs = [0, 16].map(|half| unsafe { _mm512_loadu_ps(at.add(half)) });
                    for (sums, w) in sums.iter_mut().zip(&w) {
                        sums[r] = _mm512_fmadd_ps(xs[0], w[0], sums[r]);
                        sums[r] = _mm512_fmadd_ps(xs[1], w[1], sums[r]);
                    }
                }
            }
            for (sums, y) in sums.iter().zip(y.chunks_exact_mut(rows)) {
                for (r, sum) in sums.iter().enumerate().filter(|(r, _)| first + r < rows) {
                    y[first + r] += _mm512_reduce_add_ps(*sum);
                }
            }
        }
    }
}
