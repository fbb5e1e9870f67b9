//! The packed products against the unpacked weights' products in f64: the one-row kernels
//! (AVX2 where the CPU has it, and the plain one) within the activations' rounding, the
//! several-row product within f32's, the fallback's rounding of the activations as theirs, and
//! unpacking whole, viewed and by rows.

use burn::backend::flex::FlexTensor;
use burn::tensor::{TensorData, TensorMetadata};

use super::{Activations, avx2, packed_tensor, row_dot, unpacked_tensor};
use crate::cpu::layout;
use crate::packed::{BLOCK, Packing, round_activations, unpack};

/// Values in [−1, 1) that no two neighbours share, with a larger one every 29.
fn values(n: usize, seed: usize) -> Vec<f32> {
    let value = |i: usize| ((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0;
    (0..n).map(|i| if i % 29 == 3 { 4.0 * value(i) } else { value(i) }).collect()
}

/// `outputs` rows of `k` values packed, and the values they unpack to.
fn packed(packing: Packing, outputs: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    packing.pack(&values(outputs * k, 2), &mut bytes);
    let mut wide = vec![0.0; outputs * k];
    unpack(packing, &bytes, &mut wide);
    (bytes, wide)
}

/// `x · w` in f64, and the bound of the activations' rounding: half a step of each block's
/// scale times the block's `Σ|w|`, plus f32's rounding of the sums.
fn reference(x: &[f32], w: &[f32]) -> (f64, f64) {
    let dot = x.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>();
    let rounding: f64 = x
        .chunks_exact(BLOCK)
        .zip(w.chunks_exact(BLOCK))
        .map(|(x, w)| {
            let d = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64 / 127.0;
            0.5 * d * w.iter().map(|&v| v.abs() as f64).sum::<f64>()
        })
        .sum();
    (dot, rounding + 1e-5 * (1.0 + dot.abs()))
}

/// Each one-row kernel gives `x · w` of the unpacked weights within the activations'
/// rounding, and the AVX2 kernel the plain one's sums within f32's rounding: whole groups of
/// four rows and the last few, one block and several.
#[test]
fn one_row_kernels_give_the_unpacked_products_within_the_activations_rounding() {
    for packing in Packing::ALL {
        for k in [32, 64, 96, 576] {
            for outputs in [1, 3, 4, 5, 9] {
                let x = values(k, 1);
                let (bytes, wide) = packed(packing, outputs, k);
                let activations = Activations::new(&x);
                let mut fast = vec![f32::NAN; outputs];
                let avx2 = avx2::dots(packing, &activations, &bytes, &mut fast);
                let row_bytes = packing.row_bytes(k);
                for (j, (row, w)) in bytes.chunks(row_bytes).zip(wide.chunks(k)).enumerate() {
                    let (want, bound) = reference(&x, w);
                    let plain = row_dot(packing, &activations, row) as f64;
                    let name = packing.name();
                    assert!(
                        (plain - want).abs() <= bound,
                        "{name} k {k} row {j}: {plain} vs {want}"
                    );
                    let same = (fast[j] as f64 - plain).abs() <= 1e-5 * (1.0 + plain.abs());
                    assert!(!avx2 || same, "{name} k {k} row {j}: AVX2 {} vs {plain}", fast[j]);
                }
            }
        }
    }
}

/// The fallback's rounded activations (`round_activations`, the emulated reference's) are the
/// kernels' quantized ones scaled back, bit for bit, blocks of zeros and ties included.
#[test]
fn rounded_activations_are_the_kernels_quantized_ones() {
    let mut x = values(6 * BLOCK, 5);
    x[BLOCK..2 * BLOCK].fill(0.0);
    x[2 * BLOCK] = 127.0;
    x[2 * BLOCK + 1] = 0.5;
    x[2 * BLOCK + 2] = -1.5;
    let quantized = Activations::new(&x);
    round_activations(&mut x);
    for (b, block) in x.chunks_exact(BLOCK).enumerate() {
        let q = &quantized.quants[b * BLOCK..(b + 1) * BLOCK];
        let d = quantized.scales[b];
        let expected: Vec<f32> = q.iter().map(|&q| d * q as f32).collect();
        assert_eq!(block, expected.as_slice(), "block {b}");
    }
    assert_eq!(&quantized.quants[2 * BLOCK..2 * BLOCK + 3], &[127, 0, -2]);
}

/// `[rows, in]` f32 from `values`.
fn tensor(values: &[f32], shape: [usize; 2]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values.to_vec(), shape))
}

/// The product of several rows through [`crate::cpu::linear::product`] (the weights the
/// transposed view of their stored rows, as a loaded layer's are) gives the unpacked weights'
/// products plus the bias within f32's rounding, by register tiles (up to 16 rows, whole
/// groups of 8 and the rest) or gemm panels; one row within the activations' rounding.
#[test]
fn the_product_of_a_packed_layer_is_the_unpacked_layers() {
    for packing in Packing::ALL {
        for (rows, k, outputs) in
            [(1, 64, 7), (2, 32, 9), (5, 96, 4), (9, 64, 5), (16, 32, 3), (17, 64, 130)]
        {
            let (x, bias) = (values(rows * k, 3), values(outputs, 5));
            let (bytes, wide) = packed(packing, outputs, k);
            let w = packed_tensor(bytes, packing, [outputs, k]).transpose(0, 1);
            let bias_t = FlexTensor::from_data(TensorData::new(bias.clone(), [outputs]));
            let y = crate::cpu::linear::product(&tensor(&x, [rows, k]), &w, Some(&bias_t));
            let y = y.expect("packed weights are read by the fused product");
            assert_eq!(y.shape().dims::<2>(), [rows, outputs]);
            let y = layout::read(&y);
            for (r, x) in x.chunks_exact(k).enumerate() {
                for (j, w) in wide.chunks_exact(k).enumerate() {
                    let (dot, rounding) = reference(x, w);
                    let bound = if rows == 1 { rounding } else { 1e-5 * (1.0 + dot.abs()) };
                    let (got, want) = (y[r * outputs + j] as f64, bias[j] as f64 + dot);
                    let name = packing.name();
                    assert!(
                        (got - want).abs() <= bound,
                        "{name} rows {rows}: {r}, {j}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// Unpacking gives the unpacked values under the tensor's own view (stored and transposed),
/// and by rows the looked-up rows, NaN for a row outside the table.
#[test]
fn unpacking_follows_the_view_and_looks_up_rows() {
    let (outputs, k) = (5, 64);
    for packing in Packing::ALL {
        let (bytes, wide) = packed(packing, outputs, k);
        let stored = packed_tensor(bytes, packing, [outputs, k]);
        let whole = unpacked_tensor(stored.clone(), None);
        assert_eq!(layout::read(&whole).as_ref(), wide.as_slice());
        let turned = unpacked_tensor(stored.clone().transpose(0, 1), None);
        assert_eq!(turned.shape().dims::<2>(), [k, outputs]);
        let turned = layout::read(&turned.transpose(0, 1)).into_owned();
        assert_eq!(turned, wide);
        let ids = FlexTensor::from_data(TensorData::new(vec![3i64, 0, 7], [3]));
        let rows = layout::read(&unpacked_tensor(stored, Some(ids))).into_owned();
        assert_eq!(&rows[..k], &wide[3 * k..4 * k]);
        assert_eq!(&rows[k..2 * k], &wide[..k]);
        assert!(rows[2 * k..].iter().all(|v| v.is_nan()));
    }
}
