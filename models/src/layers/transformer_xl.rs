//! Transformer-XL's relative positions (Dai et al., 2019, §3.3; docs/semantics.md §4): the
//! score `(q_i + u)·k_j + (q_i + v)·W_R r_{i−j}` with sinusoids `r`, a learned projection `W_R`
//! and learned per-head vectors `u, v`, in place of RoPE. The layer hands the core the queries
//! `q + u` and the relative-score table `T[i, δ] = scale · (q_i + v)·W_R r_δ`
//! ([`swa_attention::windowed_attention_relative`]): one matmul per layer, after which every path of
//! the core adds one scalar per score.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, TensorData, backend::Backend};

use swa_attention::layer_ops::linear;

/// The weights of Transformer-XL's position terms in one layer.
#[derive(Module, Debug)]
pub struct RelativePositions<B: Backend> {
    /// `W_R`: the sinusoids `r_δ` (model width) to `H·d_h`, no bias.
    projection: Linear<B>,
    /// `u`, `[H, d_h]`: the content bias, added to every query for the `k_j` term.
    content_bias: Param<Tensor<B, 2>>,
    /// `v`, `[H, d_h]`: the position bias, added to every query for the `W_R r` term.
    position_bias: Param<Tensor<B, 2>>,
}

impl<B: Backend> RelativePositions<B> {
    /// The position terms of a layer of width `d_model` with `heads` heads of `head_dim`:
    /// `W_R` drawn as Burn draws a linear layer, `u = v = 0`.
    pub fn new(d_model: usize, heads: usize, head_dim: usize, device: &B::Device) -> Self {
        let projection = LinearConfig::new(d_model, heads * head_dim).with_bias(false).init(device);
        let zeros = || Param::from_tensor(Tensor::zeros([heads, head_dim], device));
        Self { projection, content_bias: zeros(), position_bias: zeros() }
    }

    /// The position terms from given weights: `W_R: [d_model, H·d_h]` (Burn's layout, input
    /// first), `u, v: [H, d_h]`; as a checkpoint or a reference supplies them.
    pub fn from_weights(projection: Tensor<B, 2>, u: Tensor<B, 2>, v: Tensor<B, 2>) -> Self {
        Self {
            projection: Linear { weight: Param::from_tensor(projection), bias: None },
            content_bias: Param::from_tensor(u),
            position_bias: Param::from_tensor(v),
        }
    }

    /// The learned `[W_R, u, v]`, as parameters (for their gradients).
    pub fn weights(&self) -> [&Param<Tensor<B, 2>>; 3] {
        [&self.projection.weight, &self.content_bias, &self.position_bias]
    }
}

impl<B: swa_attention::ModelBackend> RelativePositions<B> {
    /// `q + u` and the table `T: [batch, H, N, L]`, `T[i, δ] = scale · (q_i + v)·W_R r_δ` for
    /// `δ = 0 … distances−1`, from queries `q: [batch, H, N, d_h]`.
    pub fn queries_and_table(
        &self,
        q: Tensor<B, 4>,
        distances: usize,
        scale: f32,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let [_, heads, _, head_dim] = q.dims();
        let d_model = self.projection.weight.dims()[0];
        let r = sinusoids::<B>(distances, d_model, &q.device()).cast(q.dtype());
        // `[L, H·d_h]` → `[1, H, d_h, L]`.
        let projected = linear(&self.projection, r).reshape([distances, heads, head_dim]);
        let projected = projected.permute([1, 2, 0]).unsqueeze::<4>();
        let bias = |p: &Param<Tensor<B, 2>>| p.val().reshape([1, heads, 1, head_dim]);
        let table = (q.clone() + bias(&self.position_bias)).matmul(projected).mul_scalar(scale);
        (q + bias(&self.content_bias), table)
    }
}

/// Transformer-XL's sinusoids `r_δ = [sin(δ·ω_c) for c < d/2, cos(δ·ω_c) for c < d/2]`,
/// `ω_c = 10000^(−2c/d)`, for `δ = 0 … distances−1`: `[distances, d]`. Computed in f64.
pub fn sinusoids<B: Backend>(distances: usize, d: usize, device: &B::Device) -> Tensor<B, 2> {
    let half = d / 2;
    let mut values = vec![0f32; distances * d];
    for (delta, row) in values.chunks_mut(d.max(1)).enumerate() {
        for c in 0..half {
            let angle = delta as f64 * 10000f64.powf(-2.0 * c as f64 / d as f64);
            row[c] = angle.sin() as f32;
            row[half + c] = angle.cos() as f32;
        }
    }
    Tensor::from_data(TensorData::new(values, [distances, d]), device)
}
