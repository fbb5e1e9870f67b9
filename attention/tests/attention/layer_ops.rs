//! The fused layer ops (`swa_attention::layer_ops`: RMSNorm and the MLP's gate, SiLU and tanh
//! GELU) of
//! `Autodiff<Flex>` against their tensor ops, outputs and gradients, on awkward shapes (one row,
//! width 1, ranks 2 to 4, widths that are not a multiple of the SIMD lanes, rows spread over
//! several threads), Gemma's unit offset, and f16 (computed in f32, so compared with the f32
//! tensor ops on the f16 values); the cross-entropy of logits likewise. And Flex's few-row
//! linear product (`layer_ops::product`, a
//! decoding step's projections; forward only, as no tracked op uses it) against Burn's
//! `linear`, with contiguous and transposed weights.

#[cfg(feature = "flex")]
mod on_flex {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Int;
    use burn::tensor::{DType, Tensor, TensorData, f16};
    use swa_attention::layer_ops::{
        MlpActivation, RmsOptions, cross_entropy, cross_entropy_tensor_ops, gate, gate_tensor_ops,
        product, rms_norm, rms_norm_tensor_ops,
    };

    use crate::common::{F16, F32, Rng, errors, values};

    type F = Autodiff<Flex>;

    /// Random values of `n` elements, rounded to f16 when the case is in f16.
    fn inputs(rng: &mut Rng, n: usize, dtype: DType) -> Vec<f32> {
        let mut values = rng.values(n);
        if dtype == DType::F16 {
            values.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
        }
        values
    }

    fn leaf<const D: usize>(values: &[f32], shape: [usize; D], dtype: DType) -> Tensor<F, D> {
        let t =
            Tensor::<F, D>::from_data(TensorData::new(values.to_vec(), shape), &Default::default());
        t.cast(dtype).require_grad()
    }

    /// The tolerance of a case: F32's or F16's (outputs and gradients).
    fn tolerance(dtype: DType) -> (f32, f32) {
        match dtype {
            DType::F16 => (F16.out, F16.grad),
            _ => (F32.out, F32.grad),
        }
    }

    fn check(what: &str, got: &[f32], want: &[f32], tol: f32) {
        let (max, _) = errors(got, want);
        assert!(max <= tol, "{what}: max error {max} > {tol}");
    }

    /// RMSNorm of `x: shape` on both paths: output, `∂x`, `∂w` for a random loss.
    fn rms_case<const D: usize>(rng: &mut Rng, shape: [usize; D], unit: bool, dtype: DType) {
        let width = shape[D - 1];
        let x = inputs(rng, shape.iter().product(), dtype);
        let w = inputs(rng, width, dtype);
        let g = rng.values(x.len());
        let options = RmsOptions { epsilon: 1e-6, unit_offset: unit };
        let run = |fused: bool| {
            let dtype = if fused { dtype } else { DType::F32 };
            let (xt, wt) = (leaf(&x, shape, dtype), leaf(&w, [width], dtype));
            let y = match fused {
                true => rms_norm(xt.clone(), wt.clone(), options),
                false => rms_norm_tensor_ops(xt.clone(), wt.clone(), options),
            };
            let gradient =
                Tensor::<F, D>::from_data(TensorData::new(g.clone(), shape), &Default::default());
            let grads = (y.clone().cast(DType::F32) * gradient).sum().backward();
            [values(y), values(xt.grad(&grads).unwrap()), values(wt.grad(&grads).unwrap())]
        };
        let (got, want) = (run(true), run(false));
        let (out, grad) = tolerance(dtype);
        let what = format!("RMSNorm {shape:?} unit offset {unit} {dtype:?}");
        check(&format!("{what}: output"), &got[0], &want[0], out);
        check(&format!("{what}: ∂x"), &got[1], &want[1], grad);
        check(&format!("{what}: ∂w"), &got[2], &want[2], grad);
    }

    #[test]
    fn fused_rms_norm_on_flex_matches_the_tensor_ops() {
        let mut rng = Rng::new(0x5EED_0029);
        rms_case(&mut rng, [1, 1], false, DType::F32);
        rms_case(&mut rng, [3, 1], true, DType::F32);
        rms_case(&mut rng, [2, 7, 13], false, DType::F32);
        rms_case(&mut rng, [2, 3, 5, 16], true, DType::F32);
        rms_case(&mut rng, [4, 300, 64], false, DType::F32);
        rms_case(&mut rng, [2, 9, 24], true, DType::F16);
    }

    /// The gate of `[a | b]: shape` (the last axis `2F`, `a` scaled to ±4) on both paths: output
    /// and `∂[a | b]` for a random loss. With `extra` columns the input is a view, the first
    /// `2F` columns of a wider leaf (as a part of a wider product would be).
    fn gate_case<const D: usize>(
        rng: &mut Rng,
        shape: [usize; D],
        extra: usize,
        act: MlpActivation,
        dtype: DType,
    ) {
        let width = shape[D - 1];
        let mut wide = shape;
        wide[D - 1] += extra;
        let n: usize = wide.iter().product();
        let both: Vec<f32> = inputs(rng, n, dtype)
            .iter()
            .enumerate()
            .map(|(i, x)| if i % wide[D - 1] < width / 2 { 4.0 * x } else { *x })
            .collect();
        let mut out = shape;
        out[D - 1] = width / 2;
        let g = rng.values(out.iter().product());
        let run = |fused: bool| {
            let dtype = if fused { dtype } else { DType::F32 };
            let leaf_t = leaf(&both, wide, dtype);
            let input = leaf_t.clone().narrow(D - 1, 0, width);
            let z = match fused {
                true => gate(input, act),
                false => gate_tensor_ops(input, act),
            };
            let gradient =
                Tensor::<F, D>::from_data(TensorData::new(g.clone(), out), &Default::default());
            let grads = (z.clone().cast(DType::F32) * gradient).sum().backward();
            [values(z), values(leaf_t.grad(&grads).unwrap())]
        };
        let (got, want) = (run(true), run(false));
        let (out, grad) = tolerance(dtype);
        let what = format!("{act:?} gate {shape:?} + {extra} {dtype:?}");
        check(&format!("{what}: output"), &got[0], &want[0], out);
        check(&format!("{what}: ∂[a | b]"), &got[1], &want[1], grad);
    }

    #[test]
    fn fused_gates_on_flex_match_the_tensor_ops() {
        let mut rng = Rng::new(0x5EED_1029);
        for act in [MlpActivation::Silu, MlpActivation::GeluTanh] {
            gate_case(&mut rng, [2], 0, act, DType::F32);
            gate_case(&mut rng, [3, 5, 14], 0, act, DType::F32);
            gate_case(&mut rng, [3, 5, 14], 3, act, DType::F32);
            gate_case(&mut rng, [2, 3, 4, 18], 0, act, DType::F32);
            gate_case(&mut rng, [8, 128, 384], 0, act, DType::F32);
            gate_case(&mut rng, [5, 66], 0, act, DType::F16);
        }
    }

    /// The cross-entropy of `logits: [rows, vocab]` (scaled by `scale`) on both paths: the
    /// loss of each row and `∂logits` for a random weighting of the rows.
    fn cross_entropy_case(rng: &mut Rng, rows: usize, vocab: usize, scale: f32, dtype: DType) {
        let logits: Vec<f32> = inputs(rng, rows * vocab, dtype).iter().map(|v| v * scale).collect();
        let targets: Vec<i64> = (0..rows).map(|r| ((r * 7919 + 3) % vocab) as i64).collect();
        let g = rng.values(rows);
        let run = |fused: bool| {
            let dtype = if fused { dtype } else { DType::F32 };
            let x = leaf(&logits, [rows, vocab], dtype);
            let device = Default::default();
            let t =
                Tensor::<F, 1, Int>::from_data(TensorData::new(targets.clone(), [rows]), &device);
            let loss = match fused {
                true => cross_entropy(x.clone(), t),
                false => cross_entropy_tensor_ops(x.clone(), t),
            };
            let weights = Tensor::<F, 1>::from_data(TensorData::new(g.clone(), [rows]), &device);
            let grads = (loss.clone().cast(DType::F32) * weights).sum().backward();
            [values(loss), values(x.grad(&grads).unwrap())]
        };
        let (got, want) = (run(true), run(false));
        let (out, grad) = tolerance(dtype);
        let what = format!("cross-entropy {rows}x{vocab} scale {scale} {dtype:?}");
        check(&format!("{what}: loss"), &got[0], &want[0], out);
        check(&format!("{what}: ∂logits"), &got[1], &want[1], grad);
    }

    #[test]
    fn fused_cross_entropy_on_flex_matches_the_tensor_ops() {
        let mut rng = Rng::new(0x5EED_4029);
        cross_entropy_case(&mut rng, 1, 1, 1.0, DType::F32);
        cross_entropy_case(&mut rng, 3, 7, 4.0, DType::F32);
        cross_entropy_case(&mut rng, 5, 300, 1.0, DType::F32);
        cross_entropy_case(&mut rng, 40, 1000, 80.0, DType::F32);
        cross_entropy_case(&mut rng, 6, 50, 2.0, DType::F16);
    }

    /// A target outside the vocabulary gives NaN for its row, not a panic; the other rows keep
    /// their loss.
    #[test]
    fn a_target_outside_the_vocabulary_gives_nan() {
        let device = Default::default();
        let logits = Tensor::<Flex, 2>::from_floats([[0.0, 1.0], [2.0, 0.0]], &device);
        let targets = Tensor::<Flex, 1, Int>::from_ints([1, 5], &device);
        let loss = values(cross_entropy(logits, targets));
        assert!((loss[0] - (1.0f32 + (-1.0f32).exp()).ln()).abs() < 1e-6 && loss[1].is_nan());
    }

    /// `x: [2, rows/2 or 1, k]·w + b` through `product` on Flex (its few-row kernel up to 16
    /// rows) against Burn's `linear` on the same tensors, for `w: [k, n]` stored contiguously
    /// or as the transpose of `[n, k]` (a checkpoint's linear weight), with and without bias.
    fn linear_case(rng: &mut Rng, rows: usize, k: usize, n: usize) {
        let device = Default::default();
        let scale = 1.0 / (k as f32).sqrt();
        let x = rng.values(rows * k);
        let w: Vec<f32> = rng.values(k * n).iter().map(|v| v * scale).collect();
        let b = rng.values(n);
        let x2 = Tensor::<Flex, 2>::from_data(TensorData::new(x, [rows, k]), &device);
        let x3 = match rows % 2 {
            0 => x2.clone().reshape([2, rows / 2, k]),
            _ => x2.clone().unsqueeze::<3>(),
        };
        let contiguous = Tensor::<Flex, 2>::from_data(TensorData::new(w.clone(), [k, n]), &device);
        let stored = Tensor::<Flex, 2>::from_data(TensorData::new(w, [n, k]), &device);
        for (layout, w) in [("contiguous", contiguous), ("transposed", stored.transpose())] {
            for bias in [None, Some(Tensor::<Flex, 1>::from_floats(b.as_slice(), &device))] {
                let what =
                    format!("linear {rows}x{k}x{n}, {layout} weight, bias {}", bias.is_some());
                let want = burn::tensor::module::linear(x2.clone(), w.clone(), bias.clone());
                check(
                    &what,
                    &values(product(x2.clone(), w.clone(), bias.clone())),
                    &values(want.clone()),
                    F32.out,
                );
                let got3 = product(x3.clone(), w.clone(), bias);
                check(&format!("{what}, rank 3"), &values(got3), &values(want), F32.out);
            }
        }
    }

    #[test]
    fn few_row_linear_on_flex_matches_burns_linear() {
        let mut rng = Rng::new(0x5EED_2029);
        linear_case(&mut rng, 1, 1, 1);
        linear_case(&mut rng, 1, 7, 17);
        linear_case(&mut rng, 1, 512, 1000);
        linear_case(&mut rng, 3, 64, 33);
        linear_case(&mut rng, 16, 96, 2000);
        linear_case(&mut rng, 17, 32, 40);
    }

    /// Weights kept in bf16 or f16 with f32 activations: `product` gives, in f32, Burn's
    /// `linear` with the weights cast to f32, at a decoding step's one row and at many.
    #[test]
    fn product_takes_weights_in_another_precision() {
        let mut rng = Rng::new(0x5EED_4029);
        let device = Default::default();
        let tensor = |values: Vec<f32>, shape: [usize; 2]| {
            Tensor::<Flex, 2>::from_data(TensorData::new(values, shape), &device)
        };
        for (rows, k, n) in [(1, 64, 48), (1, 100, 37), (2, 64, 48), (17, 32, 40), (40, 300, 130)] {
            let x = tensor(rng.values(rows * k), [rows, k]);
            let w = rng.values(k * n);
            let b = Tensor::<Flex, 1>::from_data(TensorData::new(rng.values(n), [n]), &device);
            let layouts = [
                ("[in, out]", tensor(w.clone(), [k, n])),
                ("[out, in]", tensor(w, [n, k]).transpose()),
            ];
            for dtype in [DType::BF16, DType::F16] {
                for (layout, w) in &layouts {
                    let w = w.clone().cast(dtype);
                    for bias in [None, Some(b.clone()), Some(b.clone().cast(dtype))] {
                        let got = product(x.clone(), w.clone(), bias.clone());
                        assert_eq!(got.dtype(), DType::F32, "the product keeps x's dtype");
                        let wide = |t: Tensor<Flex, 1>| t.cast(DType::F32);
                        let want = burn::tensor::module::linear(
                            x.clone(),
                            w.clone().cast(DType::F32),
                            bias.clone().map(wide),
                        );
                        let what = format!(
                            "linear {rows}x{k}x{n}, {dtype:?} weights as {layout}, bias {:?}",
                            bias.map(|b| b.dtype())
                        );
                        check(&what, &values(got), &values(want), F32.out);
                    }
                }
            }
        }
    }

    /// The one-row product's read bandwidth with f32, bf16 and f16 weights of an 8192 × 8192
    /// layer stored as `[out, in]` (what a decoding step reads): median of 50 calls, printed.
    /// `cargo test --release -p swa-attention --features flex --test attention
    /// one_row_product_bandwidth -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: run it on an idle machine"]
    fn one_row_product_bandwidth() {
        let (k, n) = (8192, 8192);
        let mut rng = Rng::new(0x5EED_5029);
        let device = Default::default();
        let x = Tensor::<Flex, 2>::from_data(TensorData::new(rng.values(k), [1, k]), &device);
        let w = Tensor::<Flex, 2>::from_data(TensorData::new(rng.values(k * n), [n, k]), &device);
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let w = w.clone().cast(dtype).transpose();
            let mut times: Vec<f64> = (0..50)
                .map(|_| {
                    let start = std::time::Instant::now();
                    std::hint::black_box(values(product(x.clone(), w.clone(), None)));
                    start.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let (seconds, bytes) = (times[25], (k * n * dtype.size()) as f64);
            eprintln!(
                "{dtype:?} weights: {:.3} ms, {:.1} GB/s of weights",
                seconds * 1e3,
                bytes / seconds / 1e9
            );
        }
    }

    /// Through `Autodiff<Flex>` (Burn's `linear` on the flattened rows), the product of a rank-3
    /// input and a transposed weight has Burn's gradients of the unflattened product.
    #[test]
    fn flattened_linear_keeps_burns_gradients() {
        let mut rng = Rng::new(0x5EED_3029);
        let (k, n) = (24, 10);
        let (x, w, b, g) =
            (rng.values(2 * 5 * k), rng.values(k * n), rng.values(n), rng.values(2 * 5 * n));
        let run = |flattened: bool| {
            let (xt, wt) = (leaf(&x, [2, 5, k], DType::F32), leaf(&w, [n, k], DType::F32));
            let bt = leaf(&b, [n], DType::F32);
            let y = match flattened {
                true => product(xt.clone(), wt.clone().transpose(), Some(bt.clone())),
                false => burn::tensor::module::linear(
                    xt.clone(),
                    wt.clone().transpose(),
                    Some(bt.clone()),
                ),
            };
            let gradient = Tensor::<F, 3>::from_data(
                TensorData::new(g.clone(), [2, 5, n]),
                &Default::default(),
            );
            let grads = (y.clone() * gradient).sum().backward();
            let grad = |t: &Tensor<F, 3>| values(t.grad(&grads).unwrap());
            [
                values(y),
                grad(&xt),
                values(wt.grad(&grads).unwrap()),
                values(bt.grad(&grads).unwrap()),
            ]
        };
        let (got, want) = (run(true), run(false));
        for (what, (got, want)) in ["output", "∂x", "∂w", "∂b"].iter().zip(got.iter().zip(&want))
        {
            check(&format!("flattened linear: {what}"), got, want, F32.grad);
        }
    }
}
