//! Rotary position embedding in the Llama / Hugging Face "rotate half" layout (docs/semantics.md §4).

use burn::config::Config;
use burn::tensor::{Tensor, TensorData, backend::Backend};

use crate::AttentionError;

/// Configuration of [`Rope`].
#[derive(Config, Debug)]
pub struct RopeConfig {
    /// Head dimension `d` the rotation applies to; must be even.
    pub head_dim: usize,
    /// Frequency base: dimension pair `k` turns by `position · base^(−2k/d)`.
    #[config(default = "10000.0")]
    pub base: f64,
}

impl RopeConfig {
    /// Builds the rotation; fails on an odd or zero head dimension.
    pub fn init(&self) -> Result<Rope, AttentionError> {
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(AttentionError::ShapeMismatch {
                what: "RoPE head dimension (must be even and positive)",
                expected: self.head_dim + self.head_dim % 2,
                got: self.head_dim,
            });
        }
        Ok(Rope { head_dim: self.head_dim, base: self.base })
    }
}

/// Rotates q or k by their positions. It holds no weights, so a model keeps it as a plain field.
#[derive(Clone, Debug)]
pub struct Rope {
    head_dim: usize,
    base: f64,
}

impl Rope {
    /// Rotates `x: [batch, heads, seq, head_dim]`, row `n` sitting at position `offset + n`.
    /// Returns the same shape.
    pub fn forward<B: Backend>(&self, x: Tensor<B, 4>, offset: usize) -> Tensor<B, 4> {
        let n = x.dims()[2];
        let positions: Vec<usize> = (offset..offset + n).collect();
        self.forward_at(x, &positions)
    }

    /// Rotates `x: [batch, heads, seq, head_dim]`, row `n` sitting at `positions[n]`; used for
    /// StreamingLLM's cache-slot positions (docs/semantics.md §7). Returns the same shape.
    pub fn forward_at<B: Backend>(&self, x: Tensor<B, 4>, positions: &[usize]) -> Tensor<B, 4> {
        let [_, _, n, d] = x.dims();
        assert_eq!(d, self.head_dim, "RoPE built for head_dim {} got {d}", self.head_dim);
        assert_eq!(n, positions.len(), "RoPE got {} positions for {n} rows", positions.len());
        let half = d / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(n * d), Vec::with_capacity(n * d));
        for &p in positions {
            for k in 0..d {
                let freq = self.base.powf(-2.0 * (k % half) as f64 / d as f64);
                let angle = p as f64 * freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let device = x.device();
        let table =
            |v: Vec<f32>| Tensor::<B, 4>::from_data(TensorData::new(v, [1, 1, n, d]), &device);
        let (cos, sin) = (table(cos), table(sin));
        let first = x.clone().narrow(3, 0, half);
        let second = x.clone().narrow(3, half, half);
        let rotated = Tensor::cat(vec![second.neg(), first], 3);
        x * cos + rotated * sin
    }
}
