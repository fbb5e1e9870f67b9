//! The kernels as the windowed core of `CubeBackend`, on every CubeCL runtime (wgpu, CUDA, …).

use burn::tensor::ops::FloatTensor;
use burn_cubecl::element::BoolElement;
use burn_cubecl::{CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::backward_launch::backward;
use super::forward_launch::forward;
use crate::backend::{
    KernelBackward, WindowedAttentionBackend, WindowedKernel, WindowedKernelBackend,
};
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

    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> [FloatTensor<Self>; 3] {
        backward(inputs, spec, opts)
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
