//! The fused CPU kernel as the windowed core of `Flex`, Burn's default CPU backend, through the
//! same seam as the CubeCL kernels ([`WindowedKernelBackend`]), so that `Autodiff<Flex>`
//! differentiates through [`super::backward`] (`crate::autodiff`).
//!
//! The kernel reads contiguous f32 buffers: an f32 tensor that is already contiguous is read in
//! place, a strided f32 view (the `[batch, N, H, d]` memory of the projections) a row at a time,
//! and half precision is converted, so half-precision inputs accumulate in f32
//! ([`super::layout`]). `o` returns in the inputs' dtype stored in `q`'s order (for a layer's q,
//! `[batch, N, H, d]`, the order it merges its heads from), and each gradient in the order its
//! input was stored in, so the layer's `swap_dims`/`reshape` round trips copy nothing; `lse`
//! returns in f32. The fused
//! decode step ([`super::decode`]) and append ([`super::write_slot`]) are `Flex`'s too.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::backend::Flex;
use burn::backend::flex::FlexDevice;
use burn::backend::flex::FlexTensor;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorData, TensorMetadata};

use super::rope::turned;
use super::{
    BackwardInputs, DecodeBuffer, Dims, Relative, backward, decode, forward, layout, write_slot,
};
use crate::backend::{
    KernelBackward, KernelGradients, OutputPrimitives, WindowedAttentionBackend, WindowedKernel,
    WindowedKernelBackend,
};
use crate::decode::{CacheWrite, CachedBuffer, DecodeKernel, DecodeStep, SlotWrite};
use crate::fused_ops::fused_ops_off;
use crate::layer_ops::{LayerKernels, LayerOpsBackend};
use crate::packed::Packing;
use crate::rope::{RopeAngles, RopeBackend, RotateKernel};
use crate::{ScoreOptions, WindowSpec};

const CHECKED: &str = "inputs are checked by windowed_attention before they reach a backend";

impl WindowedKernelBackend for Flex {
    fn windowed_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        relative: Option<FloatTensor<Self>>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> OutputPrimitives<Self> {
        let dims = dims_of(&q.shape(), &k.shape());
        let table = relative.as_ref().map(f32s);
        let relative = table.as_deref().zip(relative.as_ref()).map(relative_of);
        let inputs = [&*f32s(&q), &*f32s(&k), &*f32s(&v)];
        let out = forward(inputs, relative, dims, spec, opts).expect(CHECKED);
        let o = layout::write(out.o, q.shape().dims::<4>(), layout::order_of(&q), q.dtype());
        (o, tensor(out.lse, [dims.batch, dims.heads, dims.q_len], DType::F32))
    }

    fn windowed_backward(
        inputs: KernelBackward<Self>,
        spec: &WindowSpec,
        opts: &ScoreOptions,
    ) -> KernelGradients<Self> {
        let KernelBackward { q, k, v, relative, o, lse, d_o, d_lse } = inputs;
        let dims = dims_of(&q.shape(), &k.shape());
        let d_lse = d_lse.as_ref().map(f32s);
        let table = relative.as_ref().map(f32s);
        let buffers = BackwardInputs {
            q: &f32s(&q),
            k: &f32s(&k),
            v: &f32s(&v),
            o: &f32s(&o),
            lse: &f32s(&lse),
            d_o: &f32s(&d_o),
            d_lse: d_lse.as_deref(),
            relative: table.as_deref().zip(relative.as_ref()).map(relative_of),
        };
        let grads = backward(&buffers, dims, spec, opts).expect(CHECKED);
        let like = |values, input: &FlexTensor| {
            layout::write(values, input.shape().dims::<4>(), layout::order_of(input), input.dtype())
        };
        KernelGradients {
            dq: like(grads.dq, &q),
            dk: like(grads.dk, &k),
            dv: like(grads.dv, &v),
            d_relative: grads.d_relative.zip(relative.as_ref()).map(|(d, t)| like(d, t)),
        }
    }

    /// Every call [`crate::windowed_attention`] accepts, global tokens included, provided `v`'s
    /// head dim is `q`'s (the kernel's buffers share one `d`).
    fn windowed_runs(_spec: &WindowSpec, q: &Shape, _k: &Shape, v: &Shape) -> bool {
        let dim = q.dims::<4>()[3];
        dim > 0 && v.dims::<4>()[3] == dim
    }
}

impl WindowedAttentionBackend for Flex {
    fn windowed_kernel() -> Option<WindowedKernel<Self>> {
        Some(WindowedKernel::of())
    }

    fn windowed_decode() -> Option<DecodeKernel<Self>> {
        Some(decode_step)
    }

    fn windowed_cache_write() -> Option<CacheWrite<Self>> {
        Some(cache_write)
    }
}

impl RopeBackend for Flex {
    fn rope_kernel() -> Option<RotateKernel<Self>> {
        Some(super::rope::rotate)
    }
}

impl LayerOpsBackend for Flex {
    fn layer_kernels() -> Option<LayerKernels<Self>> {
        Some(super::layer_ops::kernels())
    }

    fn fused_linear(x: FlexTensor, w: FlexTensor, b: Option<FlexTensor>) -> Option<FlexTensor> {
        match fused_ops_off() {
            true => None,
            false => super::linear::product(&x, &w, b.as_ref()),
        }
    }

    fn packs_weights() -> bool {
        true
    }

    fn pack(
        bytes: Vec<u8>,
        packing: Packing,
        shape: [usize; 2],
        _device: &FlexDevice,
    ) -> Option<FlexTensor> {
        Some(super::linear::packed_tensor(bytes, packing, shape))
    }

    fn unpack(w: FlexTensor, rows: Option<FlexTensor>) -> FlexTensor {
        super::linear::unpacked_tensor(w, rows)
    }

    /// `work` on a thread of rayon's pool (where it already is when called from a job,
    /// `runtime::on_cpu_threads`), while the pool's other threads look for parts to take
    /// (`rayon::yield_now`) until it returns. The lookers are queued before any of `work`'s
    /// parts and other threads steal the oldest job first, so `work`'s thread, waiting for a
    /// part that was stolen, never finds a looker in its own queue to run in its stead.
    fn with_threads_awake<R: Send>(work: impl FnOnce() -> R + Send) -> R {
        let done = AtomicBool::new(false);
        rayon::scope(|scope| {
            for _ in 1..rayon::current_num_threads() {
                scope.spawn(|_| {
                    while !done.load(Ordering::Acquire) {
                        if rayon::yield_now() != Some(rayon::Yield::Executed) {
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            let _stop = Stop(&done);
            work()
        })
    }
}

/// Tells the threads that [`LayerOpsBackend::with_threads_awake`] keeps looking for work to stop,
/// when the work returns or panics.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// [`write_slot`] on the cache's tensors, for keys (turned by `rope` if given) and values of
/// every buffer.
fn cache_write(
    k: FlexTensor,
    v: FlexTensor,
    rope: Option<&RopeAngles>,
    writes: Vec<SlotWrite<'_, Flex>>,
) -> Vec<[FlexTensor; 2]> {
    let batch = k.shape().dims::<4>()[0];
    let (k, v) = (turned(f32s(&k), rope), f32s(&v));
    writes
        .into_iter()
        .map(|w| {
            [
                written(w.keys, &k, w.kv_heads, w.slot, batch),
                written(w.values, &v, w.kv_heads, w.slot, batch),
            ]
        })
        .collect()
}

/// `buffer` with `new`'s rows in `slot`: written in place when the cache alone holds a
/// contiguous f32 buffer, and into a copy when a fork of the cache shares it (Flex's copy on
/// write), or when it is strided or in half precision (converted to f32 and back).
fn written(
    buffer: FlexTensor,
    new: &[f32],
    kv_heads: &[usize],
    slot: usize,
    batch: usize,
) -> FlexTensor {
    let (shape, dtype) = (buffer.shape().dims::<4>(), buffer.dtype());
    let in_place = dtype == DType::F32 && buffer.is_contiguous();
    let mut buffer = match in_place {
        true => buffer,
        false => tensor(f32s(&buffer).into_owned(), shape, DType::F32),
    };
    let (start, end) = buffer.layout().contiguous_offsets().expect("contiguous by now");
    let rows = &mut buffer.storage_mut::<f32>()[start..end];
    write_slot(rows, new, kv_heads, slot, batch, shape[3]);
    match dtype {
        DType::F32 => buffer,
        _ => tensor(f32s(&buffer).into_owned(), shape, dtype),
    }
}

/// [`super::decode`] on the cache's tensors.
fn decode_step(
    q: FlexTensor,
    buffers: &[CachedBuffer<'_, Flex>],
    step: &DecodeStep<'_>,
) -> FlexTensor {
    let [batch, heads, _, dim] = q.shape().dims::<4>();
    let keys: Vec<_> = buffers.iter().map(|b| f32s(&b.keys)).collect();
    let values: Vec<_> = buffers.iter().map(|b| f32s(&b.values)).collect();
    let slices: Vec<DecodeBuffer> = buffers
        .iter()
        .zip(keys.iter().zip(&values))
        .map(|(buffer, (keys, values))| DecodeBuffer {
            keys,
            values,
            kv_heads: buffer.kv_heads,
            positions: buffer.positions,
        })
        .collect();
    let o = decode(&f32s(&q), &slices, batch, dim, step);
    tensor(o, [batch, heads, 1, dim], q.dtype())
}

/// The relative scores `values` of `table`, with their length.
fn relative_of<'a>((values, table): (&'a [f32], &FlexTensor)) -> Relative<'a> {
    Relative { table: values, len: table.shape().dims::<4>()[3] }
}

/// The sizes of a call from the shapes of `q` and `k`.
fn dims_of(q: &Shape, k: &Shape) -> Dims {
    let [batch, heads, q_len, dim] = q.dims::<4>();
    let [_, kv_heads, keys, _] = k.dims::<4>();
    Dims { batch, heads, kv_heads, q_len, keys, dim }
}

/// The tensor's elements in logical row-major order as f32 ([`layout::read`]).
fn f32s(t: &FlexTensor) -> Cow<'_, [f32]> {
    layout::read(t)
}

/// A tensor of `shape` and `dtype` from f32 values.
fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D], dtype: DType) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape).convert_dtype(dtype))
}
