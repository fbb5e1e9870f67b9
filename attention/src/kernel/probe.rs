//! The cube-side visibility rule evaluated on a device, for the test that compares it with
//! [`crate::WindowSpec::visible`] (`tests/attention/kernel.rs`).

use burn::tensor::{DType, Shape};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use cubecl::prelude::*;

use super::config::{Call, LaunchArgs};
use super::visibility::{load_window, visible};
use crate::{ScoreOptions, WindowSpec};

/// Writes `visible(h, query_offset + i, j)` as 0 or 1 into `mask: [H, N_q, N_k]`.
#[cube(launch)]
fn probe_kernel(
    windows: &Array<u32>,
    mask: &mut Tensor<u32>,
    call: Call,
    #[comptime] causal: bool,
) {
    let j = ABSOLUTE_POS_X as usize;
    let i = ABSOLUTE_POS_Y as usize;
    let head = ABSOLUTE_POS_Z as usize;
    if j >= mask.shape(2) || i >= mask.shape(1) {
        terminate!();
    }
    let window = load_window(windows, head);
    let mut seen = 0u32;
    if visible(&window, call.query_offset + i as u32, j as u32, &call, causal) {
        seen = 1;
    }
    mask[head * mask.stride(0) + i * mask.stride(1) + j * mask.stride(2)] = seen;
}

/// The kernels' visibility of every (head, query row, key) of a call with `q_len` queries and
/// `keys` key rows, in `[H, N_q, N_k]` order, computed on `device`. Global tokens are ignored
/// (calls with globals never reach the kernels).
pub fn probe_visibility<R: CubeRuntime>(
    device: &R::Device,
    spec: &WindowSpec,
    q_len: usize,
    keys: usize,
) -> Result<Vec<bool>, String> {
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
    );
    let bytes = client.read_one(mask.handle).map_err(|e| e.to_string())?;
    Ok(u32::from_bytes(&bytes).iter().map(|&w| w == 1).collect())
}
