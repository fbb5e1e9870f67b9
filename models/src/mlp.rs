//! The gated MLP of the decoder block: SwiGLU in Transformer++ (docs/semantics.md §8), GeGLU
//! with the tanh GELU in Gemma (docs/semantics.md §9).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};
use serde::{Deserialize, Serialize};
use swa_attention::WindowedAttentionBackend;
use swa_attention::layer_ops::{linear, silu_gate};

/// The activation of the gate. Serialised in snake case: `"silu"`, `"gelu_tanh"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpActivation {
    /// `x·σ(x)` (SwiGLU: Transformer++, Llama, Mistral, Qwen2).
    #[default]
    Silu,
    /// GELU in its tanh approximation, `½x(1 + tanh(√(2/π)(x + 0.044715x³)))` (Gemma).
    GeluTanh,
}

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
            gate: linear(d, hidden),
            up: linear(d, hidden),
            down: linear(hidden, d),
            activation: self.activation,
        }
    }
}

/// `down(act(gate(x)) ∘ up(x))`.
#[derive(Module, Debug)]
pub struct GatedMlp<B: Backend> {
    gate: Linear<B>,
    up: Linear<B>,
    down: Linear<B>,
    activation: MlpActivation,
}

impl<B: WindowedAttentionBackend> GatedMlp<B> {
    /// `x: [batch, N, d]` → `[batch, N, d]`; SwiGLU's gate as one fused op where the backend
    /// has one ([`swa_attention::layer_ops::silu_gate`]).
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let (gate, up) = (linear(&self.gate, x.clone()), linear(&self.up, x));
        let hidden = match self.activation {
            MlpActivation::Silu => silu_gate(gate, up),
            MlpActivation::GeluTanh => gelu_tanh(gate) * up,
        };
        linear(&self.down, hidden)
    }
}

/// GELU in its tanh approximation (Burn's `gelu` is the exact, erf form).
fn gelu_tanh<B: Backend>(x: Tensor<B, 3>) -> Tensor<B, 3> {
    let inner = (x.clone() + x.clone().powi_scalar(3).mul_scalar(0.044715))
        .mul_scalar((2.0 / std::f64::consts::PI).sqrt());
    x.mul_scalar(0.5) * inner.tanh().add_scalar(1.0)
}
