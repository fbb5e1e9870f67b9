//! Host side of the forward kernels: output allocation, the choice between the tensor-core
//! kernel (`super::forward_cmma`, where the device has a cooperative tile for the inputs' type)
//! and the portable one, grid and launch.

use burn::tensor::{DType, Shape};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;

use super::config::{Layout, ROWS};
use super::forward::forward_kernel;
use super::forward_cmma::{Mma, forward_cmma_kernel};
use crate::{ScoreOptions, WindowSpec};

/// Runs the forward kernel: `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` →
/// (`o: [batch, H, N_q, d]` in the inputs' dtype, `lse: [batch, H, N_q]` f32). Inputs may have
/// any strides.
pub(crate) fn forward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [batch, heads, q_len, dim] = q.meta.shape().dims();
    let keys = k.meta.shape().dims::<4>()[2];
    let client = q.client.clone();
    let layout = Layout::new(&client, &q.device, spec, opts, dim, keys);
    let empty =
        |shape: Shape, dtype| empty_device_dtype(client.clone(), q.device.clone(), shape, dtype);
    let o = empty(q.meta.shape().clone(), q.dtype);
    let lse = empty(Shape::new([batch, heads, q_len]), DType::F32);
    let dtype = q.dtype;
    if let Some(mma) = tensor_core_tile(&client, dtype, dim) {
        forward_cmma_kernel::launch::<R>(
            &client,
            CubeCount::Static(q_len.div_ceil(mma.m) as u32, heads as u32, batch as u32),
            CubeDim::new_1d(mma.plane as u32),
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
        return (o, lse);
    }
    forward_kernel::launch::<R>(
        &client,
        grid(q_len, heads, batch),
        CubeDim::new_1d(ROWS as u32),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
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

/// The cooperative tile the forward runs on for inputs of `dtype` and head dim `dim`, or `None`
/// (the portable kernel): a square f16 or bf16 tile with f32 accumulation that the device lists,
/// whose side divides `dim`, whose rows fit the plane (a lane per row), whose keys fit the `u32`
/// mask a row keeps of the keys it sees (`n ≤ 32`), and whose shared buffers fit the device.
pub(crate) fn tensor_core_tile<R: CubeRuntime>(
    client: &ComputeClient<R>,
    dtype: DType,
    dim: usize,
) -> Option<Mma> {
    let input = match dtype {
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        _ => return None,
    };
    let properties = client.properties();
    let plane = properties.hardware.plane_size_max as usize;
    let shared = properties.hardware.max_shared_memory_size;
    let accumulator: StorageType = ElemType::Float(FloatKind::F32).into();
    properties
        .features
        .matmul
        .cmma
        .iter()
        .filter(|t| t.a_type == input.into() && t.b_type == input.into())
        .filter(|t| t.cd_type == accumulator && t.n == t.k)
        .map(|t| Mma { m: t.m as usize, n: t.n as usize, plane })
        .find(|t| {
            let bytes = (t.m * dim + 2 * t.n * dim + t.m * t.n) * 2 + (t.m * t.n + t.m * dim) * 4;
            dim.is_multiple_of(t.n) && t.m <= plane && t.n <= 32 && bytes <= shared
        })
}

/// The tensor-core tile `device`'s forward uses for inputs of `dtype` at head dim `dim`, as
/// `[m, n, k]`, or `None` when it runs the portable kernel (what the tests print and check).
pub fn tensor_core_tile_of<R: CubeRuntime>(
    device: &R::Device,
    dtype: DType,
    dim: usize,
) -> Option<[usize; 3]> {
    tensor_core_tile(&R::client(device), dtype, dim).map(|t| [t.m, t.n, t.n])
}
