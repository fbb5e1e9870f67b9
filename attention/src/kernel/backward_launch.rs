//! Host side of the backward kernels: the row terms, then dQ (over query blocks) and dK/dV
//! (over key blocks), each writing its own outputs, so no atomics are needed.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::backward_keys::key_grads_kernel;
use super::backward_queries::query_grads_kernel;
use super::backward_rows::row_terms_kernel;
use super::config::{Layout, ROWS};
use super::forward_launch::grid;
use crate::backend::KernelBackward;
use crate::{ScoreOptions, WindowSpec};

/// Runs the backward kernels and returns `[dq, dk, dv]`, shaped as `q, k, v`. A missing
/// `∂L/∂lse` is zeros (one f32 per query row).
pub(crate) fn backward<R, B>(
    inputs: KernelBackward<B>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> [CubeTensor<R>; 3]
where
    R: CubeRuntime,
    B: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    let KernelBackward { q, k, v, o, lse, d_o, d_lse } = inputs;
    let [batch, heads, q_len, dim] = q.meta.shape().dims();
    let [_, kv_heads, keys, _] = k.meta.shape().dims();
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let layout = Layout::new(&client, &device, spec, opts, dim, keys);
    let empty =
        |shape: Shape, dtype| empty_device_dtype(client.clone(), device.clone(), shape, dtype);
    let terms = empty(Shape::new([batch, heads, q_len, 2]), DType::F32);
    let d_lse = d_lse
        .unwrap_or_else(|| zeros_client(client.clone(), device.clone(), lse.shape(), DType::F32));
    let (dq, dk, dv) = (empty(q.shape(), dtype), empty(k.shape(), dtype), empty(v.shape(), dtype));
    let cube_dim = CubeDim::new_1d(ROWS as u32);
    row_terms_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        cube_dim,
        o.into_tensor_arg(),
        d_o.clone().into_tensor_arg(),
        lse.into_tensor_arg(),
        d_lse.into_tensor_arg(),
        terms.clone().into_tensor_arg(),
        layout.variant,
        dtype.into(),
    );
    query_grads_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        cube_dim,
        q.clone().into_tensor_arg(),
        k.clone().into_tensor_arg(),
        v.clone().into_tensor_arg(),
        d_o.clone().into_tensor_arg(),
        terms.clone().into_tensor_arg(),
        dq.clone().into_tensor_arg(),
        layout.windows.clone().into_array_arg(),
        layout.slopes.clone().into_array_arg(),
        layout.call(),
        layout.variant,
        dtype.into(),
    );
    key_grads_kernel::launch::<R>(
        &client,
        grid(keys, kv_heads, batch),
        cube_dim,
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        d_o.into_tensor_arg(),
        terms.into_tensor_arg(),
        dk.clone().into_tensor_arg(),
        dv.clone().into_tensor_arg(),
        layout.windows.clone().into_array_arg(),
        layout.slopes.clone().into_array_arg(),
        layout.call(),
        layout.variant,
        dtype.into(),
    );
    [dq, dk, dv]
}
