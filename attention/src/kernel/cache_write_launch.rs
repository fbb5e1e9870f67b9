//! Host side of the fused append: one launch per ring buffer, writing in place when the cache
//! alone holds the buffer, and into a copy when another tensor (a forked cache) shares it.

use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::cache_write::{THREADS, cache_write_kernel};
use super::config::{narrow, upload};
use crate::decode::SlotWrite;

/// The fused append on a CubeCL backend (`crate::decode::CacheWrite`): `k, v: [batch, H_kv, 1,
/// d]` into each buffer's slot → each buffer's keys and values, in order.
pub(crate) fn cache_write<R, B>(
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    writes: Vec<SlotWrite<'_, B>>,
) -> Vec<[CubeTensor<R>; 2]>
where
    R: CubeRuntime,
    B: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    let batch = k.meta.shape()[0];
    writes
        .into_iter()
        .map(|write| {
            let (keys, values) = (exclusive(write.keys), exclusive(write.values));
            let heads: Vec<u32> = write.kv_heads.iter().map(|&h| narrow(h)).collect();
            let heads = upload(&k.client, &k.device, u32::as_bytes(&heads), DType::U32);
            cache_write_kernel::launch::<R>(
                &k.client,
                CubeCount::Static(write.kv_heads.len() as u32, batch as u32, 1),
                CubeDim::new_1d(THREADS as u32),
                k.clone().into_tensor_arg(),
                v.clone().into_tensor_arg(),
                keys.clone().into_tensor_arg(),
                values.clone().into_tensor_arg(),
                heads.into_array_arg(),
                narrow(write.slot),
                k.dtype.into(),
            );
            [keys, values]
        })
        .collect()
}

/// `buffer` itself when nothing else holds its memory, else a copy of it.
fn exclusive<R: CubeRuntime>(buffer: CubeTensor<R>) -> CubeTensor<R> {
    match buffer.can_mut() {
        true => buffer,
        false => buffer.copy(),
    }
}
