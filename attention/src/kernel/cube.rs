//! The kernels as the windowed core, the fused decode step, the fused append and the fused
//! RoPE of `CubeBackend`, on every CubeCL runtime (wgpu, CUDA, …).

use burn::tensor::Shape;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::element::BoolElement;
use burn_cubecl::{CubeBackend, CubeRuntime, FloatElement, IntElement};

use crate::backend::{
    KernelBackward, KernelGradients, OutputPrimitives, WindowedAttentionBackend, WindowedKernel,
    WindowedKernelBackend,
};
use crate::decode::{CacheWrite, DecodeKernel};
use crate::kernel::launch::backward::backward;
use crate::kernel::launch::cache_write::cache_write;
use crate::kernel::launch::decode::decode;
use crate::kernel::launch::forward::forward;
use crate::kernel::rope::rotate;
use crate::layer_ops::LayerOpsBackend;
use crate::rope::{RopeBackend, RotateKernel};
use crate::{ScoreOptions, WindowSpec};

/// Largest head dimension the kernels take: each thread keeps a few rows of `d` floats in
/// registers, and a tile of keys must fit in shared memory.
pub const MAX_KERNEL_HEAD_DIM: usize = 256;

/// Largest `N_q` and `N_k` the kernels take: 65535 blocks of 32 rows, the grid limit of wgpu.
pub const MAX_KERNEL_LEN: usize = 65535 * 32;

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
        relative: Option<FloatTensor<Self>>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        forward(q, k, v, relative, spec, opts)
    }

    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> KernelGradients<Self> {
        backward(inputs, spec, opts)
    }

    /// Every call but these, which the blocked path runs:
    /// - global tokens (Longformer): a global query sees every key and every query sees the
    ///   global keys, which breaks the banded tile schedule; the blocked path runs such calls
    ///   whole (its global rows are one dense block);
    /// - calls without a query or a valid key, `v`'s head dim differing from `q`'s,
    ///   `d >` [`MAX_KERNEL_HEAD_DIM`], lengths above [`MAX_KERNEL_LEN`], or more than 65535
    ///   heads or batch elements (grid limits).
    fn windowed_runs(spec: &WindowSpec, q: &Shape, k: &Shape, v: &Shape) -> bool {
        let [batch, heads, q_len, dim] = q.dims::<4>();
        let keys = k.dims::<4>()[2];
        let positions = spec.query_offset().saturating_add(q_len).max(keys);
        spec.globals().is_empty()
            && batch > 0
            && q_len > 0
            && spec.valid_keys(keys) > 0
            && (1..=MAX_KERNEL_HEAD_DIM).contains(&dim)
            && v.dims::<4>()[3] == dim
            && q_len.max(keys) <= MAX_KERNEL_LEN
            && positions < u32::MAX as usize
            && heads <= 65535
            && batch <= 65535
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

    /// One launch per layer over all of its ring buffers (`kernel::launch::decode`).
    fn windowed_decode() -> Option<DecodeKernel<Self>> {
        Some(decode::<R, Self>)
    }

    /// One launch per layer over all of its ring buffers (`kernel::launch::cache_write`).
    fn windowed_cache_write() -> Option<CacheWrite<Self>> {
        Some(cache_write::<R, Self>)
    }
}

/// RoPE as one launch (`kernel::rope`).
impl<R, F, I, BT> RopeBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn rope_kernel() -> Option<RotateKernel<Self>> {
        Some(rotate::<R>)
    }
}

/// The layer ops run as tensor ops on the CubeCL backends.
impl<R, F, I, BT> LayerOpsBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
}
