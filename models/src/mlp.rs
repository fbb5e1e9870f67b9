//! The SwiGLU MLP of the Transformer++ block (docs/semantics.md §8).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, activation::silu, backend::Backend};

/// Configuration of [`SwiGlu`].
#[derive(Config, Debug)]
pub struct SwiGluConfig {
    /// Model width `d`.
    pub d_model: usize,
}

impl SwiGluConfig {
    /// Hidden width: `⌈8d/3⌉` rounded up to a multiple of 64 (docs/semantics.md §8).
    pub fn hidden(&self) -> usize {
        (8 * self.d_model).div_ceil(3).div_ceil(64) * 64
    }

    /// Builds the MLP, without biases.
    pub fn init<B: Backend>(&self, device: &B::Device) -> SwiGlu<B> {
        let (d, hidden) = (self.d_model, self.hidden());
        let linear = |a, b| LinearConfig::new(a, b).with_bias(false).init(device);
        SwiGlu { gate: linear(d, hidden), up: linear(d, hidden), down: linear(hidden, d) }
    }
}

/// `down(silu(gate(x)) ∘ up(x))`.
#[derive(Module, Debug)]
pub struct SwiGlu<B: Backend> {
    gate: Linear<B>,
    up: Linear<B>,
    down: Linear<B>,
}

impl<B: Backend> SwiGlu<B> {
    /// `x: [batch, N, d]` → `[batch, N, d]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.down.forward(silu(self.gate.forward(x.clone())) * self.up.forward(x))
    }
}
