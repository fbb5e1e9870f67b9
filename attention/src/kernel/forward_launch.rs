//! Host side of the forward kernel: output allocation, grid and launch.

use burn::tensor::Shape;
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::config::{Layout, ROWS};
use super::forward::forward_kernel;
use crate::{ScoreOptions, WindowSpec};

/// Runs the forward kernel: `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` →
/// `[batch, H, N_q, d + 1]` (`o`, then `lse`). Inputs may have any strides.
pub(crate) fn forward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> CubeTensor<R> {
    let [batch, heads, q_len, dim] = q.meta.shape().dims();
    let keys = k.meta.shape().dims::<4>()[2];
    let client = q.client.clone();
    let layout = Layout::new(&client, &q.device, spec, opts, dim, keys);
    let shape = Shape::new([batch, heads, q_len, dim + 1]);
    let packed = empty_device_dtype(client.clone(), q.device.clone(), shape, q.dtype);
    let dtype = q.dtype;
    forward_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        CubeDim::new_1d(ROWS as u32),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        packed.clone().into_tensor_arg(),
        layout.windows.clone().into_array_arg(),
        layout.slopes.clone().into_array_arg(),
        layout.call(),
        layout.variant,
        dtype.into(),
    );
    packed
}

/// One cube per [`ROWS`] rows of `rows`, per head, per batch element.
pub(crate) fn grid(rows: usize, heads: usize, batch: usize) -> CubeCount {
    CubeCount::Static(rows.div_ceil(ROWS) as u32, heads as u32, batch as u32)
}
