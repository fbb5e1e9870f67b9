//! The kernels as the windowed core of `CubeBackend`, on every CubeCL runtime (wgpu, CUDA, …).

use burn::tensor::ops::FloatTensor;
use burn_cubecl::element::BoolElement;
use burn_cubecl::{CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::forward_launch::forward;
use crate::backend::{WindowedAttentionBackend, WindowedKernel, WindowedKernelBackend};
use crate::{ScoreOptions, WindowSpec};

impl<R, F, I, BT> WindowedKernelBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn windowed_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> FloatTensor<Self> {
        forward(q, k, v, spec, opts)
    }
}

impl<R, F, I, BT> WindowedAttentionBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn windowed_kernel() -> Option<WindowedKernel<Self>> {
        Some(WindowedKernel::of())
    }
}
