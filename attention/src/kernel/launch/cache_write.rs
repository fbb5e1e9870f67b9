//! Host side of the fused append: one launch per layer over every ring buffer, writing in place
//! into a buffer the cache alone holds, and into a copy of one another tensor (a forked cache)
//! shares.

use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::decode::SlotWrite;
use crate::kernel::cache::write::{HEAD_WORDS, THREADS, cache_write_kernel};
use crate::kernel::config::{narrow, upload};
use crate::rope::RopeAngles;

/// The fused append on a CubeCL backend (`crate::decode::CacheWrite`): `k, v: [batch, H_kv, 1,
/// d]` into each buffer's slot, the key turned by `rope` if given → each buffer's keys and
/// values, in order.
pub(crate) fn cache_write<R, B>(
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    rope: Option<&RopeAngles>,
    writes: Vec<SlotWrite<'_, B>>,
) -> Vec<[CubeTensor<R>; 2]>
where
    R: CubeRuntime,
    B: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    let batch = k.meta.shape()[0];
    let mut table: Vec<u32> = writes
        .iter()
        .enumerate()
        .flat_map(|(index, write)| {
            let rows = write.kv_heads.iter().enumerate();
            rows.flat_map(move |(local, &kv)| [kv, index, local, write.slot].map(narrow))
        })
        .collect();
    let rows = table.len() / HEAD_WORDS;
    if let Some(angles) = rope {
        table.extend(angles.cos.iter().chain(&angles.sin).map(|x| x.to_bits()));
    }
    let buffers: Vec<[CubeTensor<R>; 2]> =
        writes.into_iter().map(|w| [exclusive(w.keys), exclusive(w.values)]).collect();
    let (client, dtype) = (k.client.clone(), k.dtype);
    cache_write_kernel::launch::<R>(
        &client,
        CubeCount::Static(rows as u32, batch as u32, 1),
        CubeDim::new_1d(THREADS as u32),
        k.clone().into_tensor_arg(),
        v.into_tensor_arg(),
        buffers.iter().map(|[keys, _]| keys.clone().into_tensor_arg()).collect(),
        buffers.iter().map(|[_, values]| values.clone().into_tensor_arg()).collect(),
        upload(&client, &k.device, u32::as_bytes(&table), DType::U32).into_array_arg(),
        rope.is_some(),
        dtype.into(),
    );
    buffers
}

/// `buffer` itself when nothing else holds its memory, else a copy of it.
fn exclusive<R: CubeRuntime>(buffer: CubeTensor<R>) -> CubeTensor<R> {
    match buffer.can_mut() {
        true => buffer,
        false => buffer.copy(),
    }
}
