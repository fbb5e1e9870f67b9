//! Host side of the decode kernel: one launch per layer and step, over every ring buffer of the
//! layer's cache, with one table uploaded per step ([`Sections`]): the branches' windows, the
//! heads' ALiBi slopes, which buffer serves each query head, the position each slot holds and,
//! for specs with global tokens only, the mask of the slots each branch shows each head (asked
//! of [`crate::WindowSpec::visible`], as every path asks it). Without globals the kernel decides
//! visibility on the device, by the same rule.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::decode::{CachedBuffer, DecodeStep};
use crate::kernel::cache::decode::{ROW_WORDS, SectionsLaunch, THREADS, decode_kernel};
use crate::kernel::config::{Variant, decode_call, empty_like, narrow, upload, window_words};

/// The fused decode step on a CubeCL backend (`crate::decode::DecodeKernel`): `q: [batch, H, 1,
/// d]` against every buffer → `o: [batch, H, 1, d]`, in `q`'s dtype, stored in `q`'s physical
/// order.
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
    let (client, device, dtype) = (q.client.clone(), q.device.clone(), q.dtype);
    let out = empty_like(&q);
    let host_mask = step.specs.iter().any(|s| !s.globals().is_empty());
    let (table, sections) = step_table(buffers, step, heads, host_mask);
    decode_kernel::launch::<R>(
        &client,
        CubeCount::Static(heads as u32, batch as u32, 1),
        CubeDim::new_1d(THREADS as u32),
        q.into_tensor_arg(),
        buffers.iter().map(|b| b.keys.clone().into_tensor_arg()).collect(),
        buffers.iter().map(|b| b.values.clone().into_tensor_arg()).collect(),
        out.clone().into_tensor_arg(),
        upload(&client, &device, u32::as_bytes(&table), DType::U32).into_array_arg(),
        sections,
        decode_call(spec, step.opts, dim, step.position),
        Variant::new(spec, step.opts, dim, 1),
        step.specs.len(),
        host_mask,
        step.rope.is_some(),
        dtype.into(),
    );
    out
}

/// The step's table and where its sections sit: the windows of every branch (at 0), the slopes,
/// a row per query head ([`ROW_WORDS`]: head, buffer, local kv head, first position, first mask
/// word), the positions of every buffer's slots, the host masks (`host_mask` only), then the
/// query's rotation (when the step has one).
fn step_table<R: CubeRuntime, B: Backend>(
    buffers: &[CachedBuffer<'_, B>],
    step: &DecodeStep<'_>,
    heads: usize,
    host_mask: bool,
) -> (Vec<u32>, SectionsLaunch<R>) {
    let spec = &step.specs[0];
    let group = heads / spec.kv_heads();
    let t = step.position;
    let mut table: Vec<u32> = step.specs.iter().flat_map(window_words).collect();
    let slopes_at = table.len();
    let slope = |h: usize| step.opts.alibi.as_ref().map_or(0.0, |slopes| slopes[h]);
    table.extend((0..heads).map(|h| slope(h).to_bits()));
    let rows_at = table.len();
    table.resize(rows_at + heads * ROW_WORDS, 0);
    let positions_at = table.len();
    let mut mask = Vec::new();
    let mask_at = positions_at + buffers.iter().map(|b| b.positions.len()).sum::<usize>();
    for (index, buffer) in buffers.iter().enumerate() {
        let first = table.len() - positions_at;
        for (local, &kv) in buffer.kv_heads.iter().enumerate() {
            for h in kv * group..(kv + 1) * group {
                let mask_first = if host_mask { mask_at + mask.len() } else { 0 };
                let words = [h, index, local, first, mask_first].map(narrow);
                table[rows_at + h * ROW_WORDS..][..ROW_WORDS].copy_from_slice(&words);
                if host_mask {
                    for spec in step.specs {
                        let shown = buffer.positions.iter().map(|&j| spec.visible(h, t, j, t + 1));
                        mask.extend(shown.map(u32::from));
                    }
                }
            }
        }
        table.extend(buffer.positions.iter().map(|&j| narrow(j)));
    }
    table.extend(mask);
    let angles_at = table.len();
    if let Some(angles) = step.rope {
        table.extend(angles.cos.iter().chain(&angles.sin).map(|x| x.to_bits()));
    }
    let sections = SectionsLaunch::new(
        narrow(heads),
        narrow(slopes_at),
        narrow(rows_at),
        narrow(positions_at),
        narrow(angles_at),
    );
    (table, sections)
}
