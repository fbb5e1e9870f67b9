//! The tensor helpers of the test binaries of swa-models, swa-training and the facade: the
//! reference backend, seeded values and tensors, a tensor's values, and their max-abs difference.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData, backend::Backend};
use swa_attention::rng::SplitMix64;

/// The reference backend: ndarray, f32, with autodiff.
pub type Reference = Autodiff<NdArray<f32>>;

/// Deterministic values in [−1, 1) from a seed (SplitMix64).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_signed_f32()).collect()
}

/// A `[batch, heads, n, d]` tensor of seeded values.
pub fn tensor<B: Backend>(seed: u64, shape: [usize; 4]) -> Tensor<B, 4> {
    let data = TensorData::new(values(seed, shape.iter().product()), shape);
    Tensor::from_data(data, &Default::default())
}

/// The values of a tensor, as f32.
pub fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().expect("f32 data")
}

/// Max-abs difference; equal values (infinities too) count as none, and a NaN on one side only
/// as an infinite one (`f32::max` would drop it).
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let error = |(x, y): (&f32, &f32)| match x == y || (x.is_nan() && y.is_nan()) {
        true => 0.0,
        false => (x - y).abs(),
    };
    a.iter()
        .zip(b)
        .map(error)
        .map(|d| if d.is_nan() { f32::INFINITY } else { d })
        .fold(0.0, f32::max)
}
