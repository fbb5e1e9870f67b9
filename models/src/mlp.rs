//! The gated MLP of the decoder block: SwiGLU in Transformer++ (docs/semantics.md §8), GeGLU
//! with the tanh GELU in Gemma (docs/semantics.md §9).

use burn::config::Config;
use burn::module::Module;
use burn::module::{Content, DisplaySettings, ModuleDisplay};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};
use swa_attention::ModelBackend;
pub use swa_attention::layer_ops::MlpActivation;
use swa_attention::layer_ops::{gate, linear};

/// Configuration of [`GatedMlp`].
#[derive(Config, Debug)]
pub struct GatedMlpConfig {
    /// Model width `d`.
    pub d_model: usize,
    /// Hidden width `F`; `None` is `⌈8d/3⌉` rounded up to a multiple of 64 (docs/semantics.md
    /// §8).
    pub hidden: Option<usize>,
    /// The gate's activation.
    #[config(default = "MlpActivation::Silu")]
    pub activation: MlpActivation,
}

impl GatedMlpConfig {
    /// The hidden width `F`.
    pub fn hidden_width(&self) -> usize {
        self.hidden.unwrap_or((8 * self.d_model).div_ceil(3).div_ceil(64) * 64)
    }

    /// Builds the MLP, without biases.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GatedMlp<B> {
        let (d, hidden) = (self.d_model, self.hidden_width());
        let linear = |a, b| LinearConfig::new(a, b).with_bias(false).init(device);
        GatedMlp {
            gate_up: linear(d, 2 * hidden),
            down: linear(hidden, d),
            activation: self.activation,
        }
    }
}

/// `down(act(gate(x)) ∘ up(x))`, the gate and up projections one linear layer, so that a
/// single product gives both (one launch on a GPU rather than two).
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct GatedMlp<B: Backend> {
    /// `[W_gate | W_up]`, `[d, 2F]`: the gate's columns, then the up projection's.
    gate_up: Linear<B>,
    /// `[F, d]`.
    down: Linear<B>,
    activation: MlpActivation,
}

impl<B: ModelBackend> GatedMlp<B> {
    /// `x: [batch, N, d]` → `[batch, N, d]`; one product for the gate and up projections, whose
    /// halves the gate `act(gate)·up` reads where they lie, as one fused op where the backend has
    /// one ([`swa_attention::layer_ops::gate`]).
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        linear(&self.down, gate(linear(&self.gate_up, x), self.activation))
    }
}

/// One line: the widths and the gate's activation.
impl<B: Backend> ModuleDisplay for GatedMlp<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        let [hidden, d_model] = self.down.weight.shape().dims();
        content
            .add("d_model", &d_model)
            .add("hidden", &hidden)
            .add("activation", &format!("{:?}", self.activation))
            .optional()
    }
}
