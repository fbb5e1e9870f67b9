//! RMSNorm and the MLP's gate (SiLU or tanh GELU) on `Flex` ([`crate::layer_ops::LayerKernels`]):
//! each direction one pass over the rows, compiled under pulp's dispatch so that `exp` and the row
//! sums vectorise ([`super::math`], [`Chunk`]), threads (rayon) over chunks of rows big enough to
//! be worth a thread. Inputs are read as f32 (half precision converted, so it accumulates in f32)
//! and outputs return in the inputs' dtype; the inverse RMS of each row stays f32.

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, Shape, TensorData, TensorMetadata};
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::layout;
use super::math::{dot, exp};
use crate::layer_ops::{LayerKernels, MlpActivation, RmsOptions};

/// Elements a thread takes at least: below this a row chunk runs on the calling thread.
const TASK: usize = 1 << 14;

/// `Flex`'s layer kernels.
pub(crate) fn kernels() -> LayerKernels<burn::backend::Flex> {
    LayerKernels {
        rms_norm,
        rms_norm_backward,
        gate,
        gate_backward,
        cross_entropy: super::cross_entropy::cross_entropy,
        cross_entropy_backward: super::cross_entropy::cross_entropy_backward,
    }
}

/// `x: [..., D]`, `w: [D]` → (`y`, the inverse RMS of each row, `[rows]` f32).
fn rms_norm(x: FlexTensor, w: FlexTensor, options: RmsOptions) -> [FlexTensor; 2] {
    let (shape, width) = (x.shape(), w.shape().num_elements());
    let (xs, gamma) = (layout::read(&x), gamma(&w, options));
    let rows = xs.len() / width.max(1);
    let mut y = vec![0.0f32; xs.len()];
    let mut inverse = vec![0.0f32; rows];
    let per_task = (TASK / width.max(1)).max(1);
    let tasks = y.par_chunks_mut(per_task * width).zip(inverse.par_chunks_mut(per_task));
    tasks.zip(xs.par_chunks(per_task * width)).for_each(|((y, inverse), x)| {
        let gamma = &gamma;
        vectorised(Chunk::RmsNorm { x, y, inverse, gamma, epsilon: options.epsilon });
    });
    [tensor(y, shape, x.dtype()), tensor(inverse, Shape::new([rows]), DType::F32)]
}

/// `∂L/∂x = r·h − x·r³·(h·x)/D` with `h = γ ∘ ∂L/∂y`, and `∂L/∂w = Σ_rows ∂L/∂y ∘ x·r`.
fn rms_norm_backward(
    x: FlexTensor,
    w: FlexTensor,
    inverse: FlexTensor,
    d_y: FlexTensor,
    options: RmsOptions,
) -> [FlexTensor; 2] {
    let width = w.shape().num_elements();
    let (xs, gamma, d_ys) = (layout::read(&x), gamma(&w, options), layout::read(&d_y));
    let inverse = layout::read(&inverse);
    let mut d_x = vec![0.0f32; xs.len()];
    let per_task = (TASK / width.max(1)).max(1);
    let chunk = per_task * width;
    let tasks = d_x.par_chunks_mut(chunk).zip(xs.par_chunks(chunk)).zip(d_ys.par_chunks(chunk));
    let d_w = tasks
        .zip(inverse.par_chunks(per_task))
        .map(|(((d_x, x), d_y), inverse)| {
            vectorised(Chunk::RmsNormBackward { x, d_y, inverse, gamma: &gamma, d_x })
        })
        .reduce(|| vec![0.0f32; width], |a, b| a.iter().zip(&b).map(|(a, b)| a + b).collect());
    [tensor(d_x, x.shape(), x.dtype()), tensor(d_w, w.shape(), w.dtype())]
}

/// `γ` as f32: `w`, or `1 + w` under `unit_offset`.
fn gamma(w: &FlexTensor, options: RmsOptions) -> Vec<f32> {
    let w = layout::read(w);
    match options.unit_offset {
        true => w.iter().map(|w| 1.0 + w).collect(),
        false => w.into_owned(),
    }
}

/// `act(a)·b` of `[a | b]`, `both: [..., 2F]` → `[..., F]`.
fn gate(both: FlexTensor, activation: MlpActivation) -> FlexTensor {
    let (mut shape, dtype) = (both.shape(), both.dtype());
    let last = shape.num_dims() - 1;
    let width = shape[last] / 2;
    shape[last] = width;
    let both = layout::read(&both);
    let mut z = vec![0.0f32; both.len() / 2];
    if width > 0 {
        let rows = (TASK / (2 * width)).max(1);
        let tasks = z.par_chunks_mut(rows * width).zip(both.par_chunks(2 * rows * width));
        tasks.for_each(|(z, both)| {
            vectorised(Chunk::Gate { both, z, width, activation });
        });
    }
    tensor(z, shape, dtype)
}

/// `∂L/∂[a | b]` `= [g·b·act′(a) | g·act(a)]` for `both: [..., 2F]` and `∂L/∂z = g: [..., F]`.
fn gate_backward(both: FlexTensor, d_z: FlexTensor, activation: MlpActivation) -> FlexTensor {
    let (shape, dtype) = (both.shape(), both.dtype());
    let width = shape[shape.num_dims() - 1] / 2;
    let (both, d_z) = (layout::read(&both), layout::read(&d_z));
    let mut d_both = vec![0.0f32; both.len()];
    if width > 0 {
        let rows = (TASK / (2 * width)).max(1);
        let outputs = d_both.par_chunks_mut(2 * rows * width);
        let inputs = both.par_chunks(2 * rows * width).zip(d_z.par_chunks(rows * width));
        outputs.zip(inputs).for_each(|(d_both, (both, d_z))| {
            vectorised(Chunk::GateBackward { both, d_z, d_both, width, activation });
        });
    }
    tensor(d_both, shape, dtype)
}

/// One task's share of a kernel, run under pulp's dispatch by [`vectorised`]. The loops are
/// reached from the dispatch through `#[inline(always)]` methods only: a closure handed to the
/// dispatch is called through its `FnOnce` shim, which is compiled apart from the dispatch's
/// target features (its loops are SSE's instead of AVX-512's).
enum Chunk<'a> {
    RmsNorm {
        x: &'a [f32],
        y: &'a mut [f32],
        inverse: &'a mut [f32],
        gamma: &'a [f32],
        epsilon: f64,
    },
    RmsNormBackward {
        x: &'a [f32],
        d_y: &'a [f32],
        inverse: &'a [f32],
        gamma: &'a [f32],
        d_x: &'a mut [f32],
    },
    /// Rows of `[a | b]`, `2·width` each, into rows of `z`.
    Gate { both: &'a [f32], z: &'a mut [f32], width: usize, activation: MlpActivation },
    /// Rows of `[a | b]` and of `∂L/∂z` into rows of `∂L/∂[a | b]`.
    GateBackward {
        both: &'a [f32],
        d_z: &'a [f32],
        d_both: &'a mut [f32],
        width: usize,
        activation: MlpActivation,
    },
}

/// `chunk` compiled for the CPU's widest SIMD; its result (∂w's partial sums) or an empty
/// vector.
fn vectorised(chunk: Chunk<'_>) -> Vec<f32> {
    pulp::Arch::new().dispatch(chunk)
}

impl WithSimd for Chunk<'_> {
    type Output = Vec<f32>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> Vec<f32> {
        match self {
            Chunk::RmsNorm { x, y, inverse, gamma, epsilon } => {
                rms_rows(x, y, inverse, gamma, epsilon);
                Vec::new()
            }
            Chunk::RmsNormBackward { x, d_y, inverse, gamma, d_x } => {
                rms_rows_backward(x, d_y, inverse, gamma, d_x)
            }
            Chunk::Gate { both, z, width, activation } => {
                for (both, z) in both.chunks_exact(2 * width).zip(z.chunks_exact_mut(width)) {
                    gate_row(both, z, activation);
                }
                Vec::new()
            }
            Chunk::GateBackward { both, d_z, d_both, width, activation } => {
                let rows = both.chunks_exact(2 * width).zip(d_z.chunks_exact(width));
                for ((both, d_z), d_both) in rows.zip(d_both.chunks_exact_mut(2 * width)) {
                    gate_row_backward(both, d_z, d_both, activation);
                }
                Vec::new()
            }
        }
    }
}

/// One row: `z = act(a)·b` for `both = [a | b]`. Indexed over slices of one length, which the
/// compiler vectorises (zipped iterators over a row's halves it left scalar).
#[inline(always)]
fn gate_row(both: &[f32], z: &mut [f32], activation: MlpActivation) {
    let n = z.len();
    let (a, b) = (&both[..n], &both[n..2 * n]);
    match activation {
        MlpActivation::Silu => {
            for i in 0..n {
                z[i] = a[i] * b[i] / (1.0 + exp(-a[i]));
            }
        }
        MlpActivation::GeluTanh => {
            for i in 0..n {
                z[i] = gelu_tanh(a[i])[0] * b[i];
            }
        }
    }
}

/// One row: `∂L/∂[a | b]` for `both = [a | b]` and `∂L/∂z = d_z`, indexed as [`gate_row`].
#[inline(always)]
fn gate_row_backward(both: &[f32], d_z: &[f32], d_both: &mut [f32], activation: MlpActivation) {
    let n = d_z.len();
    let (a, b) = (&both[..n], &both[n..2 * n]);
    let (d_a, d_b) = d_both[..2 * n].split_at_mut(n);
    match activation {
        MlpActivation::Silu => {
            for i in 0..n {
                let s = 1.0 / (1.0 + exp(-a[i]));
                d_a[i] = d_z[i] * b[i] * s * (1.0 + a[i] * (1.0 - s));
                d_b[i] = d_z[i] * a[i] * s;
            }
        }
        MlpActivation::GeluTanh => {
            for i in 0..n {
                let [value, slope] = gelu_tanh(a[i]);
                d_a[i] = d_z[i] * b[i] * slope;
                d_b[i] = d_z[i] * value;
            }
        }
    }
}

/// The tanh GELU `½x(1 + t)`, `t = tanh(√(2/π)(x + 0.044715x³))`, and its derivative
/// `½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)`; `tanh u = 1 − 2/(e^{2u} + 1)` through the
/// vectorised `exp` (an overflow to ∞ gives 1, an underflow to 0 gives −1).
#[inline(always)]
fn gelu_tanh(x: f32) -> [f32; 2] {
    const C: f32 = 0.797_884_6; // √(2/π)
    let u = C * (x + 0.044715 * x * x * x);
    let t = 1.0 - 2.0 / (exp(2.0 * u) + 1.0);
    let du = C * (1.0 + 3.0 * 0.044715 * x * x);
    [0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du]
}

/// RMSNorm of rows of `gamma.len()`: `y` and each row's inverse RMS.
#[inline(always)]
fn rms_rows(x: &[f32], y: &mut [f32], inverse: &mut [f32], gamma: &[f32], epsilon: f64) {
    let width = gamma.len();
    let rows = x.chunks_exact(width).zip(y.chunks_exact_mut(width));
    for ((x, y), r) in rows.zip(inverse.iter_mut()) {
        *r = (dot(x, x) as f64 / width as f64 + epsilon).powf(-0.5) as f32;
        for ((y, &x), &g) in y.iter_mut().zip(x).zip(gamma) {
            *y = x * *r * g;
        }
    }
}

/// RMSNorm's backward over rows: `d_x`, and the rows' partial sums of `∂L/∂w`.
#[inline(always)]
fn rms_rows_backward(
    x: &[f32],
    d_y: &[f32],
    inverse: &[f32],
    gamma: &[f32],
    d_x: &mut [f32],
) -> Vec<f32> {
    let width = gamma.len();
    let mut d_w = vec![0.0f32; width];
    let mut h = vec![0.0f32; width];
    let rows = x.chunks_exact(width).zip(d_y.chunks_exact(width));
    for (((x, d_y), d_x), &r) in rows.zip(d_x.chunks_exact_mut(width)).zip(inverse) {
        for (((h, &d_y), &g), (d_w, &x)) in
            h.iter_mut().zip(d_y).zip(gamma).zip(d_w.iter_mut().zip(x))
        {
            *h = g * d_y;
            *d_w += d_y * x * r;
        }
        let shift = r * r * r * dot(&h, x) / width as f32;
        for ((d_x, &h), &x) in d_x.iter_mut().zip(&h).zip(x) {
            *d_x = r * h - x * shift;
        }
    }
    d_w
}

/// A tensor of `shape` and `dtype` from f32 values.
fn tensor(values: Vec<f32>, shape: Shape, dtype: DType) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape).convert_dtype(dtype))
}
