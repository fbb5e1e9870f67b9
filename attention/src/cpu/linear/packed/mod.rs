//! A linear layer's product on Flex with its weights kept packed in ggml's blocks
//! ([`crate::packed`]: Q8_0, Q4_0, Q4_1), `[out, in]` viewed as `[in, out]` as a checkpoint's
//! float weights are ([`super::product`]).
//!
//! One row (a decoding step) is computed as llama.cpp computes it: the row of activations is
//! quantized once per product into blocks of 32 `i8` with an f32 scale each ([`Activations`]),
//! and each weight block meets its block of activations as an integer dot product, scaled by
//! both scales (plus the minimum or the centre of 8 times the activations' block sum for the
//! 4-bit formats). Integer products are exact, so every path gives the same sums up to the
//! order of the f32 additions; the activations' rounding is the only error beside the
//! weights' own, within `½·d_x·Σ|w|` a block (the tests' bound). On AVX2 ([`avx2`]) two
//! weight rows meet each block of activations; elsewhere plain code ([`row_dot`]). Chosen by
//! measurement: with f32 activations (each block unpacked in registers, [`widened`]'s
//! arithmetic) SmolLM2-135M decodes its Q4_1 file at 11–13 ms a token, with integer dot
//! products at 7–8 (Xeon with AVX-512, AVX2 kernels, 2 threads).
//!
//! More rows (a prompt's prefill) keep f32 activations, the weights unpacked exactly: up to
//! [`super::MAX_ROWS`] rows on AVX2 by [`widened::tiles`], each block unpacked in registers once
//! for up to 8 rows of `x`; more (or without AVX2) a panel of outputs' weights unpacked into a
//! buffer of its own thread, then multiplied by gemm, as bf16 weights are without AVX-512
//! ([`super::half_weights`]): no more than a panel per thread is ever unpacked.

use burn::backend::Flex;
use burn::backend::flex::{FlexTensor, Layout};
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{Bytes, DType, Shape, TensorData, TensorMetadata};
use pulp::{Simd, WithSimd};

use super::isa::{Isa, isa};
use super::{PART, by_panels, one_row};
use crate::cpu::layout;
use crate::cpu::matmul::{Mat, matmul};
use crate::packed::{BLOCK, Packing, half, quantize_block, unpack};

mod avx2;
mod widened;

/// Outputs per panel at least, so that each gemm call has rows to tile.
const PANEL: usize = 64;

/// `x·w (+ b)` for `x: [rows, in]` (f32), `w: [in, out]` packed in `packing` with strides
/// `[1, in]` (the stored `[out, in]` transposed, from its first element) and `b: [out]` (f32)
/// → `[rows, out]` in f32. The caller ([`super::product`]) has checked the dtypes, layout and
/// sizes.
pub fn product(
    x: &FlexTensor,
    w: &FlexTensor,
    b: Option<&FlexTensor>,
    packing: Packing,
) -> FlexTensor {
    let ([rows, k], [_, n]) = (x.shape().dims::<2>(), w.shape().dims::<2>());
    let row_bytes = packing.row_bytes(k);
    let stored = &w.bytes()[..n * row_bytes];
    let (xs, bias) = (layout::read(x), b.map(layout::read));
    if rows == 1 {
        let activations = Activations::new(&xs);
        return one_row(n, k, bias.as_deref(), |outputs, y| {
            let rows = &stored[outputs.start * row_bytes..outputs.end * row_bytes];
            dots(packing, &activations, rows, y);
        });
    }
    let few = rows <= super::MAX_ROWS && isa() >= Isa::Avx2;
    let x_t = Mat::new(&xs, rows, k).t();
    by_panels((n, rows), (PART / k).max(PANEL), bias.as_deref(), |outputs, dst| {
        let weights = &stored[outputs.start * row_bytes..outputs.end * row_bytes];
        if few && widened::tiles(packing, &xs, k, weights, dst) {
            return;
        }
        let mut wide = vec![0.0f32; outputs.len() * k];
        unpack(packing, weights, &mut wide);
        matmul(dst, Mat::new(&wide, outputs.len(), k), x_t, 1.0, bias.is_some());
    })
}

/// A row of activations quantized for integer dot products ([`quantize_block`]): per block of
/// 32, the scale `d = max|x| / 127`, the `i8` values `x / d` rounded to the nearest (ties to
/// even, as llama.cpp's SIMD quantizers round), and their sum times `d`.
pub struct Activations {
    /// Each block's scale.
    scales: Vec<f32>,
    /// The quantized values, 32 a block.
    quants: Vec<i8>,
    /// Each block's `d · Σ q`, for the 4-bit formats' minimum and centre.
    sums: Vec<f32>,
}

impl Activations {
    /// `x` (a multiple of [`BLOCK`] long) quantized, in SIMD lanes where the CPU has them.
    pub fn new(x: &[f32]) -> Self {
        let blocks = x.len() / BLOCK;
        let mut quantized = Activations {
            scales: vec![0.0; blocks],
            quants: vec![0; blocks * BLOCK],
            sums: vec![0.0; blocks],
        };
        pulp::Arch::new().dispatch(Quantize { x, to: &mut quantized });
        quantized
    }
}

/// [`Activations::new`]'s work, written as plain loops over a block that the compiler
/// vectorises under the instruction set `pulp` dispatches to.
struct Quantize<'a> {
    x: &'a [f32],
    to: &'a mut Activations,
}

impl WithSimd for Quantize<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Activations { scales, quants, sums } = self.to;
        let blocks = self.x.chunks_exact(BLOCK).zip(quants.chunks_exact_mut(BLOCK));
        for ((block, q), (scale, sum)) in blocks.zip(scales.iter_mut().zip(sums.iter_mut())) {
            let d = quantize_block(block, q);
            *scale = d;
            *sum = d * q.iter().map(|&q| q as i32).sum::<i32>() as f32;
        }
    }
}

/// `y[j] = x · w[j]` for the packed rows `w[j]` of `rows` and the quantized `x`: on AVX2 where
/// the CPU has it (and `SWA_CPU_ISA` does not cap it, [`super::isa`]), else by [`row_dot`].
fn dots(packing: Packing, x: &Activations, rows: &[u8], y: &mut [f32]) {
    if isa() >= Isa::Avx2 && avx2::dots(packing, x, rows, y) {
        return;
    }
    for (row, y) in rows.chunks_exact(packing.row_bytes(x.quants.len())).zip(y) {
        *y = row_dot(packing, x, row);
    }
}

/// `x · w` for one packed row `w`, block by block: the integer dot product of the weights'
/// and the activations' integers, times both scales, plus the 4-bit formats' minimum (Q4_1)
/// or centre (Q4_0's −8·d) times the activations' block sum.
fn row_dot(packing: Packing, x: &Activations, row: &[u8]) -> f32 {
    let blocks = row.chunks_exact(packing.block_bytes()).zip(x.quants.chunks_exact(BLOCK));
    let mut sum = 0.0;
    for (b, (block, q)) in blocks.enumerate() {
        let d = half(block, 0) * x.scales[b];
        sum += match packing {
            Packing::Q8_0 => {
                let w = &block[2..2 + BLOCK];
                d * w.iter().zip(q).map(|(&w, &q)| w as i8 as i32 * q as i32).sum::<i32>() as f32
            }
            Packing::Q4_0 | Packing::Q4_1 => {
                let nibbles = &block[block.len() - BLOCK / 2..];
                let (low, high) = q.split_at(BLOCK / 2);
                let dot: i32 = nibbles
                    .iter()
                    .zip(low.iter().zip(high))
                    .map(|(&w, (&a, &b))| (w & 0xF) as i32 * a as i32 + (w >> 4) as i32 * b as i32)
                    .sum();
                let offset = match packing {
                    Packing::Q4_1 => half(block, 2),
                    _ => -8.0 * half(block, 0),
                };
                d * dot as f32 + offset * x.sums[b]
            }
        };
    }
    sum
}

/// `bytes`, the rows of `[rows, in]` packed in `packing`, as a tensor of
/// [`Packing::dtype`] ([`crate::LayerOpsBackend::pack`]): its layout counts elements, as an
/// unpacked tensor's would, so every view of it (the transposed `[in, rows]` of a linear
/// layer's weight) applies to its unpacked values unchanged.
pub fn packed_tensor(bytes: Vec<u8>, packing: Packing, [rows, k]: [usize; 2]) -> FlexTensor {
    let layout = Layout::contiguous(Shape::new([rows, k]));
    FlexTensor::new(Bytes::from_bytes_vec(bytes), layout, packing.dtype())
}

/// The values of `w` in f32 ([`crate::LayerOpsBackend::unpack`]): a packed tensor's unpacked
/// under its own view; with `ids`, only those stored rows, `[ids, in]` (a row outside the
/// table comes back as NaN). A tensor that is not packed is itself, or its rows `ids`.
pub fn unpacked_tensor(w: FlexTensor, ids: Option<FlexTensor>) -> FlexTensor {
    let Some(packing) = Packing::of(w.dtype()) else {
        return match ids {
            Some(ids) => Flex::float_select(w, 0, ids),
            None => w,
        };
    };
    let k = w.layout().strides().iter().copied().max().unwrap_or(1).max(1) as usize;
    let (stored, row_bytes) = (w.bytes(), packing.row_bytes(k));
    let stored_rows = stored.len() / row_bytes.max(1);
    let table = w.layout().clone() == Layout::contiguous(Shape::new([stored_rows, k]));
    match ids {
        Some(ids) if table => {
            let ids: Vec<i64> = ids.into_data().iter::<i64>().collect();
            let mut rows = vec![f32::NAN; ids.len() * k];
            for (&id, out) in ids.iter().zip(rows.chunks_exact_mut(k)) {
                let at = usize::try_from(id).ok().filter(|&id| id < stored_rows);
                if let Some(at) = at {
                    unpack(packing, &stored[at * row_bytes..(at + 1) * row_bytes], out);
                }
            }
            FlexTensor::from_data(TensorData::new(rows, [ids.len(), k]))
        }
        ids => {
            let mut values = vec![0.0f32; stored_rows * k];
            unpack(packing, stored, &mut values);
            let layout = w.layout().clone();
            let values = FlexTensor::new(Bytes::from_elems(values), layout, DType::F32);
            unpacked_tensor(values, ids)
        }
    }
}

#[cfg(test)]
mod tests;
