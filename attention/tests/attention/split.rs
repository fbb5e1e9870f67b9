//! The split of a joined product into its parts (`swa_attention::split`) against Burn's narrows,
//! outputs and gradients, on `Autodiff<NdArray>` and `Autodiff<Flex>`: uneven parts along an
//! inner axis (q, k, v heads of GQA), two halves of the last axis (gate and up), one-wide parts,
//! and losses that reach only some parts (the others' gradients are zeros; the first part
//! reached may be any of them). The parts' gradients are the narrows' exactly: both place the
//! same values, one by a concatenation, the other by fills, slice-assigns and adds of zeros.

use burn::backend::NdArray;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use swa_attention::LayerOpsBackend;
use swa_attention::split::split;

use crate::common::{Rng, values};

/// One case: `x` of `shape` split along `dim` into `sizes`, the loss `Σ_i Σ part_i · w_i` over
/// the parts in `reached` with random weights `w_i`.
fn check<B: AutodiffBackend + LayerOpsBackend, const D: usize>(
    shape: [usize; D],
    dim: usize,
    sizes: &[usize],
    reached: &[usize],
) {
    let what = format!("{shape:?} along {dim} into {sizes:?}, loss through {reached:?}");
    let device = Default::default();
    let mut rng = Rng::new(shape.iter().product::<usize>() as u64 + reached.len() as u64);
    let n: usize = shape.iter().product();
    let x = Tensor::<B, D>::from_data(TensorData::new(rng.values(n), shape), &device);
    let weights: Vec<Tensor<B, D>> = sizes
        .iter()
        .map(|&size| {
            let mut part = shape;
            part[dim] = size;
            let count = part.iter().product();
            Tensor::from_data(TensorData::new(rng.values(count), part), &device)
        })
        .collect();
    let run = |parts: Vec<Tensor<B, D>>| {
        let loss = reached
            .iter()
            .map(|&i| (parts[i].clone() * weights[i].clone()).sum())
            .reduce(|a, b| a + b)
            .expect("a part reached");
        loss.backward()
    };
    let x_split = x.clone().require_grad();
    let parts = split(x_split.clone(), dim, sizes);
    let x_narrow = x.require_grad();
    let mut start = 0;
    let narrows: Vec<Tensor<B, D>> = sizes
        .iter()
        .map(|&size| {
            start += size;
            x_narrow.clone().narrow(dim, start - size, size)
        })
        .collect();
    for (i, (part, narrow)) in parts.iter().zip(&narrows).enumerate() {
        assert_eq!(values(part.clone()), values(narrow.clone()), "{what}: part {i}");
    }
    let (got, want) = (run(parts), run(narrows));
    let got = x_split.grad(&got).expect("x reaches the loss");
    let want = x_narrow.grad(&want).expect("x reaches the loss");
    assert_eq!(values(got), values(want), "{what}: the gradient of x");
}

/// The cases, on backend `B`.
fn cases<B: AutodiffBackend + LayerOpsBackend>() {
    // q, k, v heads of a GQA projection, [batch, N, H + 2·H_kv, d].
    for reached in [&[0, 1, 2][..], &[1, 2], &[2], &[0]] {
        check::<B, 4>([2, 5, 8, 3], 2, &[4, 2, 2], reached);
    }
    // One head each.
    check::<B, 4>([1, 1, 3, 4], 2, &[1, 1, 1], &[0, 1, 2]);
    // The gate and up halves of [batch, N, 2F], F odd.
    check::<B, 3>([2, 3, 14], 2, &[7, 7], &[0, 1]);
    check::<B, 3>([2, 3, 14], 2, &[7, 7], &[1]);
    // Parts one wide.
    check::<B, 3>([1, 4, 2], 2, &[1, 1], &[0, 1]);
}

#[test]
fn the_split_matches_narrows_on_ndarray() {
    cases::<burn::backend::Autodiff<NdArray>>();
}

#[cfg(feature = "flex")]
#[test]
fn the_split_matches_narrows_on_flex() {
    cases::<burn::backend::Autodiff<burn::backend::Flex>>();
}

/// Without autodiff the parts are plain views: the values of the narrows.
#[test]
fn the_split_is_the_narrows_without_autodiff() {
    let x = Tensor::<NdArray, 2>::from_data(
        TensorData::new((0..12).map(|i| i as f32).collect::<Vec<_>>(), [3, 4]),
        &Default::default(),
    );
    let parts = split(x.clone(), 1, &[1, 3]);
    assert_eq!(values(parts[0].clone()), values(x.clone().narrow(1, 0, 1)));
    assert_eq!(values(parts[1].clone()), values(x.narrow(1, 1, 3)));
}
