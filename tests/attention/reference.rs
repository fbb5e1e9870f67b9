//! The dense reference against a scalar f64 transcription of docs/semantics.md §1, so that the
//! reference the other paths are held to is itself checked.

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use swa_zoo::attention::{ScoreFn, ScoreOptions, WindowSpec, alibi, dense_attention};

use crate::common::{Rng, values};

/// `o` and `lse` of one head by the formulas of §1, in f64.
fn scalar(
    [q, k, v]: [&[f32]; 3],
    n: usize,
    d: usize,
    h: usize,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> (Vec<f64>, Vec<f64>) {
    let dot =
        |i: usize, j: usize| (0..d).map(|c| q[i * d + c] as f64 * k[j * d + c] as f64).sum::<f64>();
    let (mut out, mut lse) = (vec![0.0; n * d], vec![f64::NEG_INFINITY; n]);
    for i in 0..n {
        let mut s: Vec<(usize, f64)> = Vec::new();
        for j in (0..n).filter(|&j| spec.visible(h, i, j, n)) {
            let mut x = opts.scale_for(d) as f64 * dot(i, j);
            if let Some(c) = opts.softcap {
                x = c as f64 * (x / c as f64).tanh();
            }
            if let Some(m) = &opts.alibi {
                x -= m[h] as f64 * (i as f64 - j as f64);
            }
            s.push((j, x));
        }
        let weights: Vec<(usize, f64)> = match opts.score_fn {
            ScoreFn::Softmax => s.iter().map(|&(j, x)| (j, x.exp())).collect(),
            ScoreFn::Sigmoid { beta } => {
                s.iter().map(|&(j, x)| (j, 1.0 / (1.0 + (-(x + beta as f64)).exp()))).collect()
            }
            other => panic!("the naive reference has no {other:?}"),
        };
        let total: f64 = weights.iter().map(|w| w.1).sum();
        if weights.is_empty() {
            continue;
        }
        lse[i] = total.ln();
        let norm = if matches!(opts.score_fn, ScoreFn::Softmax) { total } else { 1.0 };
        for (j, w) in weights {
            for c in 0..d {
                out[i * d + c] += w / norm * v[j * d + c] as f64;
            }
        }
    }
    (out, lse)
}

#[test]
fn dense_reference_follows_the_formulas() {
    let (n, d, heads) = (11, 4, 4);
    let slopes = alibi::balanced(heads, alibi::SlopeMagnitudes::Code).unwrap();
    let specs = [
        WindowSpec::sliding(heads, heads, 3).unwrap(),
        WindowSpec::dilated(&[2, 3, 2, 4], &[1, 2, 3, 1], heads).unwrap().with_sinks(1),
        WindowSpec::longformer(2, &[1, 2, 1, 1], heads, false).unwrap().with_globals([4]),
    ];
    let options = [
        ScoreOptions::softmax(),
        ScoreOptions::softmax().with_softcap(0.7).with_alibi(slopes.clone()),
        ScoreOptions::sigmoid(-1.0).with_alibi(slopes),
    ];
    let mut rng = Rng::new(7);
    let device = Default::default();
    for spec in &specs {
        for opts in &options {
            let (q, k, v) =
                (rng.values(heads * n * d), rng.values(heads * n * d), rng.values(heads * n * d));
            let t = |x: &Vec<f32>| {
                Tensor::<NdArray, 4>::from_data(
                    TensorData::new(x.clone(), [1, heads, n, d]),
                    &device,
                )
            };
            let (out, lse) = dense_attention(t(&q), t(&k), t(&v), spec, opts).unwrap();
            let (out, lse) = (values(out), values(lse));
            for h in 0..heads {
                let head = |x: &Vec<f32>| x[h * n * d..(h + 1) * n * d].to_vec();
                let (want_out, want_lse) =
                    scalar([&head(&q), &head(&k), &head(&v)], n, d, h, spec, opts);
                for (got, want) in out[h * n * d..].iter().zip(&want_out) {
                    assert!(
                        (*got as f64 - want).abs() < 1e-5,
                        "o: {got} vs {want} ({spec:?}, {opts:?})"
                    );
                }
                for (got, want) in lse[h * n..].iter().zip(&want_lse) {
                    assert!(
                        (*got as f64 - want).abs() < 1e-5 || (*got as f64) == *want,
                        "lse: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// `L = Σ o·g_o + Σ lse·g_l` of one head by the scalar formulas, in f64.
fn scalar_loss(
    x: [&[f32]; 3],
    g: (&[f32], &[f32]),
    shape: (usize, usize, usize),
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> f64 {
    let (n, d, h) = shape;
    let (out, lse) = scalar(x, n, d, h, spec, opts);
    let dot_out: f64 = out.iter().zip(g.0).map(|(o, g)| o * *g as f64).sum();
    let dot_lse: f64 =
        lse.iter().zip(g.1).filter(|(l, _)| l.is_finite()).map(|(l, g)| l * *g as f64).sum();
    dot_out + dot_lse
}

#[test]
fn gradients_match_an_f64_truth() {
    use crate::common::{Case, Path, Reference, run};
    // One head, so the scalar transcription sees the same inputs as `run`.
    let (n, d) = (9, 3);
    let slopes = alibi::balanced(1, alibi::SlopeMagnitudes::Code).unwrap();
    for (spec, opts) in [
        (
            WindowSpec::sliding(1, 1, 4).unwrap().with_sinks(1),
            ScoreOptions::softmax().with_softcap(1.5),
        ),
        (
            WindowSpec::dilated(&[3], &[2], 1).unwrap(),
            ScoreOptions::sigmoid(-0.5).with_alibi(slopes),
        ),
    ] {
        let case = Case::new(n, d, spec.clone(), opts.clone());
        let got = run::<Reference>(&case, Path::Dense, &Default::default());
        // The inputs `run` drew, in its order: q, k, v, g_o, g_l.
        let mut rng = Rng::new(case.seed);
        let mut inputs = [rng.values(n * d), rng.values(n * d), rng.values(n * d)];
        let (g_out, g_lse) = (rng.values(n * d), rng.values(n));
        for (which, grad) in got.grads.iter().enumerate() {
            for e in 0..n * d {
                let eps = 1e-3f32;
                let original = inputs[which][e];
                let mut at = |x: f32| {
                    inputs[which][e] = x;
                    let views = [&inputs[0][..], &inputs[1][..], &inputs[2][..]];
                    scalar_loss(views, (&g_out, &g_lse), (n, d, 0), &spec, &opts)
                };
                let numeric = (at(original + eps) - at(original - eps)) / (2.0 * eps as f64);
                inputs[which][e] = original;
                let err = (grad[e] as f64 - numeric).abs();
                assert!(
                    err < 2e-5,
                    "input {which} element {e}: {} vs {numeric} ({spec:?}, {opts:?})",
                    grad[e]
                );
            }
        }
    }
}
