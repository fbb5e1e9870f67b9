//! The backends compared with the reference, each only when the build has it and a device
//! answers; otherwise the reason is reported, never skipped silently.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::backend::{Autodiff, NdArray};
use swa_training::TrainingBackend;

use super::cases::CheckCase;
use super::compare::Arithmetic;
use super::measure::{Outcome, measure};
use super::params::Weights;
use crate::error::AppError;

/// The reference: ndarray, f32, with autodiff.
pub type Reference = Autodiff<NdArray<f32>>;

/// A backend compared with the reference, on its default device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// burn-flex (CPU), feature `flex`.
    Flex,
    /// Burn's default `Wgpu` type (fusion over CubeCL; Vulkan, Metal or DX12), feature `wgpu`.
    Wgpu,
    /// Burn's default `Cuda` type (fusion over CubeCL), feature `cuda`.
    Cuda,
}

impl Candidate {
    /// Every candidate, compiled in or not.
    pub const ALL: [Candidate; 3] = [Candidate::Flex, Candidate::Wgpu, Candidate::Cuda];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Flex => "flex",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        }
    }

    /// How it computes its f32 tensors.
    pub fn arithmetic(self) -> Arithmetic {
        match self {
            Self::Cuda => Arithmetic::Tf32,
            Self::Flex | Self::Wgpu => Arithmetic::F32,
        }
    }

    /// `Ok` when the build has the backend and its default device answers a first tensor op;
    /// otherwise why not.
    pub fn availability(self) -> Result<(), AppError> {
        match self {
            #[cfg(feature = "flex")]
            Self::Flex => answers::<burn::backend::Flex>("flex"),
            #[cfg(feature = "wgpu")]
            Self::Wgpu => answers::<burn::backend::Wgpu>("wgpu"),
            #[cfg(feature = "cuda")]
            Self::Cuda => answers::<burn::backend::Cuda>("cuda"),
            #[allow(unreachable_patterns)]
            other => Err(AppError::NoBackend { feature: other.name() }),
        }
    }

    /// Runs `case` with `weights` on this backend; a panic inside is reported as an error.
    pub fn measure(self, case: &CheckCase, weights: &Weights) -> Result<Outcome, AppError> {
        match self {
            #[cfg(feature = "flex")]
            Self::Flex => guarded::<Autodiff<burn::backend::Flex>>(case, weights),
            #[cfg(feature = "wgpu")]
            Self::Wgpu => guarded::<Autodiff<burn::backend::Wgpu>>(case, weights),
            #[cfg(feature = "cuda")]
            Self::Cuda => guarded::<Autodiff<burn::backend::Cuda>>(case, weights),
            #[allow(unreachable_patterns)]
            other => Err(AppError::NoBackend { feature: other.name() }),
        }
    }
}

/// Runs `case` on the reference backend.
#[cfg(not(feature = "ddp"))]
pub fn measure_reference(case: &CheckCase, weights: &Weights) -> Result<Outcome, AppError> {
    guarded::<Reference>(case, weights)
}

/// The reference backend, ndarray, has no autodiff in a `ddp` build.
#[cfg(feature = "ddp")]
pub fn measure_reference(_: &CheckCase, _: &Weights) -> Result<Outcome, AppError> {
    Err(AppError::CpuInDdpBuild { backend: "ndarray" })
}

/// [`measure`] on `B`'s default device, with a panic turned into an error naming it.
fn guarded<B: TrainingBackend>(case: &CheckCase, weights: &Weights) -> Result<Outcome, AppError> {
    catch_unwind(AssertUnwindSafe(|| measure::<B>(case, weights, &Default::default())))
        .unwrap_or_else(|panic| Err(AppError::Panicked { message: panic_message(panic.as_ref()) }))
}

/// Whether a first tensor op on `B`'s default device succeeds (no adapter or driver panics).
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
fn answers<B: burn::tensor::backend::Backend>(backend: &'static str) -> Result<(), AppError> {
    catch_unwind(|| burn::tensor::Tensor::<B, 1>::zeros([1], &Default::default()).into_data())
        .map(|_| ())
        .map_err(|panic| AppError::NoDevice { backend, problem: panic_message(panic.as_ref()) })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "(no message)".into(),
    }
}
