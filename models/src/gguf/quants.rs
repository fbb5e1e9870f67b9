//! ggml's tensor types that this reader dequantizes, and their blocks (ggml's `ggml-common.h`
//! and `ggml-quants.c`, read for the layouts): a block of 32 values (or 256 for the K-quants)
//! stores half-precision scales and packed integers, and a value is `scale · q` or
//! `scale · q − min`.

use burn::tensor::bf16;
use swa_attention::packed::{Packing, half};

/// Values per K-quant super-block.
const QK_K: usize = 256;

/// The tensor types read: floats, the 32-value quants, and the K-quants Q4_K, Q5_K, Q6_K.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit floats.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// 32 values: an f16 scale and 32 `i8`.
    Q8_0,
    /// 32 values: an f16 scale and 4-bit values centred on 8.
    Q4_0,
    /// 32 values: f16 scale and minimum, 4-bit values.
    Q4_1,
    /// 32 values: an f16 scale and 5-bit values centred on 16.
    Q5_0,
    /// 32 values: f16 scale and minimum, 5-bit values.
    Q5_1,
    /// 256 values in 8 groups of 32: 6-bit group scales and minimums, 4-bit values.
    Q4K,
    /// As Q4_K with a fifth bit per value.
    Q5K,
    /// 256 values in 16 groups of 16: 8-bit group scales, 6-bit values centred on 32.
    Q6K,
}

/// ggml's names of the type ids, for those this reader does not dequantize.
const OTHER_TYPES: [(u32, &str); 22] = [
    (4, "Q4_2"),
    (5, "Q4_3"),
    (9, "Q8_1"),
    (10, "Q2_K"),
    (11, "Q3_K"),
    (15, "Q8_K"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
];

impl GgmlType {
    /// The types read, with their ggml ids.
    const READ: [(u32, GgmlType); 11] = [
        (0, GgmlType::F32),
        (1, GgmlType::F16),
        (30, GgmlType::Bf16),
        (8, GgmlType::Q8_0),
        (2, GgmlType::Q4_0),
        (3, GgmlType::Q4_1),
        (6, GgmlType::Q5_0),
        (7, GgmlType::Q5_1),
        (12, GgmlType::Q4K),
        (13, GgmlType::Q5K),
        (14, GgmlType::Q6K),
    ];

    /// The type of ggml id `id`; an error naming it (and the types read) for any other.
    pub fn from_id(id: u32) -> Result<Self, String> {
        if let Some((_, kind)) = Self::READ.iter().find(|(i, _)| *i == id) {
            return Ok(*kind);
        }
        let name = OTHER_TYPES.iter().find(|(i, _)| *i == id).map_or("unknown", |(_, n)| n);
        let read: Vec<&str> = Self::READ.iter().map(|(_, kind)| kind.name()).collect();
        Err(format!("tensor type {name} (ggml type {id}) is not supported ({})", read.join(", ")))
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Bf16 => "BF16",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
        }
    }

    /// Values per block.
    pub fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => 1,
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => QK_K,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::Bf16 => 2,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
        }
    }

    /// The block format of a type that products read packed ([`Packing`]): Q8_0, Q4_0, Q4_1.
    pub fn packing(self) -> Option<Packing> {
        match self {
            GgmlType::Q8_0 => Some(Packing::Q8_0),
            GgmlType::Q4_0 => Some(Packing::Q4_0),
            GgmlType::Q4_1 => Some(Packing::Q4_1),
            _ => None,
        }
    }

    /// The bytes of a row of `len` values, `None` unless `len` is a whole number of blocks.
    pub fn row_bytes(self, len: u64) -> Option<u64> {
        let block = self.block_len() as u64;
        len.is_multiple_of(block).then(|| len / block * self.block_bytes() as u64)
    }
}

/// Dequantizes `bytes`, whole blocks of `kind`, into `out` (`block_len` values per block).
pub fn dequantize(kind: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let blocks = bytes.chunks_exact(kind.block_bytes()).zip(out.chunks_exact_mut(kind.block_len()));
    for (block, out) in blocks {
        match kind {
            GgmlType::F32 => out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]),
            GgmlType::F16 => out[0] = half(block, 0),
            GgmlType::Bf16 => {
                out[0] = bf16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32()
            }
            GgmlType::Q8_0 => Packing::Q8_0.unpack_block(block, out),
            GgmlType::Q4_0 => Packing::Q4_0.unpack_block(block, out),
            GgmlType::Q4_1 => Packing::Q4_1.unpack_block(block, out),
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let (d, qs) = (half(block, 0), &block[block.len() - 16..]);
                let (min, offset, at) = match kind {
                    GgmlType::Q5_1 => (half(block, 2), 0.0, 4),
                    _ => (0.0, 16.0, 2),
                };
                let high =
                    u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
                for (j, &q) in qs.iter().enumerate() {
                    let low = ((high >> j) & 1) << 4;
                    let up = ((high >> (j + 16)) & 1) << 4;
                    out[j] = d * (((q & 0xF) as u32 | low) as f32 - offset) + min;
                    out[j + 16] = d * (((q >> 4) as u32 | up) as f32 - offset) + min;
                }
            }
            GgmlType::Q4K | GgmlType::Q5K => k_quant_4_5(kind, block, out),
            GgmlType::Q6K => k_quant_6(block, out),
        }
    }
}

/// Scale and minimum of group `j` (0–7) of a Q4_K/Q5_K block's 12 packed bytes: 6 bits each,
/// groups 4–7 keeping their high two bits in the top of groups 0–3's bytes.
fn scale_min(j: usize, packed: &[u8]) -> (f32, f32) {
    let (scale, min) = match j < 4 {
        true => (packed[j] & 63, packed[j + 4] & 63),
        false => (
            (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4),
            (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4),
        ),
    };
    (scale as f32, min as f32)
}

/// A Q4_K block (d, dmin, 12 scale bytes, 128 bytes of nibbles) or a Q5_K block (the same with
/// 32 bytes of fifth bits before the nibbles): each 32 bytes of nibbles hold two groups of 32,
/// the low nibbles first.
fn k_quant_4_5(kind: GgmlType, block: &[u8], out: &mut [f32]) {
    let (d, dmin, packed) = (half(block, 0), half(block, 2), &block[4..16]);
    let (high, nibbles) = match kind {
        GgmlType::Q5K => (Some(&block[16..48]), &block[48..176]),
        _ => (None, &block[16..144]),
    };
    for (pair, (qs, out)) in nibbles.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
        for half_of in 0..2 {
            let (scale, min) = scale_min(2 * pair + half_of, packed);
            let (scale, min) = (d * scale, dmin * min);
            let bit = 1u8 << (2 * pair + half_of);
            for (l, &q) in qs.iter().enumerate() {
                let low = if half_of == 0 { q & 0xF } else { q >> 4 };
                let fifth = high.map_or(0, |h| if h[l] & bit != 0 { 16 } else { 0 });
                out[32 * half_of + l] = scale * (low + fifth) as f32 - min;
            }
        }
    }
}

/// A Q6_K block: 128 bytes of low nibbles, 64 bytes of high bit pairs, 16 `i8` group scales,
/// then d. Each half of 128 values takes 64 low-nibble bytes and 32 high bytes; value `l + 32k`
/// (k = 0–3) of a half takes the low or high nibble of byte `l` or `l + 32` and bits `2k` of the
/// high byte `l`, centred on 32, with the scale of its group of 16.
fn k_quant_6(block: &[u8], out: &mut [f32]) {
    let (low, high, scales, d) =
        (&block[..128], &block[128..192], &block[192..208], half(block, 208));
    for n in 0..2 {
        let (ql, qh, sc) = (&low[64 * n..], &high[32 * n..], &scales[8 * n..]);
        for l in 0..32 {
            let group = l / 16;
            let q = [
                (ql[l] & 0xF) | (qh[l] & 3) << 4,
                (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4,
                (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4,
                (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4,
            ];
            for (k, q) in q.into_iter().enumerate() {
                let scale = sc[group + 2 * k] as i8 as f32;
                out[128 * n + 32 * k + l] = d * scale * (q as i32 - 32) as f32;
            }
        }
    }
}
