//! Weights kept packed in ggml's blocks of 32 (Q8_0, Q4_0, Q4_1: a quantized GGUF file's own
//! bytes, or a float checkpoint quantized on load), for products that read them as they are.
//! A packed weight is a linear layer's `[out, in]` (or an embedding table's `[vocab, d]`): each
//! row `in / 32` blocks, one after the other; a block is an f16 scale `d` (and an f16 minimum
//! `m` for Q4_1), then its 32 values' integers. Value `j` of a block is
//!
//! - Q8_0: `d · q_j`, `q_j` an `i8` (34 bytes a block);
//! - Q4_0: `d · (q_j − 8)`, `q_j` four bits (18 bytes);
//! - Q4_1: `d · q_j + m`, `q_j` four bits (20 bytes);
//!
//! the 4-bit formats holding values `j` and `j + 16` in the low and high nibble of byte `j`.
//!
//! A backend that keeps such weights ([`crate::LayerOpsBackend::pack`]) holds them in a float
//! tensor whose dtype is [`Packing::dtype`], Burn's quantized dtype nearest to the block (a
//! tag: the bytes are ggml's, which only the backend's products and [`unpack`] read). Products
//! and lookups go through [`crate::layer_ops`], which reads them there or unpacks them.

use burn::tensor::quantization::{
    BlockSize, QuantLevel, QuantMode, QuantParam, QuantScheme, QuantStore, QuantValue,
};
use burn::tensor::{DType, f16};

/// Values per block.
pub const BLOCK: usize = 32;

/// One block of activations quantized for integer dot products against packed weights, as the
/// one-row products quantize them (and llama.cpp does): the scale `d = max|x| / 127`, returned,
/// and each value's integer `x / d` rounded to the nearest, ties to even, into `q`.
#[inline(always)]
pub fn quantize_block(block: &[f32], q: &mut [i8]) -> f32 {
    let d = block.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
    let inverse = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(block) {
        *q = (v * inverse).round_ties_even() as i8;
    }
    d
}

/// `x` (a multiple of [`BLOCK`] long) as a one-row product on packed weights sees it: each
/// block quantized by [`quantize_block`] and scaled back, `d · q`. That product equals the
/// unpacked weights' product with these activations up to the order of its sums, which makes
/// this the products' reference ([`crate::layer_ops::product`]'s fallback).
pub fn round_activations(x: &mut [f32]) {
    let mut q = [0i8; BLOCK];
    for block in x.chunks_exact_mut(BLOCK) {
        let d = quantize_block(block, &mut q);
        block.iter_mut().zip(&q).for_each(|(v, &q)| *v = d * q as f32);
    }
}

/// A block format of packed weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packing {
    /// An f16 scale and 32 `i8`.
    Q8_0,
    /// An f16 scale and 32 four-bit values centred on 8.
    Q4_0,
    /// An f16 scale and minimum and 32 four-bit values.
    Q4_1,
}

impl Packing {
    /// Every format.
    pub const ALL: [Packing; 3] = [Packing::Q8_0, Packing::Q4_0, Packing::Q4_1];

    /// ggml's name: `Q8_0`, `Q4_0`, `Q4_1`.
    pub fn name(self) -> &'static str {
        match self {
            Packing::Q8_0 => "Q8_0",
            Packing::Q4_0 => "Q4_0",
            Packing::Q4_1 => "Q4_1",
        }
    }

    /// Bytes per block of 32 values.
    pub fn block_bytes(self) -> usize {
        match self {
            Packing::Q8_0 => 34,
            Packing::Q4_0 => 18,
            Packing::Q4_1 => 20,
        }
    }

    /// Bytes of a row of `len` values (a multiple of [`BLOCK`]).
    pub fn row_bytes(self, len: usize) -> usize {
        len / BLOCK * self.block_bytes()
    }

    /// The dtype that tags a tensor holding weights in this format: Burn's quantized dtype of
    /// blocks of 32 along the rows with f16 parameters and 8-bit symmetric (Q8_0), 4-bit
    /// symmetric (Q4_0) or 4-bit full-range (Q4_1, which also has a minimum) values.
    pub fn dtype(self) -> DType {
        let value = match self {
            Packing::Q8_0 => QuantValue::Q8S,
            Packing::Q4_0 => QuantValue::Q4S,
            Packing::Q4_1 => QuantValue::Q4F,
        };
        DType::QFloat(QuantScheme {
            value,
            param: QuantParam::F16,
            store: QuantStore::PackedNative(1),
            level: QuantLevel::Block(BlockSize::new([1, BLOCK as u8])),
            mode: QuantMode::Symmetric,
        })
    }

    /// The format a tensor of `dtype` holds, if it is packed.
    pub fn of(dtype: DType) -> Option<Packing> {
        let DType::QFloat(scheme) = dtype else {
            return None;
        };
        let packing = match scheme.value {
            QuantValue::Q8S => Packing::Q8_0,
            QuantValue::Q4S => Packing::Q4_0,
            QuantValue::Q4F => Packing::Q4_1,
            _ => return None,
        };
        (packing.dtype() == dtype).then_some(packing)
    }

    /// The 32 values of `block` (its [`Packing::block_bytes`] bytes).
    pub fn unpack_block(self, block: &[u8], out: &mut [f32]) {
        let d = half(block, 0);
        match self {
            Packing::Q8_0 => {
                for (o, &q) in out.iter_mut().zip(&block[2..2 + BLOCK]) {
                    *o = d * q as i8 as f32;
                }
            }
            Packing::Q4_0 | Packing::Q4_1 => {
                let (offset, m) = match self {
                    Packing::Q4_1 => (0.0, half(block, 2)),
                    _ => (8.0, 0.0),
                };
                let nibbles = &block[block.len() - BLOCK / 2..];
                for (j, &q) in nibbles.iter().enumerate() {
                    out[j] = d * ((q & 0xF) as f32 - offset) + m;
                    out[j + BLOCK / 2] = d * ((q >> 4) as f32 - offset) + m;
                }
            }
        }
    }

    /// `values` (a multiple of [`BLOCK`] long) quantized into blocks appended to `out`, as
    /// llama.cpp's reference quantizers do: Q8_0 scales by the block's largest magnitude over
    /// 127, Q4_0 by its value of largest magnitude over −8, Q4_1 spans its minimum to its maximum
    /// in 15 steps; each value rounds to the nearest integer step.
    pub fn pack(self, values: &[f32], out: &mut Vec<u8>) {
        for block in values.chunks_exact(BLOCK) {
            let extreme = block.iter().fold(0.0f32, |e, &v| if v.abs() > e.abs() { v } else { e });
            match self {
                Packing::Q8_0 => {
                    let d = extreme.abs() / 127.0;
                    let inverse = if d > 0.0 { 1.0 / d } else { 0.0 };
                    out.extend(f16::from_f32(d).to_bits().to_le_bytes());
                    out.extend(block.iter().map(|&v| (v * inverse).round() as i8 as u8));
                }
                Packing::Q4_0 | Packing::Q4_1 => {
                    let (d, m, offset) = match self {
                        Packing::Q4_0 => (extreme / -8.0, 0.0, 8.0),
                        _ => {
                            let min = block.iter().copied().fold(f32::INFINITY, f32::min);
                            let max = block.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                            ((max - min) / 15.0, min, 0.0)
                        }
                    };
                    let inverse = if d != 0.0 { 1.0 / d } else { 0.0 };
                    let q = |v: f32| ((v - m) * inverse + offset + 0.5).clamp(0.0, 15.0) as u8;
                    out.extend(f16::from_f32(d).to_bits().to_le_bytes());
                    if self == Packing::Q4_1 {
                        out.extend(f16::from_f32(m).to_bits().to_le_bytes());
                    }
                    let (low, high) = block.split_at(BLOCK / 2);
                    out.extend(low.iter().zip(high).map(|(&a, &b)| q(a) | q(b) << 4));
                }
            }
        }
    }
}

/// Bytes a tensor of `elements` values of `dtype` holds: packed, its blocks' bytes.
pub fn held_bytes(dtype: DType, elements: usize) -> usize {
    match Packing::of(dtype) {
        Some(packing) => packing.row_bytes(elements),
        None => elements * dtype.size(),
    }
}

/// The values of `rows` of packed weights (each `row_bytes` bytes of `packing`), row after row.
pub fn unpack(packing: Packing, rows: &[u8], out: &mut [f32]) {
    let blocks = rows.chunks_exact(packing.block_bytes()).zip(out.chunks_exact_mut(BLOCK));
    for (block, out) in blocks {
        packing.unpack_block(block, out);
    }
}

/// The f16 at `bytes[at..at + 2]` as f32.
pub fn half(bytes: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [−1, 1) that no two neighbours share, with an outlier per block.
    fn values(n: usize) -> Vec<f32> {
        let value = |i: usize| ((i * 7919) % 1000) as f32 / 500.0 - 1.0;
        (0..n).map(|i| if i % 32 == 5 { 3.0 * value(i) } else { value(i) }).collect()
    }

    /// Packing then unpacking lands each value within half a step of the block's scale (Q4_0:
    /// a step), and each format's tag names it.
    #[test]
    fn packed_values_come_back_within_half_a_step() {
        let values = values(4 * BLOCK);
        for packing in Packing::ALL {
            let mut bytes = Vec::new();
            packing.pack(&values, &mut bytes);
            assert_eq!(bytes.len(), packing.row_bytes(values.len()));
            let mut back = vec![0.0; values.len()];
            unpack(packing, &bytes, &mut back);
            for (block, (want, got)) in values.chunks(BLOCK).zip(back.chunks(BLOCK)).enumerate() {
                let d = half(&bytes[block * packing.block_bytes()..], 0).abs();
                // Half a step (a whole one for Q4_0, whose 16 steps run from −8·d to 7·d: the
                // value opposite its largest magnitude may be clamped to 7·d), and f16's
                // rounding of d and m over up to 15 steps.
                let steps = if packing == Packing::Q4_0 { 1.0 } else { 0.5 };
                let bound = steps * d + 16.0 * d / 1024.0 + 1e-3;
                for (w, g) in want.iter().zip(got) {
                    assert!((w - g).abs() <= bound, "{}: {w} came back {g}", packing.name());
                }
            }
            assert_eq!(Packing::of(packing.dtype()), Some(packing));
        }
        assert_eq!(Packing::of(DType::F32), None);
    }

    /// A block of zeros packs to a zero scale and unpacks to zeros (no division by zero).
    #[test]
    fn a_block_of_zeros_stays_zeros() {
        for packing in Packing::ALL {
            let mut bytes = Vec::new();
            packing.pack(&[0.0; BLOCK], &mut bytes);
            let mut back = [1.0; BLOCK];
            unpack(packing, &bytes, &mut back);
            assert_eq!(back, [0.0; BLOCK], "{}", packing.name());
        }
    }
}
