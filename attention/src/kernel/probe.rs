//! The cube-side visibility rule evaluated on a device, for the test that compares it with
//! [`crate::WindowSpec::visible`] (`attention/tests/attention/kernel.rs`).

use burn::tensor::{DType, Shape};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use cubecl::prelude::*;

use crate::kernel::config::{Call, LaunchArgs, plain_windows};
use crate::kernel::visibility::{key_span, load_window, visible, visible_by_span};
use crate::{ScoreOptions, WindowSpec};

/// Writes `visible(h, query_offset + i, j)` into `mask: [H, N_q, N_k]` twice, as the kernels
/// read it: bit 0 from the query's side ([`visible`], through the query's span where the
/// call's windows are `plain`), bit 1 from the key's side (through the key's span,
/// [`key_span`], where they are plain; else [`visible`] again).
#[cube(launch)]
fn probe_kernel(
    windows: &Array<u32>,
    mask: &mut Tensor<u32>,
    call: Call,
    #[comptime] causal: bool,
    #[comptime] plain: bool,
) {
    let j = ABSOLUTE_POS_X as usize;
    let i = ABSOLUTE_POS_Y as usize;
    let head = ABSOLUTE_POS_Z as usize;
    if j >= mask.shape(2) || i >= mask.shape(1) {
        terminate!();
    }
    let window = load_window(windows, head);
    let (position, key) = (call.query_offset + i as u32, j as u32);
    let query_side = visible(&window, position, key, &call, causal, plain);
    let span = key_span(&window, key, &call, causal, plain);
    let key_side = visible_by_span(&span, &window, position, key, &call, causal, plain, true);
    let seen = select(query_side, 1u32, 0u32) + select(key_side, 2u32, 0u32);
    mask[head * mask.stride(0) + i * mask.stride(1) + j * mask.stride(2)] = seen;
}

/// The kernels' visibility of every (head, query row, key) of a call with `q_len` queries and
/// `keys` key rows, in `[H, N_q, N_k]` order, computed on `device`, each read from the
/// query's side and from the key's side (`[query side, key side]`). Global tokens are ignored
/// (calls with globals never reach the kernels).
pub fn probe_visibility<R: CubeRuntime>(
    device: &R::Device,
    spec: &WindowSpec,
    q_len: usize,
    keys: usize,
) -> Result<Vec<[bool; 2]>, String> {
    let client = R::client(device);
    let heads = spec.num_heads();
    let layout = LaunchArgs::new(&client, device, spec, &ScoreOptions::softmax(), 1, keys);
    let shape = Shape::new([heads, q_len, keys]);
    let mask = empty_device_contiguous_dtype(client.clone(), device.clone(), shape, DType::U32);
    let side = 8;
    let count =
        CubeCount::Static(keys.div_ceil(side) as u32, q_len.div_ceil(side) as u32, heads as u32);
    probe_kernel::launch::<R>(
        &client,
        count,
        CubeDim::new_3d(side as u32, side as u32, 1),
        layout.windows.clone().into_array_arg(),
        mask.clone().into_tensor_arg(),
        layout.call(),
        spec.is_causal(),
        plain_windows(spec),
    );
    let bytes = client.read_one(mask.handle).map_err(|e| e.to_string())?;
    Ok(u32::from_bytes(&bytes).iter().map(|&w| [w & 1 == 1, w & 2 == 2]).collect())
}
