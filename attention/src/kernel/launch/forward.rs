//! Host side of the forward kernels: output allocation, the choice between FlashAttention-2's
//! design (`kernel::flash::forward`, on CUDA's MMA instructions: `kernel::flash::flash_path`), the
//! cooperative-matrix kernel (`kernel::cmma::forward`, where the device has a cooperative tile for
//! the inputs' type) and the portable one, grid and launch.

use burn::tensor::{DType, Shape, Tensor, TensorPrimitive};
use burn_cubecl::element::BoolElement;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use crate::backend::WindowedKernelBackend;
use crate::kernel::cmma::forward::forward_cmma_kernel;
use crate::kernel::cmma::{load_vector, tensor_core_tile};
use crate::kernel::config::{LaunchArgs, ROWS, empty_like, placeholder, upload};
use crate::kernel::flash::forward::forward_flash_kernel;
use crate::kernel::flash::{
    self, UNITS, flash_path, flash_variant, forward_groups, head_order, tile_strides,
};
use crate::kernel::fragment::FragmentPath;
use crate::kernel::portable::forward::forward_kernel;
use crate::{ScoreOptions, WindowSpec};

/// Runs the forward kernel: `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` and the
/// relative scores `[batch, H, N_q, L]` when given → (`o: [batch, H, N_q, d]` in the inputs'
/// dtype, stored in `q`'s physical order, `lse: [batch, H, N_q]` f32). Inputs may have any
/// strides. The tensor-core kernel
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
    let mut layout = LaunchArgs::new(&client, &q.device, spec, opts, dim, keys);
    layout.variant.relative = relative.is_some();
    let empty =
        |shape: Shape, dtype| empty_device_dtype(client.clone(), q.device.clone(), shape, dtype);
    let o = empty_like(&q);
    let lse = empty(Shape::new([batch, heads, q_len]), DType::F32);
    let dtype = q.dtype;
    if let Some(path) = flash_path(&client, dtype, dim, relative.is_some()) {
        launch_flash([q, k, v], [&o, &lse], &layout, spec, path);
        return (o, lse);
    }
    if let Some(mma) = tensor_core_tile(&client, dtype, dim).filter(|_| relative.is_none()) {
        // SAFETY: the tensor-core kernels guard every access (`kernel::cmma`, "Unchecked").
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

/// Launches `kernel::flash::forward` on `path` for `q, k, v` into `o` and `lse` (allocated as
/// [`forward`] allocates them), its grid's heads in [`head_order`].
fn launch_flash<R: CubeRuntime>(
    [q, k, v]: [CubeTensor<R>; 3],
    [o, lse]: [&CubeTensor<R>; 2],
    layout: &LaunchArgs<R>,
    spec: &WindowSpec,
    path: FragmentPath,
) {
    let client = q.client.clone();
    let [batch, heads, q_len, _] = q.meta.shape().dims();
    let order = head_order(spec);
    let order = upload(&client, &q.device, u32::as_bytes(&order), DType::U32);
    let dtype = q.dtype;
    let vector = load_vector(&[&q, &k, &v, o]);
    let strides = tile_strides(&k, &v, vector);
    let rows = flash::ROWS * forward_groups(q.meta.shape()[3], path);
    let cubes = CubeCount::Static(q_len.div_ceil(rows) as u32, heads as u32, batch as u32);
    // SAFETY: the kernel guards every access to its tensors by the call's lengths, as the
    // tensor-core kernels do (`kernel::cmma`, "Unchecked"), and `order` holds a head per grid row.
    unsafe {
        forward_flash_kernel::launch_unchecked::<R>(
            &client,
            cubes,
            CubeDim::new_1d(UNITS as u32),
            vector,
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            o.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            layout.windows.clone().into_array_arg(),
            layout.slopes.clone().into_array_arg(),
            order.into_array_arg(),
            layout.call(),
            strides,
            flash_variant(layout, spec, path),
            path,
            dtype.into(),
        );
    }
}

/// The forward of FlashAttention-2's design (`kernel::flash::forward`) on the emulated fragment
/// path, on any device: the tests run it on devices without MMA instructions (lavapipe), so
/// that the kernel CUDA's launches pick is checked on every commit. `q: [batch, H, N_q, d]`,
/// `k, v: [batch, H_kv, N_k, d]` in f16 or bf16 with `d` one of 64 and 128 → (`o: [batch, H,
/// N_q, d]`, `lse: [batch, H, N_q]` f32). Errors on a call the kernel does not take.
pub fn forward_emulated<R, F, I, BT>(
    q: Tensor<CubeBackend<R, F, I, BT>, 4>,
    k: Tensor<CubeBackend<R, F, I, BT>, 4>,
    v: Tensor<CubeBackend<R, F, I, BT>, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Result<EmulatedOutputs<R, F, I, BT>, String>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
    let (q_shape, k_shape, v_shape) = (q.shape(), k.shape(), v.shape());
    let dim = q_shape.dims::<4>()[3];
    if !B::<R, F, I, BT>::windowed_runs(spec, &q_shape, &k_shape, &v_shape) {
        return Err(format!("the kernels do not take this call: q {q_shape:?}, k {k_shape:?}"));
    }
    if !flash::HEAD_DIMS.contains(&dim) || !matches!(q.dtype(), DType::F16 | DType::BF16) {
        return Err(format!(
            "d = {dim} in {:?}: the kernel takes f16 or bf16 at d = 64, 128",
            q.dtype()
        ));
    }
    let [q, k, v] = [q, k, v].map(|t| t.into_primitive().tensor());
    let client = q.client.clone();
    let (needs, has) =
        (flash::shared_bytes(dim, FragmentPath::Emulated), flash::max_shared(&client));
    if needs > has {
        return Err(format!(
            "d = {dim} needs {needs} bytes of shared memory; the device has {has}"
        ));
    }
    let keys = k.meta.shape().dims::<4>()[2];
    let [batch, heads, q_len, _] = q.meta.shape().dims();
    let layout = LaunchArgs::new(&client, &q.device, spec, opts, dim, keys);
    let empty =
        |shape: Shape, dtype| empty_device_dtype(client.clone(), q.device.clone(), shape, dtype);
    let o = empty_like(&q);
    let lse = empty(Shape::new([batch, heads, q_len]), DType::F32);
    launch_flash([q, k, v], [&o, &lse], &layout, spec, FragmentPath::Emulated);
    let wrap = |t| TensorPrimitive::Float(t);
    Ok((Tensor::from_primitive(wrap(o)), Tensor::from_primitive(wrap(lse))))
}

/// What [`forward_emulated`] returns: `o` and `lse`.
pub type EmulatedOutputs<R, F, I, BT> =
    (Tensor<CubeBackend<R, F, I, BT>, 4>, Tensor<CubeBackend<R, F, I, BT>, 3>);
