//! What a job is asked to run on: the backend and the float precision (and a checkpoint's
//! weights' float type), as the command line and
//! the examples' flags name them. Plain values, so that both the runner ([`crate::runtime`]) and
//! the errors ([`crate::error`]) can name them without depending on each other.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use burn::tensor::DType;
use clap::ValueEnum;
use swa_models::hf::WeightPrecision;

/// The backends a build can offer; those not compiled in say how to get them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// burn-flex on the CPU: the fastest CPU backend here.
    Flex,
    /// burn-ndarray on the CPU: the tests' reference.
    Ndarray,
    /// wgpu: Vulkan, Metal or DX12 (needs `--features wgpu`).
    Wgpu,
    /// CUDA (needs `--features cuda`).
    Cuda,
}

/// The float type of the model's weights, activations and gradients (training in half precision
/// keeps an f32 master copy of the weights: see [`swa_training::mixed_precision`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Precision {
    /// 32-bit floats, on every backend.
    F32,
    /// IEEE half precision, on wgpu (where the adapter has shader-f16) and CUDA.
    F16,
    /// bfloat16, on CUDA.
    Bf16,
}

/// `--weights`: the float type a loaded checkpoint's weights are kept in, one of
/// [`WeightPrecision::NAMED`] by its name, for clap.
pub fn weights_flag() -> impl clap::builder::TypedValueParser<Value = WeightPrecision> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(WeightPrecision::NAMED.map(WeightPrecision::name))
        .try_map(|name| WeightPrecision::named(&name).ok_or(format!("no float type `{name}`")))
}

impl BackendChoice {
    /// The flag's value, also the cargo feature that brings the backend.
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Flex => "flex",
            BackendChoice::Ndarray => "ndarray",
            BackendChoice::Wgpu => "wgpu",
            BackendChoice::Cuda => "cuda",
        }
    }
}

impl Precision {
    /// The flag's value: `f32`, `f16` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    /// Weights of this precision's own float type.
    pub fn weights(self) -> WeightPrecision {
        match self {
            Precision::F32 => WeightPrecision::F32,
            Precision::F16 => WeightPrecision::F16,
            Precision::Bf16 => WeightPrecision::Bf16,
        }
    }

    /// The Burn float type of this precision.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(crate) fn dtype(self) -> DType {
        match self {
            Precision::F32 => DType::F32,
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::BF16,
        }
    }
}
