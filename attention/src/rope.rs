//! Rotary position embedding in the Llama / Hugging Face "rotate half" layout (docs/semantics.md
//! §4), with the frequency scalings of pretrained checkpoints (docs/semantics.md §9). A backend may
//! fuse the rotation into one op ([`RotateKernel`]); the tensor ops are the fallback.

use std::f64::consts::PI;

use burn::config::Config;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive, backend::Backend};
use serde::{Deserialize, Serialize};

use crate::AttentionError;
use crate::fused_ops::fused_ops_off;

/// Configuration of [`Rope`].
#[derive(Config, Debug)]
pub struct RopeConfig {
    /// Head dimension `d` the rotation applies to; must be even.
    pub head_dim: usize,
    /// Frequency base: dimension pair `k` turns by `position · base^(−2k/d)`.
    #[config(default = "10000.0")]
    pub base: f64,
    /// How the frequencies are stretched for long contexts; `None` keeps them as they are.
    pub scaling: Option<RopeScaling>,
}

/// A stretch of RoPE's frequencies (docs/semantics.md §9). Serialised with a `"type"` tag, e.g.
/// `{"type": "linear", "factor": 8.0}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (position interpolation; Gemma 3's global layers).
    Linear {
        /// The stretch, `> 0`.
        factor: f64,
    },
    /// Llama 3.1's scaling: wavelengths longer than `original_max_position / low_freq_factor`
    /// are stretched by `factor`, those shorter than `original_max_position / high_freq_factor`
    /// kept, and the band between interpolated smoothly.
    Llama3 {
        /// The stretch of the low frequencies, `> 0`.
        factor: f64,
        /// Wavelengths above `original_max_position / low_freq_factor` are stretched.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was first trained at.
        original_max_position: usize,
    },
}

impl RopeScaling {
    /// The stretched inverse frequency of one dimension pair.
    fn apply(&self, inv_freq: f64) -> f64 {
        match *self {
            RopeScaling::Linear { factor } => inv_freq / factor,
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let context = original_max_position as f64;
                let wavelength = 2.0 * PI / inv_freq;
                if wavelength < context / high_freq_factor {
                    inv_freq
                } else if wavelength > context / low_freq_factor {
                    inv_freq / factor
                } else {
                    let smooth = (context / wavelength - low_freq_factor)
                        / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
                }
            }
        }
    }

    /// Whether the numbers describe a stretch: positive finite factors, ordered bands.
    fn is_valid(&self) -> bool {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        match *self {
            RopeScaling::Linear { factor } => positive(factor),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                positive(factor)
                    && positive(low_freq_factor)
                    && high_freq_factor > low_freq_factor
                    && high_freq_factor.is_finite()
                    && original_max_position > 0
            }
        }
    }
}

impl RopeConfig {
    /// Builds the rotation; fails on an odd or zero head dimension, or a scaling whose numbers
    /// describe no stretch.
    pub fn init(&self) -> Result<Rope, AttentionError> {
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(AttentionError::ShapeMismatch {
                what: "RoPE head dimension (must be even and positive)",
                expected: self.head_dim + self.head_dim % 2,
                got: self.head_dim,
            });
        }
        if let Some(scaling) = self.scaling.filter(|s| !s.is_valid()) {
            return Err(AttentionError::BadRopeScaling(scaling));
        }
        let d = self.head_dim;
        let inv_freq = (0..d / 2)
            .map(|k| {
                let inv_freq = self.base.powf(-2.0 * k as f64 / d as f64);
                self.scaling.map_or(inv_freq, |s| s.apply(inv_freq))
            })
            .collect();
        Ok(Rope { head_dim: d, inv_freq })
    }
}

/// Rotates q or k by their positions. It holds no weights, so a model keeps it as a plain field.
#[derive(Clone, Debug)]
pub struct Rope {
    head_dim: usize,
    /// The angle per position of dimension pair `k`, `base^(−2k/d)` after any scaling.
    inv_freq: Vec<f64>,
}

impl Rope {
    /// Rotates `x: [batch, heads, seq, head_dim]`, row `n` sitting at position `offset + n`.
    /// Returns the same shape.
    pub fn forward<B: RopeBackend>(&self, x: Tensor<B, 4>, offset: usize) -> Tensor<B, 4> {
        let n = x.dims()[2];
        let positions: Vec<usize> = (offset..offset + n).collect();
        self.forward_at(x, &positions)
    }

    /// Rotates `x: [batch, heads, seq, head_dim]`, row `n` sitting at `positions[n]`; used for
    /// StreamingLLM's cache-slot positions (docs/semantics.md §7). Returns the same shape.
    ///
    /// Runs as [`rotate`] does.
    pub fn forward_at<B: RopeBackend>(&self, x: Tensor<B, 4>, positions: &[usize]) -> Tensor<B, 4> {
        rotate(x, &self.angles(positions))
    }

    /// The angles of rows at `positions`, in f64 and then rounded to f32.
    pub fn angles(&self, positions: &[usize]) -> RopeAngles {
        let half = self.head_dim / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(positions.len() * half), Vec::new());
        sin.reserve(positions.len() * half);
        for &p in positions {
            for &inv_freq in &self.inv_freq[..half] {
                let angle = p as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        RopeAngles { rows: positions.len(), half, cos, sin }
    }
}

/// The rotation of `N` rows: `cos` and `sin` of each row's angle for each dimension pair,
/// `[N, d/2]` row-major. Pair `k` is dimensions `k` and `k + d/2` ("rotate half").
#[derive(Clone, Debug, PartialEq)]
pub struct RopeAngles {
    /// Rows `N`.
    pub rows: usize,
    /// Dimension pairs `d/2`.
    pub half: usize,
    /// `cos θ`, `[N, d/2]`.
    pub cos: Vec<f32>,
    /// `sin θ`, `[N, d/2]`.
    pub sin: Vec<f32>,
}

impl RopeAngles {
    /// The opposite rotation, `−θ`: a rotation's transpose, so the backward of a rotation.
    pub fn inverse(&self) -> Self {
        Self { sin: self.sin.iter().map(|s| -s).collect(), ..self.clone() }
    }
}

/// Rotates `x: [batch, heads, N, d]`, row `n` by `angles` row `n` → the same shape: the
/// backend's fused rotation ([`RopeBackend::rope_kernel`]) where it has one, unless
/// [`crate::FUSED_OPS_VARIABLE`] turns the fused ops off ([`rotate_tensor_ops`]).
pub fn rotate<B: RopeBackend>(x: Tensor<B, 4>, angles: &RopeAngles) -> Tensor<B, 4> {
    match B::rope_kernel().filter(|_| !fused_ops_off()) {
        Some(rotate) => {
            let rotated = rotate(x.into_primitive().tensor(), angles);
            Tensor::from_primitive(TensorPrimitive::Float(rotated))
        }
        None => rotate_tensor_ops(x, angles),
    }
}

/// A backend's fused rotation: `x: [batch, heads, N, d]`, row `n` turned by `angles` row `n`,
/// → the same shape, stored in the physical order `x` was stored in (so that a fused op's
/// output can be merged or split back without a copy).
pub type RotateKernel<B> = fn(FloatTensor<B>, &RopeAngles) -> FloatTensor<B>;

/// A Burn backend that may rotate with a fused RoPE kernel.
pub trait RopeBackend: Backend {
    /// The backend's fused RoPE ([`RotateKernel`]), or `None` (the default) when
    /// the rotation runs as tensor ops. `Autodiff<B>` differentiates through its inner
    /// backend's (the backward of a rotation is the opposite rotation).
    fn rope_kernel() -> Option<RotateKernel<Self>> {
        None
    }
}

#[cfg(feature = "ndarray")]
impl<E, I, Q> RopeBackend for burn::backend::NdArray<E, I, Q>
where
    E: burn::backend::ndarray::FloatNdArrayElement,
    I: burn::backend::ndarray::IntNdArrayElement,
    Q: burn::backend::ndarray::QuantElement,
    burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<E>>,
    burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<I>>,
{
}

/// The rotation as tensor ops, on every backend: `x · cos θ + rotate_half(x) · sin θ` with
/// `rotate_half(x) = [−x₂, x₁]`. The fused kernels' fallback and test reference.
/// `x: [batch, heads, N, d]` → the same shape.
pub fn rotate_tensor_ops<B: Backend>(x: Tensor<B, 4>, angles: &RopeAngles) -> Tensor<B, 4> {
    let [_, _, n, d] = x.dims();
    assert_eq!(d, 2 * angles.half, "RoPE built for head_dim {} got {d}", 2 * angles.half);
    assert_eq!(n, angles.rows, "RoPE got {} positions for {n} rows", angles.rows);
    let half = angles.half;
    let device = x.device();
    let table = |values: &[f32]| {
        let full: Vec<f32> =
            values.chunks_exact(half).flat_map(|row| row.iter().chain(row)).copied().collect();
        Tensor::<B, 4>::from_data(TensorData::new(full, [1, 1, n, d]), &device)
    };
    let (cos, sin) = (table(&angles.cos), table(&angles.sin));
    let first = x.clone().narrow(3, 0, half);
    let second = x.clone().narrow(3, half, half);
    let rotated = Tensor::cat(vec![second.neg(), first], 3);
    x * cos + rotated * sin
}
