//! The dense reference against a scalar f64 transcription of docs/semantics.md §1, so that the
//! reference the other paths are held to is itself checked.

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use swa_attention::{
    ScoreFn, ScoreOptions, WindowSpec, alibi, dense_attention, dense_attention_relative,
};

use crate::common::{Rng, values};

/// `o` and `lse` of one head by the formulas of §1 (and §4's relative scores, `relative` being
/// the head's `[n, L]` table and `L`), in f64.
fn scalar(
    [q, k, v]: [&[f32]; 3],
    relative: Option<(&[f32], usize)>,
    (n, d, h): (usize, usize, usize),
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
            if let Some((table, len)) = relative {
                x += table[i * len + (i - j)] as f64;
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
                    scalar([&head(&q), &head(&k), &head(&v)], None, (n, d, h), spec, opts);
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
    relative: Option<(&[f32], usize)>,
    g: (&[f32], &[f32]),
    shape: (usize, usize, usize),
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> f64 {
    let (out, lse) = scalar(x, relative, shape, spec, opts);
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
        for (which, grad) in got.grads.iter().take(3).enumerate() {
            for e in 0..n * d {
                let eps = 1e-3f32;
                let original = inputs[which][e];
                let mut at = |x: f32| {
                    inputs[which][e] = x;
                    let views = [&inputs[0][..], &inputs[1][..], &inputs[2][..]];
                    scalar_loss(views, None, (&g_out, &g_lse), (n, d, 0), &spec, &opts)
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

/// Relative scores (docs/semantics.md §4): the dense reference against the f64 transcription,
/// outputs and `lse`, on causal windows, sinks, a decoding offset and sigmoid with ALiBi.
#[test]
fn relative_scores_follow_the_formula() {
    let (n, d, heads, len) = (10, 4, 2, 12);
    let slopes = alibi::balanced(heads, alibi::SlopeMagnitudes::Code).unwrap();
    let cases = [
        (WindowSpec::per_head(&[3, 10], 1).unwrap(), ScoreOptions::softmax()),
        (WindowSpec::sliding(heads, 2, 4).unwrap().with_sinks(2), ScoreOptions::softmax()),
        (WindowSpec::full(heads, 1).unwrap(), ScoreOptions::sigmoid(-1.0).with_alibi(slopes)),
    ];
    let mut rng = Rng::new(11);
    let device = Default::default();
    for (spec, opts) in &cases {
        let kv_heads = spec.kv_heads();
        let (q, k, v) =
            (rng.values(heads * n * d), rng.values(kv_heads * n * d), rng.values(kv_heads * n * d));
        let table = rng.values(heads * n * len);
        let t = |x: &Vec<f32>, shape: [usize; 4]| {
            Tensor::<NdArray, 4>::from_data(TensorData::new(x.clone(), shape), &device)
        };
        let (out, lse) = dense_attention_relative(
            t(&q, [1, heads, n, d]),
            t(&k, [1, kv_heads, n, d]),
            t(&v, [1, kv_heads, n, d]),
            Some(t(&table, [1, heads, n, len])),
            spec,
            opts,
        )
        .unwrap();
        let (out, lse) = (values(out), values(lse));
        for h in 0..heads {
            let g = spec.kv_head_of(h);
            let slice = |x: &Vec<f32>, head: usize, size: usize| x[head * size..][..size].to_vec();
            let own = [slice(&q, h, n * d), slice(&k, g, n * d), slice(&v, g, n * d)];
            let rows = slice(&table, h, n * len);
            let views = [&own[0][..], &own[1][..], &own[2][..]];
            let (want_out, want_lse) = scalar(views, Some((&rows, len)), (n, d, h), spec, opts);
            for (got, want) in out[h * n * d..].iter().zip(&want_out) {
                assert!((*got as f64 - want).abs() < 1e-5, "o: {got} vs {want} ({spec:?})");
            }
            for (got, want) in lse[h * n..].iter().zip(&want_lse) {
                assert!((*got as f64 - want).abs() < 1e-5, "lse: {got} vs {want} ({spec:?})");
            }
        }
    }
}

/// The gradient of the relative table (and of q, k, v with it) by central differences of the
/// f64 transcription, one head.
#[test]
fn relative_score_gradients_match_an_f64_truth() {
    use crate::common::{Case, Path, Reference, run};
    let (n, d, len) = (7, 3, 5);
    let spec = WindowSpec::sliding(1, 1, 4).unwrap().with_query_offset(2).with_kv_len(n);
    let case = Case { q_len: n - 2, ..Case::new(n, d, spec.clone(), ScoreOptions::softmax()) }
        .with_relative(len);
    let got = run::<Reference>(&case, Path::Dense, &Default::default());
    // The inputs `run` drew, in its order: q, k, v, g_o, g_l, the table.
    let rows = n - 2;
    let mut rng = Rng::new(case.seed);
    let mut inputs = [rng.values(rows * d), rng.values(n * d), rng.values(n * d), Vec::new()];
    let (g_out, g_lse) = (rng.values(rows * d), rng.values(rows));
    inputs[3] = rng.values(rows * len);
    // The transcription indexes queries from 0: shift them to absolute positions 2 … n−1 by
    // padding two query rows (and two table rows) that the loss weights by 0.
    let padded = |x: &[f32], width: usize| [vec![0.0; 2 * width], x.to_vec()].concat();
    let (g_out, g_lse) = (padded(&g_out, d), padded(&g_lse, 1));
    let absolute = spec.clone().with_query_offset(0);
    for (which, grad) in got.grads.iter().enumerate() {
        for e in 0..grad.len() {
            let eps = 1e-3f32;
            let original = inputs[which][e];
            let mut at = |x: f32| {
                inputs[which][e] = x;
                let (q, table) = (padded(&inputs[0], d), padded(&inputs[3], len));
                let views = [&q[..], &inputs[1][..], &inputs[2][..]];
                let g = (&g_out[..], &g_lse[..]);
                scalar_loss(views, Some((&table, len)), g, (n, d, 0), &absolute, &case.opts)
            };
            let numeric = (at(original + eps) - at(original - eps)) / (2.0 * eps as f64);
            inputs[which][e] = original;
            let err = (grad[e] as f64 - numeric).abs();
            assert!(err < 2e-5, "input {which} element {e}: {} vs {numeric}", grad[e]);
        }
    }
}
