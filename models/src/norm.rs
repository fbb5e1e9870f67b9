//! RMSNorm (docs/semantics.md §8: pre-norm, ε = 1e-6).

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::{Tensor, backend::Backend};

/// Configuration of [`RmsNorm`].
#[derive(Config, Debug)]
pub struct RmsNormConfig {
    /// Width of the normalised features.
    pub d_model: usize,
    /// Added to the mean square before the square root.
    #[config(default = 1e-6)]
    pub epsilon: f64,
}

/// `x / √(mean(x²) + ε) · γ`.
///
/// Written with `powf(−½)` rather than a division: Burn 0.21's ndarray backend computes the
/// backward of a division, and its `recip`, through an approximate SIMD reciprocal.
#[derive(Module, Debug)]
pub struct RmsNorm<B: Backend> {
    gamma: Param<Tensor<B, 1>>,
    epsilon: f64,
}

impl RmsNormConfig {
    /// A norm with `γ = 1`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RmsNorm<B> {
        RmsNorm {
            gamma: Param::from_tensor(Tensor::ones([self.d_model], device)),
            epsilon: self.epsilon,
        }
    }
}

impl<B: Backend> RmsNorm<B> {
    /// `x: [..., d_model]` → same shape.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let scale =
            x.clone().powi_scalar(2).mean_dim(D - 1).add_scalar(self.epsilon).powf_scalar(-0.5);
        x * scale * self.gamma.val().unsqueeze()
    }
}
