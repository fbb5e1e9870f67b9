//! The elementwise arithmetic of the kernel: `exp`, `σ`, sums, maxima and dot products written
//! as plain loops over slices that the compiler vectorises once they run under pulp's dispatch
//! (`pulp::Arch::dispatch`), which compiles the tile code for the widest SIMD the CPU has
//! (AVX2 + FMA on most x86-64). Every function here is `#[inline(always)]` so that it is
//! compiled into its caller under that dispatch; [`dots`] and [`add_weighted_rows`] take the
//! dispatch's `Simd` token and keep their sums in its registers.

use pulp::Simd;

/// Below this `e^x` is 0 in f32 (subnormals aside); −∞ lands here too.
const EXP_UNDERFLOW: f32 = -87.33;

/// `e^x`, branch-free so that loops over it vectorise: Cephes' `expf` (`x = n·ln 2 + r`, a
/// degree-7 polynomial for `e^r`, then `2^n` through the exponent bits), within about 1 ulp of
/// `f32::exp` and exactly 0 below [`EXP_UNDERFLOW`].
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    // Adding 1.5·2²³ rounds to an integer `n` and leaves it in the low mantissa bits, so `2^n`
    // needs no float-to-int conversion (whose saturating checks would not vectorise).
    const ROUND: f32 = 12_582_912.0;
    let clamped = x.clamp(EXP_UNDERFLOW, 88.37);
    let shifted = clamped * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = clamped - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let biased = shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    let y = (p * r * r + r + 1.0) * f32::from_bits(biased << 23);
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

/// `y[r] = x · rows[r]` for the rows of `rows`, each `x.len()` floats, contiguous (a
/// matrix-vector product): four rows at a time, whose four independent sums hide the
/// additions' latency, each row's tail past whole vectors by [`dot`].
#[inline(always)]
pub(crate) fn dots<S: Simd>(simd: S, x: &[f32], rows: &[f32], y: &mut [f32]) {
    let k = x.len();
    if k == 0 {
        y.fill(0.0);
        return;
    }
    let (x_head, x_tail) = S::as_simd_f32s(x);
    let mut fours = rows.chunks_exact(4 * k);
    let mut outputs = y.chunks_exact_mut(4);
    for (four, y) in (&mut fours).zip(&mut outputs) {
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
    for (row, y) in fours.remainder().chunks_exact(k).zip(outputs.into_remainder()) {
        *y = dot(x, row);
    }
}

/// Vectors of the output [`add_weighted_rows`] keeps in registers while it reads every row.
const HELD: usize = 4;

/// `out += Σ_r weights[r] · rows[r]` for the rows of `rows`, each `out.len()` floats,
/// contiguous (a vector-matrix product); rows of weight 0 (hidden keys) are skipped. [`HELD`]
/// vectors of `out` at a time stay in registers over all the rows, so each row costs one fused
/// multiply-add per vector and no store.
#[inline(always)]
pub(crate) fn add_weighted_rows<S: Simd>(simd: S, weights: &[f32], rows: &[f32], out: &mut [f32]) {
    let (d, lanes) = (out.len(), S::F32_LANES);
    let whole = d / lanes * lanes;
    let (head, tail) = out.split_at_mut(whole);
    let (head, _) = S::as_mut_simd_f32s(head);
    let mut blocks = head.chunks_exact_mut(HELD);
    let mut start = 0;
    for block in &mut blocks {
        accumulate::<S, HELD>(simd, weights, rows, [d, start], block);
        start += HELD * lanes;
    }
    for one in blocks.into_remainder().chunks_exact_mut(1) {
        accumulate::<S, 1>(simd, weights, rows, [d, start], one);
        start += lanes;
    }
    if whole < d {
        for (r, &w) in weights.iter().enumerate() {
            let row = &rows[r * d + whole..(r + 1) * d];
            tail.iter_mut().zip(row).for_each(|(o, &x)| *o += w * x);
        }
    }
}

/// [`add_weighted_rows`] for the `N` vectors `out` of the output, which start at float
/// `start` of each row of `d` floats.
#[inline(always)]
fn accumulate<S: Simd, const N: usize>(
    simd: S,
    weights: &[f32],
    rows: &[f32],
    [d, start]: [usize; 2],
    out: &mut [S::f32s],
) {
    let mut sums: [S::f32s; N] = std::array::from_fn(|v| out[v]);
    for (r, &w) in weights.iter().enumerate() {
        if w == 0.0 {
            continue;
        }
        let at = r * d + start;
        let (part, _) = S::as_simd_f32s(&rows[at..at + N * S::F32_LANES]);
        let w = simd.splat_f32s(w);
        for (sum, &x) in sums.iter_mut().zip(part) {
            *sum = simd.mul_add_e_f32s(w, x, *sum);
        }
    }
    out.copy_from_slice(&sums);
}

/// `σ(x) = 1 / (1 + e^−x)`.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}
