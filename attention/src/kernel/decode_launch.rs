//! Host side of the decode kernel: for each ring buffer of the layer's cache, the rows of the
//! query heads it serves, the mask of the slots each branch's spec shows them (asked of
//! [`crate::WindowSpec::visible`] at the slots' positions, as every path asks it), and one
//! launch writing those heads' rows of the output.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::config::{Variant, decode_call, narrow, upload};
use super::decode::{THREADS, decode_kernel};
use crate::decode::{CachedBuffer, DecodeStep};

/// The fused decode step on a CubeCL backend (`crate::decode::DecodeKernel`): `q: [batch, H, 1,
/// d]` against every buffer → `o: [batch, H, 1, d]`, in `q`'s dtype.
pub(crate) fn decode<R, B>(
    q: CubeTensor<R>,
    buffers: &[CachedBuffer<'_, B>],
    step: &DecodeStep<'_>,
) -> CubeTensor<R>
where
    R: CubeRuntime,
    B: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    let [batch, heads, _, dim] = q.shape().dims();
    let spec = &step.specs[0];
    let group = heads / spec.kv_heads();
    let t = step.position;
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let out = empty_device_dtype(client.clone(), device.clone(), q.shape(), dtype);
    let variant = Variant::new(spec, step.opts, dim, 1);
    for buffer in buffers {
        // (query head, local index of its kv head) for every query head the buffer serves.
        let rows: Vec<(usize, usize)> = buffer
            .kv_heads
            .iter()
            .enumerate()
            .flat_map(|(local, &kv)| (kv * group..(kv + 1) * group).map(move |h| (h, local)))
            .collect();
        let mask: Vec<u32> = step
            .specs
            .iter()
            .flat_map(|spec| {
                rows.iter().flat_map(move |&(h, _)| {
                    buffer.positions.iter().map(move |&j| u32::from(spec.visible(h, t, j, t + 1)))
                })
            })
            .collect();
        let words: Vec<u32> = rows.iter().flat_map(|&(h, l)| [narrow(h), narrow(l)]).collect();
        let positions: Vec<u32> = buffer.positions.iter().map(|&j| narrow(j)).collect();
        let slope = |h: usize| step.opts.alibi.as_ref().map_or(0.0, |slopes| slopes[h]);
        let slopes: Vec<f32> = rows.iter().map(|&(h, _)| slope(h)).collect();
        let array = |bytes: &[u8], dtype| upload(&client, &device, bytes, dtype);
        decode_kernel::launch::<R>(
            &client,
            CubeCount::Static(rows.len() as u32, batch as u32, 1),
            CubeDim::new_1d(THREADS as u32),
            q.clone().into_tensor_arg(),
            buffer.keys.clone().into_tensor_arg(),
            buffer.values.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            array(u32::as_bytes(&words), DType::U32).into_array_arg(),
            array(u32::as_bytes(&mask), DType::U32).into_array_arg(),
            array(u32::as_bytes(&positions), DType::U32).into_array_arg(),
            array(f32::as_bytes(&slopes), DType::F32).into_array_arg(),
            decode_call(step.opts, dim, t),
            variant,
            step.specs.len(),
            dtype.into(),
        );
    }
    out
}
