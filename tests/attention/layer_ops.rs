//! The fused layer ops (`swa_attention::layer_ops`: RMSNorm and the SwiGLU gate) of
//! `Autodiff<Flex>` against their tensor ops, outputs and gradients, on awkward shapes (one row,
//! width 1, ranks 2 to 4, widths that are not a multiple of the SIMD lanes, rows spread over
//! several threads), Gemma's unit offset, and f16 (computed in f32, so compared with the f32
//! tensor ops on the f16 values).

#[cfg(feature = "flex")]
mod on_flex {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{DType, Tensor, TensorData, f16};
    use swa_zoo::attention::layer_ops::{
        RmsOptions, rms_norm, rms_norm_tensor_ops, silu_gate, silu_gate_tensor_ops,
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

    /// The gate of `a, b: shape` on both paths: output, `∂a`, `∂b` for a random loss.
    fn gate_case<const D: usize>(rng: &mut Rng, shape: [usize; D], dtype: DType) {
        let n = shape.iter().product();
        let (a, b) = (inputs(rng, n, dtype), inputs(rng, n, dtype));
        let a: Vec<f32> = a.iter().map(|x| 4.0 * x).collect();
        let g = rng.values(n);
        let run = |fused: bool| {
            let dtype = if fused { dtype } else { DType::F32 };
            let (at, bt) = (leaf(&a, shape, dtype), leaf(&b, shape, dtype));
            let z = match fused {
                true => silu_gate(at.clone(), bt.clone()),
                false => silu_gate_tensor_ops(at.clone(), bt.clone()),
            };
            let gradient =
                Tensor::<F, D>::from_data(TensorData::new(g.clone(), shape), &Default::default());
            let grads = (z.clone().cast(DType::F32) * gradient).sum().backward();
            [values(z), values(at.grad(&grads).unwrap()), values(bt.grad(&grads).unwrap())]
        };
        let (got, want) = (run(true), run(false));
        let (out, grad) = tolerance(dtype);
        let what = format!("SwiGLU gate {shape:?} {dtype:?}");
        check(&format!("{what}: output"), &got[0], &want[0], out);
        check(&format!("{what}: ∂a"), &got[1], &want[1], grad);
        check(&format!("{what}: ∂b"), &got[2], &want[2], grad);
    }

    #[test]
    fn fused_silu_gate_on_flex_matches_the_tensor_ops() {
        let mut rng = Rng::new(0x5EED_1029);
        gate_case(&mut rng, [1], DType::F32);
        gate_case(&mut rng, [3, 5, 7], DType::F32);
        gate_case(&mut rng, [2, 3, 4, 9], DType::F32);
        gate_case(&mut rng, [8, 128, 192], DType::F32);
        gate_case(&mut rng, [5, 33], DType::F16);
    }
}
