//! RMSNorm (docs/semantics.md §8: pre-norm, ε = 1e-6 unless a checkpoint says otherwise), also
//! used per head on q and k (Gemma 3's q/k norm, docs/semantics.md §9).

use burn::config::Config;
use burn::module::{Content, DisplaySettings, ModuleDisplay};
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Tensor, backend::Backend};

use swa_attention::ModelBackend;
use swa_attention::layer_ops::{RmsOptions, rms_norm};

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

/// `x / √(mean(x²) + ε) · γ`, with `γ = w` or `γ = 1 + w` ([`RmsNormConfig::unit_offset`]),
/// as one fused op where the backend has one ([`swa_attention::layer_ops::rms_norm`]).
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct RmsNorm<B: Backend> {
    gamma: Param<Tensor<B, 1>>,
    epsilon: f64,
    unit_offset: bool,
}

impl RmsNormConfig {
    /// A norm that starts as the identity scale: `w = 1`, or `w = 0` under `unit_offset`. The
    /// scale is drawn lazily, as Burn's parameters are: nothing is allocated before it is used,
    /// so a model built to be loaded from a checkpoint costs nothing until its weights come.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RmsNorm<B> {
        let initializer = match self.unit_offset {
            true => Initializer::Zeros,
            false => Initializer::Ones,
        };
        RmsNorm {
            gamma: initializer.init([self.d_model], device),
            epsilon: self.epsilon,
            unit_offset: self.unit_offset,
        }
    }
}

impl<B: ModelBackend> RmsNorm<B> {
    /// `x: [..., d_model]` → same shape.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let options = RmsOptions { epsilon: self.epsilon, unit_offset: self.unit_offset };
        rms_norm(x, self.gamma.val(), options)
    }
}

/// One line: width, ε and whether the scale is `1 + w`.
impl<B: Backend> ModuleDisplay for RmsNorm<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("d", &self.gamma.shape().dims::<1>()[0])
            .add("epsilon", &self.epsilon)
            .add("unit_offset", &self.unit_offset)
            .optional()
    }
}
