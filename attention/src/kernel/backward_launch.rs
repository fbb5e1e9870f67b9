//! Host side of the backward kernels: the row terms, then dQ (over query blocks) and dK/dV
//! (over key blocks), each writing its own outputs, so no atomics are needed. dQ and dK/dV run
//! on tensor cores (`super::mma`) where the forward does, on the portable kernels otherwise.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::backward_keys::key_grads_kernel;
use super::backward_keys_cmma::key_grads_cmma_kernel;
use super::backward_queries::query_grads_kernel;
use super::backward_queries_cmma::query_grads_cmma_kernel;
use super::backward_rows::row_terms_kernel;
use super::config::{Layout, ROWS, placeholder};
use super::forward_launch::grid;
use super::mma::{Mma, load_vector, tensor_core_tile};
use crate::backend::{KernelBackward, KernelGradients};
use crate::{ScoreOptions, WindowSpec};

/// Runs the backward kernels and returns the gradients of `q, k, v` (and of the relative scores
/// when the call has them), shaped as them. A missing `∂L/∂lse` is zeros (one f32 per query
/// row).
pub(crate) fn backward<R, B>(
    inputs: KernelBackward<B>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> KernelGradients<B>
where
    R: CubeRuntime,
    B: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    let KernelBackward { q, k, v, relative, o, lse, d_o, d_lse } = inputs;
    let [batch, heads, q_len, dim] = q.meta.shape().dims();
    let keys = k.meta.shape().dims::<4>()[2];
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let mut layout = Layout::new(&client, &device, spec, opts, dim, keys);
    layout.variant.relative = relative.is_some();
    let zeros = |shape, dtype| zeros_client(client.clone(), device.clone(), shape, dtype);
    let d_relative = relative.as_ref().map(|t| zeros(t.shape(), t.dtype));
    let empty =
        |shape: Shape, dtype| empty_device_dtype(client.clone(), device.clone(), shape, dtype);
    let terms = empty(Shape::new([batch, heads, q_len, 2]), DType::F32);
    let d_lse = d_lse.unwrap_or_else(|| zeros(lse.shape(), DType::F32));
    let (dq, dk, dv) = (empty(q.shape(), dtype), empty(k.shape(), dtype), empty(v.shape(), dtype));
    row_terms_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        CubeDim::new_1d(ROWS as u32),
        o.into_tensor_arg(),
        d_o.clone().into_tensor_arg(),
        lse.into_tensor_arg(),
        d_lse.into_tensor_arg(),
        terms.clone().into_tensor_arg(),
        layout.variant,
        dtype.into(),
    );
    let placeholder = || placeholder(&client, &device, dtype);
    let grads = Grads {
        q,
        k,
        v,
        d_o,
        terms,
        dq: dq.clone(),
        dk: dk.clone(),
        dv: dv.clone(),
        relative: relative.unwrap_or_else(placeholder),
        d_relative: d_relative.clone().unwrap_or_else(placeholder),
    };
    // The tensor-core kernels read no relative scores: such calls run the portable kernels.
    match tensor_core_tile(&client, dtype, dim).filter(|_| !layout.variant.relative) {
        Some(mma) => launch_cmma(&client, grads, &layout, mma),
        None => launch_portable(&client, grads, &layout),
    }
    KernelGradients { dq, dk, dv, d_relative }
}

/// The tensors of the dQ and dK/dV kernels: inputs, `dO`, the row terms and the outputs.
struct Grads<R: CubeRuntime> {
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    d_o: CubeTensor<R>,
    terms: CubeTensor<R>,
    dq: CubeTensor<R>,
    dk: CubeTensor<R>,
    dv: CubeTensor<R>,
    /// The relative scores and their gradient, or placeholders when the call has none.
    relative: CubeTensor<R>,
    d_relative: CubeTensor<R>,
}

/// dQ and dK/dV on the portable kernels: a cube of [`ROWS`] threads, one row each.
fn launch_portable<R: CubeRuntime>(client: &ComputeClient<R>, g: Grads<R>, layout: &Layout<R>) {
    let [batch, heads, q_len, _] = g.q.meta.shape().dims();
    let [_, kv_heads, keys, _] = g.k.meta.shape().dims();
    let dtype = g.q.dtype;
    let cube_dim = CubeDim::new_1d(ROWS as u32);
    let vector = load_vector(&[&g.q, &g.k, &g.v, &g.d_o]);
    query_grads_kernel::launch::<R>(
        client,
        grid(q_len, heads, batch),
        cube_dim,
        vector,
        g.q.clone().into_tensor_arg(),
        g.k.clone().into_tensor_arg(),
        g.v.clone().into_tensor_arg(),
        g.d_o.clone().into_tensor_arg(),
        g.terms.clone().into_tensor_arg(),
        g.relative.clone().into_tensor_arg(),
        g.dq.into_tensor_arg(),
        g.d_relative.into_tensor_arg(),
        layout.windows.clone().into_array_arg(),
        layout.slopes.clone().into_array_arg(),
        layout.call(),
        layout.variant,
        dtype.into(),
    );
    key_grads_kernel::launch::<R>(
        client,
        grid(keys, kv_heads, batch),
        cube_dim,
        vector,
        g.q.into_tensor_arg(),
        g.k.into_tensor_arg(),
        g.v.into_tensor_arg(),
        g.d_o.into_tensor_arg(),
        g.terms.into_tensor_arg(),
        g.relative.into_tensor_arg(),
        g.dk.into_tensor_arg(),
        g.dv.into_tensor_arg(),
        layout.windows.clone().into_array_arg(),
        layout.slopes.clone().into_array_arg(),
        layout.call(),
        layout.variant,
        dtype.into(),
    );
}

/// dQ and dK/dV on the tensor-core kernels: a cube of one plane per `m` rows.
fn launch_cmma<R: CubeRuntime>(
    client: &ComputeClient<R>,
    g: Grads<R>,
    layout: &Layout<R>,
    mma: Mma,
) {
    let [batch, heads, q_len, _] = g.q.meta.shape().dims();
    let [_, kv_heads, keys, _] = g.k.meta.shape().dims();
    let dtype = g.q.dtype;
    let cube_dim = CubeDim::new_1d(mma.plane as u32);
    let vector = load_vector(&[&g.q, &g.k, &g.v, &g.d_o]);
    let blocks = |rows: usize, heads: usize| {
        CubeCount::Static(rows.div_ceil(mma.m) as u32, heads as u32, batch as u32)
    };
    // SAFETY: the tensor-core kernels guard every access (`super::mma`, "Unchecked").
    unsafe {
        query_grads_cmma_kernel::launch_unchecked::<R>(
            client,
            blocks(q_len, heads),
            cube_dim,
            vector,
            g.q.clone().into_tensor_arg(),
            g.k.clone().into_tensor_arg(),
            g.v.clone().into_tensor_arg(),
            g.d_o.clone().into_tensor_arg(),
            g.terms.clone().into_tensor_arg(),
            g.dq.into_tensor_arg(),
            layout.windows.clone().into_array_arg(),
            layout.slopes.clone().into_array_arg(),
            layout.call(),
            layout.variant,
            mma,
            dtype.into(),
        );
    }
    // SAFETY: the tensor-core kernels guard every access (`super::mma`, "Unchecked").
    unsafe {
        key_grads_cmma_kernel::launch_unchecked::<R>(
            client,
            blocks(keys, kv_heads),
            cube_dim,
            vector,
            g.q.into_tensor_arg(),
            g.k.into_tensor_arg(),
            g.v.into_tensor_arg(),
            g.d_o.into_tensor_arg(),
            g.terms.into_tensor_arg(),
            g.dk.into_tensor_arg(),
            g.dv.into_tensor_arg(),
            layout.windows.clone().into_array_arg(),
            layout.slopes.clone().into_array_arg(),
            layout.call(),
            layout.variant,
            mma,
            dtype.into(),
        );
    }
}
