//! Taylor linear attention (docs/semantics.md §6): the feature map, the chunked and recurrent forms
//! against the quadratic form, their gradients, and the configuration errors.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use swa_attention::AttentionError;
use swa_models::layers::taylor::*;

use crate::{max_abs, to_vec, values};

type B = NdArray<f32>;

fn random<Be: Backend, const D: usize>(seed: u64, shape: [usize; D]) -> Tensor<Be, D> {
    let data = TensorData::new(values(seed, shape.iter().product()), shape);
    Tensor::from_data(data, &Default::default())
}

fn max_error<Be: Backend, const D: usize>(got: Tensor<Be, D>, want: Tensor<Be, D>) -> f32 {
    max_abs(&to_vec(got), &to_vec(want))
}

fn layer<Be: Backend>(
    d_model: usize,
    heads: usize,
    feature_dim: usize,
    chunk: usize,
) -> LinearAttention<Be> {
    let config =
        LinearAttentionConfig::new(d_model, heads).with_feature_dim(feature_dim).with_chunk(chunk);
    config.init(&Default::default()).unwrap()
}

#[test]
fn feature_map_gives_the_second_order_taylor_kernel() {
    for (seed, d) in [(1, 4), (2, 16), (3, 16)] {
        let (q, k) = (random::<B, 4>(seed, [1, 1, 1, d]), random::<B, 4>(seed + 100, [1, 1, 1, d]));
        let dot = |a: Vec<f32>, b: Vec<f32>| a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>();
        let s = dot(to_vec(q.clone()), to_vec(k.clone())) / (d as f32).sqrt();
        let (fq, fk) = (to_vec(feature_map(q)), to_vec(feature_map(k)));
        assert_eq!(fq.len(), 1 + d + d * d, "feature size");
        let got = dot(fq, fk);
        assert!((got - (1.0 + s + s * s / 2.0)).abs() < 1e-5, "d_f={d}: {got} vs s={s}");
    }
}

#[test]
fn chunked_form_matches_the_quadratic_form() {
    for heads in [1, 4] {
        for chunk in [16, 64] {
            let layer = layer::<B>(32, heads, 16, chunk);
            for n in [1, 5, 63, 64, 65, 130] {
                let x = random::<B, 3>(n as u64, [2, n, 32]);
                let err = max_error(layer.forward(x.clone()), layer.forward_quadratic(x));
                assert!(err <= 1e-5, "heads={heads} chunk={chunk} n={n}: max-abs {err:e}");
            }
        }
    }
}

#[test]
fn recurrent_steps_reproduce_the_forward_pass_with_a_constant_state() {
    let device = Default::default();
    let (n, d) = (40, 32);
    let layer = layer::<B>(d, 4, 8, 16);
    let x = random::<B, 3>(9, [2, n, d]);
    let full = layer.forward(x.clone());
    let mut state = layer.empty_state(2, &device);
    let mut shapes = Vec::new();
    for t in 0..n {
        let (y, next) = layer.step(x.clone().narrow(1, t, 1), state);
        state = next;
        let err = max_error(y, full.clone().narrow(1, t, 1));
        assert!(err <= 1e-5, "step {t}: max-abs {err:e}");
        if t + 1 == 10 || t + 1 == n {
            shapes.push((state.kv.dims(), state.k_sum.dims()));
        }
    }
    assert_eq!(shapes[0], shapes[1], "the state does not grow with the steps");
    assert_eq!(shapes[0], ([2, 4, 1 + 8 + 64, 8], [2, 4, 1 + 8 + 64]));
    assert_eq!(state.position, n);
}

#[test]
fn chunked_gradients_match_the_quadratic_form() {
    type A = Autodiff<B>;
    let layer = layer::<A>(16, 2, 4, 8);
    let grad = |quadratic: bool| {
        let x = random::<A, 3>(3, [2, 21, 16]).require_grad();
        let weights = random::<A, 3>(4, [2, 21, 16]);
        let y =
            if quadratic { layer.forward_quadratic(x.clone()) } else { layer.forward(x.clone()) };
        to_vec(x.grad(&(y * weights).sum().backward()).expect("x reaches the loss"))
    };
    let (chunked, quadratic) = (grad(false), grad(true));
    let err = max_abs(&chunked, &quadratic);
    assert!(err <= 1e-4, "gradient max-abs {err:e}");
}

#[test]
fn bad_configs_name_the_field() {
    let what = |config: LinearAttentionConfig| match config.init::<B>(&Default::default()) {
        Err(AttentionError::ShapeMismatch { what, .. }) => what,
        other => panic!("expected a ShapeMismatch, got {other:?}"),
    };
    assert!(what(LinearAttentionConfig::new(30, 4)).contains("d_model"));
    assert!(what(LinearAttentionConfig::new(32, 0)).contains("heads"));
    assert!(what(LinearAttentionConfig::new(32, 4).with_feature_dim(5)).contains("feature_dim"));
    assert!(what(LinearAttentionConfig::new(32, 4).with_feature_dim(0)).contains("feature_dim"));
    assert!(what(LinearAttentionConfig::new(32, 4).with_chunk(0)).contains("chunk"));
}
