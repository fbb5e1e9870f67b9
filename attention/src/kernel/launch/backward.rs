//! Host side of the backward kernels: the row terms, then dQ (over query blocks) and dK/dV
//! (over key blocks), each writing its own outputs, so no atomics are needed. dQ and dK/dV run
//! on tensor cores (`kernel::cmma`) where the device has a cooperative tile, on the portable
//! kernels otherwise; dQ and dK/dV run on FlashAttention-2's design
//! (`kernel::flash::backward_queries`, `kernel::flash::backward_keys`) where
//! `kernel::flash::flash_backward_path` says so (CUDA, d = 64 and 128).

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Shape, Tensor, TensorMetadata, TensorPrimitive};
use burn_cubecl::element::BoolElement;
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use crate::backend::{KernelBackward, KernelGradients};
use crate::kernel::cmma::backward_keys::key_grads_cmma_kernel;
use crate::kernel::cmma::backward_queries::query_grads_cmma_kernel;
use crate::kernel::cmma::{Mma, load_vector, tensor_core_tile};
use crate::kernel::config::{LaunchArgs, ROWS, empty_like, placeholder, upload};
use crate::kernel::flash::backward_keys::key_grads_flash_kernel;
use crate::kernel::flash::backward_queries::query_grads_flash_kernel;
use crate::kernel::flash::{
    KEYS, ROWS as ROWS_FLASH, UNITS, backward_shared_bytes, flash_backward_path, flash_variant,
    head_order, max_shared, tile_strides,
};
use crate::kernel::fragment::FragmentPath;
use crate::kernel::launch::forward::{forward_emulated, grid};
use crate::kernel::portable::backward_keys::key_grads_kernel;
use crate::kernel::portable::backward_queries::query_grads_kernel;
use crate::kernel::portable::backward_rows::row_terms_kernel;
use crate::{ScoreOptions, WindowSpec};

/// Runs the backward kernels and returns the gradients of `q, k, v` (and of the relative scores
/// when the call has them), shaped as them and stored in their physical order. A missing `∂L/∂lse`
/// is zeros (one f32 per query row).
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
    let dim = q.meta.shape().dims::<4>()[3];
    let keys = k.meta.shape().dims::<4>()[2];
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let mut layout = LaunchArgs::new(&client, &device, spec, opts, dim, keys);
    layout.variant.relative = relative.is_some();
    let zeros = |shape, dtype| zeros_client(client.clone(), device.clone(), shape, dtype);
    let d_relative = relative.as_ref().map(|t| zeros(t.shape(), t.dtype));
    let d_lse = d_lse.unwrap_or_else(|| zeros(lse.shape(), DType::F32));
    let (dq, dk, dv) = (empty_like(&q), empty_like(&k), empty_like(&v));
    let terms = row_terms([o, d_o.clone(), lse, d_lse], &layout);
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
    let relative = layout.variant.relative;
    match tensor_core_tile(&client, dtype, dim).filter(|_| !relative) {
        Some(mma) => match flash_backward_path(&client, dtype, dim, relative) {
            Some(path) => {
                launch_query_grads_flash(&client, &grads, &layout, spec, path);
                launch_key_grads_flash(&client, grads, &layout, spec, path);
            }
            None => {
                launch_query_grads_cmma(&client, &grads, &layout, mma);
                launch_key_grads_cmma(&client, grads, &layout, mma);
            }
        },
        None => launch_portable(&client, grads, &layout),
    }
    KernelGradients { dq, dk, dv, d_relative }
}

/// The row terms of `o`, `dO`, `lse` and `∂L/∂lse` (`kernel::portable::backward_rows`): `[batch, H,
/// N_q, 2]` f32.
fn row_terms<R: CubeRuntime>(
    [o, d_o, lse, d_lse]: [CubeTensor<R>; 4],
    layout: &LaunchArgs<R>,
) -> CubeTensor<R> {
    let [batch, heads, q_len, _] = o.meta.shape().dims();
    let (client, device, dtype) = (o.client.clone(), o.device.clone(), o.dtype);
    let shape = Shape::new([batch, heads, q_len, 2]);
    let terms = empty_device_dtype(client.clone(), device, shape, DType::F32);
    row_terms_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        CubeDim::new_1d(ROWS as u32),
        o.into_tensor_arg(),
        d_o.into_tensor_arg(),
        lse.into_tensor_arg(),
        d_lse.into_tensor_arg(),
        terms.clone().into_tensor_arg(),
        layout.variant,
        dtype.into(),
    );
    terms
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
fn launch_portable<R: CubeRuntime>(client: &ComputeClient<R>, g: Grads<R>, layout: &LaunchArgs<R>) {
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

/// dQ on the tensor-core kernel: a cube of one plane per `m` query rows.
fn launch_query_grads_cmma<R: CubeRuntime>(
    client: &ComputeClient<R>,
    g: &Grads<R>,
    layout: &LaunchArgs<R>,
    mma: Mma,
) {
    let [batch, heads, q_len, _] = g.q.meta.shape().dims();
    let vector = load_vector(&[&g.q, &g.k, &g.v, &g.d_o]);
    let cubes = CubeCount::Static(q_len.div_ceil(mma.m) as u32, heads as u32, batch as u32);
    // SAFETY: the tensor-core kernels guard every access (`kernel::cmma`, "Unchecked").
    unsafe {
        query_grads_cmma_kernel::launch_unchecked::<R>(
            client,
            cubes,
            CubeDim::new_1d(mma.plane as u32),
            vector,
            g.q.clone().into_tensor_arg(),
            g.k.clone().into_tensor_arg(),
            g.v.clone().into_tensor_arg(),
            g.d_o.clone().into_tensor_arg(),
            g.terms.clone().into_tensor_arg(),
            g.dq.clone().into_tensor_arg(),
            layout.windows.clone().into_array_arg(),
            layout.slopes.clone().into_array_arg(),
            layout.call(),
            layout.variant,
            mma,
            g.q.dtype.into(),
        );
    }
}

/// dK/dV on the tensor-core kernel: a cube of one plane per `m` key rows.
fn launch_key_grads_cmma<R: CubeRuntime>(
    client: &ComputeClient<R>,
    g: Grads<R>,
    layout: &LaunchArgs<R>,
    mma: Mma,
) {
    let [batch, kv_heads, keys, _] = g.k.meta.shape().dims();
    let dtype = g.q.dtype;
    let vector = load_vector(&[&g.q, &g.k, &g.v, &g.d_o]);
    let cubes = CubeCount::Static(keys.div_ceil(mma.m) as u32, kv_heads as u32, batch as u32);
    // SAFETY: the tensor-core kernels guard every access (`kernel::cmma`, "Unchecked").
    unsafe {
        key_grads_cmma_kernel::launch_unchecked::<R>(
            client,
            cubes,
            CubeDim::new_1d(mma.plane as u32),
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

/// dQ on the FlashAttention-2 kernel (`kernel::flash::backward_queries`) on `path`: four warps
/// per 64 query rows, heads in [`head_order`] as the forward runs them.
fn launch_query_grads_flash<R: CubeRuntime>(
    client: &ComputeClient<R>,
    g: &Grads<R>,
    layout: &LaunchArgs<R>,
    spec: &WindowSpec,
    path: FragmentPath,
) {
    let [batch, heads, q_len, _] = g.q.meta.shape().dims();
    let order = upload(client, &g.q.device, u32::as_bytes(&head_order(spec)), DType::U32);
    let vector = load_vector(&[&g.q, &g.k, &g.v, &g.d_o, &g.dq]);
    let strides = tile_strides(&g.k, &g.v, vector);
    let cubes = CubeCount::Static(q_len.div_ceil(ROWS_FLASH) as u32, heads as u32, batch as u32);
    // SAFETY: the kernel guards every access by the call's lengths, as the tensor-core kernels
    // do (`kernel::cmma`, "Unchecked"), and `order` holds a head per grid row.
    unsafe {
        query_grads_flash_kernel::launch_unchecked::<R>(
            client,
            cubes,
            CubeDim::new_1d(UNITS as u32),
            vector,
            g.q.clone().into_tensor_arg(),
            g.k.clone().into_tensor_arg(),
            g.v.clone().into_tensor_arg(),
            g.d_o.clone().into_tensor_arg(),
            g.terms.clone().into_tensor_arg(),
            g.dq.clone().into_tensor_arg(),
            layout.windows.clone().into_array_arg(),
            layout.slopes.clone().into_array_arg(),
            order.into_array_arg(),
            layout.call(),
            strides,
            flash_variant(layout, spec, path),
            path,
            g.q.dtype.into(),
        );
    }
}

/// dK/dV on the FlashAttention-2 kernel (`kernel::flash::backward_keys`) on `path`: four warps
/// per 64 key rows.
fn launch_key_grads_flash<R: CubeRuntime>(
    client: &ComputeClient<R>,
    g: Grads<R>,
    layout: &LaunchArgs<R>,
    spec: &WindowSpec,
    path: FragmentPath,
) {
    let [batch, kv_heads, keys, _] = g.k.meta.shape().dims();
    let dtype = g.q.dtype;
    let vector = load_vector(&[&g.q, &g.k, &g.v, &g.d_o, &g.dk, &g.dv]);
    let strides = tile_strides(&g.q, &g.d_o, vector);
    let cubes = CubeCount::Static(keys.div_ceil(KEYS) as u32, kv_heads as u32, batch as u32);
    // SAFETY: the kernel guards every access by the call's lengths, as the tensor-core kernels
    // do (`kernel::cmma`, "Unchecked").
    unsafe {
        key_grads_flash_kernel::launch_unchecked::<R>(
            client,
            cubes,
            CubeDim::new_1d(UNITS as u32),
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
            strides,
            flash_variant(layout, spec, path),
            path,
            dtype.into(),
        );
    }
}

/// The gradients of `q`, `k` and `v` from the FlashAttention-2 backward kernels on the emulated
/// fragment path, on any device (the tests run them on lavapipe): the forward
/// ([`crate::kernel::launch::forward::forward_emulated`]) and the row terms of `dO`, then dQ and
/// dK/dV. `q, d_o: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` (d = 64 or 128) in f16 or
/// bf16 → (`dq`, `dk`, `dv`) shaped and stored as `q`, `k` and `v`, for the loss `Σ o·dO`. Errors
/// on a call the kernels do not take (their shared memory past the device's: d = 128 on lavapipe).
pub fn grads_emulated<R, F, I, BT>(
    [q, k, v, d_o]: [Tensor<CubeBackend<R, F, I, BT>, 4>; 4],
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<EmulatedGrads<R, F, I, BT>, String>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let dim = q.shape().dims::<4>()[3];
    let client = q.clone().into_primitive().tensor().client;
    let (needs, has) = (backward_shared_bytes(dim, FragmentPath::Emulated), max_shared(&client));
    if needs > has {
        return Err(format!(
            "the backward kernels need {needs} bytes of shared memory; the device has {has}"
        ));
    }
    let (o, lse) = forward_emulated(q.clone(), k.clone(), v.clone(), spec, opts)?;
    let [q, k, v, d_o, o] = [q, k, v, d_o, o].map(|t| t.into_primitive().tensor());
    let lse = lse.into_primitive().tensor();
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let keys = k.meta.shape().dims::<4>()[2];
    let layout = LaunchArgs::new(&client, &device, spec, opts, dim, keys);
    let d_lse = zeros_client(client.clone(), device.clone(), lse.shape(), DType::F32);
    let terms = row_terms([o, d_o.clone(), lse, d_lse], &layout);
    let (dq, dk, dv) = (empty_like(&q), empty_like(&k), empty_like(&v));
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
        relative: placeholder(),
        d_relative: placeholder(),
    };
    launch_query_grads_flash(&client, &grads, &layout, spec, FragmentPath::Emulated);
    launch_key_grads_flash(&client, grads, &layout, spec, FragmentPath::Emulated);
    Ok([dq, dk, dv].map(|t| Tensor::from_primitive(TensorPrimitive::Float(t))))
}

/// What [`grads_emulated`] returns: `dq`, `dk` and `dv`.
pub type EmulatedGrads<R, F, I, BT> = [Tensor<CubeBackend<R, F, I, BT>, 4>; 3];
