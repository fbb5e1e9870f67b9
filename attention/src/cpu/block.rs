//! One block of scores and the arithmetic every pass shares (docs/semantics.md §1, §4): the
//! same scores as `crate::scores::attend`, `s = c·tanh(scale·q·k / c) − m_h·(i − j)`, with −∞
//! where the pair is not visible.
//!
//! A block pairs consecutive rows of one query list, each repeated for every head of the group
//! (row `r·G + g` is query `r` of the group's head `g`), with consecutive keys of one key list.
//! Its matrix products go through gemm, the crate burn-flex's matmul uses; the elementwise loops
//! are written as plain loops that vectorise once the caller runs them under [`pulp`]'s dispatch
//! (`pulp::Arch::dispatch`), which compiles them for the widest SIMD the CPU has (AVX2 + FMA on
//! most x86-64).

use crate::{ScoreOptions, WindowSpec};

/// A row-major matrix view of `rows × cols` floats, `stride` apart from row to row, or its
/// transpose.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// The first `rows × cols` floats of `data`, row-major.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self { data, rows, cols, row_stride: cols, col_stride: 1 }
    }

    /// The transpose, read in place.
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Whether every element lies inside `data`, so that gemm may read them.
    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// `dst = (dst if accumulate) + alpha·lhs·rhs`, `dst` row-major `lhs.rows × rhs.cols`, on the
/// calling thread (the kernel's threads go over tiles).
pub(crate) fn matmul(dst: &mut [f32], lhs: Mat, rhs: Mat, alpha: f32, accumulate: bool) {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    assert!(lhs.fits() && rhs.fits() && rhs.rows == k && dst.len() >= m * n, "matmul shapes");
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    // SAFETY: the asserts above keep every element gemm reads or writes inside its slice.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Below this `e^x` is 0 in f32 (subnormals aside); −∞ lands here too.
const EXP_UNDERFLOW: f32 = -87.33;

/// `e^x`, branch-free so that loops over it vectorise: Cephes' `expf` (`x = n·ln 2 + r`, a
/// degree-7 polynomial for `e^r`, then `2^n` through the exponent bits), within about 1 ulp of
/// `f32::exp` and exactly 0 below [`EXP_UNDERFLOW`].
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    // Adding and subtracting 1.5·2²³ rounds to the nearest integer without a rounding instruction.
    const ROUND: f32 = 12_582_912.0;
    let clamped = x.clamp(EXP_UNDERFLOW, 88.37);
    let n = (clamped * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = clamped - n * 0.693_359_375 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = (p * r * r + r + 1.0) * f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x < EXP_UNDERFLOW { 0.0 } else { y }
}

/// Lanes of the partial sums and maxima below: AVX2's eight f32 (two SSE vectors).
const LANES: usize = 8;

/// `Σ xs`, in [`LANES`] partial sums so that the loop vectorises (a single running sum is a
/// chain of dependent additions that the compiler may not reorder).
#[inline(always)]
pub(crate) fn sum(xs: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += x;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The largest of `xs`, −∞ when empty, in [`LANES`] partial maxima as [`sum`].
#[inline(always)]
pub(crate) fn max(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = if x > *lane { x } else { *lane };
        }
    }
    lanes.iter().fold(tail, |a, &x| a.max(x))
}

/// `Σ a·b`, in [`LANES`] partial sums as [`sum`].
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (a, b) in a_chunks.zip(b_chunks) {
        for ((lane, &x), &y) in lanes.iter_mut().zip(a).zip(b) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `σ(x) = 1 / (1 + e^−x)`.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// The rows and columns of one block.
pub(crate) struct Block<'a> {
    /// Query index of each row (each stands for `G` rows, one per head of the group).
    pub queries: &'a [usize],
    /// For class rows, the key-list indices each row sees ([`super::schedule::Rows`]); `None`
    /// to decide every pair with [`WindowSpec::visible`].
    pub intervals: Option<&'a [(usize, usize)]>,
    /// Position of each column's key.
    pub keys: &'a [usize],
    /// Index of the first column's key in its key list.
    pub first_key: usize,
}

impl Block<'_> {
    /// Rows of the block: queries × heads.
    pub fn rows(&self, heads: usize) -> usize {
        self.queries.len() * heads
    }
}

/// What scoring a block needs besides the block: the call's spec and options, and the group.
pub(crate) struct Scoring<'a> {
    /// The call's window spec.
    pub spec: &'a WindowSpec,
    /// The call's score options.
    pub opts: &'a ScoreOptions,
    /// The group's heads.
    pub heads: &'a [usize],
    /// Valid keys.
    pub kv_len: usize,
    /// Head dimension.
    pub dim: usize,
}

impl Scoring<'_> {
    /// Fills `s` (`rows × keys`, row-major) with the scores of `block` from its query rows `q`
    /// (`rows × d`) and key rows `k` (`keys × d`): −∞ where a pair is not visible. With a
    /// softcap, `chain` (same shape), when given, receives `∂s/∂(scale·q·k) = 1 − tanh²`.
    #[inline(always)]
    pub fn scores(
        &self,
        q: &[f32],
        k: &[f32],
        block: &Block,
        s: &mut [f32],
        mut chain: Option<&mut [f32]>,
    ) {
        let (g, n) = (self.heads.len(), block.keys.len());
        let (m, d) = (block.rows(g), self.dim);
        let scale = self.opts.scale_for(d);
        matmul(s, Mat::new(q, m, d), Mat::new(k, n, d).t(), scale, false);
        let offset = self.spec.query_offset();
        let key_positions: Vec<f32> = match self.opts.alibi {
            Some(_) => block.keys.iter().map(|&j| j as f32).collect(),
            None => Vec::new(),
        };
        for (row, s) in s[..m * n].chunks_exact_mut(n).enumerate() {
            let (r, h) = (row / g, self.heads[row % g]);
            let p = offset + block.queries[r];
            if let Some(cap) = self.opts.softcap {
                for (col, x) in s.iter_mut().enumerate() {
                    let t = (*x / cap).tanh();
                    *x = cap * t;
                    if let Some(chain) = chain.as_deref_mut() {
                        chain[row * n + col] = 1.0 - t * t;
                    }
                }
            }
            if let Some(slopes) = &self.opts.alibi {
                let (slope, p) = (slopes[h], p as f32);
                for (x, &j) in s.iter_mut().zip(&key_positions) {
                    *x -= slope * (p - j);
                }
            }
            match block.intervals {
                Some(intervals) => {
                    let (start, end) = intervals[r];
                    let start = start.clamp(block.first_key, block.first_key + n) - block.first_key;
                    let end = end.clamp(block.first_key, block.first_key + n) - block.first_key;
                    s[..start].fill(f32::NEG_INFINITY);
                    s[end.max(start)..].fill(f32::NEG_INFINITY);
                }
                None => {
                    for (x, &j) in s.iter_mut().zip(block.keys) {
                        if !self.spec.visible(h, p, j, self.kv_len) {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }
}
