//! The block products of the kernel, `dst (+)= alpha·lhs·rhs`, through gemm 0.19, the crate
//! burn-flex's matmul uses, one call per block on the calling thread (the kernel's threads go
//! over tiles).
//!
//! A hand-written pulp microkernel that skips the masked corners of a window band (panels of
//! 4 rows over the union of their live ranges, with transposed key copies) is slower than
//! gemm on a causal window's block shapes, so the products are computed whole and the passes
//! give the masked entries weight 0.

use std::ops::Range;

/// A matrix view of `rows × cols` floats of `data`: element `(i, j)` at
/// `i·row_stride + j·col_stride`.
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

    /// A `rows × cols` view of `data` with element `(i, j)` at `i·row_stride + j·col_stride`,
    /// e.g. a tensor's transposed view.
    pub fn strided(
        data: &'a [f32],
        [rows, cols]: [usize; 2],
        [row_stride, col_stride]: [usize; 2],
    ) -> Self {
        Self { data, rows, cols, row_stride, col_stride }
    }

    /// The rows `range` of the view.
    pub fn row_range(self, range: Range<usize>) -> Self {
        let data = &self.data[(range.start * self.row_stride).min(self.data.len())..];
        Self { data, rows: range.len(), ..self }
    }

    /// The transpose, read in place.
    pub fn t(self) -> Self {
        let Self { data, rows, cols, row_stride, col_stride } = self;
        Self { data, rows: cols, cols: rows, row_stride: col_stride, col_stride: row_stride }
    }

    /// Whether every element lies inside `data`, so that gemm may read them.
    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// `dst = (dst if accumulate) + alpha·lhs·rhs`, `dst` row-major `lhs.rows × rhs.cols`.
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
