//! Transformer-XL's relative positions (docs/semantics.md §4) against the paper's formulation in
//! PyTorch (`models/tests/fixtures/transformer_xl/make_fixture.py`, float64): per-head windows
//! over a memory of earlier positions, output and the gradients of q, k, v, `W_R`, `u` and `v`.

use burn::tensor::{Tensor, TensorData};
use swa_attention::{ScoreOptions, WindowSpec, windowed_attention_relative};
use swa_models::layers::transformer_xl::RelativePositions;

use crate::{Reference, max_abs, to_vec};

/// f32 against float64: sums of a few hundred products of values of order 1.
const TOLERANCE: f32 = 2e-5;

#[test]
fn relative_attention_matches_the_paper_in_pytorch() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/transformer_xl/relative_attention.json"
    );
    let text = std::fs::read_to_string(path).expect("the committed fixture");
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let size = |name: &str| fixture["sizes"][name].as_u64().unwrap() as usize;
    let (batch, heads, head_dim, d_model) =
        (size("batch"), size("heads"), size("head_dim"), size("d_model"));
    let (memory, queries) = (size("memory"), size("queries"));
    let windows: Vec<usize> = fixture["sizes"]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_u64().unwrap() as usize)
        .collect();
    let numbers = |name: &str| -> Vec<f32> {
        fixture[name].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
    };
    let device = Default::default();
    let tensor = |name: &str, shape: [usize; 4]| {
        Tensor::<Reference, 4>::from_data(TensorData::new(numbers(name), shape), &device)
    };
    let matrix = |name: &str, shape: [usize; 2]| {
        Tensor::<Reference, 2>::from_data(TensorData::new(numbers(name), shape), &device)
    };
    let keys = memory + queries;
    let q = tensor("q", [batch, heads, queries, head_dim]).require_grad();
    let k = tensor("k", [batch, heads, keys, head_dim]).require_grad();
    let v = tensor("v", [batch, heads, keys, head_dim]).require_grad();
    let positions = RelativePositions::from_weights(
        matrix("w_r", [d_model, heads * head_dim]),
        matrix("u", [heads, head_dim]),
        matrix("v_bias", [heads, head_dim]),
    );
    let spec = WindowSpec::per_head(&windows, heads).unwrap().with_query_offset(memory);
    let scale = 1.0 / (head_dim as f32).sqrt();
    let (shifted, table) = positions.queries_and_table(q.clone(), keys, scale);
    let opts = ScoreOptions::softmax();
    let (out, _) =
        windowed_attention_relative(shifted, k.clone(), v.clone(), Some(table), &spec, &opts)
            .unwrap();
    let grads = (out.clone() * tensor("g", [batch, heads, queries, head_dim])).sum().backward();
    let [w_r, u, v_bias] = positions.weights();
    let checks = [
        ("out", to_vec(out)),
        ("d_q", to_vec(q.grad(&grads).unwrap())),
        ("d_k", to_vec(k.grad(&grads).unwrap())),
        ("d_v", to_vec(v.grad(&grads).unwrap())),
        ("d_w_r", to_vec(w_r.val().grad(&grads).unwrap())),
        ("d_u", to_vec(u.val().grad(&grads).unwrap())),
        ("d_v_bias", to_vec(v_bias.val().grad(&grads).unwrap())),
    ];
    for (name, got) in checks {
        let error = max_abs(&got, &numbers(name));
        eprintln!("{name}: max-abs {error:e}");
        assert!(error < TOLERANCE, "{name} differs from PyTorch by {error:e}");
    }
}
