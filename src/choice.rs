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

/// The float type of a loaded checkpoint's weights (`--weights`): narrower than the
/// computation on the CPU backends, which widen the weights as their products read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WeightChoice {
    /// 32-bit floats.
    F32,
    /// bfloat16, the storage of most published checkpoints: half the memory and half the bytes
    /// read per decoded token.
    Bf16,
    /// IEEE half precision.
    F16,
}

impl WeightChoice {
    /// The flag's value: `f32`, `bf16` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            WeightChoice::F32 => "f32",
            WeightChoice::Bf16 => "bf16",
            WeightChoice::F16 => "f16",
        }
    }

    /// Whether the weights are of the computation's type `precision`.
    pub fn is(self, precision: Precision) -> bool {
        matches!(
            (self, precision),
            (WeightChoice::F32, Precision::F32)
                | (WeightChoice::Bf16, Precision::Bf16)
                | (WeightChoice::F16, Precision::F16)
        )
    }

    /// The library's choice of the same type.
    pub fn precision(self) -> WeightPrecision {
        match self {
            WeightChoice::F32 => WeightPrecision::F32,
            WeightChoice::Bf16 => WeightPrecision::Bf16,
            WeightChoice::F16 => WeightPrecision::F16,
        }
    }
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
