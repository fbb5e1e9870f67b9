//! RoPE in the rotate-half layout (docs/semantics.md §4).

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use swa_zoo::attention::RopeConfig;

use crate::common::{Rng, values};

type B = NdArray;

fn tensor(values: Vec<f32>, shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

#[test]
fn rotates_halves_by_position_times_frequency() {
    let rope = RopeConfig::new(4).init().unwrap();
    let x = tensor(vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0], [1, 1, 2, 4]);
    let got = values(rope.forward(x, 0));
    // Position 1: pair (0, 2) turns by 1 rad, pair (1, 3) by 10000^(-1/2) = 0.01 rad.
    let (c0, s0, c1, s1) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
    let want = [1.0 * c0 - 3.0 * s0, 2.0 * c1 - 4.0 * s1, 3.0 * c0 + 1.0 * s0, 4.0 * c1 + 2.0 * s1];
    for (g, w) in got[4..].iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?}");
    }
}

#[test]
fn scores_depend_only_on_relative_position_and_offset_matches() {
    let rope = RopeConfig::new(8).with_base(500.0).init().unwrap();
    let mut rng = Rng::new(3);
    let (q, k) = (rng.values(8), rng.values(8));
    let dot = |p: usize, r: usize| {
        let a = values(rope.forward(tensor(q.clone(), [1, 1, 1, 8]), p));
        let b = values(rope.forward(tensor(k.clone(), [1, 1, 1, 8]), r));
        a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
    };
    assert!((dot(7, 3) - dot(104, 100)).abs() < 1e-4);
    let rows = rng.values(5 * 8);
    let whole = values(rope.forward(tensor(rows.clone(), [1, 1, 5, 8]), 10));
    let tail = values(rope.forward(tensor(rows[16..].to_vec(), [1, 1, 3, 8]), 12));
    for (a, b) in whole[16..].iter().zip(&tail) {
        assert!((a - b).abs() < 1e-6);
    }
    assert!(RopeConfig::new(7).init().is_err(), "odd head dimension is rejected");
}
