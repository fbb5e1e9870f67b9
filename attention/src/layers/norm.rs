//! RMSNorm (docs/semantics.md §8: pre-norm, ε = 1e-6 unless a checkpoint says otherwise), also
//! used per head on q and k (Gemma 3's q/k norm, docs/semantics.md §9).

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
    /// Scale by `1 + w` instead of `w`, with `w` starting at 0 (Gemma's form; docs/semantics.md
    /// §9). The stored weight is `w` either way.
    #[config(default = false)]
    pub unit_offset: bool,
}

/// `x / √(mean(x²) + ε) · γ`, with `γ = w` or `γ = 1 + w` ([`RmsNormConfig::unit_offset`]).
///
/// Written with `powf(−½)` rather than a division: Burn 0.21's ndarray backend computes the
/// backward of a division, and its `recip`, through an approximate SIMD reciprocal.
#[derive(Module, Debug)]
pub struct RmsNorm<B: Backend> {
    gamma: Param<Tensor<B, 1>>,
    epsilon: f64,
    unit_offset: bool,
}

impl RmsNormConfig {
    /// A norm that starts as the identity scale: `w = 1`, or `w = 0` under `unit_offset`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RmsNorm<B> {
        let gamma = match self.unit_offset {
            true => Tensor::zeros([self.d_model], device),
            false => Tensor::ones([self.d_model], device),
        };
        RmsNorm {
            gamma: Param::from_tensor(gamma),
            epsilon: self.epsilon,
            unit_offset: self.unit_offset,
        }
    }
}

impl<B: Backend> RmsNorm<B> {
    /// `x: [..., d_model]` → same shape.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let scale =
            x.clone().powi_scalar(2).mean_dim(D - 1).add_scalar(self.epsilon).powf_scalar(-0.5);
        let gamma = match self.unit_offset {
            true => self.gamma.val().add_scalar(1.0),
            false => self.gamma.val(),
        };
        x * scale * gamma.unsqueeze()
    }
}
