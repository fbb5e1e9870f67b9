//! The core's kernels expanded into kernel definitions without a device, for
//! `kernel::cuda_check`: what a `#[cube(launch)]` kernel's `define` does with a compute client,
//! done by hand. Each function registers the kernel's float type, expands its runtime arguments
//! in the signature's order (outputs with `expand_output`, so that the definition's bindings are
//! the launch's) and calls the kernel's `expand` with its compile-time arguments.

use cubecl::KernelSettings;
use cubecl::cuda::CudaRuntime;
use cubecl::ir::DeviceProperties;
use cubecl::prelude::*;

use crate::kernel::cache::decode::THREADS as DECODE_THREADS;
use crate::kernel::cache::decode::{Sections, SectionsCompilationArg, decode_kernel};
use crate::kernel::cache::write::THREADS as WRITE_THREADS;
use crate::kernel::cache::write::cache_write_kernel;
use crate::kernel::cmma::Mma;
use crate::kernel::cmma::backward_keys::key_grads_cmma_kernel;
use crate::kernel::cmma::backward_queries::query_grads_cmma_kernel;
use crate::kernel::cmma::forward::forward_cmma_kernel;
use crate::kernel::config::ROWS;
use crate::kernel::config::{Call, CallCompilationArg, Variant};
use crate::kernel::flash::backward_keys::key_grads_flash_kernel;
use crate::kernel::flash::backward_queries::query_grads_flash_kernel;
use crate::kernel::flash::forward::forward_flash_kernel;
use crate::kernel::flash::{TileStrides, TileStridesCompilationArg, UNITS};
use crate::kernel::fragment::probe::fragment_probe_kernel;
use crate::kernel::fragment::{FragmentPath, LANES};
use crate::kernel::portable::backward_keys::key_grads_kernel;
use crate::kernel::portable::backward_queries::query_grads_kernel;
use crate::kernel::portable::backward_rows::row_terms_kernel;
use crate::kernel::portable::forward::forward_kernel;
use crate::kernel::rope::{PAIRS, ROWS as ROPE_ROWS, rope_kernel};

/// A kernel's definition.
type Def = KernelDefinition;

/// The portable forward (`kernel::portable::forward`): one thread per query row.
pub(super) fn forward(device: &DeviceProperties, variant: Variant, dtype: StorageType) -> Def {
    use forward_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let (q, k, v) = (vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let relative = input::<F>(&mut b);
    let (o, lse) = (output::<F>(&mut b), output::<f32>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    forward_kernel::expand::<F, N>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        relative,
        o,
        lse,
        windows,
        slopes,
        call,
        variant,
        dtype,
    );
    b.build(settings("forward_kernel", ROWS))
}

/// The tensor-core forward (`kernel::cmma::forward`): one plane per `m` query rows.
pub(super) fn forward_cmma(
    device: &DeviceProperties,
    variant: Variant,
    mma: Mma,
    dtype: StorageType,
) -> Def {
    use forward_cmma_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let (q, k, v) = (vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let (o, lse) = (output::<F>(&mut b), output::<f32>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    forward_cmma_kernel::expand::<F, N>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        o,
        lse,
        windows,
        slopes,
        call,
        variant,
        mma,
        dtype,
    );
    b.build(settings("forward_cmma_kernel", mma.plane))
}

/// The forward of FlashAttention-2's design (`kernel::flash::forward`) on `path`: four warps per
/// 64 query rows.
pub(super) fn forward_flash(
    device: &DeviceProperties,
    variant: Variant,
    path: FragmentPath,
    dtype: StorageType,
) -> (Def, usize) {
    use forward_flash_kernel::{F, NV};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<NV>(VECTOR);
    let (q, k, v) = (vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let o = output::<Vector<F, NV>>(&mut b);
    let lse = output::<f32>(&mut b);
    let (windows, slopes, order) = (array::<u32>(&mut b), array::<f32>(&mut b), array(&mut b));
    let call = call(&mut b);
    let strides = strides(&mut b);
    forward_flash_kernel::expand::<F, NV>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        o,
        lse,
        windows,
        slopes,
        order,
        call,
        strides,
        variant,
        path,
        dtype,
    );
    (b.build(settings("forward_flash_kernel", UNITS)), UNITS)
}

/// The backward's row terms (`kernel::portable::backward_rows`).
pub(super) fn row_terms(device: &DeviceProperties, variant: Variant, dtype: StorageType) -> Def {
    use row_terms_kernel::F;
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    let (o, d_o) = (input::<F>(&mut b), input::<F>(&mut b));
    let (lse, d_lse) = (input::<f32>(&mut b), input::<f32>(&mut b));
    let terms = output::<f32>(&mut b);
    row_terms_kernel::expand::<F>(&mut b.scope, o, d_o, lse, d_lse, terms, variant, dtype);
    b.build(settings("row_terms_kernel", ROWS))
}

/// The portable dQ (`kernel::portable::backward_queries`).
pub(super) fn query_grads(device: &DeviceProperties, variant: Variant, dtype: StorageType) -> Def {
    use query_grads_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let (q, k, v, d_o) = (vectors(&mut b), vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let (terms, relative) = (input::<f32>(&mut b), input::<F>(&mut b));
    let (dq, d_relative) = (output::<F>(&mut b), output::<F>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    query_grads_kernel::expand::<F, N>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        d_o,
        terms,
        relative,
        dq,
        d_relative,
        windows,
        slopes,
        call,
        variant,
        dtype,
    );
    b.build(settings("query_grads_kernel", ROWS))
}

/// The tensor-core dQ (`kernel::cmma::backward_queries`).
pub(super) fn query_grads_cmma(
    device: &DeviceProperties,
    variant: Variant,
    mma: Mma,
    dtype: StorageType,
) -> Def {
    use query_grads_cmma_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let (q, k, v, d_o) = (vectors(&mut b), vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let (terms, dq) = (input::<f32>(&mut b), output::<F>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    query_grads_cmma_kernel::expand::<F, N>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        d_o,
        terms,
        dq,
        windows,
        slopes,
        call,
        variant,
        mma,
        dtype,
    );
    b.build(settings("query_grads_cmma_kernel", mma.plane))
}

/// The portable dK/dV (`kernel::portable::backward_keys`).
pub(super) fn key_grads(device: &DeviceProperties, variant: Variant, dtype: StorageType) -> Def {
    use key_grads_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let (q, k, v, d_o) = (vectors(&mut b), vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let (terms, relative) = (input::<f32>(&mut b), input::<F>(&mut b));
    let (dk, dv) = (output::<F>(&mut b), output::<F>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    key_grads_kernel::expand::<F, N>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        d_o,
        terms,
        relative,
        dk,
        dv,
        windows,
        slopes,
        call,
        variant,
        dtype,
    );
    b.build(settings("key_grads_kernel", ROWS))
}

/// The tensor-core dK/dV (`kernel::cmma::backward_keys`).
pub(super) fn key_grads_cmma(
    device: &DeviceProperties,
    variant: Variant,
    mma: Mma,
    dtype: StorageType,
) -> Def {
    use key_grads_cmma_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let (q, k, v, d_o) = (vectors(&mut b), vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let (terms, dk, dv) = (input::<f32>(&mut b), output::<F>(&mut b), output::<F>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    key_grads_cmma_kernel::expand::<F, N>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        d_o,
        terms,
        dk,
        dv,
        windows,
        slopes,
        call,
        variant,
        mma,
        dtype,
    );
    b.build(settings("key_grads_cmma_kernel", mma.plane))
}

/// The decode step (`kernel::cache::decode`) over one ring buffer, with `branches` branches, the
/// windows decided on the device (no host mask) and the query turned by RoPE, as a RoPE model's
/// layers run it.
pub(super) fn decode(
    device: &DeviceProperties,
    variant: Variant,
    branches: usize,
    dtype: StorageType,
) -> (Def, usize) {
    use decode_kernel::F;
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    let q = input::<F>(&mut b);
    let buffers = sequence();
    let keys = <Sequence<Tensor<F>> as LaunchArg>::expand(&buffers, &mut b);
    let values = <Sequence<Tensor<F>> as LaunchArg>::expand(&buffers, &mut b);
    let (out, table) = (output::<F>(&mut b), array::<u32>(&mut b));
    let sections =
        SectionsCompilationArg { heads: (), slopes: (), rows: (), positions: (), angles: () };
    let sections = <Sections as LaunchArg>::expand(&sections, &mut b);
    let call = call(&mut b);
    decode_kernel::expand::<F>(
        &mut b.scope,
        q,
        keys,
        values,
        out,
        table,
        sections,
        call,
        variant,
        branches,
        false,
        true,
        dtype,
    );
    (b.build(settings("decode_kernel", DECODE_THREADS)), DECODE_THREADS)
}

/// The cache append (`kernel::cache::write`) into one ring buffer, the key turned by RoPE.
pub(super) fn cache_write(device: &DeviceProperties, dtype: StorageType) -> (Def, usize) {
    use cache_write_kernel::F;
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    let (new_keys, new_values) = (input::<F>(&mut b), input::<F>(&mut b));
    let buffers = sequence();
    let keys = <Sequence<Tensor<F>> as LaunchArg>::expand_output(&buffers, &mut b);
    let values = <Sequence<Tensor<F>> as LaunchArg>::expand_output(&buffers, &mut b);
    let table = array::<u32>(&mut b);
    let scope = &mut b.scope;
    cache_write_kernel::expand::<F>(scope, new_keys, new_values, keys, values, table, true, dtype);
    (b.build(settings("cache_write_kernel", WRITE_THREADS)), WRITE_THREADS)
}

/// RoPE (`kernel::rope`): a cube of [`ROPE_ROWS`] rows × [`PAIRS`] dimension pairs.
pub(super) fn rope(device: &DeviceProperties, dtype: StorageType) -> (Def, usize) {
    use rope_kernel::{F, N};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<N>(VECTOR);
    let x = vectors(&mut b);
    let out = output::<Vector<F, N>>(&mut b);
    let angles = array::<f32>(&mut b);
    rope_kernel::expand::<F, N>(&mut b.scope, VECTOR, x, out, angles, dtype);
    let threads = PAIRS * ROPE_ROWS;
    let cube = CubeDim::new_2d(PAIRS as u32, ROPE_ROWS as u32);
    (b.build(settings("rope_kernel", threads).cube_dim(cube)), threads)
}

/// The fragment seam's probe (`kernel::fragment::probe`) of two warps on `path`: every operation
/// of the seam, as the FlashAttention-2 kernels will use it.
pub(super) fn fragment_probe(
    device: &DeviceProperties,
    path: FragmentPath,
    dtype: StorageType,
) -> (Def, usize) {
    use fragment_probe_kernel::F;
    let warps = 2;
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    let (a, rhs) = (input::<F>(&mut b), input::<F>(&mut b));
    let (c, stats, layout) = (output::<f32>(&mut b), output::<f32>(&mut b), output::<u32>(&mut b));
    fragment_probe_kernel::expand::<F>(&mut b.scope, a, rhs, c, stats, layout, path, warps, dtype);
    (b.build(settings("fragment_probe_kernel", warps * LANES)), warps * LANES)
}

/// Elements per vector of the tensor-core kernels' tile copies on an H100: 8 halves, 16 bytes
/// (`kernel::cmma::load_vector` for contiguous inputs whose `d` is a multiple of 8).
const VECTOR: usize = 8;

/// A tensor input read as vectors of the size registered for `N`.
fn vectors<F: Float, N: Size>(
    b: &mut KernelBuilder,
) -> <Tensor<Vector<F, N>> as CubeType>::ExpandType {
    input::<Vector<F, N>>(b)
}

/// One ring buffer's tensors, as a sequence's compilation argument.
fn sequence<T: CubePrimitive>() -> SequenceCompilationArg<Tensor<T>> {
    std::iter::once(TensorCompilationArg { inplace: None }).collect()
}

/// A builder for a definition on `device`, with the address type every launch uses (u32).
pub(super) fn builder(device: &DeviceProperties) -> KernelBuilder {
    let mut builder = KernelBuilder::default();
    builder.runtime_properties(CudaRuntime::target_properties());
    builder.device_properties(device);
    AddressType::U32.register(&mut builder.scope);
    builder
}

/// The settings of a definition: its entry name and cube.
fn settings(name: &str, threads: usize) -> KernelSettings {
    KernelSettings::default()
        .kernel_name(name)
        .cube_dim(CubeDim::new_1d(threads as u32))
        .address_type(AddressType::U32)
}

/// A tensor input, an output, an array and the call's scalars, expanded into `b`.
fn input<T: CubePrimitive>(b: &mut KernelBuilder) -> <Tensor<T> as CubeType>::ExpandType {
    <Tensor<T> as LaunchArg>::expand(&TensorCompilationArg { inplace: None }, b)
}

fn output<T: CubePrimitive>(b: &mut KernelBuilder) -> <Tensor<T> as CubeType>::ExpandType {
    <Tensor<T> as LaunchArg>::expand_output(&TensorCompilationArg { inplace: None }, b)
}

fn array<T: CubePrimitive>(b: &mut KernelBuilder) -> <Array<T> as CubeType>::ExpandType {
    <Array<T> as LaunchArg>::expand(&ArrayCompilationArg { inplace: None }, b)
}

fn call(b: &mut KernelBuilder) -> <Call as CubeType>::ExpandType {
    let arg = CallCompilationArg {
        kv_len: (),
        query_offset: (),
        sinks: (),
        scale: (),
        cap: (),
        beta: (),
        neg_inf: (),
    };
    <Call as LaunchArg>::expand(&arg, b)
}

fn strides(b: &mut KernelBuilder) -> <TileStrides as CubeType>::ExpandType {
    let arg = TileStridesCompilationArg { first: (), second: () };
    <TileStrides as LaunchArg>::expand(&arg, b)
}

/// The dK/dV of FlashAttention-2's design (`kernel::flash::backward_keys`) on `path`: four warps
/// per 64 key rows.
pub(super) fn key_grads_flash(
    device: &DeviceProperties,
    variant: Variant,
    path: FragmentPath,
    dtype: StorageType,
) -> (Def, usize) {
    use key_grads_flash_kernel::{F, NV};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<NV>(VECTOR);
    let (q, k, v, d_o) = (vectors(&mut b), vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let terms = input::<f32>(&mut b);
    let (dk, dv) = (output::<Vector<F, NV>>(&mut b), output::<Vector<F, NV>>(&mut b));
    let (windows, slopes, call) = (array::<u32>(&mut b), array::<f32>(&mut b), call(&mut b));
    let strides = strides(&mut b);
    key_grads_flash_kernel::expand::<F, NV>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        d_o,
        terms,
        dk,
        dv,
        windows,
        slopes,
        call,
        strides,
        variant,
        path,
        dtype,
    );
    (b.build(settings("key_grads_flash_kernel", UNITS)), UNITS)
}

/// The dQ of FlashAttention-2's design (`kernel::flash::backward_queries`) on `path`: four warps
/// per 64 query rows.
pub(super) fn query_grads_flash(
    device: &DeviceProperties,
    variant: Variant,
    path: FragmentPath,
    dtype: StorageType,
) -> (Def, usize) {
    use query_grads_flash_kernel::{F, NV};
    let mut b = builder(device);
    b.scope.register_type::<F>(dtype);
    b.scope.register_size::<NV>(VECTOR);
    let (q, k, v, d_o) = (vectors(&mut b), vectors(&mut b), vectors(&mut b), vectors(&mut b));
    let (terms, dq) = (input::<f32>(&mut b), output::<Vector<F, NV>>(&mut b));
    let (windows, slopes, order) = (array::<u32>(&mut b), array::<f32>(&mut b), array(&mut b));
    let call = call(&mut b);
    let strides = strides(&mut b);
    query_grads_flash_kernel::expand::<F, NV>(
        &mut b.scope,
        VECTOR,
        q,
        k,
        v,
        d_o,
        terms,
        dq,
        windows,
        slopes,
        order,
        call,
        strides,
        variant,
        path,
        dtype,
    );
    (b.build(settings("query_grads_flash_kernel", UNITS)), UNITS)
}
