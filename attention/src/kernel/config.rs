//! What every kernel of the core receives besides its tensors: the compile-time [`Variant`], the
//! runtime scalars of a call ([`Call`]) and the per-head windows and ALiBi slopes, laid out on
//! the host from the [`WindowSpec`] and [`ScoreOptions`] (docs/semantics.md §1, §2, §4).

use burn::tensor::{DType, Shape};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::{ScoreFn, ScoreOptions, WindowSpec};

/// Threads per cube. Each thread owns one row: a query row in the forward and dQ kernels, a
/// key row in the dK/dV kernel.
pub(crate) const ROWS: usize = 32;

/// Most rows of a shared-memory tile: the forward keeps which keys of a tile a row sees in one
/// `u32` bit mask.
const MAX_TILE: usize = 32;

/// Shared memory a kernel may use, at most: the static limit of CUDA and below what desktop
/// wgpu adapters offer; smaller adapters lower it further.
pub(crate) const SHARED_BUDGET: usize = 48 * 1024;

/// The compile-time part of a call: one compiled kernel per distinct value.
#[derive(CubeType, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    /// Head dimension `d`.
    pub head_dim: usize,
    /// Rows of a shared-memory tile (keys in the forward and dQ kernels, queries in dK/dV).
    pub tile: usize,
    /// `j ≤ i` (docs/semantics.md §2).
    pub causal: bool,
    /// Sigmoid scores instead of softmax (docs/semantics.md §1).
    pub sigmoid: bool,
    /// Softcap `c·tanh(s/c)` (docs/semantics.md §1).
    pub softcap: bool,
    /// ALiBi bias `−m_h·(i − j)` (docs/semantics.md §4).
    pub alibi: bool,
    /// Relative scores `T[i, i − j]` from a table (docs/semantics.md §4). The tensor-core
    /// kernels do not read them: their launches run the portable kernels for such calls.
    pub relative: bool,
    /// Read the per-pair rule as one span per query or key
    /// ([`crate::kernel::visibility::plain_span`]): every head's window is undilated and
    /// unsegmented (Mistral, MSWA, SWAT, sinks). Set only by the native FlashAttention-2 launches
    /// (`kernel::flash::flash_variant`); false in every other kernel, so that calls of both
    /// kinds share their compiled kernels.
    pub plain: bool,
    /// The score is `q·k` times the scale alone, a scale in `(0, 2]` (softmax without softcap
    /// or ALiBi): the FlashAttention-2 kernels then take their row maxima over the products
    /// themselves and fold the scale into the exponent (`kernel::score::score`), one
    /// fused multiply-add before `ex2` per pair. Set only by their launches
    /// (`kernel::flash::flash_variant`), false in every other kernel.
    pub scaled_dots: bool,
}

/// The runtime scalars of a call.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct Call {
    /// Valid keys; keys at or past it are padding.
    pub kv_len: u32,
    /// Absolute position of query row 0.
    pub query_offset: u32,
    /// Sink positions `0 … sinks − 1`.
    pub sinks: u32,
    /// Multiplier of `q·k`.
    pub scale: f32,
    /// Softcap `c` (1 when unused).
    pub cap: f32,
    /// Sigmoid bias `β` (0 for softmax).
    pub beta: f32,
    /// `−∞`, passed at run time: WGSL has no infinite literals.
    pub neg_inf: f32,
}

/// Words per head in the windows array: `left, right, dilation, segment (0 = none), phase`, then
/// the reach `dilation·left` back and `dilation·right` forward, saturated to `u32::MAX`.
pub(crate) const WINDOW_WORDS: usize = 7;

/// A call laid out for the kernels.
pub(crate) struct LaunchArgs<R: CubeRuntime> {
    pub variant: Variant,
    /// `[H · WINDOW_WORDS]` u32.
    pub windows: CubeTensor<R>,
    /// `[H]` f32 ALiBi slopes (zeros without ALiBi).
    pub slopes: CubeTensor<R>,
    kv_len: u32,
    query_offset: u32,
    sinks: u32,
    scale: f32,
    cap: f32,
    beta: f32,
}

impl<R: CubeRuntime> LaunchArgs<R> {
    /// Lays out a call of `head_dim` and `keys` key rows for `client`'s device. The kernels
    /// only run calls [`crate::WindowedKernel::runs`] accepted, so positions fit in `u32`.
    pub fn new(
        client: &ComputeClient<R>,
        device: &R::Device,
        spec: &WindowSpec,
        opts: &ScoreOptions,
        head_dim: usize,
        keys: usize,
    ) -> Self {
        let words = window_words(spec);
        let slopes = opts.alibi.clone().unwrap_or_else(|| vec![0.0; spec.num_heads()]);
        let max_shared = client.properties().hardware.max_shared_memory_size;
        Self {
            variant: Variant::new(spec, opts, head_dim, tile_rows(head_dim, max_shared)),
            windows: upload(client, device, u32::as_bytes(&words), DType::U32),
            slopes: upload(client, device, f32::as_bytes(&slopes), DType::F32),
            kv_len: narrow(spec.valid_keys(keys)),
            query_offset: narrow(spec.query_offset()),
            sinks: narrow(spec.sinks()),
            scale: opts.scale_for(head_dim),
            cap: opts.softcap.unwrap_or(1.0),
            beta: beta(opts),
        }
    }

    /// The multiplier of `q·k`.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The runtime scalars as a launch argument.
    pub fn call(&self) -> CallLaunch<R> {
        CallLaunch::new(
            self.kv_len,
            self.query_offset,
            self.sinks,
            self.scale,
            self.cap,
            self.beta,
            f32::NEG_INFINITY,
        )
    }
}

impl Variant {
    /// The variant of a call of `spec` and `opts` at `head_dim`, with tiles of `tile` rows.
    pub fn new(spec: &WindowSpec, opts: &ScoreOptions, head_dim: usize, tile: usize) -> Self {
        Variant {
            head_dim,
            tile,
            causal: spec.is_causal(),
            sigmoid: matches!(opts.score_fn, ScoreFn::Sigmoid { .. }),
            softcap: opts.softcap.is_some(),
            alibi: opts.alibi.is_some(),
            relative: false,
            plain: false,
            scaled_dots: false,
        }
    }
}

/// Whether every head of `spec` has an undilated, unsegmented window ([`Variant::plain`]).
pub(crate) fn plain_windows(spec: &WindowSpec) -> bool {
    spec.heads().iter().all(|w| w.dilation == 1 && w.segment.is_none())
}

/// The runtime scalars of a decode step of `spec` with its query at `position`
/// (`kernel::cache::decode`): the keys are the positions up to it, and its sinks are `spec`'s.
pub(crate) fn decode_call<R: CubeRuntime>(
    spec: &WindowSpec,
    opts: &ScoreOptions,
    head_dim: usize,
    position: usize,
) -> CallLaunch<R> {
    let cap = opts.softcap.unwrap_or(1.0);
    let (scale, beta) = (opts.scale_for(head_dim), beta(opts));
    let (kv_len, query, sinks) = (narrow(position + 1), narrow(position), narrow(spec.sinks()));
    CallLaunch::new(kv_len, query, sinks, scale, cap, beta, f32::NEG_INFINITY)
}

/// The sigmoid bias `β`, 0 for softmax.
fn beta(opts: &ScoreOptions) -> f32 {
    match opts.score_fn {
        ScoreFn::Softmax => 0.0,
        ScoreFn::Sigmoid { beta } => beta,
    }
}

/// An empty tensor of `x`'s shape and dtype whose axes lie in memory in the order of `x`'s
/// (largest stride outermost), contiguous in that order: a kernel's output written where its
/// input lies (e.g. `[batch, N, H, d]` memory viewed as `[batch, H, N, d]`), so that the heads
/// merge back with a reshape that moves nothing.
pub(crate) fn empty_like<R: CubeRuntime>(x: &CubeTensor<R>) -> CubeTensor<R> {
    let (shape, strides) = (x.meta.shape(), x.meta.strides());
    let mut order: Vec<usize> = (0..shape.num_dims()).collect();
    order.sort_by_key(|&axis| std::cmp::Reverse(strides[axis]));
    let stored = Shape::from(order.iter().map(|&axis| shape[axis]).collect::<Vec<_>>());
    let out = empty_device_dtype(x.client.clone(), x.device.clone(), stored, x.dtype);
    let mut back = vec![0; order.len()];
    for (place, &axis) in order.iter().enumerate() {
        back[axis] = place;
    }
    permute(out, &back)
}

/// A one-element `[1, 1, 1, 1]` tensor of `dtype`, passed where a kernel's variant reads no
/// tensor of that argument (relative scores, when the call has none).
pub(crate) fn placeholder<R: CubeRuntime>(
    client: &ComputeClient<R>,
    device: &R::Device,
    dtype: DType,
) -> CubeTensor<R> {
    empty_device_dtype(client.clone(), device.clone(), Shape::new([1, 1, 1, 1]), dtype)
}

/// A 1-D tensor of `dtype` on `device` holding `bytes` (the kernels read it as an array).
pub(crate) fn upload<R: CubeRuntime>(
    client: &ComputeClient<R>,
    device: &R::Device,
    bytes: &[u8],
    dtype: DType,
) -> CubeTensor<R> {
    let len = bytes.len() / dtype.size();
    let handle = client.create_from_slice(bytes);
    CubeTensor::new_contiguous(client.clone(), device.clone(), Shape::new([len]), handle, dtype)
}

/// `spec`'s windows as the kernels read them: [`WINDOW_WORDS`] words per head, in head order.
pub(crate) fn window_words(spec: &WindowSpec) -> Vec<u32> {
    spec.heads()
        .iter()
        .flat_map(|w| {
            let reach = |steps: usize| narrow(w.dilation.saturating_mul(steps));
            [
                narrow(w.left),
                narrow(w.right),
                narrow(w.dilation),
                w.segment.map_or(0, narrow),
                narrow(w.phase),
                reach(w.left),
                reach(w.right),
            ]
        })
        .collect()
}

/// `x` as `u32`, saturated: `usize::MAX` (an unbounded window) becomes `u32::MAX`, which the
/// kernels treat the same way since every position is below it.
pub(crate) fn narrow(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// Rows per shared tile for head dimension `d`: two `[tile, d]` f32 tiles and two `[tile]` f32
/// vectors must fit the budget; a power of two up to [`MAX_TILE`], at least 1.
pub(crate) fn tile_rows(head_dim: usize, max_shared: usize) -> usize {
    let fit = SHARED_BUDGET.min(max_shared) / (8 * head_dim + 8);
    let tile = fit.clamp(1, MAX_TILE);
    1 << tile.ilog2()
}
