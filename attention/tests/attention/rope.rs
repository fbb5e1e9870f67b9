//! RoPE in the rotate-half layout (docs/semantics.md §4).

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use swa_attention::RopeConfig;

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

/// The fused rotation (forward and its backward, the opposite rotation) of an autodiff backend
/// against the tensor ops, on awkward shapes (rows past a cube's 8, half rows of 1, 3, 6 and
/// 132 pairs: element, 2-wide and 4-wide vectors, more vectors than a cube's 32 threads), the
/// projections' `[batch, N, H, d]` layout and strided rows, offsets, scaled frequencies and f16 (turned in f32,
/// so compared with the f32 tensor ops on the f16 values, within F16's output tolerance; f32
/// within 1e-6).
#[cfg(any(feature = "flex", feature = "wgpu"))]
fn fused_rotation_matches_the_tensor_ops<F>(device: &F::Device)
where
    F: burn::tensor::backend::AutodiffBackend + swa_attention::RopeBackend,
{
    use burn::tensor::{DType, f16};
    use swa_attention::{RopeScaling, rotate_tensor_ops};

    use crate::common::{F16, errors, heads_inner as heads_inner_order};

    assert!(F::rope_kernel().is_some(), "the backend has a fused rotation");
    /// How `x` lies in memory.
    #[derive(Clone, Copy)]
    enum Layout {
        Plain,
        /// `[batch, N, H, d]`, as the projections give it.
        HeadsInner,
        /// `[batch, H, d, N]`: rows strided.
        Transposed,
    }
    let linear = Some(RopeScaling::Linear { factor: 4.0 });
    let shapes = [
        ([1, 1, 1, 2], Layout::Plain, DType::F32, 0, None),
        ([3, 2, 5, 8], Layout::HeadsInner, DType::F32, 7, None),
        ([2, 4, 17, 16], Layout::HeadsInner, DType::F32, 0, linear),
        ([1, 3, 9, 6], Layout::Plain, DType::F32, 100, None),
        ([1, 2, 11, 80], Layout::HeadsInner, DType::F32, 5, None),
        ([2, 3, 4, 12], Layout::Transposed, DType::F32, 1, None),
        ([1, 1, 3, 264], Layout::HeadsInner, DType::F32, 2, None),
        ([2, 2, 33, 32], Layout::HeadsInner, DType::F16, 3, None),
    ];
    let mut rng = Rng::new(29);
    for (shape, layout, dtype, offset, scaling) in shapes {
        let [b, h, n, d] = shape;
        let rope = RopeConfig::new(d).with_scaling(scaling).init().unwrap();
        let mut x = rng.values(b * h * n * d);
        let g = rng.values(x.len());
        if dtype == DType::F16 {
            x.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
        }
        let leaf = |dtype: DType| {
            let t = match layout {
                Layout::Plain => {
                    Tensor::<F, 4>::from_data(TensorData::new(x.clone(), shape), device)
                }
                Layout::HeadsInner => {
                    let stored = TensorData::new(heads_inner_order(&x, shape), [b, n, h, d]);
                    Tensor::<F, 4>::from_data(stored, device).swap_dims(1, 2)
                }
                Layout::Transposed => {
                    let rows: Vec<&[f32]> = x.chunks(d).collect();
                    let columns = (0..b * h).flat_map(|m| {
                        let rows = &rows[m * n..(m + 1) * n];
                        (0..d).flat_map(move |c| rows.iter().map(move |row| row[c]))
                    });
                    let stored = TensorData::new(columns.collect(), [b, h, d, n]);
                    Tensor::<F, 4>::from_data(stored, device).swap_dims(2, 3)
                }
            };
            t.cast(dtype).require_grad()
        };
        let positions: Vec<usize> = (offset..offset + n).collect();
        let gradient = Tensor::<F, 4>::from_data(TensorData::new(g.clone(), shape), device);
        let run = |fused: bool| {
            let x = leaf(if fused { dtype } else { DType::F32 });
            let y = match fused {
                true => rope.forward(x.clone(), offset),
                false => rotate_tensor_ops(x.clone(), &rope.angles(&positions)),
            };
            assert_eq!(y.dims(), shape);
            let grads = (y.clone().cast(DType::F32) * gradient.clone()).sum().backward();
            (values(y), values(x.grad(&grads).unwrap()))
        };
        let ((y, dx), (want_y, want_dx)) = (run(true), run(false));
        let tol = if dtype == DType::F16 { F16.out } else { 1e-6 };
        for (what, got, want) in [("output", &y, &want_y), ("gradient", &dx, &want_dx)] {
            let (max, _) = errors(got, want);
            assert!(max <= tol, "{shape:?} {dtype:?}: {what} max error {max} > {tol}");
        }
    }
}

#[cfg(feature = "flex")]
#[test]
fn the_fused_rotation_on_flex_matches_the_tensor_ops() {
    use burn::backend::{Autodiff, Flex};
    fused_rotation_matches_the_tensor_ops::<Autodiff<Flex>>(&Default::default());
}

/// The CubeCL kernel (`swa_attention::kernel::rope`) on wgpu, inside fusion (Burn's `Wgpu`, as
/// a custom op of the stream) and on the bare `CubeBackend`.
#[cfg(feature = "wgpu")]
#[test]
fn the_fused_rotation_on_wgpu_matches_the_tensor_ops() {
    use burn::backend::wgpu::{CubeBackend, WgpuRuntime};
    use burn::backend::{Autodiff, Wgpu};

    use crate::wgpu_devices::lease;

    // A lease for each backend: with no other test holding one, the two devices.
    let (Some(device), Some(second)) = (lease(), lease()) else {
        return;
    };
    fused_rotation_matches_the_tensor_ops::<Autodiff<Wgpu>>(&device);
    type Cube = CubeBackend<WgpuRuntime, f32, i32, u32>;
    fused_rotation_matches_the_tensor_ops::<Autodiff<Cube>>(&second);
}
