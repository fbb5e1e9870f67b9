//! Host side of the forward kernels: output allocation, the choice between the tensor-core
//! kernel (`super::forward_cmma`, where the device has a cooperative tile for the inputs' type)
//! and the portable one, grid and launch.

use burn::tensor::{DType, Shape};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::config::{Layout, ROWS, placeholder};
use super::forward::forward_kernel;
use super::forward_cmma::forward_cmma_kernel;
use super::mma::{load_vector, tensor_core_tile};
use crate::{ScoreOptions, WindowSpec};

/// Runs the forward kernel: `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` and the
/// relative scores `[batch, H, N_q, L]` when given → (`o: [batch, H, N_q, d]` in the inputs'
/// dtype, `lse: [batch, H, N_q]` f32). Inputs may have any strides. The tensor-core kernel
/// reads no relative scores: calls with them run the portable kernel.
pub(crate) fn forward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    relative: Option<CubeTensor<R>>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [batch, heads, q_len, dim] = q.meta.shape().dims();
    let keys = k.meta.shape().dims::<4>()[2];
    let client = q.client.clone();
    let mut layout = Layout::new(&client, &q.device, spec, opts, dim, keys);
    layout.variant.relative = relative.is_some();
    let empty =
        |shape: Shape, dtype| empty_device_dtype(client.clone(), q.device.clone(), shape, dtype);
    let o = empty(q.meta.shape().clone(), q.dtype);
    let lse = empty(Shape::new([batch, heads, q_len]), DType::F32);
    let dtype = q.dtype;
    if let Some(mma) = tensor_core_tile(&client, dtype, dim).filter(|_| relative.is_none()) {
        // SAFETY: the tensor-core kernels guard every access (`super::mma`, "Unchecked").
        unsafe {
            forward_cmma_kernel::launch_unchecked::<R>(
                &client,
                CubeCount::Static(q_len.div_ceil(mma.m) as u32, heads as u32, batch as u32),
                CubeDim::new_1d(mma.plane as u32),
                load_vector(&[&q, &k, &v]),
                q.into_tensor_arg(),
                k.into_tensor_arg(),
                v.into_tensor_arg(),
                o.clone().into_tensor_arg(),
                lse.clone().into_tensor_arg(),
                layout.windows.clone().into_array_arg(),
                layout.slopes.clone().into_array_arg(),
                layout.call(),
                layout.variant,
                mma,
                dtype.into(),
            );
        }
        return (o, lse);
    }
    let relative = relative.unwrap_or_else(|| placeholder(&client, &q.device, dtype));
    forward_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        CubeDim::new_1d(ROWS as u32),
        load_vector(&[&q, &k, &v]),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        relative.into_tensor_arg(),
        o.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        layout.windows.clone().into_array_arg(),
        layout.slopes.clone().into_array_arg(),
        layout.call(),
        layout.variant,
        dtype.into(),
    );
    (o, lse)
}

/// One cube per [`ROWS`] rows of `rows`, per head, per batch element.
pub(crate) fn grid(rows: usize, heads: usize, batch: usize) -> CubeCount {
    CubeCount::Static(rows.div_ceil(ROWS) as u32, heads as u32, batch as u32)
}
