//! The fused ops of the layers around the core: RMSNorm (docs/semantics.md §8), the gated MLP's
//! gate `act(a)·b` of its joined gate and up product `[a | b]` (SwiGLU's SiLU, Gemma's tanh
//! GELU) and the cross-entropy of logits, each as one op forward and one op backward
//! where the backend has kernels for them ([`LayerKernels`], offered by
//! [`LayerOpsBackend::layer_kernels`]), and as tensor ops otherwise. The tensor ops are
//! also the kernels' test reference. The cross-entropy never materialises the softmax: its
//! forward keeps each row's log-normaliser, and its backward recomputes the probabilities from
//! it.
//!
//! As tensor ops, an RMSNorm is six ops forward and about twelve backward, and the SiLU gate
//! three and five (the GELU gate about twice that), each a pass over its tensor (and on the CPU,
//! each a wake-up of the thread pool); fused, each is one pass forward and one backward.
//! `Autodiff<B>` differentiates through its inner backend's kernels (`crate::layer_ops_autodiff`).

use burn::nn::{Embedding, Linear};
use burn::tensor::activation::{log_softmax, silu};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Device, Int, Tensor, TensorData, TensorPrimitive, backend::Backend};
use serde::{Deserialize, Serialize};

use crate::fused_ops::fused_ops_off;
use crate::packed::Packing;
use crate::split::split;

/// How an RMSNorm scales: `x / √(mean(x²) + ε) · γ` with `γ = w`, or `γ = 1 + w` under
/// `unit_offset` (Gemma's form, docs/semantics.md §9).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsOptions {
    /// `ε`, added to the mean square.
    pub epsilon: f64,
    /// Scale by `1 + w` rather than `w`.
    pub unit_offset: bool,
}

/// The activation of a gated MLP's gate. Serialised in snake case: `"silu"`, `"gelu_tanh"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MlpActivation {
    /// `x·σ(x)` (SwiGLU: Transformer++, Llama, Mistral, Qwen2).
    #[default]
    Silu,
    /// GELU in its tanh approximation, `½x(1 + tanh(√(2/π)(x + 0.044715x³)))` (Gemma).
    GeluTanh,
}

/// A backend's layer kernels as plain function pointers (as [`crate::WindowedKernel`], so that
/// `Autodiff<B>` can use those of its inner backend). Every tensor is row-major over its last
/// dimension, of any rank.
pub struct LayerKernels<B: Backend> {
    /// RMSNorm's forward.
    pub rms_norm: RmsNormKernel<B>,
    /// RMSNorm's backward.
    pub rms_norm_backward: RmsNormBackward<B>,
    /// `[a | b]`, the gate and up halves joined along the last axis, `[..., 2F]` → `act(a)·b`,
    /// `[..., F]`.
    pub gate: fn(FloatTensor<B>, MlpActivation) -> FloatTensor<B>,
    /// The gate's backward.
    pub gate_backward: GateBackward<B>,
    /// The cross-entropy's forward.
    pub cross_entropy: CrossEntropyKernel<B>,
    /// The cross-entropy's backward.
    pub cross_entropy_backward: CrossEntropyBackward<B>,
}

/// `x: [..., D]`, `w: [D]` → (`y: [..., D]`, `1/√(mean(x²) + ε)` per row: `[...]` flattened to
/// `[rows]`, f32).
pub type RmsNormKernel<B> = fn(FloatTensor<B>, FloatTensor<B>, RmsOptions) -> [FloatTensor<B>; 2];

/// `x`, `w`, the forward's inverse RMS and `∂L/∂y` → `[∂L/∂x, ∂L/∂w]`.
pub type RmsNormBackward<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    RmsOptions,
) -> [FloatTensor<B>; 2];

/// `[a | b]` and `∂L/∂z` → `∂L/∂[a | b]`, the two halves' gradients side by side.
pub type GateBackward<B> = fn(FloatTensor<B>, FloatTensor<B>, MlpActivation) -> FloatTensor<B>;

/// `logits: [rows, V]`, `targets: [rows]` (ints in `0..V`) → (`−log softmax(logits)[target]`
/// per row, `[rows]`; the log-normaliser `log Σ exp(logits)` per row, `[rows]` f32). A target
/// outside `0..V` gives NaN.
pub type CrossEntropyKernel<B> = fn(FloatTensor<B>, IntTensor<B>) -> [FloatTensor<B>; 2];

/// `logits`, `targets`, the forward's log-normalisers and `∂L/∂loss: [rows]` → `∂L/∂logits`
/// `= ∂L/∂loss · (softmax(logits) − onehot(target))`.
pub type CrossEntropyBackward<B> =
    fn(FloatTensor<B>, IntTensor<B>, FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>;

impl<B: Backend> Clone for LayerKernels<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for LayerKernels<B> {}

impl<B: Backend> std::fmt::Debug for LayerKernels<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LayerKernels")
    }
}

/// A Burn backend that may run the layers' ops fused: RMSNorm, the MLP's gate, the cross-entropy
/// (each forward and backward), a linear layer's product, and the split of a joined product
/// into its parts. Every method defaults to the tensor ops.
pub trait LayerOpsBackend: Backend {
    /// The backend's fused RMSNorm of `x: [..., D]` with weight `w: [D]` → the shape of `x`
    /// ([`crate::layer_ops::rms_norm`]), or `None` where it has none and the caller runs the
    /// tensor ops. The default runs the backend's kernel ([`Self::layer_kernels`]).
    fn rms_norm(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        options: RmsOptions,
    ) -> Option<FloatTensor<Self>> {
        let kernels = chosen::<Self>()?;
        let [y, _] = (kernels.rms_norm)(x, w, options);
        Some(y)
    }

    /// The backend's fused gate `act(a)·b` of `both = [a | b]: [..., 2F]` → `[..., F]`
    /// ([`crate::layer_ops::gate`]), or `None` where it has none and the caller runs the
    /// tensor ops. The default runs the backend's kernel ([`Self::layer_kernels`]).
    fn gate(both: FloatTensor<Self>, activation: MlpActivation) -> Option<FloatTensor<Self>> {
        chosen::<Self>().map(|kernels| (kernels.gate)(both, activation))
    }

    /// The backend's fused cross-entropy of `logits: [rows, V]` against `targets: [rows]` →
    /// `[rows]` ([`crate::layer_ops::cross_entropy`]), or `None` where it has none and the
    /// caller runs the tensor ops. The default runs the backend's kernel
    /// ([`Self::layer_kernels`]).
    fn cross_entropy(
        logits: FloatTensor<Self>,
        targets: IntTensor<Self>,
    ) -> Option<FloatTensor<Self>> {
        let kernels = chosen::<Self>()?;
        let [loss, _] = (kernels.cross_entropy)(logits, targets);
        Some(loss)
    }

    /// The backend's product `x·w (+ b)` of a linear layer for `x: [rows, in]`, `w: [in, out]`
    /// (any strides) and `b: [out]` → `[rows, out]` in `x`'s dtype
    /// ([`crate::layer_ops::linear`]), where it has a faster one than its matmul for these
    /// shapes and dtypes; `None` (the default) otherwise, and the caller runs Burn's `linear`.
    /// `w` and `b` may be in another float dtype than `x` (weights kept in bf16 or f16 with f32
    /// activations): this is where a backend reads them without a cast; declining, the caller
    /// casts them. Flex has a product for a few rows (a decoding step) with f32 weights, and for
    /// any rows with bf16 or f16 weights stored as a checkpoint's `[out, in]`.
    fn fused_linear(
        _x: FloatTensor<Self>,
        _w: FloatTensor<Self>,
        _b: Option<FloatTensor<Self>>,
    ) -> Option<FloatTensor<Self>> {
        None
    }

    /// Whether the backend keeps weights packed ([`Self::pack`]); a loader asks before it reads
    /// a tensor, so that a backend without them is refused before any work. Flex keeps them.
    fn packs_weights() -> bool {
        false
    }

    /// Weights kept packed ([`crate::packed`]): `bytes`, the rows of `shape = [rows, in]` in
    /// `packing`'s blocks, as a float tensor of dtype [`Packing::dtype`] on `device`, which
    /// [`Self::fused_linear`] and [`Self::unpack`] read; `None` (the default) where the backend
    /// keeps no packed weights ([`Self::packs_weights`]).
    fn pack(
        _bytes: Vec<u8>,
        _packing: Packing,
        _shape: [usize; 2],
        _device: &Device<Self>,
    ) -> Option<FloatTensor<Self>> {
        None
    }

    /// The values of `w` in the backend's float type, the same shape and view: for a packed
    /// weight ([`Self::pack`], or its transposed view) its unpacked values, the products'
    /// reference and fallback; with `rows`, only those of its stored rows, `[ids, in]` (an
    /// embedding table's lookup). The default, for backends that keep no packed weights, is `w`
    /// itself (or its rows `ids`).
    fn unpack(w: FloatTensor<Self>, rows: Option<IntTensor<Self>>) -> FloatTensor<Self> {
        match rows {
            Some(ids) => Self::float_select(w, 0, ids),
            None => w,
        }
    }

    /// Runs `work`, a decoding step's few hundred small ops one after the other, with the
    /// backend's CPU threads awake: where it has a pool, its idle threads keep looking for the
    /// ops' parallel parts until `work` returns, instead of falling asleep between two ops and
    /// being woken for the next (about one wake-up a product, `perf stat`, each costing more
    /// than a small op's part). The default runs `work` here.
    fn with_threads_awake<R: Send>(work: impl FnOnce() -> R + Send) -> R {
        work()
    }

    /// `x` cut along `dim` into consecutive parts of `sizes` ([`crate::split::split`]): views
    /// of `x` by default; `Autodiff<B>` differentiates the parts as one op, their gradients
    /// written side by side (`crate::split`).
    fn split_parts(x: FloatTensor<Self>, dim: usize, sizes: &[usize]) -> Vec<FloatTensor<Self>> {
        crate::split::views::<Self>(x, dim, sizes)
    }

    /// The backend's fused layer ops ([`LayerKernels`]: RMSNorm, the MLP's gate and the
    /// cross-entropy, forward and backward), or `None` (the default) when they run as tensor ops.
    /// `Autodiff<B>` differentiates through its inner backend's.
    fn layer_kernels() -> Option<LayerKernels<Self>> {
        None
    }
}

#[cfg(feature = "ndarray")]
impl<E, I, Q> LayerOpsBackend for burn::backend::NdArray<E, I, Q>
where
    E: burn::backend::ndarray::FloatNdArrayElement,
    I: burn::backend::ndarray::IntNdArrayElement,
    Q: burn::backend::ndarray::QuantElement,
    burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<E>>,
    burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<I>>,
{
}

/// The backend's layer kernels, unless [`crate::FUSED_OPS_VARIABLE`] turns the fused ops off.
pub(crate) fn chosen<B: LayerOpsBackend>() -> Option<LayerKernels<B>> {
    B::layer_kernels().filter(|_| !fused_ops_off())
}

/// RMSNorm of `x: [..., D]` with weight `w: [D]` → the same shape: the backend's fused op
/// ([`LayerOpsBackend::rms_norm`]) where it has one.
pub fn rms_norm<B: LayerOpsBackend, const N: usize>(
    x: Tensor<B, N>,
    w: Tensor<B, 1>,
    options: RmsOptions,
) -> Tensor<B, N> {
    let primitive = |t: Tensor<B, N>| t.into_primitive().tensor();
    let fused = B::rms_norm(primitive(x.clone()), w.clone().into_primitive().tensor(), options);
    match fused {
        Some(y) => Tensor::from_primitive(TensorPrimitive::Float(y)),
        None => rms_norm_tensor_ops(x, w, options),
    }
}

/// `act(a)·b` of `both = [a | b]: [..., 2F]` (a joined gate and up product) → `[..., F]`: the
/// backend's fused op ([`LayerOpsBackend::gate`]) where it has one, reading the halves where
/// they lie and writing their gradients side by side.
pub fn gate<B: LayerOpsBackend, const N: usize>(
    both: Tensor<B, N>,
    activation: MlpActivation,
) -> Tensor<B, N> {
    match B::gate(both.clone().into_primitive().tensor(), activation) {
        Some(z) => Tensor::from_primitive(TensorPrimitive::Float(z)),
        None => gate_tensor_ops(both, activation),
    }
}

/// The cross-entropy of each row of `logits: [rows, V]` against `targets: [rows]`,
/// `−log softmax(logits)[target]` → `[rows]`: the backend's fused op
/// ([`LayerOpsBackend::cross_entropy`]) where it has one.
pub fn cross_entropy<B: LayerOpsBackend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let fused = B::cross_entropy(
        logits.clone().into_primitive().tensor(),
        targets.clone().into_primitive(),
    );
    match fused {
        Some(loss) => Tensor::from_primitive(TensorPrimitive::Float(loss)),
        None => cross_entropy_tensor_ops(logits, targets),
    }
}

/// The cross-entropy of each row as tensor ops on any backend: a log-softmax and a gather.
pub fn cross_entropy_tensor_ops<B: Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let rows = targets.dims()[0];
    log_softmax(logits, 1).gather(1, targets.reshape([rows, 1])).reshape([rows]).neg()
}

/// A linear layer (Burn's `Linear`, weight `[in, out]`) on `x: [..., in]` → `[..., out]`,
/// through [`product`].
pub fn linear<B: LayerOpsBackend, const N: usize>(
    layer: &Linear<B>,
    x: Tensor<B, N>,
) -> Tensor<B, N> {
    product(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// `x·w (+ b)` for `x: [..., in]`, `w: [in, out]`, `b: [out]` → `[..., out]` in `x`'s dtype,
/// with the rows of `x` flattened: the backend's fused product
/// ([`LayerOpsBackend::fused_linear`]) where it has one for these shapes and dtypes, else
/// Burn's `linear` on the flattened rows. `w` and `b` may be kept in another float dtype than
/// `x` (bf16 or f16 weights with f32 activations): where the backend has no product reading
/// them as they are, they are cast to `x`'s dtype for this call. Flattening keeps a weight
/// stored as its transpose a view (a checkpoint's `[out, in]`, or a tied embedding table): for
/// a product of higher rank Burn's `linear` reshapes the weight, which copies a transposed
/// view. Weights kept packed ([`crate::packed`]) are unpacked there, and a single row of
/// activations rounded as the fused one-row product rounds it.
pub fn product<B: LayerOpsBackend, const N: usize>(
    x: Tensor<B, N>,
    w: Tensor<B, 2>,
    b: Option<Tensor<B, 1>>,
) -> Tensor<B, N> {
    let mut dims = x.dims();
    let [d_in, d_out] = w.dims();
    let rows = x.shape().num_elements() / d_in.max(1);
    let x = x.reshape([rows, d_in]);
    let primitive = |t: Tensor<B, 2>| t.into_primitive().tensor();
    let fused = B::fused_linear(
        primitive(x.clone()),
        primitive(w.clone()),
        b.clone().map(|b| b.into_primitive().tensor()),
    );
    let y = match fused {
        Some(y) => Tensor::from_primitive(TensorPrimitive::Float(y)),
        None => {
            // Packed weights are unpacked, and one row's activations rounded as the fused
            // product rounds them (`packed::round_activations`): the same values, so that this
            // path is the fused one's reference.
            let (w, x) = match Packing::of(w.dtype()) {
                Some(_) if rows == 1 => (unpack(w, None), rounded(x)),
                Some(_) => (unpack(w, None), x),
                None => (w, x),
            };
            // Only a weight of another dtype is cast: under `Autodiff` a cast to the same dtype
            // would still add a node per weight to every step's graph.
            let dtype = x.dtype();
            let w = if w.dtype() == dtype { w } else { w.cast(dtype) };
            let b = b.map(|b| if b.dtype() == dtype { b } else { b.cast(dtype) });
            burn::tensor::module::linear(x, w, b)
        }
    };
    dims[N - 1] = d_out;
    y.reshape(dims)
}

/// A row of activations `x: [1, in]` as a one-row product on packed weights sees it
/// ([`crate::packed::round_activations`]), in `x`'s dtype.
fn rounded<B: LayerOpsBackend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let (shape, dtype, device) = (x.shape(), x.dtype(), x.device());
    let mut values: Vec<f32> = x.into_data().convert::<f32>().into_vec().expect("f32 values");
    crate::packed::round_activations(&mut values);
    Tensor::<B, 2>::from_data(TensorData::new(values, shape), &device).cast(dtype)
}

/// The values of `w` ([`LayerOpsBackend::unpack`]): a packed weight's unpacked, or with `rows`
/// only those stored rows; any other tensor is itself (or those rows).
pub fn unpack<B: LayerOpsBackend, const D: usize>(
    w: Tensor<B, D>,
    rows: Option<Tensor<B, 1, Int>>,
) -> Tensor<B, D> {
    let ids = rows.map(|ids| ids.into_primitive());
    Tensor::from_primitive(TensorPrimitive::Float(B::unpack(w.into_primitive().tensor(), ids)))
}

/// The embeddings of `tokens: [batch, N]` → `[batch, N, d]` from `table: [vocab, d]`, in the
/// table's float type: rows looked up, or unpacked where the table is kept packed
/// ([`crate::packed`]).
pub fn embedding<B: LayerOpsBackend>(
    table: &Embedding<B>,
    tokens: Tensor<B, 2, Int>,
) -> Tensor<B, 3> {
    let weight = table.weight.val();
    if Packing::of(weight.dtype()).is_none() {
        return table.forward(tokens);
    }
    let [batch, n] = tokens.dims();
    let d = weight.dims()[1];
    unpack(weight, Some(tokens.reshape([batch * n]))).reshape([batch, n, d])
}

/// RMSNorm as tensor ops on any backend, `x: [..., D]`, `w: [D]` → the same shape. Written
/// with `powf(−½)` rather than a division: Burn 0.21's ndarray backend computes the backward of
/// a division, and its `recip`, through an approximate SIMD reciprocal.
pub fn rms_norm_tensor_ops<B: Backend, const N: usize>(
    x: Tensor<B, N>,
    w: Tensor<B, 1>,
    options: RmsOptions,
) -> Tensor<B, N> {
    let scale =
        x.clone().powi_scalar(2).mean_dim(N - 1).add_scalar(options.epsilon).powf_scalar(-0.5);
    let gamma = match options.unit_offset {
        true => w.add_scalar(1.0),
        false => w,
    };
    x * scale * gamma.unsqueeze()
}

/// `act(a)·b` of `both = [a | b]: [..., 2F]` as tensor ops on any backend, the halves cut by
/// [`split`] (so that `Autodiff<B>` writes their gradients side by side).
pub fn gate_tensor_ops<B: LayerOpsBackend, const N: usize>(
    both: Tensor<B, N>,
    activation: MlpActivation,
) -> Tensor<B, N> {
    let width = both.dims()[N - 1] / 2;
    let [a, b]: [Tensor<B, N>; 2] =
        split(both, N - 1, &[width, width]).try_into().expect("two halves");
    match activation {
        MlpActivation::Silu => silu(a) * b,
        MlpActivation::GeluTanh => gelu_tanh(a) * b,
    }
}

/// GELU in its tanh approximation (Burn's `gelu` is the exact, erf form).
fn gelu_tanh<B: Backend, const N: usize>(x: Tensor<B, N>) -> Tensor<B, N> {
    let inner = (x.clone() + x.clone().powi_scalar(3).mul_scalar(0.044715))
        .mul_scalar((2.0 / std::f64::consts::PI).sqrt());
    x.mul_scalar(0.5) * inner.tanh().add_scalar(1.0)
}
